"""The JAX sampler: continuous batching over a KV cache, per-token log-probs and versions,
live parameter swap, a vision cache (engine.py); sampling rules (sampling.py); a
synchronous helper (generate.py)."""

from asyncwebrl.sampler.engine import Engine, EngineSettings, Image, Request, Response
from asyncwebrl.sampler.generate import generate
from asyncwebrl.sampler.sampling import SamplingSettings

__all__ = ["Engine", "EngineSettings", "Image", "Request", "Response", "SamplingSettings", "generate"]
