"""jaxcse: contrastive sentence embeddings (SimCSE, MixCSE, DCLR) in JAX/Flax."""

# First of all, in a command's process (``python -m jaxcse.X`` or a console script): Ctrl-C is one line and exit
# 130 from here on, while JAX and the rest import (core/interrupts.py; it imports nothing but the standard library).
from jaxcse.core import interrupts as _interrupts

_interrupts.command_starts()

from jaxcse.core import compat as _compat, platforms as _platforms  # noqa: E402  (after the handler)
from jaxcse.version import __version__  # noqa: E402, F401  (jaxcse.__version__; after the handler)

# Before anything imports jax: no accelerator here -> jax's CPU only (jaxcse/core/platforms.py says why).
_platforms.cpu_only_without_accelerators()
# And, on the CPU only, XLA's per-step buffers kept by malloc rather than mapped afresh each step (same docstring).
_platforms.keep_xla_cpu_buffers()
# And XLA:CPU's dots on the path measured fastest on this CPU's kind (same file, choose_cpu_dot_path).
_platforms.choose_cpu_dot_path()
# Before anything imports transformers: jaxcse needs no PyTorch, so its absence is no news (compat.py).
_compat.without_transformers_torch_notice()


def __getattr__(name):
  # `from jaxcse import Encoder` without importing JAX and orbax for every `import jaxcse`.
  if name == "Encoder":
    from jaxcse.inference.encoder import Encoder

    return Encoder
  raise AttributeError(f"module 'jaxcse' has no attribute {name!r}")
