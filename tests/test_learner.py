"""The learner: packing, exact accumulation, the NaN guard, the gradient step's memory check,
sharding, and exact resume."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from asyncwebrl.learner import device_memory
from asyncwebrl.learner.checkpoints import CheckpointStore
from asyncwebrl.learner.learner import Learner, LearnerSettings
from asyncwebrl.learner.choices import LOSSES, loss_kind
from asyncwebrl.learner.losses import LossKind
from asyncwebrl.learner.packing import PackingShape, StepRow, merge_duplicates, pack
from asyncwebrl.learner.train import learning_rate_schedule, target_logprobs, zeros_like_params
from asyncwebrl.model import Qwen3VL, preset
from asyncwebrl.model.inputs import vision_inputs
from asyncwebrl.model.tokenizer import Processor, byte_tokenizer, make_image_processor
from asyncwebrl.parallel import make_mesh
from asyncwebrl.records import Task, Trajectory
from asyncwebrl.runtime.rows import episode_advantages
from asyncwebrl.runtime.training import learner_record
from bare_settings import loss_settings, model_options, optimizer_settings  # tests/bare_settings.py
from configs.default import bare

# The tiny preset's architecture with fewer layers: the learner's mechanics, quicker to compile.
CONFIG = dataclasses.replace(preset("tiny"), text=dataclasses.replace(preset("tiny").text, num_layers=2),
                             vision=dataclasses.replace(preset("tiny").vision, depth=1, deepstack_layers=(0,)))
PROCESSOR = Processor(byte_tokenizer(), make_image_processor(min_pixels=32 * 32, max_pixels=64 * 64))
SHAPE = PackingShape(row_length=128, rows_per_microbatch=2, images_per_microbatch=4, patches_per_image=16)


def make_rows(count: int, seed: int = 0, version: int = 0) -> list[StepRow]:
    """Step rows like the agent's: some text, maybe a screenshot, some text; a response."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        prompt = list(rng.integers(0, 256, rng.integers(5, 20)))
        pixels, grids = PROCESSOR.process_images([])
        if i % 3 != 2:
            h, w = [(64, 64), (32, 64), (64, 32)][i % 3]
            pixels, grids = PROCESSOR.process_images([rng.integers(0, 256, (h, w, 3), dtype=np.uint8)])
            n = int(grids[0].prod()) // 4
            prompt += [CONFIG.vision_start_token_id] + [CONFIG.image_token_id] * n + [CONFIG.vision_end_token_id]
        prompt += list(rng.integers(0, 256, rng.integers(3, 10)))
        response = rng.integers(0, 256, rng.integers(4, 16))
        rows.append(StepRow(prompt_ids=np.array(prompt, np.int32), response_ids=response.astype(np.int32),
                            pixel_values=pixels, image_grid_thw=grids,
                            behave_logprobs=-rng.uniform(4.0, 7.0, len(response)).astype(np.float32),
                            versions=np.full(len(response), version - rng.integers(0, 3), np.int32),
                            advantage=float(rng.normal())))
    return rows


def tiny_model(seed: int = 0, **options) -> Qwen3VL:
    return Qwen3VL(CONFIG, **model_options(**options), rngs=nnx.Rngs(seed))


def settings(**changes) -> LearnerSettings:
    """The bare config's learner (configs/default.py) on SHAPE's microbatches, at a higher learning rate."""
    base = dataclasses.replace(LearnerSettings.from_config(bare()), packing=SHAPE,
                               optimizer=optimizer_settings(learning_rate=1e-3, warmup_steps=2, total_steps=20))
    return dataclasses.replace(base, **changes)


def params_of(learner):
    return [np.asarray(x) for x in jax.tree.leaves(learner.params)]


def test_packed_rows_score_like_rows_alone():
    """Packing several rows into one sequence changes nothing: attention stays inside a
    row and positions restart, so each response token's log-prob equals the one computed
    with the row alone in its own microbatch."""
    model = tiny_model()
    rows = make_rows(6, seed=1)
    packed = pack(rows, SHAPE, CONFIG)
    assert len(packed) < len(rows)
    alone_shape = dataclasses.replace(SHAPE, rows_per_microbatch=1)
    packed_scores = np.concatenate([np.asarray(target_logprobs(model, mb, 1.0, 64))[np.asarray(mb.loss_mask) > 0]
                                    for mb in packed])
    alone_scores = []
    for row in rows:
        (mb,) = pack([row], alone_shape, CONFIG)
        alone_scores.append(np.asarray(target_logprobs(model, mb, 1.0, 64))[np.asarray(mb.loss_mask) > 0])
    # compare as multisets of per-row score vectors
    assert np.isclose(np.sort(packed_scores), np.sort(np.concatenate(alone_scores)), atol=2e-5).all()
    assert sum(float(mb.loss_mask.sum()) for mb in packed) == sum(len(r.response_ids) for r in rows)


