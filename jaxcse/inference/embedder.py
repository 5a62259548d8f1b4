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
from jaxcse.models import ModelSpec, poolers


def check_settings(batch_size: int, max_seq_len: int | None = None) -> None:
  """Raises ``EmbeddingError`` for settings no model can embed with; the commands call it before loading one."""
  if batch_size < 1:
    raise EmbeddingError(f"batch_size must be >= 1, not {batch_size}")
  if max_seq_len is not None and max_seq_len < 3:  # None: the model's own limit.
    raise EmbeddingError(f"max_seq_len must be at least 3 ([CLS], a token, [SEP]), not {max_seq_len}")


class BucketedEmbedder:
  """Embeds sentences with any params of one model spec, fast: sorted by length, bucketed shapes, one jit per shape.

  Batches are padded to a bucket length (4, 8, ..., 64, 80, ..., 512; see
  ``tokenization.LENGTH_BUCKETS``); full batches have ``batch_size`` rows and
  the last, partial one is padded only to the next power of two (at least 8),
  so a call computes on at most ~2x its rows, never a whole batch for one
  sentence. Each (length, rows) shape compiles once per BucketedEmbedder, ever.
  """

  def __init__(
    self,
    spec: ModelSpec,
    pooler: str | None = None,
    *,
    batch_size: int = 128,
    max_seq_len: int | None = None,
    attend_padding: bool = False,
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

  def params_for_pooler(self, params: Any) -> dict:
    """Only what this pooler's module reads: training params may also hold an MLP or an MLM head."""
    has_mlp = poolers.get(self.pooler).has_mlp
    return {k: v for k, v in params.items() if k == "backbone" or (k == "mlp" and has_mlp)}

  def __call__(self, sentences: Sequence[str], params: Any, *, progress=None) -> np.ndarray:
    """Returns float32 ``[len(sentences), hidden]`` in input order; ``progress`` (a ``progress.Progress``) counts."""
    params = self.params_for_pooler(params)
    ids = tokenization.tokenize(self.spec.tokenizer, sentences, self.max_seq_len)
    pad_id = self.spec.tokenizer.pad_token_id or 0
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
    if not np.isfinite(out).all():
      raise EmbeddingError(
        f"the model gives non-finite embeddings for {int((~np.isfinite(out).all(axis=1)).sum())} "
        f"of {len(out)} sentences (its parameters are NaN or overflow)"
      )
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


def _row_bucket(rows: int) -> int:
  """Rows a partial batch is padded to: the next power of two, at least 8."""
  return max(8, 1 << (rows - 1).bit_length())


class EmbeddingError(JaxcseError, ValueError):
  """The embedder cannot run as asked (a batch size or length that cannot work), or the model produced NaN or
  infinite embeddings; the message says which."""
