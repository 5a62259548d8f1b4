"""What the encoder families of ``jaxcse.models`` share: the output they return, the activations they name, their
embedding tables."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

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


class Embed(nn.Embed):
  """``nn.Embed`` (the same ``embedding`` parameter, the same values) whose gradient accumulates in float32.

  ``nn.Embed(dtype=bfloat16)`` casts the whole table and gathers from the cast copy, so the gradient of its lookup
  is a scatter-add in bfloat16: rounded at every add, and on GPUs a bfloat16 atomic add per update, which runs many
  times slower than a float32 one where many updates hit one entry (the padding, [CLS] and [SEP] of every row; all
  of a batch's positions and token types). Here the lookup gathers from the table in its own dtype (float32) and
  casts the rows: the same values (a cast after a gather is a gather after a cast), a float32 scatter-add.

  Besides the lookup (``__call__``, ``nn.Embed``'s contract, out-of-range ids included), the lookups whose ids are
  known without reading them, with no gather and no scatter at all (their gradient is a sum over the batch):
  ``leading`` (ids ``start .. start + len-1`` in every row: BERT's positions) and ``row`` (one id everywhere: the
  default token type, RoBERTa's padding position), and ``select`` (a few rows chosen per token: token types).
  """

  def _cast(self, rows: jax.Array) -> jax.Array:
    return rows.astype(self.dtype or self.embedding.dtype)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if not jnp.issubdtype(inputs.dtype, jnp.integer):
      raise ValueError("Input type must be an integer or unsigned integer.")
    if self.num_embeddings == 1:  # nn.Embed's rule: a one-row table is broadcast, whatever the ids.
      return self.row(0, inputs.shape)
    return self._cast(jnp.take(self.embedding, inputs, axis=0))

  def row(self, index: int, shape: tuple[int, ...]) -> jax.Array:
    """The lookup of ``jnp.full(shape, index)``: row ``index`` broadcast to ``shape + (features,)``."""
    return self._cast(jnp.broadcast_to(self.embedding[index], (*shape, self.features)))

  def leading(self, shape: tuple[int, ...], start: int = 0) -> jax.Array:
    """The lookup of ``start .. start + shape[-1] - 1`` along the last axis of ``shape`` (the same in every row).

    Rows past the table are NaN, as the gather's out-of-range rows are.
    """
    stop = start + shape[-1]
    if stop > self.num_embeddings:
      return self(jnp.broadcast_to(jnp.arange(start, stop, dtype=jnp.int32), shape))
    return self._cast(jnp.broadcast_to(self.embedding[start:stop], (*shape, self.features)))

  def select(self, inputs: jax.Array) -> jax.Array:
    """``__call__``'s values by one select per row of the table (for tables of a few rows, e.g. token types).

    As the gather: an id ``-n <= i < 0`` is row ``n + i``, any other id outside the table gives NaN.
    """
    n = self.num_embeddings
    if n == 1:
      return self.row(0, inputs.shape)
    ids = jnp.where(inputs < 0, inputs + n, inputs)[..., None]
    table = self.embedding
    rows = jnp.full((*inputs.shape, self.features), jnp.nan, table.dtype)
    for index in range(n):
      rows = jnp.where(ids == index, table[index], rows)
    return self._cast(rows)