def test_packing_marks_targets_and_rejects_rows_that_do_not_fit():
    rows = make_rows(1, seed=2)
    (mb,) = pack(rows, SHAPE, CONFIG)
    row = rows[0]
    p, n = len(row.prompt_ids), len(row.response_ids)
    mask = np.asarray(mb.loss_mask[0])
    assert np.flatnonzero(mask).tolist() == list(range(p - 1, p - 1 + n))
    np.testing.assert_array_equal(np.asarray(mb.targets[0, p - 1:p - 1 + n]), row.response_ids)
    np.testing.assert_array_equal(np.asarray(mb.behave_logprobs[0, p - 1:p - 1 + n]), row.behave_logprobs)
    assert (np.asarray(mb.inputs.vision_source[0]) >= 0).sum() == int(row.image_grid_thw.prod()) // 4
    with pytest.raises(ValueError, match="row_length"):
        pack(rows, dataclasses.replace(SHAPE, row_length=8), CONFIG)
    with pytest.raises(ValueError, match="patches_per_image"):
        pack(rows, dataclasses.replace(SHAPE, patches_per_image=4), CONFIG)


def episode_rows(steps: int, seed: int = 0, keys: bool = True) -> list[StepRow]:
    """Step rows of one episode with history 1: step j shows screenshots j-1 and j, so
    consecutive rows share one (named by its store key unless keys=False)."""
    rng = np.random.default_rng(seed)
    screenshots = [PROCESSOR.process_images([rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)])
                   for _ in range(steps)]
    image = [CONFIG.vision_start_token_id] + [CONFIG.image_token_id] * 4 + [CONFIG.vision_end_token_id]
    rows = []
    for j in range(steps):
        shown = [j - 1, j] if j else [0]
        prompt = list(rng.integers(0, 256, 6))
        for _ in shown:
            prompt += image + list(rng.integers(0, 256, 4))
        response = rng.integers(0, 256, 8).astype(np.int32)
        rows.append(StepRow(prompt_ids=np.array(prompt, np.int32), response_ids=response,
                            pixel_values=np.concatenate([screenshots[i][0] for i in shown]),
                            image_grid_thw=np.concatenate([screenshots[i][1] for i in shown]),
                            behave_logprobs=-rng.uniform(4.0, 7.0, 8).astype(np.float32),
                            versions=np.zeros(8, np.int32), advantage=float(rng.normal()),
                            image_keys=tuple(f"shot-{i}" for i in shown) if keys else ()))
    return rows


def test_rows_sharing_a_screenshot_share_its_encoding():
    """Consecutive steps of an episode land in one microbatch and encode their common
    screenshot once; the log-probs and the update are those of unshared encodings."""
    shape = PackingShape(row_length=64, rows_per_microbatch=3, images_per_microbatch=4, patches_per_image=16)
    shared, unshared = episode_rows(6, keys=True), episode_rows(6, keys=False)
    shared_packed, unshared_packed = pack(shared, shape, CONFIG), pack(unshared, shape, CONFIG)
    encoded = lambda packed: sum(int(mb.inputs.vision.patch_valid[:, 0].sum()) for mb in packed)  # noqa: E731
    # 4 screenshots fill the first microbatch; the next repeats the last of them: 7 encodings
    assert encoded(shared_packed) == 7 < encoded(unshared_packed) == 11
    assert len(shared_packed) == 2 < len(unshared_packed)
    model = tiny_model()
    scores = lambda packed: np.sort(np.concatenate([  # noqa: E731
        np.asarray(target_logprobs(model, mb, 1.0, 64))[np.asarray(mb.loss_mask) > 0] for mb in packed]))
    np.testing.assert_allclose(scores(shared_packed), scores(unshared_packed), atol=2e-5)
    with_keys = Learner(tiny_model(), settings(packing=shape))
    without_keys = Learner(tiny_model(), settings(packing=shape))
    measured = with_keys.update(shared)
    assert (measured["images_shown"], measured["images_encoded"]) == (11, 7)
    without_keys.update(unshared)
    for a, b in zip(params_of(with_keys), params_of(without_keys)):
        np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="image keys"):
        pack([dataclasses.replace(shared[1], image_keys=("one",))], shape, CONFIG)


