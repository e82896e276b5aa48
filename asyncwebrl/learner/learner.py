"""The learner: step rows in, one update out (docs/architecture.md#from-episodes-to-an-update).

    learner = Learner(model, LearnerSettings.from_config(config), mesh)
    measurements = learner.update(rows)      # RL: prox pass, epochs x minibatches, version + 1
    measurements = learner.update(rows)      # a learner of loss kind "sft": the warm start
    params = learner.params                  # what the sampler gets

Rows are packed into fixed-shape microbatches (packing.py); each minibatch is a list of
whole microbatches whose gradients are summed and divided by its response-token count
(so an update has at most as many minibatches as it has microbatches; `optimizer_steps`
in the measurements says how many it took).
The microbatch order is shuffled per epoch by a generator seeded from (seed, step), so a
run restored from a checkpoint replays exactly. An update reads the device twice: its
starting step and version, and at its end the summed measurements of all its steps.
Before the gradient step of a new microbatch signature first runs on an accelerator, its
compiled memory is checked against the devices' free memory (device_memory.py).

Several processes (asyncwebrl/distributed.py): each process calls update with its own
rows, and they never leave it. A microbatch of R rows and I images is fed in parts: each
process packs its rows into R / P rows and I / P images (its part), and its part becomes
its block of the global arrays along the batch axis (make_array_from_process_local_data;
the mesh's batch axes must split R and I over the processes, in process order). The
processes agree only on small facts (distributed.gather): the microbatch count, the
global maximum of theirs (a process with fewer feeds empty parts, loss mask 0), and the
counts of the measurements. The loss needs nothing more: its token means are sums over
the global arrays inside the jitted step, divided by their global token count.
merge_duplicates runs per process, so copies of a step on two processes stay two rows.
The update then equals one process's on all rows up to float summation order (rows are
grouped into other microbatches), exactly so only where the microbatches are the same.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from asyncwebrl import distributed
from asyncwebrl.learner import device_memory
from asyncwebrl.learner.choices import WARM_START_KIND, loss_kind
from asyncwebrl.learner.packing import Microbatch, PackingShape, StepRow, empty_microbatch, merge_duplicates, pack
from asyncwebrl.learner.train import (LossSettings, OptimizerSettings, TrainState, build_steps, learning_rate_schedule,
                                      make_optimizer, zeros_like_params)
from asyncwebrl.parallel import LEARNER_RULES, logical_spec, make_mesh, param_shardings

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LearnerSettings:
    """The fields without a default are config keys (configs/default.py holds their
    defaults: from_config); gradient_dtype no config sets."""
    packing: PackingShape
    loss: LossSettings
    optimizer: OptimizerSettings
    epochs: int
    minibatches: int
    merge_duplicates: bool   # identical steps trained as one row (packing.merge_duplicates)
    seed: int
    gradient_dtype: str = "float32"   # the accumulator; "bfloat16" saves memory on big models

    def __post_init__(self):
        if self.epochs < 1 or self.minibatches < 1:
            raise ValueError(f"epochs and minibatches must be >= 1, got {self.epochs} and {self.minibatches}")
        loss_kind(self.loss.kind)   # an unknown kind fails here, not when the first update compiles

    @classmethod
    def from_config(cls, config, mode: str = "rl") -> LearnerSettings:
        """mode "rl": config.loss and config.optimizer, config.learner's epochs and minibatches.
        mode "sft": the warm start (config.sft): the cross-entropy of the untempered logits, one
        optimiser step per call on config.sft's schedule, config.optimizer's other settings."""
        packing = PackingShape.from_config(config)
        loss, optimizer = LossSettings.from_config(config), OptimizerSettings.from_config(config)
        if mode == "rl":
            return cls(packing=packing, loss=loss, optimizer=optimizer, epochs=config.learner.epochs,
                       minibatches=config.learner.minibatches, merge_duplicates=config.learner.merge_duplicates,
                       seed=config.seed)
        if mode != "sft":
            raise ValueError(f"mode must be 'rl' or 'sft', got {mode!r}")
        sft = config.sft
        return cls(packing=packing, loss=dataclasses.replace(loss, kind=WARM_START_KIND, temperature=1.0),
                   optimizer=dataclasses.replace(optimizer, learning_rate=sft.learning_rate,
                                                 warmup_steps=sft.warmup_steps, total_steps=max(sft.steps, 1)),
                   epochs=1, minibatches=1, merge_duplicates=config.learner.merge_duplicates, seed=config.seed)


def refuse_prompt_weight(rows: list[StepRow], who: str) -> None:
    """A loss on the prompt (StepRow.prompt_weight) is for supervised rows: an RL loss has no
    advantage or behaviour log-prob for prompt tokens, and a response's scores would take them in."""
    if any(row.prompt_weight for row in rows):
        raise ValueError(f"{who} got step rows with a prompt_weight: a loss on prompts is for "
                         "supervised (sft) rows only")


