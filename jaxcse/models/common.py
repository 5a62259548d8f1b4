"""What the encoder families of ``jaxcse.models`` share: the output they return, the activations they name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax

# transformers' names of feed-forward activations (config.hidden_act, ModernBERT's hidden_activation). "gelu" is
# the exact (erf) GELU, "gelu_new" and "gelu_pytorch_tanh" its tanh approximation.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
  "gelu": functools.partial(jax.nn.gelu, approximate=False),
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