def test_gradient_accumulation_is_exact():
    """One minibatch as 1 big microbatch or as many small ones: the same update."""
    rows = make_rows(8, seed=3)
    big = Learner(tiny_model(), settings(packing=dataclasses.replace(SHAPE, rows_per_microbatch=8,
                                                                      images_per_microbatch=8)))
    small = Learner(tiny_model(), settings(packing=dataclasses.replace(SHAPE, rows_per_microbatch=1)))
    big_measured, small_measured = big.update(rows), small.update(rows)
    assert big_measured["microbatches"] == 1 and small_measured["microbatches"] > 2
    for a, b in zip(params_of(big), params_of(small)):
        np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)
    for name in ("loss", "clip_ratio", "approx_kl", "grad_norm"):
        assert abs(big_measured[name] - small_measured[name]) < 1e-5 * max(1.0, abs(big_measured[name])), name


def test_single_step_update_takes_pi_prox_from_its_own_forward(monkeypatch):
    """One optimiser step per update: pi_prox is the parameters the loss is taken at, so the
    update without the separate proximal pass equals the one with it."""
    rows = make_rows(6, seed=5)
    shape = dataclasses.replace(SHAPE, rows_per_microbatch=1)
    without = Learner(tiny_model(), settings(packing=shape))
    assert not without._needs_proximal_pass(len(pack(rows, shape, CONFIG)))
    with_pass = Learner(tiny_model(), settings(packing=shape))
    monkeypatch.setattr(with_pass, "_needs_proximal_pass", lambda microbatches: True)
    measured_without, measured_with = without.update(rows), with_pass.update(rows)
    assert measured_with["prox_seconds"] > 0 and measured_without["optimizer_steps"] == 1
    assert measured_with["proximal_pass"] and not measured_without["proximal_pass"]
    for a, b in zip(params_of(without), params_of(with_pass)):
        np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)
    for name in ("loss", "importance_weight_mean", "grad_norm"):
        assert measured_without[name] == pytest.approx(measured_with[name], rel=1e-5, abs=1e-7), name
    assert Learner(tiny_model(), settings(packing=shape, epochs=2))._needs_proximal_pass(3)
    assert not Learner(tiny_model(), settings(packing=shape, epochs=2, loss=loss_settings(decoupled=False))
                       )._needs_proximal_pass(3)


def test_rl_update_measures_and_bumps_the_version():
    learner = Learner(tiny_model(), settings(epochs=2, minibatches=2,
                                             packing=dataclasses.replace(SHAPE, rows_per_microbatch=1)))
    before = params_of(learner)
    rows = make_rows(6, seed=4)
    measured = learner.update(rows)
    assert learner.version == 1 and measured["version"] == 1
    assert measured["optimizer_steps"] == 4 and measured["skipped"] == 0
    lags = np.concatenate([0 - r.versions for r in rows])
    assert measured["staleness_mean"] == pytest.approx(lags.mean()) and measured["staleness_max"] == lags.max()
    assert measured["response_tokens"] == sum(len(r.response_ids) for r in rows)
    for name in ("loss", "clip_ratio", "behave_cap_ratio", "importance_weight_mean", "approx_kl", "grad_norm",
                 "param_norm", "learning_rate", "fill"):
        assert np.isfinite(measured[name]), name
    assert any(not np.array_equal(a, b) for a, b in zip(before, params_of(learner)))


# How a jax array is read on the host without jax.device_get: int(x), float(x), bool(x),
# operator.index(x), x.item(), x.tolist(), np.asarray(x)
IMPLICIT_READS = ("__int__", "__float__", "__bool__", "__index__", "item", "tolist", "__array__")


def test_an_update_reads_the_device_at_its_start_and_end_only(monkeypatch):
    """Four optimiser steps, two reads of the device: the starting step and version, and
    the summed measurements; no step waits for the host to read its results. On an
    accelerator jax.transfer_guard_device_to_host("disallow") would name a stray read, but
    the CPU backend lets such copies through (its arrays are host memory), so here every
    way of reading a jax array but jax.device_get fails during the update."""
    learner = Learner(tiny_model(), settings(epochs=2, minibatches=2,
                                             packing=dataclasses.replace(SHAPE, rows_per_microbatch=1)))
    rows = make_rows(6, seed=4)
    array_type = type(jnp.zeros(()))
    fetching, fetches = [], []

    def refused(name, read):
        def guarded(self, *args, **kwargs):
            if not fetching:
                raise AssertionError(f"the update read a device array through {name}, not jax.device_get")
            return read(self, *args, **kwargs)
        return guarded

    def device_get(tree, device_get=jax.device_get):
        fetches.append(tree)
        fetching.append(True)
        try:
            return device_get(tree)
        finally:
            fetching.pop()

    for name in IMPLICIT_READS:
        monkeypatch.setattr(array_type, name, refused(name, getattr(array_type, name)))
    monkeypatch.setattr(jax, "device_get", device_get)
    measured = learner.update(rows)
    monkeypatch.undo()
    assert measured["optimizer_steps"] == 4 and len(fetches) == 2