# two trees of measurements added on the device, in one dispatch
_summed = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))


class Learner:
    def __init__(self, model: nnx.Module, settings: LearnerSettings, mesh=None, rules=LEARNER_RULES):
        self.settings = settings
        self.config = model.config
        self.mesh = mesh or make_mesh({"fsdp": 1}, devices=jax.devices()[:1])
        self.rules = rules
        self.graphdef, params = nnx.split(model)
        self.tx = make_optimizer(settings.optimizer)

        def initial_state(params):
            return TrainState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                              version=jnp.zeros((), jnp.int32))

        self.state_shardings = param_shardings(jax.eval_shape(initial_state, params), self.mesh, rules)
        self.state = jax.jit(initial_state, out_shardings=self.state_shardings)(params)
        self._logprobs, self._accumulate, self._apply = build_steps(
            self.graphdef, self.tx, learning_rate_schedule(settings.optimizer), settings.loss,
            settings.optimizer.max_grad_norm, self.state_shardings, self.mesh)
        # what the memory check names when the gradient step does not fit
        self._shrinking_settings = {"model.remat": model.remat,
                                    "learner.rows_per_microbatch": settings.packing.rows_per_microbatch,
                                    "learner.images_per_microbatch": settings.packing.images_per_microbatch,
                                    "learner.row_length": settings.packing.row_length}
        self._checked_signatures = set()
        self._part = process_part(settings.packing, jax.process_count())

    @property
    def params(self):
        return self.state.params

    @property
    def version(self) -> int:
        return int(self.state.version)

    def model(self) -> nnx.Module:
        """The current parameters as a model (shares the arrays)."""
        return nnx.merge(self.graphdef, self.state.params)

    # ------------------------------------------------------------ one update

    def update(self, rows: list[StepRow]) -> dict:
        """Train on these step rows (with several processes: this process's, every process
        calling together); returns the measurements of the update, over all processes' rows."""
        started = time.perf_counter()
        # where the update starts, in one fetch: the previous update's measurements were
        # fetched at its end, so this waits for nothing
        step, version = (int(x) for x in jax.device_get((self.state.step, self.state.version)))
        learns = loss_kind(self.settings.loss.kind).learns_from_rewards
        if learns:
            refuse_prompt_weight(rows, f"loss kind {self.settings.loss.kind!r}")
        trained = merge_duplicates(rows) if self.settings.merge_duplicates else rows
        first_image = jax.process_index() * self._part.images_per_microbatch
        packed_on_host = pack(trained, self._part, self.config, first_image)
        facts = self._batch_facts(rows, trained, packed_on_host, version)
        if not facts["rows"]:
            raise ValueError("an update needs at least one step row")
        # a process with fewer microbatches feeds empty parts: every process joins every step
        packed_on_host += [empty_microbatch(self._part, self.config, first_image)
                           for _ in range(facts["microbatches"] - len(packed_on_host))]
        microbatches = [self._place(mb) for mb in packed_on_host]
        packed = time.perf_counter()
        prox = [None] * len(microbatches)
        proximal_pass = self._needs_proximal_pass(len(microbatches))
        if proximal_pass:
            prox = jax.block_until_ready([self._logprobs(self.state.params, mb) for mb in microbatches])
        proximal = time.perf_counter()
        summed, last, steps = self._optimizer_steps(microbatches, prox, step)
        if learns:   # a policy version (warm-start steps are none)
            self.state = self.state.replace(version=self.state.version + 1)
        summed, last = jax.device_get((summed, last))   # the update's one fetch of what the device measured
        measurements = {name: float(total) / steps for name, total in summed.items()}
        measurements.update(
            facts, skipped=float(summed["skipped"]), optimizer_steps=steps, proximal_pass=proximal_pass,
            param_norm=float(last["param_norm"]), learning_rate=float(last["learning_rate"]),
            version=version + 1 if learns else version,
            seconds=time.perf_counter() - started, pack_seconds=packed - started, prox_seconds=proximal - packed)
        return measurements

    def response_logprobs(self, rows: list[StepRow]) -> tuple[np.ndarray, np.ndarray]:
        """(log-prob under the current parameters, behaviour log-prob the row carries) of every
        response token of these rows, flat in packed order: packed, placed and scored as an
        update's proximal pass does, i.e. the pi_prox and pi_behave of the staleness weight
        exp(prox - behave). With the sampler at the same version their difference is the
        train-inference mismatch (benchmarks/logprob_gap.py)."""
        refuse_prompt_weight(rows, "response_logprobs")   # its mask would take in the prompt
        current, behave = [], []
        for microbatch in pack(rows, self.settings.packing, self.config):
            logp = np.asarray(self._logprobs(self.state.params, self._place(microbatch)))
            mask = microbatch.loss_mask > 0
            current.append(logp[mask])
            behave.append(microbatch.behave_logprobs[mask])
        return np.concatenate(current), np.concatenate(behave)

    def _optimizer_steps(self, microbatches: list[Microbatch], prox: list, step: int):
        """epochs x minibatches optimiser steps from optimiser step `step`: (the sum of their
        measurements, the last one's, how many). The measurements stay on the device, summed
        there (a few float32 additions), so the host queues each step without waiting for the
        one before; the caller fetches them once."""
        summed, last, steps = None, None, 0
        for epoch in range(self.settings.epochs):
            # seeded by the steps taken before this epoch, counted on the host (a step the NaN
            # guard skipped counts too), so choosing the order waits for no step to finish
            order = np.random.default_rng((self.settings.seed, step + steps, epoch)).permutation(len(microbatches))
            for chunk in np.array_split(order, min(self.settings.minibatches, len(order))):
                grads = zeros_like_params(self.state.params, self.settings.gradient_dtype)
                metrics = None
                for i in chunk:
                    self._check_gradient_step_fits(grads, microbatches[i], prox[i])
                    grads, new = self._accumulate(self.state.params, grads, microbatches[i], prox[i])
                    metrics = new if metrics is None else _summed(metrics, new)
                self.state, last = self._apply(self.state, grads, metrics)
                summed = last if summed is None else _summed(summed, last)
                steps += 1
        return summed, last, steps

    def _check_gradient_step_fits(self, grads, microbatch: Microbatch, prox) -> None:
        """Before accumulate first runs with a signature (prox None or an array; a microbatch
        with or without images), on devices with an allocator arena: compile it and compare
        what it will allocate with their free memory (device_memory.py), so that a step too
        big fails here, naming the config keys, and not in XLA under another program's name.
        Nothing is compiled twice: the jitted call that follows finds the executable that
        .lower().compile() made for the same argument shapes and shardings in jax's cache
        (tests/test_learner.py counts the backend compiles of accumulate)."""
        leaves, structure = jax.tree.flatten((microbatch, prox))
        signature = (structure, tuple((leaf.shape, leaf.dtype) for leaf in leaves))
        if signature in self._checked_signatures:
            return
        local_devices = [d for d in self.mesh.devices.flat if d.process_index == jax.process_index()]
        free = device_memory.free_device_bytes(local_devices)
        if free is not None:
            analysis = self._accumulate.lower(self.state.params, grads, microbatch, prox).compile().memory_analysis()
            if analysis is None:   # the backend keeps allocator statistics but cannot analyse a program
                logger.warning("the gradient step's memory is not checked: %s has no compiled memory analysis",
                               local_devices[0].platform)
            else:
                device_memory.check_gradient_step_fits(
                    analysis.temp_size_in_bytes, analysis.output_size_in_bytes - analysis.alias_size_in_bytes,
                    free, self._shrinking_settings)
        self._checked_signatures.add(signature)

    def _needs_proximal_pass(self, microbatches: int) -> bool:
        """pi_prox (decoupled loss) is the parameters at the start of the update. With one
        optimiser step per update the loss is taken at exactly those parameters, so the
        forward pass of the step itself gives pi_prox (stop-gradient) and a separate pass
        would compute the same numbers again; the coupled loss, and a kind that reads no
        pi_prox, do not use it."""
        optimizer_steps = self.settings.epochs * min(self.settings.minibatches, microbatches)
        loss = self.settings.loss
        return loss_kind(loss.kind).uses_prox and loss.decoupled and optimizer_steps > 1

    def _batch_facts(self, rows: list[StepRow], trained: list[StepRow], packed: list[Microbatch],
                     version: int) -> dict:
        """The batch's counts over every process (a gather of a few numbers each): rows, the
        steps of the batch; trained, the rows packed (copies merged); packed, this process's
        parts of microbatches. "microbatches" is the most parts any process packed."""
        lags = [version - np.asarray(r.versions) for r in rows]
        mine = {"rows": len(rows), "rows_trained": len(trained), "microbatches": len(packed),
                "response_tokens": sum(len(r.response_ids) for r in rows),
                "row_tokens": sum(len(r) for r in trained),
                "lag_sum": int(sum(lag.sum() for lag in lags)), "lag_max": max((int(lag.max()) for lag in lags
                                                                                 if len(lag)), default=0),
                "images_shown": sum(r.num_images for r in rows),
                "images_encoded": sum(int(mb.inputs.vision.patch_valid[:, 0].sum()) for mb in packed
                                      if mb.inputs.vision is not None)}
        everyone = distributed.gather([mine])
        total = {name: sum(part[name] for part in everyone) for name in mine}
        microbatches = max(part["microbatches"] for part in everyone)
        tokens = total["response_tokens"]
        return {"rows": total["rows"], "rows_trained": total["rows_trained"], "microbatches": microbatches,
                "response_tokens": tokens, "tokens_per_step": tokens / max(total["rows"], 1),
                "fill": total["row_tokens"] / max(microbatches * self.settings.packing.tokens, 1),
                "staleness_mean": total["lag_sum"] / max(tokens, 1),
                "staleness_max": float(max(part["lag_max"] for part in everyone)),
                "images_shown": total["images_shown"], "images_encoded": total["images_encoded"]}

    def _place(self, part: Microbatch) -> Microbatch:
        """Put this process's part of a microbatch on the mesh, as its block of the global
        arrays: rows (and images) over the rule's batch axes (one process: the whole of it)."""
        processes = jax.process_count()

        def place(path, array):
            batch_axis = 1 if any(getattr(k, "name", None) == "positions" for k in path) else 0
            shape = list(np.shape(array))
            shape[batch_axis] *= processes
            axes = [None] * len(shape)
            axes[batch_axis] = "batch"
            sharding = jax.sharding.NamedSharding(self.mesh, logical_spec(axes, shape, self.mesh, self.rules))
            check_process_block(sharding, tuple(shape), batch_axis, jax.tree_util.keystr(path))
            return jax.make_array_from_process_local_data(sharding, np.asarray(array), tuple(shape))
        return jax.tree_util.tree_map_with_path(place, part)

    # ------------------------------------------------------------ checkpoints

    def restore(self, state: TrainState) -> None:
        self.state = jax.device_put(state, self.state_shardings)


