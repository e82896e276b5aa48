"""ScreenshotStore: screenshots live once, in a tensorstore key-value store; keys travel.

Keys are content addresses (SHA-256 of the PNG), so the identical screenshots an agent
sees again and again (a page that did not change, the same start page for all eight
episodes of a group) are stored once. Every holder of a key counts as a reference;
`free` drops references and deletes an entry when none is left: the learner frees a
trajectory's keys once it has consumed or rejected it, evaluation once it has judged.

Drivers (config.screenshots.driver): "memory" (one process) or "file" (a directory; for spilling to
disk, or shared between hosts, e.g. on NFS or a gcsfuse-mounted bucket). Reference counts
live in the process that put the keys, so hosts sharing a directory keep their keys apart
with a `namespace` prefix ("host3/"): one host's free never deletes another's screenshot.
The PNG bytes are the stored form: PNG is already compressed, and the sampler decodes
only what it feeds the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import threading

import numpy as np
import tensorstore as ts
from PIL import Image


@dataclasses.dataclass
class StoreStats:
    entries: int = 0
    bytes_held: int = 0
    puts: int = 0
    hits: int = 0  # puts of content already held
    frees: int = 0  # references dropped
    deletes: int = 0  # entries removed


def content_key(png: bytes) -> str:
    return hashlib.sha256(png).hexdigest()[:32]


class ScreenshotStore:
    def __init__(self, driver: str, path: str, namespace: str = ""):
        """config.screenshots' driver and path (runtime/settings.screenshot_store passes them)."""
        if driver == "memory":
            spec = {"driver": "memory"}
        elif driver == "file":
            if not path:
                raise ValueError("the file driver needs a path")
            spec = {"driver": "file", "path": path.rstrip("/") + "/"}
        else:
            raise ValueError(f"unknown screenshot store driver {driver!r} (memory or file)")
        # fsync per write buys nothing for data that lives a few minutes.
        self._kv = ts.KvStore.open(spec, context=ts.Context({"file_io_sync": False})).result()
        self.namespace = namespace
        self._refs: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self.stats = StoreStats()

    @classmethod
    def in_memory(cls) -> ScreenshotStore:
        """A store of this process's own, whatever config.screenshots says: for a caller whose
        screenshots no one else reads (a text-only run, a test)."""
        return cls("memory", "")

    def _reference(self, png: bytes) -> tuple[str, bool]:
        """Count one more reference to this content; True if it must be written."""
        key = self.namespace + content_key(png)
        with self._lock:
            self.stats.puts += 1
            if key in self._refs:
                self._refs[key] += 1
                self.stats.hits += 1
                return key, False
            self._refs[key] = 1
            self._sizes[key] = len(png)
            self.stats.entries += 1
            self.stats.bytes_held += len(png)
            return key, True

    def put(self, png: bytes) -> str:
        """Store (or reference again) a PNG; returns its key. The caller holds one reference."""
        key, new = self._reference(png)
        if new:
            self._kv.write(key, png).result()
        return key

    async def aput(self, png: bytes) -> str:
        """`put` for asyncio code: the write does not block the event loop."""
        key, new = self._reference(png)
        if new:
            await self._kv.write(key, png)
        return key

    def retain(self, key: str) -> None:
        """One more holder of an existing key."""
        with self._lock:
            if key not in self._refs:
                raise KeyError(f"screenshot {key} is not in the store")
            self._refs[key] += 1

    def free(self, keys) -> None:
        """Drop one reference per key (a key listed twice drops two)."""
        doomed = []
        with self._lock:
            for key in keys:
                if key not in self._refs:
                    raise KeyError(f"screenshot {key} freed more often than it was put")
                self.stats.frees += 1
                self._refs[key] -= 1
                if self._refs[key] == 0:
                    del self._refs[key]
                    self.stats.entries -= 1
                    self.stats.bytes_held -= self._sizes.pop(key)
                    self.stats.deletes += 1
                    doomed.append(key)
        for key in doomed:
            self._kv.delete_range(ts.KvStore.KeyRange(inclusive_min=key, exclusive_max=key + "\0")).result()

    def get(self, key: str) -> bytes:
        result = self._kv.read(key).result()
        if result.state != "value":
            raise KeyError(f"screenshot {key} is not in the store")
        return bytes(result.value)

    def get_array(self, key: str) -> np.ndarray:
        """The screenshot as an RGB uint8 array [height, width, 3]."""
        return np.asarray(Image.open(io.BytesIO(self.get(key))).convert("RGB"))

    def references(self, key: str) -> int:
        with self._lock:
            return self._refs.get(key, 0)

    def keys(self) -> list[str]:
        """Keys of this namespace actually present in the underlying store (for leak checks)."""
        listed = self._kv.list(ts.KvStore.KeyRange(inclusive_min=self.namespace,
                                                   exclusive_max=self.namespace + "\U0010ffff")).result()
        return [k.decode() for k in listed]
