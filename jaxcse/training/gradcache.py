"""GradCache: the gradient of a loss over a whole batch's embeddings, with the activation memory of one chunk.

Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup". The batch is cut into chunks (``to_chunks``). Pass 1 embeds
every chunk without keeping activations; the loss and its gradient with
respect to the embeddings are taken on the whole batch, so every example still
has the whole batch as negatives; pass 2 embeds each chunk again with the same
inputs (the same dropout keys, so the same masks) and pulls its slice of that
gradient back to the parameters (a vector-Jacobian product), accumulated in a
``lax.scan``. A loss that is a sum over examples (``chunk_loss``, e.g. MLM) is
differentiated chunk by chunk in the same scan. The price is a second forward
pass.

Pure functions of pytrees; nothing here knows about models or methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

# (params, chunk) -> [chunk rows, ...] embeddings of one chunk.
Embed = Callable[[Any, Any], jax.Array]
# (embeddings [rows, ...] of the whole batch) -> (loss, aux).
BatchLoss = Callable[[jax.Array], tuple[jax.Array, Any]]
# (params, chunk) -> (a scalar summed over chunks, aux of sums).
ChunkLoss = Callable[[Any, Any], tuple[jax.Array, Any]]


class Parts(NamedTuple):
  """The parts of ``value_and_grad``'s value; None where the loss has no such part."""

  batch_loss: jax.Array | None = None  # ``batch_loss``'s loss (with ``embed``).
  batch_aux: Any = None  # ``batch_loss``'s aux.
  chunk_sum: jax.Array | None = None  # ``chunk_loss``'s scalar, summed over the chunks (unweighted).
  chunk_aux: Any = None  # ``chunk_loss``'s aux, every leaf summed over the chunks.


def to_chunks(tree: Any, num_chunks: int) -> Any:
  """``[batch, ...]`` leaves -> ``[num_chunks, batch / num_chunks, ...]``; chunk ``i`` holds rows ``i, i + n, ...``.

  Strided rather than contiguous: a batch sharded in contiguous blocks over the
  devices then puts ``chunk / devices`` rows of every chunk on every device, so
  each chunk's forward still runs on all devices, and which rows share a chunk
  (and a dropout key) does not depend on the device count.
  """

  def split(x):
    if x.shape[0] % num_chunks:
      raise ValueError(f"a batch of {x.shape[0]} rows does not split into {num_chunks} chunks")
    return jnp.swapaxes(x.reshape(x.shape[0] // num_chunks, num_chunks, *x.shape[1:]), 0, 1)

  return jax.tree.map(split, tree)


def from_chunks(x: jax.Array) -> jax.Array:
  """The inverse of ``to_chunks`` for one ``[num_chunks, chunk, ...]`` array: back to ``[batch, ...]`` in row order."""
  return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def value_and_grad(
  params: Any,
  chunks: Any,
  *,
  embed: Embed | None = None,
  batch_loss: BatchLoss | None = None,
  chunk_loss: ChunkLoss | None = None,
  chunk_weight: jax.Array | float = 1.0,
  cache: bool = True,
) -> tuple[tuple[jax.Array, Parts], Any]:
  """Value and gradient of ``batch_loss(embeddings of all chunks) + chunk_weight * sum of chunk_loss``.

  Args:
    params: the parameters to differentiate.
    chunks: the per-chunk inputs, every leaf ``[num_chunks, ...]`` (batch rows through ``to_chunks``, one dropout
      key per chunk, ...).
    embed: a chunk's embeddings ``[chunk rows, ...]``; with ``batch_loss`` (both or neither).
    batch_loss: the loss on the whole batch's embeddings ``[batch rows, ...]``, rows in batch order.
    chunk_loss: an additive loss term of one chunk, ``(scalar, aux)``; its aux leaves are summed over chunks.
    chunk_weight: the weight of the summed ``chunk_loss`` in the total (e.g. ``mlm_weight / token_count``).
    cache: False differentiates the same chunked computation as one graph (full-batch memory): the reference the
      cached gradient must equal.

  Returns:
    ``((value, parts), grads)``; ``parts`` (``Parts``) holds ``batch_loss``/``batch_aux`` (with ``embed``) and
    ``chunk_sum``/``chunk_aux`` (with ``chunk_loss``).
  """
  if (embed is None) != (batch_loss is None):
    raise ValueError("give embed and batch_loss together (or neither)")
  if embed is None and chunk_loss is None:
    raise ValueError("nothing to differentiate: give embed + batch_loss, chunk_loss, or both")

  def forward(p, chunk):
    """One chunk: ((embeddings, chunk loss), chunk aux); absent parts are empty."""
    z = embed(p, chunk) if embed is not None else jnp.zeros((0,))
    s, aux = chunk_loss(p, chunk) if chunk_loss is not None else (jnp.zeros(()), {})
    return (z, s), aux

  def combine(z, s, aux):
    parts, value = Parts(), 0.0
    if embed is not None:
      loss, batch_aux = batch_loss(z)
      parts, value = parts._replace(batch_loss=loss, batch_aux=batch_aux), loss
    if chunk_loss is not None:
      parts = parts._replace(chunk_sum=s, chunk_aux=aux)
      value = value + chunk_weight * s
    return value, parts

  if not cache:

    def total(p):
      (z, s), aux = jax.lax.map(lambda c: forward(p, c), chunks)
      return combine(from_chunks(z) if embed is not None else z, s.sum(), jax.tree.map(jnp.sum, aux))

    return jax.value_and_grad(total, has_aux=True)(params)

  # Pass 1: the whole batch's embeddings, chunk by chunk, no activations kept.
  dz = None
  parts = Parts()
  if embed is not None:
    z = from_chunks(jax.lax.map(lambda c: embed(params, c), chunks))
    (loss, batch_aux), dz_full = jax.value_and_grad(batch_loss, has_aux=True)(z)
    parts = parts._replace(batch_loss=loss, batch_aux=batch_aux)
    dz = to_chunks(dz_full, jax.tree.leaves(chunks)[0].shape[0])

  # Pass 2: each chunk again, the same inputs; its cached cotangent pulled back to the params.
  def accumulate(grads, x):
    chunk, dz_chunk = x
    (z, s), vjp, aux = jax.vjp(lambda p: forward(p, chunk), params, has_aux=True)
    cotangent = (jnp.zeros_like(z) if dz_chunk is None else dz_chunk, jnp.asarray(chunk_weight, s.dtype))
    (chunk_grads,) = vjp(cotangent)
    return jax.tree.map(jnp.add, grads, chunk_grads), (s, aux)

  grads, (sums, auxes) = jax.lax.scan(accumulate, jax.tree.map(jnp.zeros_like, params), (chunks, dz))
  value = 0.0 if parts.batch_loss is None else parts.batch_loss
  if chunk_loss is not None:
    parts = parts._replace(chunk_sum=sums.sum(), chunk_aux=jax.tree.map(jnp.sum, auxes))
    value = value + chunk_weight * parts.chunk_sum
  return (value, parts), grads