def process_part(shape: PackingShape, processes: int) -> PackingShape:
    """The part of a microbatch that each of `processes` processes packs its rows into."""
    if shape.rows_per_microbatch % processes or shape.images_per_microbatch % processes:
        raise ValueError(f"learner.rows_per_microbatch={shape.rows_per_microbatch} and learner.images_per_microbatch="
                         f"{shape.images_per_microbatch} must be multiples of the process count {processes}: each "
                         "process feeds an equal part of every microbatch")
    return dataclasses.replace(shape, rows_per_microbatch=shape.rows_per_microbatch // processes,
                               images_per_microbatch=shape.images_per_microbatch // processes)


def check_process_block(sharding, shape: tuple, batch_axis: int, name: str) -> None:
    """That this process's devices hold exactly its block of the batch axis (the p-th of P
    equal ones): otherwise its rows would land elsewhere, or be taken as copies of the
    other processes' (a batch axis the mesh does not split over the processes)."""
    processes, index = jax.process_count(), jax.process_index()
    size = shape[batch_axis] // processes
    held = set()
    for indices in sharding.addressable_devices_indices_map(shape).values():
        held.update(range(*indices[batch_axis].indices(shape[batch_axis])))
    if held != set(range(index * size, (index + 1) * size)):
        raise ValueError(f"the learner mesh {dict(sharding.mesh.shape)} does not split the batch axis of {name} "
                         f"(global size {shape[batch_axis]}) into one block per process in process order: "
                         "learner.rows_per_microbatch and learner.images_per_microbatch must be multiples of the "
                         "mesh's batch axes (data x fsdp), and those must span the processes in order")