def test_nan_guard_skips_the_update_and_keeps_the_moments():
    learner = Learner(tiny_model(), settings())
    rows = make_rows(4, seed=5)
    rows[0].advantage = float("nan")
    before = params_of(learner)
    moments = [np.asarray(x) for x in jax.tree.leaves(learner.state.opt_state)]
    measured = learner.update(rows)
    assert measured["skipped"] == 1
    assert int(learner.state.step) == 0
    for a, b in zip(before, params_of(learner)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(moments, [np.asarray(x) for x in jax.tree.leaves(learner.state.opt_state)]):
        np.testing.assert_array_equal(a, b)


SHRINKING = {"model.remat": "none", "learner.rows_per_microbatch": 4, "learner.images_per_microbatch": 5,
             "learner.row_length": 3072}


def test_the_memory_check_names_the_keys_that_shrink_the_gradient_step():
    """The numbers of the one-H200 end-to-end run at remat none: 81.22 GiB of temporaries."""
    gib = device_memory.GIB
    assert device_memory.check_gradient_step_fits(int(60 * gib), int(0.5 * gib), int(61 * gib), SHRINKING) == 60.5 * gib
    with pytest.raises(device_memory.GradientStepDoesNotFit) as raised:
        device_memory.check_gradient_step_fits(int(81.22 * gib), 0, int(60 * gib), SHRINKING)
    message = str(raised.value)
    for words in ("81.22 GiB", "60.00 GiB", "model.remat (now 'none')", "learner.rows_per_microbatch (now 4)",
                  "learner.images_per_microbatch", "learner.row_length"):
        assert words in message, words
    # outputs not written into donated arguments count too
    with pytest.raises(MemoryError):
        device_memory.check_gradient_step_fits(int(59 * gib), int(2 * gib), int(60 * gib), SHRINKING)


class FakeDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_free_memory_is_the_least_over_the_devices_and_unknown_on_cpu():
    devices = [FakeDevice({"bytes_limit": 100, "bytes_in_use": 30}),
               FakeDevice({"bytes_limit": 100, "bytes_in_use": 60})]
    assert device_memory.free_device_bytes(devices) == 40
    assert device_memory.free_device_bytes(devices + [FakeDevice(None)]) is None
    assert device_memory.free_device_bytes(jax.devices("cpu")[:1]) is None   # CPU keeps no allocator statistics


def test_a_gradient_step_too_big_for_the_device_is_named_before_it_runs(monkeypatch):
    """The check runs before the first gradient step of an update: nothing has changed when it raises."""
    learner = Learner(tiny_model(), settings())
    before = params_of(learner)
    monkeypatch.setattr(device_memory, "free_device_bytes", lambda devices: 1024)
    with pytest.raises(device_memory.GradientStepDoesNotFit, match="model.remat"):
        learner.update(make_rows(4, seed=5))
    assert learner.version == 0 and int(learner.state.step) == 0
    for a, b in zip(before, params_of(learner)):
        np.testing.assert_array_equal(a, b)


def test_the_memory_check_compiles_each_gradient_step_once(monkeypatch):
    """The check compiles accumulate through .lower().compile(); the jitted call after it must
    find that executable, not compile again: one backend compile per signature (prox None or an
    array; microbatches with or without images)."""
    learner = Learner(tiny_model(), settings(epochs=2, minibatches=2,
                                             packing=dataclasses.replace(SHAPE, rows_per_microbatch=1)))
    monkeypatch.setattr(device_memory, "free_device_bytes", lambda devices: 2**40)
    compiled = []

    def listen(event, seconds, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration" and fun_name == "jit(accumulate)":
            compiled.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        measured = learner.update(make_rows(6, seed=4))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert measured["proximal_pass"] and measured["optimizer_steps"] == 4
    assert len(learner._checked_signatures) >= 1
    assert len(compiled) == len(learner._checked_signatures)


def test_the_optimizer_step_is_optax_clip_then_adamw_on_the_token_mean():
    """apply folds the token mean and the global-norm clip into one scalar (no copy of the
    gradient tree): two steps, the second with gradients far over the clip, must match
    optax.chain(clip_by_global_norm, adamw) applied to the mean gradients."""
    import optax

    from asyncwebrl.learner.train import TrainState, build_steps, make_optimizer

    options = optimizer_settings(max_grad_norm=0.5, warmup_steps=0, total_steps=4)
    graphdef, params = nnx.split(tiny_model())
    tx = make_optimizer(options)
    _, _, apply = build_steps(graphdef, tx, learning_rate_schedule(options), loss_settings(), options.max_grad_norm)
    reference = optax.chain(optax.clip_by_global_norm(options.max_grad_norm),
                            optax.adamw(learning_rate_schedule(options), b1=options.b1, b2=options.b2,
                                        eps=options.eps, weight_decay=options.weight_decay))
    state = TrainState(params=params, opt_state=tx.init(params), step=jnp.zeros((), jnp.int32),
                       version=jnp.zeros((), jnp.int32))
    expected, expected_state = params, reference.init(params)
    objective = loss_kind(loss_settings().kind).objective
    for seed, size, tokens in ((0, 1e-3, 7.0), (1, 50.0, 3.0)):   # under the clip, then far over it
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(jax.random.key(seed), len(leaves))
        summed = treedef.unflatten([size * jax.random.normal(k, p.shape, jnp.float32) for k, p in zip(keys, leaves)])
        mean = jax.tree.map(lambda g: g / tokens, summed)
        updates, expected_state = reference.update(mean, expected_state, expected)
        expected = optax.apply_updates(expected, updates)
        state, measured = apply(state, summed, {"tokens": jnp.float32(tokens), objective: jnp.float32(0.0)})
        assert float(measured["grad_norm"]) == pytest.approx(float(optax.tree.norm(mean)), rel=1e-5)
    assert float(optax.tree.norm(mean)) > 10 * options.max_grad_norm   # the second step was clipped
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(state.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-5, atol=1e-7)
    assert int(state.step) == 2


def copies(row: StepRow, *advantages: float) -> list[StepRow]:
    return [dataclasses.replace(row, advantage=a) for a in advantages]


def test_identical_steps_merge_into_one_row_per_advantage_sign():
    rows = make_rows(4, seed=9)
    nudged = dataclasses.replace(rows[1], behave_logprobs=rows[1].behave_logprobs + 1e-3)   # beyond the tolerance
    other_key = dataclasses.replace(rows[2], image_keys=("k",) * rows[2].num_images) if rows[2].num_images else None
    batch = [*copies(rows[0], 0.5, 0.25, -1.0, 0.75), rows[1], nudged, *copies(rows[3], 1.0, 2.0)]
    merged = merge_duplicates(batch)
    assert [m.count for m in merged] == [3, 1, 1, 1, 2]
    assert [m.advantage for m in merged] == pytest.approx([1.5, -1.0, rows[1].advantage, nudged.advantage,
                                                          3.0])
    assert merged[0].prompt_ids is rows[0].prompt_ids   # the first copy, order kept
    assert sum(m.count for m in merged) == len(batch)
    assert merge_duplicates(batch, tolerance=1e-2)[2].count == 2   # within a looser tolerance they merge
    if other_key is not None:
        assert len(merge_duplicates([rows[2], other_key])) == 2
    mask = pack(merged, SHAPE, CONFIG)
    assert sum(float(mb.loss_mask.sum()) for mb in mask) == sum(len(r.response_ids) for r in batch)


def summed_gradient(learner, rows, params, prox_params):
    """The minibatch gradient and metric sums of these rows at `params`, pi_prox at `prox_params`."""
    grads, sums = zeros_like_params(params), None
    for microbatch in pack(rows, SHAPE, CONFIG):
        microbatch = learner._place(microbatch)
        grads, new = learner._accumulate(params, grads, microbatch, learner._logprobs(prox_params, microbatch))
        sums = new if sums is None else jax.tree.map(jnp.add, sums, new)
    return grads, sums


@pytest.mark.parametrize("kind", ["grpo", "sft"])
def test_merged_copies_train_exactly_as_the_copies(kind):
    """Copies of steps (advantages of both signs, as in a group whose episodes share their
    first moves) trained as merged rows give the copies' gradient and metrics: at the
    parameters an update starts from, and after a large step, where the clip acts."""
    rows = make_rows(6, seed=10)
    batch = [*copies(rows[0], 0.8, -0.4, 0.3, -1.1), *rows[1:4], *copies(rows[4], -0.7, -0.2), rows[5]]
    merged_rows = merge_duplicates(batch)
    assert len(merged_rows) == (len(batch) - 2 - 1 if kind == "grpo" else len(batch) - 2 - 1)
    big_step = optimizer_settings(learning_rate=3e-2, warmup_steps=0, total_steps=20)
    learners = {merge: Learner(tiny_model(), settings(loss=loss_settings(kind=kind), optimizer=big_step,
                                                      merge_duplicates=merge)) for merge in (True, False)}
    start = jax.tree.map(jnp.copy, learners[False].params)
    measured = {merge: learner.update(batch) for merge, learner in learners.items()}
    assert measured[True]["rows_trained"] == len(merged_rows) and measured[False]["rows_trained"] == len(batch)
    names = ("nll",) if kind == "sft" else ("loss", "importance_weight_mean")
    for name in (*names, "grad_norm", "rows", "response_tokens"):   # one optimiser step from equal parameters
        assert measured[True][name] == pytest.approx(measured[False][name], rel=1e-5, abs=1e-7), name

    moved = learners[False].params   # the copies' gradient at moved parameters, pi_prox at the start
    (merged_grads, merged_sums), (grads, sums) = (summed_gradient(learners[False], r, moved, start)
                                                  for r in (merged_rows, batch))
    if kind == "grpo":
        assert float(sums["clip_ratio"]) > 0 and float(sums["approx_kl"]) > 0   # the clip acts
    for name in sums:
        assert float(merged_sums[name]) == pytest.approx(float(sums[name]), rel=1e-5, abs=1e-6), name
    scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads))
    for a, b in zip(jax.tree.leaves(merged_grads), jax.tree.leaves(grads)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6 * scale, rtol=1e-5)


