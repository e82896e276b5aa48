"""Continuous-batching generation: a fixed set of decode slots over one KV cache.

    engine = Engine(model, EngineSettings.from_config(config, temperature=config.rl.temperature, top_p=1.0,
                                                     stop_token_ids=(eos,)))
    with engine:                                   # the engine runs on its own thread
        future = engine.submit(Request(input_ids, max_new_tokens=config.sampler.max_new_tokens, images=images))
        response = future.result()                 # or: await asyncio.wrap_future(future)
        engine.publish(new_params, version=3)      # from the learner thread, any time

Loop (one thread): swap in published parameters if any -> prefill queued requests into
free slots -> one decode call -> hand back finished slots at once. A request's prompt is
prefilled in chunks of the bucketed lengths in `prompt_buckets`.

A decode call runs up to `decode_steps` steps on device without coming back to the host,
each slot stopping there by the rules `_record` applies (a stop token, max_new_tokens, a
full slot); the host records the tokens in order afterwards. It runs one step when the
host has work waiting (a publish to swap in, a queued request and a free slot), and ends
at the first finished slot when requests wait for one. It decodes only the block of
slots that holds every occupied one (`blocks`: admission takes the lowest free slot, so
under light load the block is small). The shapes the engine compiles are: one prefill
per bucket (for a first and for a later chunk) and one decode call per (block, attention
window); `warm_up` compiles them all.

Every generated token carries the version of the parameters that produced it (the
prefill's version for the first token, the decode call's for the others). A publish
takes effect at the next iteration, between decode calls; in-flight requests keep their cache.

Images: each one is encoded once per (screenshot key, version) and kept in a small cache,
because consecutive steps of an episode show the same screenshot twice (history).

Prefill cache (`prefill_cache` > 0): the episodes of a GRPO group often send the very same
prompt (same token ids, same weights version). A text-only prompt that fits one chunk keeps
its prefill's KV rows and last-position logits, keyed by (version, token ids), in a small
LRU cache; a copy of it is then written into its slot from there and its first token is
sampled afresh from the cached logits (a fresh key, the same `sample`), so it is
distributed exactly as a real prefill's. A swap of parameters empties the cache.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from asyncwebrl import distributed
from asyncwebrl.model.inputs import IMAGE, ModelInputs, VisionFeatures, sequence_positions, vision_inputs
from asyncwebrl.model.layers import LAYERS
from asyncwebrl.model.text import KVCache
from asyncwebrl.parallel import SAMPLER_RULES, logical_spec, make_mesh, param_shardings, traced_on
from asyncwebrl.sampler.sampling import SamplingSettings, sample


class EngineFailure(Exception):
    """The engine's computation failed (a device error in a prefill or a decode step): not
    a refusal of one request (that is a ValueError from submit) nor a stop."""


PARAM_DTYPES = ("", "float32", "bfloat16")   # "": the model's own


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """The fields without a default are config keys or from_config's arguments
    (configs/default.py holds the keys' defaults); vision_cache_entries no config sets."""
    slots: int                                       # requests decoded together
    capacity: int                                    # cache tokens per slot: prompt + response
    prompt_buckets: tuple[int, ...]                  # prefill chunk lengths (the largest chunks long prompts)
    max_images: int                                  # per request
    patches_per_image: int                           # image patches are padded to this
    # Requests whose prompts fit one chunk are prefilled up to this many at a time, in one
    # call (padded to a power of two of rows), sharing a call's fixed cost: meant for GPUs,
    # where a small model's prefill is mostly that cost (not yet measured:
    # benchmarks/sampler.py --prefill-rows). 1 = one at a time (on a CPU the work grows
    # with the rows anyway, and every width is one more shape to compile).
    prefill_rows: int
    # Recent prompts whose prefill (KV rows of their bucket + last logits) is kept for exact
    # copies of them (same ids, same version; text-only, one chunk); 0 = off. Both prefill
    # paths (one at a time and prefill_rows) use it.
    prefill_cache: int
    # Decode steps per jitted call, run on device while the host has nothing to do in between
    # (no publish pending); each call costs a host round trip. 1 = one step per round trip.
    decode_steps: int
    # The dtype of the sampler's copy of the weights ("" = the model's): bfloat16 under a
    # learner's float32 master weights halves the copy and the bytes each decode step reads
    param_dtype: str
    seed: int
    sampling: SamplingSettings
    stop_token_ids: tuple[int, ...]                  # e.g. <|im_end|>
    vision_cache_entries: int = 64

    def __post_init__(self):
        if self.decode_steps < 1:
            raise ValueError(f"sampler.decode_steps must be >= 1, got {self.decode_steps}")
        if self.param_dtype not in PARAM_DTYPES:
            raise ValueError(f"sampler.param_dtype must be one of {PARAM_DTYPES}, got {self.param_dtype!r}")

    @classmethod
    def from_config(cls, config, *, temperature: float, top_p: float, stop_token_ids: tuple[int, ...]) -> EngineSettings:
        """config.sampler's engine, sampling at `temperature` with top-p truncation `top_p`
        (eval's, or RL's: 1.0) until one of `stop_token_ids` (the processor's)."""
        s = config.sampler
        return cls(slots=s.slots, capacity=s.capacity, prompt_buckets=tuple(s.prompt_buckets), max_images=s.max_images,
                   patches_per_image=s.patches_per_image, prefill_rows=s.prefill_rows,
                   prefill_cache=s.prefill_cache, decode_steps=s.decode_steps, param_dtype=s.param_dtype,
                   seed=config.seed,
                   sampling=SamplingSettings(temperature=temperature, top_p=top_p), stop_token_ids=tuple(stop_token_ids))


@dataclasses.dataclass
class Image:
    pixel_values: np.ndarray     # [patches, still_patch_dim] uint8 (the Processor's), or float [patches, patch_dim]
    grid_thw: tuple              # (1, h, w) in patches
    key: str | None = None       # the screenshot key: enables the vision cache


@dataclasses.dataclass
class Request:
    input_ids: np.ndarray        # [p] with image placeholders expanded
    max_new_tokens: int          # sampler.max_new_tokens (the model policy's)
    images: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Response:
    tokens: np.ndarray           # [n] int32
    logprobs: np.ndarray         # [n] float32
    versions: np.ndarray         # [n] int32
    finish_reason: str           # "stop", "length" (max_new_tokens) or "context" (slot full)
    prompt_tokens: int
    latency_s: float


@dataclasses.dataclass
class _Slot:
    request: Request
    future: concurrent.futures.Future
    submitted: float
    length: int = 0              # tokens in the cache
    position: int = 0            # rotary position of the next token fed
    tokens: list = dataclasses.field(default_factory=list)
    logprobs: list = dataclasses.field(default_factory=list)
    versions: list = dataclasses.field(default_factory=list)


class Engine:
    def __init__(self, model: nnx.Module, settings: EngineSettings, mesh=None,
                 rules=SAMPLER_RULES, version: int = 0):
        self.settings = settings
        self.config = model.config
        self.mesh = mesh or make_mesh({"fsdp": 1}, devices=jax.devices()[:1])
        self.graphdef, params = nnx.split(model)
        self._param_shardings = param_shardings(params, self.mesh, rules)
        # jitted calls take the parameters as a flat list: flattening an nnx.State in
        # Python on every decode step cost milliseconds of host time for a 2B model
        self._params_def = jax.tree.structure(params)
        # the copy's dtypes: every later version is cast to them as it is published
        self._dtypes = [jnp.dtype(settings.param_dtype) if settings.param_dtype and jnp.issubdtype(leaf.dtype, jnp.floating)
                        else leaf.dtype for leaf in jax.tree.leaves(params)]
        self._params = self._private_copy(params)
        self._version = version
        # A padded prompt chunk must be written whole, never clamped at the end of a row: a
        # prompt longer than the largest bucket is chunked, and its last chunk may overhang
        # by up to one bucket. With a bucket as large as the capacity nothing is chunked.
        self.buckets = tuple(sorted({min(b, settings.capacity) for b in settings.prompt_buckets}))
        largest = self.buckets[-1]
        allocated = settings.capacity + (0 if largest == settings.capacity else largest)
        # the Pallas decode kernel reads each row up to its own length, in 128-position
        # blocks split into parts: it needs no windows, and an allocation of whole 512s
        self._reads_own_length = model.attention == "pallas"
        if self._reads_own_length:
            allocated = -(-allocated // 512) * 512
        cache = model.init_cache(settings.slots, allocated)
        cache_shardings = self._cache_shardings(cache, rules)
        self._cache = jax.device_put(cache, cache_shardings)
        # The slots are split in equal parts over the devices of the batch axes. A decode call
        # takes the first rows of every part (its block): each device decodes as many rows as
        # the others and no row moves between devices. Admission takes the lowest free row of
        # the parts in turn, so the occupied slots stay in the smallest block.
        self.slot_shards = self._slot_shards(cache_shardings.keys)
        per_shard = settings.slots // self.slot_shards
        self.blocks = tuple(sorted({self.slot_shards * min(2**k, per_shard)
                                    for k in range(per_shard.bit_length() + 1)}))
        self._admission_order = sorted(range(settings.slots), key=lambda i: (i % per_shard, i // per_shard))
        self._slots: list[_Slot | None] = [None] * settings.slots
        self._queue: collections.deque = collections.deque()
        self._pending_params = None
        self._lock = threading.Condition()
        self._thread = None
        self._running = False
        self._step = 0
        self._vision_cache: collections.OrderedDict = collections.OrderedDict()
        # (version, prompt ids bytes) -> (KV keys, values [L, 1, K, bucket, H], last logits [1, V],
        # prompt length, next rotary position), least recently used first
        self._prefill_cache: collections.OrderedDict = collections.OrderedDict()
        self.stats = collections.Counter()
        # the cache keeps one sharding across calls (else every call would see a new one and recompile);
        # every call is traced on the engine's mesh, which the Pallas kernels split their work over
        self._prefill = jax.jit(traced_on(self.mesh, self._prefill_impl), donate_argnums=(1,),
                                static_argnames=("first",), out_shardings=(cache_shardings, None, None, None))
        self._restore = jax.jit(self._restore_impl, donate_argnums=(0,), out_shardings=(cache_shardings, None, None))
        self._decode = jax.jit(traced_on(self.mesh, self._decode_impl), donate_argnums=(1,),
                               static_argnames=("rows", "window"), out_shardings=(cache_shardings, None, None, None))
        self._prefill_rows = jax.jit(traced_on(self.mesh, self._prefill_rows_impl), donate_argnums=(1,),
                                     out_shardings=(cache_shardings, None, None, None))
        # the row counts a batched prefill is padded to: powers of two, then prefill_rows itself
        rows = min(settings.prefill_rows, settings.slots)
        self.prefill_widths = tuple(sorted({min(2**k, rows) for k in range(rows.bit_length() + 1)})) if rows > 1 else ()
        # XLA attention reads every position it is given, so decode attends over the first
        # `window` positions only: the smallest of these that holds every active slot
        # (powers of two from 256 up to the allocated length)
        self.windows = ((allocated,) if self._reads_own_length else
                        tuple(sorted({min(2**k, allocated) for k in range(8, max(8, allocated.bit_length()) + 1)})))
        self._encode = jax.jit(traced_on(self.mesh, lambda p, v: self._model(p).encode_images(v)))

    def _cache_shardings(self, cache: KVCache, rules: dict):
        """Slots over the batch axes, KV heads over tensor (as the attention weights are);
        the layers axis, as the stacked weights' own, is never sharded."""
        def place(axes, shape):
            return NamedSharding(self.mesh, logical_spec(axes, shape, self.mesh, rules))
        kv = place((LAYERS, "batch", "kv_heads", None, "head_dim"), cache.keys.shape)
        return KVCache(keys=kv, values=kv, lengths=place((None,), cache.lengths.shape))

    def _slot_shards(self, kv_sharding: NamedSharding) -> int:
        """Devices the slots axis (axis 1 of the KV arrays) is split over."""
        axes = kv_sharding.spec[1] if len(kv_sharding.spec) > 1 else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        return math.prod(self.mesh.shape[axis] for axis in axes)

    # ------------------------------------------------------------ public API (any thread)

    def submit(self, request: Request) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        problem = self._check(request)
        if problem:
            future.set_exception(ValueError(problem))
            return future
        with self._lock:
            self._queue.append(_Slot(request=request, future=future, submitted=time.perf_counter()))
            self._lock.notify()
        return future

    def publish(self, params, version: int) -> None:
        """New weights for the next iteration; resharded (and cast to the engine's dtypes)
        here, on the caller's thread."""
        placed = self._private_copy(params)
        with self._lock:
            self._pending_params = (placed, int(version))
            self._lock.notify()

    def _private_copy(self, params) -> list:
        """The parameters on the engine's shardings, never sharing a buffer with the caller
        (a learner donates its own buffers to the next update). A learner that spans several
        hosts is first gathered to this one (every process publishes together)."""
        if jax.tree.structure(params) != self._params_def:
            raise ValueError("published parameters do not have the engine model's structure")
        params = distributed.addressable_copy(params)
        # cast where the weights are, before they move: a float32 master copy never lands whole
        # on the sampler's devices
        cast = [leaf.astype(dtype) for leaf, dtype in zip(jax.tree.leaves(params), self._dtypes)]
        return jax.tree.leaves(jax.device_put(jax.tree.unflatten(self._params_def, cast), self._param_shardings,
                                              may_alias=False))

    def _model(self, leaves) -> nnx.Module:
        return nnx.merge(self.graphdef, jax.tree.unflatten(self._params_def, leaves))

    @property
    def version(self) -> int:
        return self._version

    def start(self) -> "Engine":
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()
        for slot in list(self._queue) + [s for s in self._slots if s is not None]:
            if not slot.future.done():
                slot.future.set_exception(RuntimeError("the sampler stopped"))

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def warm_up(self) -> None:
        """Compile every shape the engine will ever run (each prefill bucket, first and
        later chunks; decode for each block and window; the vision encoder) before serving,
        on a free slot's cache."""
        if self._thread is not None:
            raise RuntimeError("warm up before start()")
        for bucket in self.buckets:
            for first in (True, False):
                zeros = np.zeros((1, bucket), np.int32)
                features = None
                if self.settings.max_images:
                    patches = np.zeros((4, self.config.vision.still_patch_dim), np.uint8)   # the Processor's kind
                    features = self._features([Image(pixel_values=patches, grid_thw=(1, 2, 2))])
                self._cache, _, _, kept = self._prefill(self._params, self._cache, np.int32(0), np.int32(0), zeros,
                                                        np.zeros((3, 1, bucket), np.int32), zeros + 1, zeros - 1,
                                                        features, self._key(), first=first)
                if kept is not None:   # a cached prompt's copy: written back into a slot
                    self._cache, _, _ = self._restore(self._cache, np.int32(0), *kept, np.int32(1), self._key())
        for bucket in self.buckets:
            for width in self.prefill_widths:
                self._run_prefill_rows(bucket, width, [])
        for rows in self.blocks:
            for window in self.windows:   # no slot active: compiled, and no step run
                self._cache, _, _, _ = self._decode(*self.idle_decode_arguments(rows), rows=rows, window=window)
        jax.block_until_ready(self._cache)
        self.stats.clear()

    def idle_decode_arguments(self, rows: int, steps: int = 1) -> tuple:
        """The positional arguments of a decode call of up to `steps` steps over a block of
        `rows` slots, none of them active: it compiles the call (warm_up, or `_decode.lower`
        to inspect it) without decoding anything."""
        idle = np.zeros(rows, np.int32)
        return (self._params, self._cache, idle, idle, idle.astype(bool), idle, self._key(), np.int32(steps),
                np.bool_(False))

    def busy_seconds(self) -> float:
        """Seconds this engine spent computing (prefill, image encoding, decode) since its
        stats were last cleared: its busy share of the device, over a wall-clock span."""
        return self.stats["prefill_seconds"] + self.stats["vision_seconds"] + self.stats["decode_seconds"]

    def compilations(self) -> dict[str, int]:
        """How many shapes each jitted function has compiled (steady state: constant)."""
        return {name: fn._cache_size() for name, fn in
                (("prefill", self._prefill), ("prefill_rows", self._prefill_rows), ("decode", self._decode),
                 ("encode", self._encode), ("restore", self._restore))}

    # ------------------------------------------------------------ the loop (engine thread)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._running and not self._queue and not self._active() and self._pending_params is None:
                    self._lock.wait()
                if not self._running:
                    return
                if self._pending_params is not None:
                    (self._params, self._version), self._pending_params = self._pending_params, None
                    self._prefill_cache.clear()   # the old version's prefills: never used again
                    self.stats["swaps"] += 1
                admitted = []
                while self._queue and None in self._slots:
                    slot = self._queue.popleft()
                    # a request cancelled while queued (its episode gave up) is dropped; once
                    # running, its future can no longer be cancelled, so finishing it cannot fail
                    if not slot.future.set_running_or_notify_cancel():
                        self.stats["cancelled"] += 1
                        continue
                    index = next(i for i in self._admission_order if self._slots[i] is None)
                    self._slots[index] = slot
                    admitted.append(index)
            try:
                self._prefill_admitted(admitted)
                if self._active():
                    self._decode_all()
            except Exception as error:  # a device error fails the requests in flight, not the thread
                failure = EngineFailure(f"the sampler failed: {type(error).__name__}: {error}")
                failure.__cause__ = error
                for index, slot in enumerate(self._slots):
                    if slot is not None:
                        slot.future.set_exception(failure)
                        self._slots[index] = None

    def _active(self) -> bool:
        return any(slot is not None for slot in self._slots)

    def _check(self, request: Request) -> str | None:
        s = self.settings
        length = len(request.input_ids)
        if length == 0 or length >= s.capacity:
            return f"a prompt of {length} tokens does not fit a slot of {s.capacity}"
        if len(request.images) > s.max_images:
            return f"{len(request.images)} images; the engine takes {s.max_images} per request"
        for image in request.images:
            if int(np.prod(image.grid_thw)) > s.patches_per_image:
                return f"an image of {int(np.prod(image.grid_thw))} patches; patches_per_image is {s.patches_per_image}"
        if request.max_new_tokens < 1:
            return "max_new_tokens must be >= 1"
        return None

    def _key(self) -> np.int32:
        """A fresh sampling-key index (the key itself is made inside the jitted step)."""
        return self._keys(1)

    def _keys(self, count: int) -> np.int32:
        """The first of `count` fresh sampling-key indices (a decode call's steps use them in turn)."""
        first = self._step + 1
        self._step += count
        return np.int32(first)

    def _sampling_key(self, index):
        return jax.random.fold_in(jax.random.key(self.settings.seed), index)

    def _prompt_layout(self, slot: _Slot, block: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A prompt's ids, rotary positions (setting the slot's next position) and, for each
        image token, its row in a features table where the request's images are block
        `block` (one block of max_images images per request); -1 elsewhere."""
        request, s, config = slot.request, self.settings, self.config
        ids = np.asarray(request.input_ids, np.int32)
        types = (ids == config.image_token_id).astype(np.int32) * IMAGE
        positions, slot.position = sequence_positions(types, [im.grid_thw for im in request.images],
                                                      config.vision.spatial_merge_size)
        source = np.full(len(ids), -1, np.int32)
        stride = s.patches_per_image // config.vision.merge_unit
        per_image = [int(np.prod(im.grid_thw)) // config.vision.merge_unit for im in request.images]
        if s.max_images and per_image:
            first = block * s.max_images * stride
            source[types == IMAGE] = np.concatenate([first + i * stride + np.arange(n) for i, n in enumerate(per_image)])
        return ids, positions, source

    def _prefill_slot(self, index: int) -> None:
        slot = self._slots[index]
        ids, positions, source = self._prompt_layout(slot)
        features = self._features(slot.request.images) if self.settings.max_images else None
        started = time.perf_counter()
        start, token, logprob = 0, None, None
        while start < len(ids):
            chunk = min(len(ids) - start, self.buckets[-1])
            bucket = min(b for b in self.buckets if b >= chunk)
            pad = bucket - chunk
            piece = lambda a: np.pad(a[..., start:start + chunk], [(0, 0)] * (a.ndim - 1) + [(0, pad)])  # noqa: E731
            self._cache, token, logprob, kept = self._prefill(
                self._params, self._cache, np.int32(index), np.int32(start), piece(ids)[None],
                piece(positions)[:, None], piece(np.ones(len(ids), np.int32))[None], piece(source)[None],
                features, self._key(), first=start == 0)
            start += chunk
        slot.length = len(ids)
        if kept is not None:   # a first chunk, here the whole prompt: the prefill cache may keep it
            self._store(index, *kept)
        self._record(index, int(token), float(logprob))
        self.stats["prefills"] += 1
        self.stats["prefill_seconds"] += time.perf_counter() - started  # image encoding is vision_seconds

    def _prefill_admitted(self, admitted: list[int]) -> None:
        """Prompts that fit one chunk go prefill_rows at a time, by bucket; longer ones (and
        all of them with prefill_rows = 1) chunk by chunk, one slot at a time. With the
        prefill cache, a prompt found there is copied into its slot, and copies of a prompt
        admitted together with it wait for its prefill, then are copied."""
        copies, misses, prefilling = [], [], set()
        for index in admitted:
            key = self._prefill_key(index)
            if key is not None and key in self._prefill_cache:
                self._restore_slot(index, key)
            elif key is not None and key in prefilling:
                copies.append((index, key))
            else:
                if key is not None:
                    prefilling.add(key)
                misses.append(index)
        self._prefill_each(misses)
        for index, key in copies:
            if key in self._prefill_cache:
                self._restore_slot(index, key)
            else:   # evicted by the others admitted with it (more distinct prompts than entries)
                self._prefill_slot(index)

    def _prefill_each(self, admitted: list[int]) -> None:
        together: dict[int, list[int]] = collections.defaultdict(list)
        for index in admitted:
            length = len(self._slots[index].request.input_ids)
            if self.prefill_widths and length <= self.buckets[-1]:
                together[min(b for b in self.buckets if b >= length)].append(index)
            else:
                self._prefill_slot(index)
        for bucket, indices in together.items():
            for start in range(0, len(indices), self.prefill_widths[-1]):
                piece = indices[start:start + self.prefill_widths[-1]]
                width = min(w for w in self.prefill_widths if w >= len(piece))
                self._run_prefill_rows(bucket, width, piece)

    def _run_prefill_rows(self, bucket: int, width: int, indices: list[int]) -> None:
        """Prefill the slots `indices` (at most `width`) in one call of `width` rows of
        `bucket` tokens; rows past them are padding that writes no slot."""
        s, config = self.settings, self.config
        started = time.perf_counter()
        tokens = np.zeros((width, bucket), np.int32)
        positions = np.zeros((3, width, bucket), np.int32)
        valid = np.zeros((width, bucket), np.int32)
        source = np.full((width, bucket), -1, np.int32)
        targets = np.full(width, s.slots, np.int32)   # a slot index past the last: the write is dropped
        blocks = []
        for row, index in enumerate(indices):   # row r's images are block r of the features table
            ids, row_positions, row_source = self._prompt_layout(self._slots[index], block=row)
            n = len(ids)
            tokens[row, :n], positions[:, row, :n], valid[row, :n], source[row, :n] = ids, row_positions, 1, row_source
            targets[row] = index
            if s.max_images:
                blocks.append(self._features(self._slots[index].request.images))
        features = None
        if s.max_images:
            blocks += [self._features([])] * (width - len(indices))
            features = VisionFeatures(tokens=jnp.concatenate([b.tokens for b in blocks]),
                                      deepstack=tuple(jnp.concatenate([b.deepstack[k] for b in blocks])
                                                      for k in range(len(config.vision.deepstack_layers))))
        self._cache, first_tokens, first_logprobs, kept = self._prefill_rows(
            self._params, self._cache, targets, tokens, positions, valid, source, features, self._key())
        if not indices:
            return   # warm-up
        first_tokens, first_logprobs = np.asarray(first_tokens), np.asarray(first_logprobs)
        for row, index in enumerate(indices):
            self._slots[index].length = len(self._slots[index].request.input_ids)
            if kept is not None:   # row `row` of the call's KV rows [L, W, K, S, H] and logits [W, V]
                keys, values, logits = kept
                take = lambda a, axis: jax.lax.dynamic_slice_in_dim(a, np.int32(row), 1, axis=axis)  # noqa: E731
                self._store(index, take(keys, 1), take(values, 1), take(logits, 0))
            self._record(index, int(first_tokens[row]), float(first_logprobs[row]))
        self.stats["prefills"] += len(indices)
        self.stats["prefill_calls"] += 1
        self.stats["prefill_seconds"] += time.perf_counter() - started

    def _prefill_key(self, index: int):
        """The prefill cache's key of the slot's prompt, or None if it is not cached: the cache
        is off, the prompt has images (their pixels would have to be hashed into the key; the
        warm-started agent is text-only) or does not fit one chunk."""
        request = self._slots[index].request
        if not self.settings.prefill_cache or request.images or len(request.input_ids) > self.buckets[-1]:
            return None
        return self._version, np.asarray(request.input_ids, np.int32).tobytes()

    def _store(self, index: int, keys, values, logits) -> None:
        """Keep the prefill just written into slot `index`: its bucket's KV rows and the
        logits of its last position (of the version that made them)."""
        key = self._prefill_key(index)
        if key is None:
            return
        slot = self._slots[index]
        self._prefill_cache[key] = (keys, values, logits, len(slot.request.input_ids), slot.position)
        self._prefill_cache.move_to_end(key)
        while len(self._prefill_cache) > self.settings.prefill_cache:
            self._prefill_cache.popitem(last=False)

    def _restore_slot(self, index: int, key) -> None:
        """A cached prompt's copy: its KV rows into slot `index`, and a first token sampled
        afresh from its logits (fresh key), recorded with the engine's version."""
        started = time.perf_counter()
        self._prefill_cache.move_to_end(key)
        keys, values, logits, length, position = self._prefill_cache[key]
        slot = self._slots[index]
        slot.position = position
        self._cache, token, logprob = self._restore(self._cache, np.int32(index), keys, values, logits,
                                                    np.int32(length), self._key())
        slot.length = length
        self._record(index, int(token), float(logprob))
        self.stats["prefill_cache_hits"] += 1
        self.stats["prefill_seconds"] += time.perf_counter() - started

    def _features(self, images) -> VisionFeatures:
        """The request's images as a fixed-shape [max_images * P/4, D] block (zeros past the last)."""
        s, config = self.settings, self.config
        tokens_per_image = s.patches_per_image // config.vision.merge_unit
        started = time.perf_counter()
        blocks = []
        for image in images:
            key = (image.key, self._version)
            cached = self._vision_cache.get(key) if image.key is not None else None
            if cached is None:
                vision = vision_inputs(image.pixel_values, np.asarray([image.grid_thw]), config.vision,
                                       patches_per_image=s.patches_per_image, num_images=1)
                cached = self._encode(self._params, vision)
                self.stats["images_encoded"] += 1
                if image.key is not None:
                    self._vision_cache[key] = cached
                    while len(self._vision_cache) > s.vision_cache_entries:
                        self._vision_cache.popitem(last=False)
            else:
                self._vision_cache.move_to_end(key)
                self.stats["vision_cache_hits"] += 1
            blocks.append(cached)
        width = config.text.hidden_size
        empty = jnp.zeros((tokens_per_image, width), self._cache.keys.dtype)
        depth = len(config.vision.deepstack_layers)
        missing = s.max_images - len(blocks)
        stack = lambda parts: jnp.concatenate(parts + [empty] * missing)  # noqa: E731
        features = VisionFeatures(tokens=stack([b.tokens for b in blocks]),
                                  deepstack=tuple(stack([b.deepstack[k] for b in blocks]) for k in range(depth)))
        # one placement whatever the images (cached, fresh or none): a jit cache key includes it
        features = jax.block_until_ready(jax.device_put(features, NamedSharding(self.mesh, PartitionSpec())))
        self.stats["vision_seconds"] += time.perf_counter() - started   # the prefill would wait for it anyway
        return features

    def _decode_all(self) -> None:
        """One decode call over the block of slots that holds every occupied one; its tokens
        are recorded step by step, as that many calls of one step would record them.

        Stats: decode_calls (jitted calls, host round trips), decode_steps (steps run),
        decode_slot_steps (tokens decoded for requests), decode_slot_rows (rows computed:
        the block's, occupied or not, in every step run)."""
        if not self._active():
            return
        steps, until_a_finish = self._call_length()
        block = self._block([i for i, slot in enumerate(self._slots) if slot is not None])
        slots = [self._slots[index] for index in block]
        active = np.array([slot is not None for slot in slots])
        tokens = np.array([slot.tokens[-1] if slot else 0 for slot in slots], np.int32)
        positions = np.array([slot.position if slot else 0 for slot in slots], np.int32)
        room = np.array([self._room(slot) if slot else 0 for slot in slots], np.int32)
        started = time.perf_counter()
        # every position the call may write lies in the window
        longest = max(slot.length + min(steps, r) for slot, r in zip(slots, room) if slot is not None)
        window = min(w for w in self.windows if w >= longest)
        self._cache, new_tokens, new_logprobs, produced = self._decode(
            self._params, self._cache, tokens, positions, active, room, self._keys(steps), np.int32(steps),
            np.bool_(until_a_finish), rows=len(block), window=window)
        new_tokens, new_logprobs, produced = np.asarray(new_tokens), np.asarray(new_logprobs), np.asarray(produced)
        ran = int(produced.max())   # a step runs only while some slot is active, which then produces
        self.stats["decode_calls"] += 1
        self.stats["decode_steps"] += ran
        self.stats["decode_seconds"] += time.perf_counter() - started
        self.stats["decode_slot_steps"] += int(produced.sum())
        self.stats["decode_slot_rows"] += len(block) * ran
        for step in range(ran):
            for row, index in enumerate(block):
                if step < produced[row]:
                    if self._slots[index] is not slots[row]:
                        raise RuntimeError(f"slot {index} decoded on device past the token that finished it")
                    slots[row].length += 1
                    slots[row].position += 1
                    self._record(index, int(new_tokens[step, row]), float(new_logprobs[step, row]))

    def _call_length(self) -> tuple[int, bool]:
        """(most steps, whether to end at the first finished slot) of the next decode call.
        One step when the host has work waiting for the call's end: a publish to swap in, or
        a request queued (since this round's admission) while a slot is free. Requests
        queued with every slot taken end the call when one finishes, which frees its slot."""
        with self._lock:
            if self._pending_params is not None or (self._queue and None in self._slots):
                return 1, False
            return self.settings.decode_steps, bool(self._queue)

    def _block(self, occupied: list[int]) -> list[int]:
        """The slots a decode call computes, in its rows' order: the smallest block (the first
        rows of every shard's part of the slots) that holds every occupied slot."""
        per_shard = self.settings.slots // self.slot_shards
        deepest = max(index % per_shard for index in occupied) + 1
        rows = min(b for b in self.blocks if b // self.slot_shards >= deepest)
        depth = rows // self.slot_shards
        return [shard * per_shard + row for shard in range(self.slot_shards) for row in range(depth)]

    def _room(self, slot: _Slot) -> int:
        """Tokens the slot may still generate before `_record` finishes it for its length
        (max_new_tokens) or a full slot (capacity); a stop token may end it sooner."""
        made = len(slot.tokens)
        return min(slot.request.max_new_tokens - made, self.settings.capacity - len(slot.request.input_ids) - made)

    def _record(self, index: int, token: int, logprob: float) -> None:
        slot = self._slots[index]
        slot.tokens.append(token)
        slot.logprobs.append(logprob)
        slot.versions.append(self._version)
        self.stats["tokens"] += 1
        if token in self.settings.stop_token_ids:
            self._finish(index, "stop")
        elif len(slot.tokens) >= slot.request.max_new_tokens:
            self._finish(index, "length")
        elif len(slot.request.input_ids) + len(slot.tokens) >= self.settings.capacity:
            # Full: prompt + response fill the slot. Stopping here, not when the cache is full
            # (one token later: the last sampled token's keys are not cached yet), keeps every
            # step row (prompt + response) within the learner's row_length = capacity.
            self._finish(index, "context")

    def _finish(self, index: int, reason: str) -> None:
        slot = self._slots[index]
        self._slots[index] = None
        slot.future.set_result(Response(
            tokens=np.array(slot.tokens, np.int32), logprobs=np.array(slot.logprobs, np.float32),
            versions=np.array(slot.versions, np.int32), finish_reason=reason,
            prompt_tokens=len(slot.request.input_ids), latency_s=time.perf_counter() - slot.submitted))

    # ------------------------------------------------------------ jitted bodies

    def _prefill_impl(self, params, cache: KVCache, slot, start, tokens, positions, valid, source, features, key,
                      first: bool):
        """Append one prompt chunk to slot `slot` (which holds `start` tokens); sample from its last token.

        The first chunk attends only within itself, so it runs on a cache row of the chunk's
        length rather than the slot's capacity (most prompts are one chunk)."""
        model = self._model(params)
        bucket = tokens.shape[1]
        if first:
            row = KVCache.empty(self.config.text, 1, bucket, cache.keys.dtype)
        else:
            take = lambda a: jax.lax.dynamic_slice_in_dim(a, slot, 1, 1)  # noqa: E731
            row = KVCache(keys=take(cache.keys), values=take(cache.values), lengths=start[None])
        inputs = ModelInputs(tokens=tokens, positions=positions, segment_ids=valid, vision_source=source)
        hidden, row = model.hidden_states(inputs, row, features)
        last = jax.lax.dynamic_slice_in_dim(hidden, valid.sum() - 1, 1, axis=1)
        logits = model.logits(last)[:, 0]
        token, logprob = sample(logits, self._sampling_key(key), self.settings.sampling)
        zero = jnp.zeros((), jnp.int32)
        put = lambda a, r: jax.lax.dynamic_update_slice(a, r, (zero, slot, zero, zero, zero))  # noqa: E731
        cache = KVCache(keys=put(cache.keys, row.keys), values=put(cache.values, row.values),
                        lengths=cache.lengths.at[slot].set(row.lengths[0]))
        # a first chunk's rows and logits, for the prefill cache (a copy of the rows: only when it is on)
        kept = (row.keys, row.values, logits) if first and self.settings.prefill_cache else None
        return cache, token[0], logprob[0], kept

    def _restore_impl(self, cache: KVCache, slot, keys, values, logits, length, key):
        """A cached prefill into slot `slot`: its KV rows ([L, 1, K, bucket, H]) and length;
        the first token sampled from its logits ([1, V]) as a prefill samples it."""
        zero = jnp.zeros((), jnp.int32)
        put = lambda a, r: jax.lax.dynamic_update_slice(a, r, (zero, slot, zero, zero, zero))  # noqa: E731
        cache = KVCache(keys=put(cache.keys, keys), values=put(cache.values, values),
                        lengths=cache.lengths.at[slot].set(length))
        token, logprob = sample(logits, self._sampling_key(key), self.settings.sampling)
        return cache, token[0], logprob[0]

    def _prefill_rows_impl(self, params, cache: KVCache, targets, tokens, positions, valid, source, features, key):
        """Whole prompts of several requests, one per row, each written to its slot
        (targets[r]; an index past the last slot drops the row); samples from each row's
        last token. Each row attends only within itself, as a first chunk does."""
        model = self._model(params)
        rows, bucket = tokens.shape
        fresh = KVCache.empty(self.config.text, rows, bucket, cache.keys.dtype)
        inputs = ModelInputs(tokens=tokens, positions=positions, segment_ids=valid, vision_source=source)
        hidden, fresh = model.hidden_states(inputs, fresh, features)
        last = jnp.take_along_axis(hidden, (valid.sum(-1) - 1)[:, None, None], axis=1)
        logits = model.logits(last)[:, 0]
        token, logprob = sample(logits, self._sampling_key(key), self.settings.sampling)
        put = lambda a, r: a.at[:, targets, :, :bucket].set(r, mode="drop")  # noqa: E731
        cache = KVCache(keys=put(cache.keys, fresh.keys), values=put(cache.values, fresh.values),
                        lengths=cache.lengths.at[targets].set(fresh.lengths, mode="drop"))
        kept = (fresh.keys, fresh.values, logits) if self.settings.prefill_cache else None
        return cache, token, logprob, kept

    def _decode_impl(self, params, cache: KVCache, tokens, positions, active, room, first_key, steps,
                     until_a_finish, rows: int, window: int):
        """Up to `steps` tokens for each active slot of a block of `rows` slots (`_block`'s
        order; tokens, positions, active and room are [rows]), attending over the first
        `window` positions. A slot stops after a stop token or `room` tokens, as `_record`
        finishes it; from then on it is inactive: it writes only its first position (which
        the next request's prefill overwrites) and produces nothing. The call ends after
        `steps`, when no slot is active, or (until_a_finish) when one has stopped.

        Returns the cache, tokens and log-probs [decode_steps, rows] ([s, r]: step s of the
        call, block row r) and each row's count of tokens produced [rows]."""
        model = self._model(params)
        view = self._block_view(cache, rows, window)
        stops = jnp.asarray(self.settings.stop_token_ids, jnp.int32)
        recorded = (jnp.zeros((self.settings.decode_steps, rows), jnp.int32),
                    jnp.zeros((self.settings.decode_steps, rows), jnp.float32))

        def running(carry):
            step, _, _, _, active, _, stopped, _ = carry
            return (step < steps) & active.any() & ~(until_a_finish & stopped)

        def decode(carry):
            step, view, tokens, positions, active, produced, stopped, (out_tokens, out_logprobs) = carry
            # an inactive slot attends to its first position only (the Pallas kernel would
            # otherwise read a free slot's stale row every step until it is reused)
            attending = KVCache(keys=view.keys, values=view.values, lengths=jnp.where(active, view.lengths, 0))
            inputs = ModelInputs(tokens=tokens[:, None],
                                 positions=jnp.broadcast_to(positions[None, :, None], (3, rows, 1)),
                                 segment_ids=active[:, None].astype(jnp.int32),
                                 vision_source=jnp.full((rows, 1), -1, jnp.int32))
            hidden, written = model.hidden_states(inputs, attending)
            token, logprob = sample(model.logits(hidden)[:, 0], self._sampling_key(first_key + step),
                                    self.settings.sampling)
            grown = active.astype(jnp.int32)
            produced = produced + grown
            finished = active & ((token[:, None] == stops[None, :]).any(axis=1) | (produced >= room))
            view = KVCache(keys=written.keys, values=written.values, lengths=view.lengths + grown)
            recorded = (out_tokens.at[step].set(token), out_logprobs.at[step].set(logprob))
            return (step + 1, view, token, positions + grown, active & ~finished, produced,
                    stopped | finished.any(), recorded)

        start = (jnp.int32(0), view, tokens, positions, active, jnp.zeros(rows, jnp.int32), jnp.bool_(False), recorded)
        _, view, _, _, _, produced, _, (out_tokens, out_logprobs) = jax.lax.while_loop(running, decode, start)
        return self._merge_block(cache, view), out_tokens, out_logprobs, produced

    def _block_view(self, cache: KVCache, rows: int, window: int) -> KVCache:
        """The block's rows of the cache (keys and values up to `window` positions). With
        unsharded slots the Pallas kernel takes the whole cache, whose first rows are the
        block: it and the cache's writes index rows by the inputs' rows, and it reads each
        row only to its length, so nothing is copied. With sharded slots the block is the
        first rows of every shard's part, so the kernel, like XLA attention, gets them as a
        copy (split over the same devices, each device its own part's rows)."""
        lengths = self._block_rows(cache.lengths, rows, axis=0)
        in_place = self._reads_own_length and self.slot_shards == 1
        if in_place or (rows == self.settings.slots and window == cache.capacity):
            return KVCache(keys=cache.keys, values=cache.values, lengths=lengths)   # in place, in the donated buffer
        take = lambda a: self._block_rows(a[:, :, :, :window], rows, axis=1)  # noqa: E731
        return KVCache(keys=take(cache.keys), values=take(cache.values), lengths=lengths)

    def _merge_block(self, cache: KVCache, view: KVCache) -> KVCache:
        """The cache with the block's rows (`_block_view`'s, after the call) written back."""
        keys, values = view.keys, view.values
        if keys.shape != cache.keys.shape:
            keys = self._put_block_rows(cache.keys, keys, axis=1)
            values = self._put_block_rows(cache.values, values, axis=1)
        return KVCache(keys=keys, values=values, lengths=self._put_block_rows(cache.lengths, view.lengths, axis=0))

    def _block_rows(self, array, rows: int, axis: int):
        """The first rows / slot_shards slots of every shard's part of the slots axis, in order."""
        parts = self._by_shard(array, axis)
        return jax.lax.slice_in_dim(parts, 0, rows // self.slot_shards, axis=axis + 1).reshape(
            array.shape[:axis] + (rows,) + array.shape[axis + 1:])

    def _put_block_rows(self, full, block, axis: int):
        """`full` with `_block_rows`' rows (and leading positions) replaced by `block`."""
        merged = jax.lax.dynamic_update_slice(self._by_shard(full, axis), self._by_shard(block, axis),
                                              (0,) * (full.ndim + 1))
        return merged.reshape(full.shape)

    def _by_shard(self, array, axis: int):
        """The slots axis split in two: [..., shards, rows of one shard, ...]."""
        return array.reshape(array.shape[:axis] + (self.slot_shards, -1) + array.shape[axis + 1:])
