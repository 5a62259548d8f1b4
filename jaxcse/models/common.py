"""What the encoder families of ``jaxcse.models`` share: the output they return, the activations they name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np


def gelu(x: jax.Array) -> jax.Array:
  """The exact (erf) GELU in PyTorch's form: ``x * 0.5 * (1 + erf(x / sqrt(2)))``, in ``x``'s dtype.

  The same function as ``jax.nn.gelu(x, approximate=False)`` (equal to float32 rounding: tests/test_models.py), which
  goes through ``erfc`` instead and costs XLA:CPU more (docs/benchmarks.md has the measurements).
  """
  return x * 0.5 * (1 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


# transformers' names of feed-forward activations (config.hidden_act, ModernBERT's hidden_activation). "gelu" is
# the exact (erf) GELU, "gelu_new" and "gelu_pytorch_tanh" its tanh approximation.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": gelu,
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
  """The activation transformers calls ``name``; a ValueError naming the supported ones otherwise."""
  try:
    return ACTIVATIONS[name]
  except KeyError:
    raise ValueError(f"activation {name!r} is not supported; supported: {', '.join(ACTIVATIONS)}") from None


class BackboneOutput(NamedTuple):
  """A backbone's forward pass.

  Attributes:
    last_hidden_state: ``[batch, len, hidden]``, the last layer's output (after the final norm, for pre-norm models).
    hidden_states: with ``output_hidden_states=True``, the embedding output followed by each layer's output
      (``num_hidden_layers + 1`` arrays of ``[batch, len, hidden]``), as transformers returns them; else None.
    pooler_output: ``[batch, hidden]``, BERT's NSP pooler layer (Linear + tanh on the first token) when the
      family has one and it was built; else None.
  """

  last_hidden_state: jax.Array
  hidden_states: tuple[jax.Array, ...] | None = None
  pooler_output: jax.Array | None = None