def test_supervised_mode_learns_the_demonstrations():
    learner = Learner(tiny_model(), settings(loss=loss_settings(kind="sft")))
    rows = make_rows(4, seed=6)
    first = learner.update(rows)["nll"]
    for _ in range(15):
        last = learner.update(rows)["nll"]
    assert last < 0.7 * first
    assert learner.version == 0  # warm-start steps are not RL updates


def test_a_supervised_rows_prompt_weight_trains_its_prompt_text_and_rl_refuses_it():
    """prompt_weight: the prompt's text targets join the loss at that weight (image
    placeholders never do) while the response's targets keep their weight; an RL
    loss kind refuses such rows (it has no advantage for prompt tokens)."""
    (row,) = make_rows(1, seed=2)   # a prompt with a screenshot between two runs of text
    weighted = dataclasses.replace(row, prompt_weight=0.25)
    (plain,), (mb,) = pack([row], SHAPE, CONFIG), pack([weighted], SHAPE, CONFIG)
    p, n = len(row.prompt_ids), len(row.response_ids)
    mask = np.asarray(mb.loss_mask[0])
    np.testing.assert_array_equal(mask[p - 1:p - 1 + n], np.asarray(plain.loss_mask[0, p - 1:p - 1 + n]))
    text_targets = [t for t in range(p - 1) if row.prompt_ids[t + 1] != CONFIG.image_token_id]
    assert len(text_targets) < p - 1   # the placeholders are left out ...
    assert np.flatnonzero(mask[:p - 1]).tolist() == text_targets   # ... and every text target is in
    np.testing.assert_allclose(mask[text_targets], 0.25)
    rl_learner = Learner(tiny_model(), settings())
    with pytest.raises(ValueError, match="prompt_weight"):
        rl_learner.update([weighted])
    with pytest.raises(ValueError, match="prompt_weight"):
        rl_learner.response_logprobs([weighted])

    def prompt_nll(learner):
        logp = np.asarray(target_logprobs(learner.model(), plain, 1.0, 128))[0]
        return -logp[text_targets].mean()

    trained = {}
    for weight in (0.0, 1.0):
        learner = Learner(tiny_model(), settings(loss=loss_settings(kind="sft")))
        before = prompt_nll(learner)
        for _ in range(8):
            learner.update([dataclasses.replace(row, prompt_weight=weight)])
        trained[weight] = prompt_nll(learner) - before
    assert trained[1.0] < trained[0.0] - 0.5   # only the weighted prompt is learned


