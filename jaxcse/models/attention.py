"""Attention for every encoder family: which keys each query sees, and ``softmax(q k^T / sqrt(d)) v`` over them.

Two questions, answered once for BERT, RoBERTa, XLM-R and ModernBERT alike:

* **Who sees whom** (``visible``): a boolean mask ``[batch, 1, queries or 1, keys]`` from a padding mask (a query
  sees every real token of its row) or from the segment ids of packed rows (``packing``: a query sees the real
  tokens of its own segment only), optionally within a local window (ModernBERT's local layers). Segments are
  contiguous, so a window over columns is a window over each segment's own positions.
* **The computation** (``attend``): with no dropout on the weights, ``jax.nn.dot_product_attention`` (XLA's
  attention, or cuDNN's fused kernel where ``implementation`` asks and the GPU has it: equal within 16-bit rounding
  on an H200, experiments/packing/README.md); with dropout on the weights, or in float64 (jax's function keeps its
  logits in float32), flax's weights function and one einsum. Both scale the query first, so on a CPU in float32
  the two paths compute the same numbers (``tests/test_packing.py``).

On a TPU, ``splash_attend`` runs the same attention within segments through Pallas' splash kernel (equal at real
tokens, checked through Pallas' interpreter on a CPU).

A padding query in a packed row (segment 0) sees no key at all: its weights are then uniform over the row's keys,
finite; no real token reads a padding token's state, and poolers read only real tokens.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax.linen.attention import dot_product_attention_weights


def visible(
  attention_mask: jax.Array | None = None,
  segment_ids: jax.Array | None = None,
  *,
  window: int | None = None,
) -> jax.Array:
  """Which keys each query sees: a boolean ``[batch, 1, queries or 1, keys]`` mask (broadcast over heads).

  Exactly one of:
    attention_mask: ``[batch, len]``, nonzero at real tokens: a query sees every real token of its row.
    segment_ids: ``[batch, len]`` int, ``1, 2, ...`` for the texts packed in a row (each contiguous) and 0 at
      padding: a query sees the real tokens of its own segment.
  window: a query sees only keys at most ``window`` columns away (ModernBERT's ``local_attention // 2``).
  """
  if (attention_mask is None) == (segment_ids is None):
    raise ValueError("visible needs exactly one of attention_mask and segment_ids")
  if segment_ids is None:
    mask = attention_mask.astype(bool)[:, None, None, :]  # [batch, 1, 1, keys]
  else:
    mask = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] > 0)
    mask = mask[:, None]  # [batch, 1, queries, keys]
  if window is not None:
    length = mask.shape[-1]
    distance = jnp.abs(jnp.arange(length)[:, None] - jnp.arange(length)[None, :])
    mask = mask & (distance <= window)
  return mask


def attend(
  query: jax.Array,
  key: jax.Array,
  value: jax.Array,
  mask: jax.Array,
  *,
  dtype: Any,
  dropout_rate: float = 0.0,
  dropout_rng: jax.Array | None = None,
  shared_dropout: bool = False,
  implementation: Literal["xla", "cudnn"] | None = None,
) -> jax.Array:
  """Multi-head attention of ``query`` over ``key``/``value``, each ``[batch, len, heads, head_dim]``.

  Args:
    mask: ``visible``'s boolean mask, broadcastable to ``[batch, heads, queries, keys]``.
    dtype: the computation dtype. In 16-bit dtypes the logits and softmax stay float32 on both paths.
    dropout_rate, dropout_rng: dropout on the attention weights (None or rate 0: none). The mask is drawn by flax's
      weights function from ``dropout_rng``, per element, or with ``shared_dropout`` one per call for the whole
      batch and every head (flax's ``broadcast_dropout``).
    implementation: ``jax.nn.dot_product_attention``'s (None: XLA's, or its choice; ``"cudnn"``: cuDNN's fused
      kernel on a GPU that has it).

  Returns: ``[batch, len, heads, head_dim]``.
  """
  depth = query.shape[-1]
  scaled = query / jnp.sqrt(depth).astype(dtype)  # As flax's weights function scales it: the paths agree.
  dropout = dropout_rng is not None and dropout_rate > 0.0
  if not dropout and jnp.dtype(dtype) != jnp.float64:
    if implementation == "cudnn":  # cuDNN takes the mask as a bias of full [queries, keys]: no broadcast query axis.
      mask = jnp.broadcast_to(mask, (*mask.shape[:2], query.shape[1], key.shape[1]))
    return jax.nn.dot_product_attention(scaled, key, value, mask=mask, scale=1.0, implementation=implementation)
  weights = dot_product_attention_weights(
    query,
    key,
    mask=mask,
    dropout_rng=dropout_rng,
    dropout_rate=dropout_rate,
    broadcast_dropout=shared_dropout,
    deterministic=not dropout,
    dtype=dtype,
    force_fp32_for_softmax=jnp.dtype(dtype).itemsize < 4,  # Never for float64: it would round it to float32.
  )
  return jnp.einsum("...hqk,...khd->...qhd", weights.astype(dtype), value)


def segment_positions(segment_ids: jax.Array) -> jax.Array:
  """Each token's position within its segment ``[batch, len]`` (0 at a segment's first token; padding counts as a
  segment of its own): what position ids are for a text packed at some column of a row."""
  length = segment_ids.shape[-1]
  columns = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), segment_ids.shape)
  previous = jnp.concatenate([jnp.full_like(segment_ids[:, :1], -1), segment_ids[:, :-1]], axis=-1)
  starts = jnp.where(segment_ids != previous, columns, 0)
  return columns - jax.lax.cummax(starts, axis=segment_ids.ndim - 1)


def splash_attend(
  query: jax.Array,
  key: jax.Array,
  value: jax.Array,
  segment_ids: jax.Array,
  *,
  window: int | None = None,
  block: int = 128,
  interpret: bool = False,
) -> jax.Array:
  """Attention within the segments of packed rows by the TPU's splash kernel (jax's Pallas ``splash_attention``):
  what ``attend(query, key, value, visible(segment_ids=segment_ids, window=window))`` computes at every real token.

  Args:
    query, key, value: ``[batch, len, heads, head_dim]``; ``len`` a multiple of ``block``.
    segment_ids: ``[batch, len]``, as for ``visible`` (0 at padding).
    window: a query sees only keys at most this many columns away (ModernBERT's local layers).
    block: the kernel's query and key block (``len`` and ``block`` multiples of 128 on a TPU).
    interpret: run the kernel through Pallas' interpreter (any backend, slowly): how tests check it off a TPU.

  Returns: ``[batch, len, heads, head_dim]``. Padding queries (segment 0) attend over the row's padding keys here,
  where ``visible`` lets them see no key at all: their outputs differ, and nothing reads them (no real token sees a
  padding key; poolers read real tokens only).
  """
  # Imported here: Pallas' TPU package loads only for this path.
  from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as kernels,
    splash_attention_mask as masks,
  )

  _, length, heads, depth = query.shape
  if length % block:
    raise ValueError(f"splash attention needs a length that is a multiple of its block {block}; got {length}")
  shape = (length, length)
  static = masks.FullMask(shape) if window is None else masks.LocalMask(shape, (window, window), offset=0)
  blocks = {
    name: block
    for name in ("block_q", "block_kv", "block_kv_compute", "block_q_dkv", "block_kv_dkv", "block_kv_dkv_compute")
  }
  kernel = kernels.make_splash_mha(
    masks.MultiHeadMask([static] * heads),
    block_sizes=kernels.BlockSizes(**blocks, block_q_dq=block, block_kv_dq=block),
    head_shards=1,
    q_seq_shards=1,
    interpret=interpret,
  )
  scaled = query / jnp.sqrt(depth).astype(query.dtype)  # As attend scales it.

  def one_row(q, k, v, ids):  # The kernel takes [heads, len, head_dim] of one row.
    out = kernel(q.swapaxes(0, 1), k.swapaxes(0, 1), v.swapaxes(0, 1), segment_ids=kernels.SegmentIds(q=ids, kv=ids))
    return out.swapaxes(0, 1)

  return jax.vmap(one_row)(scaled, key, value, segment_ids)
