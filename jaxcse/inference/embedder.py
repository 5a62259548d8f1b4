"""The inference kernel: sentences -> float32 vectors with a given model spec, pooler and params.

Used by the evaluation during training (params change at every evaluation)
and under ``encode.Encoder`` (params loaded once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from jaxcse.core.errors import JaxcseError
from jaxcse.data import tokenization
from jaxcse.models import ModelSpec, packing, poolers


def check_settings(batch_size: int, max_seq_len: int | None = None) -> None:
  """Raises ``EmbeddingError`` for settings no model can embed with; the commands call it before loading one."""
  if batch_size < 1:
    raise EmbeddingError(f"batch_size must be >= 1, not {batch_size}")
  if max_seq_len is not None and max_seq_len < 3:  # None: the model's own limit.
    raise EmbeddingError(f"max_seq_len must be at least 3 ([CLS], a token, [SEP]), not {max_seq_len}")


# Packed rows are at least this long, so that short sentences share rows (a row of 16 holds one sentence of 9
# tokens and 7 padding); longer only for a longer sentence. Attention costs ~4 * row_len * hidden per token and
# layer against the dense layers' ~24 * hidden^2: at 128 about 5% of MiniLM's (hidden 384) step.
MIN_ROW_LEN = 128


class BucketedEmbedder:
  """Embeds sentences with any params of one model spec, fast: little padding computed, few shapes, one jit per shape.

  Padded (the default, and always with ``attend_padding``): batches of ``batch_size`` sentences, sorted by length,
  padded to a bucket length (4, 8, ..., 64, 80, ..., 512; ``tokenization.LENGTH_BUCKETS``); the last, partial one is
  padded only to the next power of two rows (at least 8). Sorted, a batch's sentences are of about one length, so
  little padding is computed.

  Packed (``packed=True``): the sentences, longest first, are packed end to end into rows (``models.packing``: each
  attends only to itself, numbered from its own first token; equal to the padded path to float32 rounding,
  ``tests/test_packing.py``). A row is ``MIN_ROW_LEN`` long, or the bucket of the longest sentence if longer; a full
  call holds about as many tokens as a padded batch of ``batch_size`` longest sentences, and the last call's rows
  are padded to the next power of two. Each (rows, row length) shape compiles once per BucketedEmbedder, ever. Not
  the default: on a CPU its longer rows' attention costs more than the sorted batches' padding (docs/benchmarks.md).
  """

  def __init__(
    self,
    spec: ModelSpec,
    pooler: str | None = None,
    *,
    batch_size: int = 128,
    max_seq_len: int | None = None,
    attend_padding: bool = False,
    packed: bool = False,
  ):
    self.spec = spec
    self.pooler = pooler or spec.pooling.test_pooler
    poolers.get(self.pooler)  # Raises for an unknown name.
    check_settings(batch_size, max_seq_len)
    self.batch_size = batch_size
    self.max_seq_len = min(spec.max_positions if max_seq_len is None else max_seq_len, spec.max_positions)
    # attend_padding (DCLR's released dev evaluation, which passes no attention mask): every batch is cut at its
    # longest sentence, as a collator that pads to the longest would leave it.
    self._apply = jit_embed(spec, self.pooler, attend_padding=attend_padding)
    # attend_padding reads the padding of a batch padded to its longest sentence: a packed batch has none.
    self.packed = packed and not attend_padding
    self._apply_packed = jit_embed_packed(spec, self.pooler) if self.packed else None

  def params_for_pooler(self, params: Any) -> dict:
    """Only what this pooler's module reads: training params may also hold an MLP or an MLM head."""
    has_mlp = poolers.get(self.pooler).has_mlp
    return {k: v for k, v in params.items() if k == "backbone" or (k == "mlp" and has_mlp)}

  def __call__(self, sentences: Sequence[str], params: Any, *, progress=None) -> np.ndarray:
    """Returns float32 ``[len(sentences), hidden]`` in input order; ``progress`` (a ``progress.Progress``) counts."""
    params = self.params_for_pooler(params)
    ids = tokenization.tokenize(self.spec.tokenizer, sentences, self.max_seq_len)
    pad_id = self.spec.tokenizer.pad_token_id or 0
    if self.packed:
      out = self._embed_packed(ids, params, pad_id, progress)
    else:
      out = self._embed_padded(ids, params, pad_id, progress)
    if not np.isfinite(out).all():
      raise EmbeddingError(
        f"the model gives non-finite embeddings for {int((~np.isfinite(out).all(axis=1)).sum())} "
        f"of {len(out)} sentences (its parameters are NaN or overflow)"
      )
    return out

  def _embed_packed(self, ids: list[list[int]], params: Any, pad_id: int, progress) -> np.ndarray:
    out = np.zeros((len(ids), self.spec.hidden_size), np.float32)
    if not ids:
      return out
    lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    order = np.argsort(-lengths, kind="stable")  # Longest first: first fit decreasing within each call.
    longest = tokenization.bucket(int(lengths.max()), self.max_seq_len)
    row_len = max(MIN_ROW_LEN, longest)
    full_rows = max(1, -(-self.batch_size * longest // row_len))  # A padded batch's tokens, at most.
    pending, at = [], 0
    while at < len(order):
      # Texts per call: at most the row count times the texts a row can hold; fillers (length 0) complete it.
      window = order[at : at + full_rows * row_len // 2]
      rows, _ = packing.first_fit(lengths[window], row_len, max_rows=full_rows)
      taken = window[rows >= 0]
      used = int(rows.max()) + 1
      call_rows = full_rows if used == full_rows else min(full_rows, 1 << (used - 1).bit_length())
      texts = [ids[i] for i in taken]
      capacity = call_rows * row_len // 2  # Fixed per shape: one compile per (rows, row_len).
      texts += [[]] * (max(capacity, len(texts)) - len(texts))
      batch = packing.pack(texts, rows=call_rows, row_len=row_len, pad_id=pad_id)
      pending.append((taken, self._apply_packed(params, batch.input_ids, batch.segment_ids, batch.places)))
      at += len(taken)
    for taken, emb in pending:
      out[taken] = np.asarray(emb[: len(taken)], np.float32)
      if progress is not None:
        progress.update(len(taken))
    return out

  def _embed_padded(self, ids: list[list[int]], params: Any, pad_id: int, progress) -> np.ndarray:
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(ids), self.spec.hidden_size), np.float32)
    pending = []
    for start in range(0, len(order), self.batch_size):
      rows = order[start : start + self.batch_size]
      length = tokenization.bucket(max(len(ids[r]) for r in rows), self.max_seq_len)
      padded = self.batch_size if len(rows) == self.batch_size else min(self.batch_size, _row_bucket(len(rows)))
      batch_ids = np.full((padded, length), pad_id, np.int32)
      batch_mask = np.zeros((padded, length), np.int32)
      batch_mask[len(rows) :, 0] = 1  # Padding rows: one visible token keeps them finite.
      for i, r in enumerate(rows):
        batch_ids[i, : len(ids[r])] = ids[r]
        batch_mask[i, : len(ids[r])] = 1
      pending.append((rows, self._apply(params, batch_ids, batch_mask)))  # Dispatch runs ahead.
    for rows, emb in pending:
      out[rows] = np.asarray(emb[: len(rows)], np.float32)
      if progress is not None:
        progress.update(len(rows))
    return out


def embed_each_once(embed: Callable[[list[str]], np.ndarray], sentences: Iterable[str]) -> dict[str, np.ndarray]:
  """``{sentence: vector}``, each distinct sentence of ``sentences`` embedded once (in sorted order)."""
  unique = sorted(set(sentences))
  return dict(zip(unique, embed(unique)))


def normalize_rows(x: np.ndarray) -> np.ndarray:
  """Rows scaled to unit length, ``[n, dim]`` (or one ``[dim]`` vector); a zero row stays zero (eps 1e-12, as
  sentence-transformers' Normalize and torch's F.normalize)."""
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def jit_embed(spec: ModelSpec, pooler: str, *, attend_padding: bool = False):
  """The jitted forward ``(params, ids [rows, len], mask [rows, len]) -> [rows, hidden]`` that an BucketedEmbedder runs.

  ``params`` are ``BucketedEmbedder.params_for_pooler``'s. ``jaxcse.compile --inference`` lowers this same function.
  """
  module = spec.module_for(pooler, attend_padding=attend_padding)
  return jax.jit(lambda params, ids, mask: module.apply({"params": params}, ids, mask, train=False))


def jit_embed_packed(spec: ModelSpec, pooler: str):
  """The jitted forward of packed rows ``(params, ids [rows, row_len], segment_ids [rows, row_len], places) ->
  [texts, hidden]`` (``models.packing``) that a packed BucketedEmbedder runs."""
  module = spec.module_for(pooler)
  return jax.jit(
    lambda params, ids, segments, places: module.apply({"params": params}, ids, segments, train=False, places=places)
  )


def _row_bucket(rows: int) -> int:
  """Rows a partial batch is padded to: the next power of two, at least 8."""
  return max(8, 1 << (rows - 1).bit_length())


class EmbeddingError(JaxcseError, ValueError):
  """The embedder cannot run as asked (a batch size or length that cannot work), or the model produced NaN or
  infinite embeddings; the message says which."""