def reinforce(logp, prox_logp, microbatch, settings):
    # a merged row's advantage is already its copies' sum: weigh it once (LossKind's contract)
    weighted = microbatch.advantages * (microbatch.loss_mask > 0)
    total = -(weighted * logp).sum()
    return total, {"reinforce_loss": total, "mean_advantage": weighted.sum()}


def centred_rewards(rewards, group_ids, num_steps, *, normalizer, k):
    rewards = np.asarray(rewards, np.float32)
    return rewards - rewards.mean()


REINFORCE = LossKind(reinforce, "reinforce_loss", advantages=centred_rewards)


def test_a_new_loss_kind_is_one_registry_line(monkeypatch):
    """A toy REINFORCE kind (its function and LossKind above), registered with one line:
    the step rows take its advantages, the learner trains with its loss (with no proximal
    pass, as it reads no pi_prox), and its metrics come back and are logged under their
    own names."""
    monkeypatch.setitem(LOSSES, "reinforce", f"{__name__}:REINFORCE")

    task = Task(task_id="toy", task_name="toy", website="http://toy.test/")
    episodes = [Trajectory(task=task, steps=[], outcome="answered", reward=r) for r in (1.0, 0.0, 0.0, 1.0)]
    np.testing.assert_allclose(episode_advantages(episodes, kind="reinforce", normalizer="const", k=10.0),
                               [0.5, -0.5, -0.5, 0.5])
    rows = make_rows(6, seed=8)
    learner = Learner(tiny_model(), settings(loss=loss_settings(kind="reinforce"), epochs=2))
    before = params_of(learner)
    measured = learner.update(rows)
    tokens = np.array([len(r.response_ids) for r in rows])
    advantages = np.array([r.advantage for r in rows])
    assert measured["mean_advantage"] == pytest.approx((tokens * advantages).sum() / tokens.sum(), rel=1e-5)
    assert np.isfinite(measured["reinforce_loss"]) and measured["skipped"] == 0
    assert measured["optimizer_steps"] == 2 and not measured["proximal_pass"]
    assert learner.version == 1   # it learns from rewards: each update is a policy version
    assert any(not np.array_equal(a, b) for a, b in zip(before, params_of(learner)))
    for name in ("reinforce_loss", "mean_advantage"):   # metrics.jsonl's record takes them as they are
        assert learner_record(measured)[name] == measured[name]


