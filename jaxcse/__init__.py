"""jaxcse: contrastive sentence embeddings (SimCSE, MixCSE, DCLR) in JAX/Flax."""

__version__ = "0.1.0"

from jaxcse import platforms as _platforms

# Before anything imports jax: no accelerator here -> jax's CPU only (jaxcse/platforms.py says why).
_platforms.cpu_only_without_accelerators()


def __getattr__(name):
  # `from jaxcse import Encoder` without importing JAX and orbax for every `import jaxcse`.
  if name == "Encoder":
    from jaxcse.encode import Encoder

    return Encoder
  raise AttributeError(f"module 'jaxcse' has no attribute {name!r}")