def test_an_unknown_loss_kind_is_named_when_the_learner_is_set_up():
    with pytest.raises(ValueError, match="loss kind must be one of"):
        settings(loss=loss_settings(kind="ppo"))


def test_sharded_update_equals_single_device():
    """fsdp=4 x tensor=2 on 8 fake CPU devices: two updates give the same parameters as
    on one device. Sharded sums reduce in another order (float32 rounding), and Adam
    divides each gradient element by its own magnitude, so a near-zero gradient element can
    turn a 1e-9 rounding difference into a visible step; Adam's eps = 1e-6 (instead of
    1e-8) bounds that amplification, and we allow 1% of lr (1e-3) absolute (0.5% held until
    the linear maps became 2-D matmuls, which sum in another order: one element of 36,864
    then differed by 5.2e-6). A wrong sharded gradient moves parameters by ~lr."""
    rows = make_rows(8, seed=7)
    shape = dataclasses.replace(SHAPE, rows_per_microbatch=4, images_per_microbatch=8)
    smooth = optimizer_settings(learning_rate=1e-3, eps=1e-6, warmup_steps=2, total_steps=20)
    single = Learner(tiny_model(), settings(packing=shape, optimizer=smooth))
    sharded = Learner(tiny_model(), settings(packing=shape, optimizer=smooth),
                      mesh=make_mesh({"data": 1, "fsdp": 4, "tensor": 2}))
    gate = sharded.params["layers"]["gate_proj"]["kernel"][...]
    assert len(gate.sharding.device_set) == 8
    for _ in range(2):
        a, b = single.update(rows), sharded.update(rows)
        assert abs(a["loss"] - b["loss"]) < 1e-5
    for x, y in zip(params_of(single), params_of(sharded)):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("moment_dtype", ["float32", "bfloat16"])
def test_float32_master_weights_and_moments_shard_over_fsdp_and_the_sampler_takes_a_bf16_copy(moment_dtype):
    """configs/instruct.py's recipe on fsdp=8: the learner keeps float32 weights and Adam
    moments (the first in optimizer.moment_dtype), each device one eighth of a weight
    matrix's, computes in bf16; the sampler's copy (sampler.param_dtype) is bf16, and every
    published version is cast to it."""
    from asyncwebrl.sampler import Engine
    from bare_settings import engine_settings

    model = tiny_model(dtype=jnp.bfloat16, param_dtype=jnp.float32)
    learner = Learner(model, settings(optimizer=optimizer_settings(learning_rate=1e-3, moment_dtype=moment_dtype)),
                      mesh=make_mesh({"data": 1, "fsdp": 8, "tensor": 1}))
    assert np.isfinite(learner.update(make_rows(8, seed=3))["loss"])
    moments = {jax.tree_util.keystr(path): leaf for path, leaf in
               jax.tree_util.tree_flatten_with_path(learner.state.opt_state)[0] if "gate_proj" in jax.tree_util.keystr(path)}
    first = next(leaf for path, leaf in moments.items() if ".mu" in path)
    second = next(leaf for path, leaf in moments.items() if ".nu" in path)
    assert first.dtype == jnp.dtype(moment_dtype) and second.dtype == jnp.float32
    for leaf in (learner.params["layers"]["gate_proj"]["kernel"][...], first, second):
        assert leaf.sharding.shard_shape(leaf.shape) != leaf.shape and len(leaf.sharding.device_set) == 8
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(learner.params))

    engine = Engine(learner.model(), engine_settings(0.0, param_dtype="bfloat16"))
    floating = lambda leaves: [leaf for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]  # noqa: E731
    assert {leaf.dtype for leaf in floating(engine._params)} == {jnp.dtype(jnp.bfloat16)}
    engine.publish(learner.params, learner.version)
    published, version = engine._pending_params
    assert version == 1 and {leaf.dtype for leaf in floating(published)} == {jnp.dtype(jnp.bfloat16)}
    expected = floating(jax.tree.leaves(learner.params))
    np.testing.assert_array_equal(np.asarray(floating(published)[0], np.float32),
                                  np.asarray(jnp.asarray(expected[0]).astype(jnp.bfloat16), np.float32))
    with pytest.raises(ValueError, match="sampler.param_dtype"):
        engine_settings(0.0, param_dtype="float8")
    with pytest.raises(ValueError, match="optimizer.moment_dtype"):
        optimizer_settings(moment_dtype="float64")


def test_pallas_update_on_a_2x2x2_mesh_equals_the_xla_update():
    """data=2 x fsdp=2 x tensor=2 on 8 fake CPU devices: the flash kernel (its interpreter),
    each device on its rows and heads, in the text and the vision tower, trains as XLA
    attention does on the same mesh (the kernel sums in another order: float32 rounding)."""
    rows = make_rows(8, seed=3)
    shape = dataclasses.replace(SHAPE, rows_per_microbatch=4, images_per_microbatch=8)
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    xla = Learner(tiny_model(), settings(packing=shape), mesh=mesh)
    pallas = Learner(tiny_model(attention="pallas"), settings(packing=shape), mesh=mesh)
    a, b = xla.update(rows), pallas.update(rows)
    assert abs(a["loss"] - b["loss"]) < 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-4 * a["grad_norm"]
    for x, y in zip(params_of(xla), params_of(pallas)):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)


def test_resume_from_a_checkpoint_ends_identical(tmp_path):
    """Train 4 updates, checkpointing after 2; a fresh learner restored from it and run for
    the remaining 2 ends with bit-identical parameters and optimiser state."""
    batches = [make_rows(5, seed=10 + i, version=i) for i in range(4)]
    straight = Learner(tiny_model(), settings(epochs=2, minibatches=2))
    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    for i, rows in enumerate(batches):
        straight.update(rows)
        if i == 1:
            store.save(2, straight.state, {"task_position": 17, "admitted": 9})
    store.close()

    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    resumed = Learner(tiny_model(seed=99), settings(epochs=2, minibatches=2))  # different init: all must come back
    state, runtime, step = store.restore(resumed.state)
    resumed.restore(state)
    assert (step, runtime) == (2, {"task_position": 17, "admitted": 9})
    assert resumed.version == 2
    for rows in batches[2:]:
        resumed.update(rows)
    for a, b in zip(jax.tree.leaves(straight.state), jax.tree.leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    store.close()


def test_restore_onto_another_mesh(tmp_path):
    learner = Learner(tiny_model(), settings())
    learner.update(make_rows(3, seed=11))
    with CheckpointStore(tmp_path / "c", keep=bare().train.keep_checkpoints) as store:
        store.save(1, learner.state, {})
    sharded = Learner(tiny_model(seed=5), settings(), mesh=make_mesh({"fsdp": 4, "tensor": 2}))
    with CheckpointStore(tmp_path / "c", keep=bare().train.keep_checkpoints) as store:
        state, _, _ = store.restore(sharded.state)
    sharded.restore(state)
    kernel = sharded.params["layers"]["gate_proj"]["kernel"][...]
    assert len(kernel.sharding.device_set) == 8
    for a, b in zip(params_of(learner), params_of(sharded)):
        np.testing.assert_array_equal(a, b)


def test_vision_inputs_accept_no_images():
    empty = vision_inputs(np.zeros((0, CONFIG.vision.still_patch_dim), np.uint8), np.zeros((0, 3)), CONFIG.vision,
                          patches_per_image=16, num_images=2)
    assert empty.patches.shape == (2, 16, CONFIG.vision.still_patch_dim) and empty.patches.dtype == np.uint8
    assert not np.asarray(empty.patch_valid).any()
    assert jnp.asarray(empty.interp_weight).sum() == 0


def test_a_response_that_spells_an_image_pad_is_text():
    """The policy may write any token id, the image placeholder's included: in a response
    it is an ordinary token, never a request for an image."""
    row = make_rows(1, seed=12)[0]
    row.response_ids = row.response_ids.copy()
    row.response_ids[1] = CONFIG.image_token_id
    (mb,) = pack([row], SHAPE, CONFIG)
    p = len(row.prompt_ids)
    assert int(mb.inputs.vision_source[0, p + 1]) == -1
    assert (np.asarray(mb.inputs.vision_source[0]) >= 0).sum() == int(row.image_grid_thw.prod()) // 4


def test_a_warmup_longer_than_the_schedule_is_named():
    with pytest.raises(ValueError, match="warmup_steps=100 .* total_steps=10"):
        learning_rate_schedule(optimizer_settings(learning_rate=1e-3, warmup_steps=100, total_steps=10))
    assert float(learning_rate_schedule(optimizer_settings(learning_rate=1e-3, warmup_steps=5, total_steps=10))(5)) \
        == pytest.approx(1e-3)
