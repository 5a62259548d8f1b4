"""A batch's views as encoder rows, and their embeddings: ``[batch, columns, len]`` ids in, ``[batch, views, hidden]``
out, in one forward pass (a one-column batch becomes SimCSE's two views, each with its own dropout mask).

Packed (``train.packed``): ``PackedViews.lay_out`` lays the same views, in the same order, end to end in rows of
real tokens on the host (``models.packing``), and ``embed_views`` embeds those rows instead of the padded ones.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import models
from jaxcse.models import packing

# A packed row holds this many tokens at least (several sentences of a batch), or the batch's length if longer.
MIN_ROW_LEN = 128


def rows_bucket(rows: int) -> int:
  """The rows a step that needs ``rows`` computes: ``rows`` up to 8, then rounded up to 4 buckets an octave (9-16
  by 2, 17-32 by 4, ...): at most 12.5% more than needed past 8, and a run's steps, whose needs vary by a few rows,
  meet only a few shapes (each compiles once)."""
  if rows <= 8:
    return max(rows, 1)
  step = 1 << ((rows - 1).bit_length() - 3)
  return -(-rows // step) * step


@dataclasses.dataclass(frozen=True)
class PackedViews:
  """How a run packs each step's views: rows of ``row_len`` tokens, as many as ``rows_bucket`` says.

  ``for_batches(examples, columns, length)`` sizes it from the batch's shape alone, so every step of a run (and its
  resume) packs alike; ``lay_out`` is deterministic in the batch.
  """

  row_len: int
  two_views: bool = True
  pad_id: int = 0

  @classmethod
  def for_batches(cls, examples: int, columns: int, length: int, *, pad_id: int, two_views: bool = True):
    del examples, columns  # Every batch of a run has the same; the rows follow each batch's real tokens.
    return cls(max(MIN_ROW_LEN, length), two_views, pad_id)

  def texts(self, batch: dict) -> list[np.ndarray]:
    """The host batch's views' real tokens, in ``flat_views``' order (example by example, view by view)."""
    ids, mask = np.asarray(batch["input_ids"]), np.asarray(batch["attention_mask"])
    if ids.shape[1] == 1 and self.two_views:
      ids, mask = np.repeat(ids, 2, axis=1), np.repeat(mask, 2, axis=1)
    return [row[keep > 0] for row, keep in zip(ids.reshape(-1, ids.shape[-1]), mask.reshape(-1, mask.shape[-1]))]

  def parts(self, batch: dict, shards: int, chunks: int) -> list[list[np.ndarray]]:
    """The texts of each (device, chunk), device by device: device ``d`` holds the ``d``-th consecutive block of
    examples (the batch's sharding), chunk ``c`` the examples ``c, c + chunks, ...`` (``gradcache.to_chunks``)."""
    texts = self.texts(batch)
    examples = len(np.asarray(batch["input_ids"]))
    views = len(texts) // examples
    block = examples // shards
    return [
      [t for e in range(d * block + c, (d + 1) * block, chunks) for t in texts[e * views : (e + 1) * views]]
      for d in range(shards)
      for c in range(chunks)
    ]

  def rows_for(self, parts: list[list[np.ndarray]]) -> int:
    """The rows each part is packed into: the most any part needs, bucketed."""
    return rows_bucket(max(packing.rows_needed([len(t) for t in part], self.row_len) for part in parts))

  def lay_out(self, batch: dict, *, shards: int | None = None, chunks: int = 1, rows: int | None = None) -> dict:
    """``{"input_ids", "segment_ids", "places"}`` of the host batch's views (``texts``), packed; the step's
    ``batch["packed"]``. ``shards`` (a data mesh's devices, or a process's part of them) and GradCache's
    ``chunks``: one part a (device, chunk) (``parts``), each in ``rows`` rows of its own (``packing.pack_shards``;
    default ``rows_for``; a multi-process run passes the most any process needs, so that every device has the
    same). None: one layout for one device."""
    if shards is None and chunks == 1:
      texts = self.texts(batch)
      rows = rows or self.rows_for([texts])
      packed = packing.pack(texts, rows=rows, row_len=self.row_len, pad_id=self.pad_id)
      return {"input_ids": packed.input_ids, "segment_ids": packed.segment_ids, "places": packed.places}
    return self.pack_parts(self.parts(batch, shards or 1, chunks), chunks=chunks, rows=rows)

  def pack_parts(self, parts: list[list[np.ndarray]], *, chunks: int = 1, rows: int | None = None) -> dict:
    """``lay_out`` of ``parts`` already split (``parts``), e.g. by a caller that sized ``rows`` from them."""
    rows = rows or self.rows_for(parts)
    packed = packing.pack_shards(parts, rows=rows, row_len=self.row_len, pad_id=self.pad_id, chunks=chunks)
    return {"input_ids": packed.input_ids, "segment_ids": packed.segment_ids, "places": packed.places}


def flat_views(batch: dict, *, two_views: bool = True) -> tuple[jax.Array, jax.Array, int, int]:
  """``[batch * views, len]`` ids and mask; a one-column (unsupervised) batch becomes two views if ``two_views``."""
  ids, mask = batch["input_ids"], batch["attention_mask"]
  if ids.shape[1] == 1 and two_views:
    ids = jnp.repeat(ids, 2, axis=1)
    mask = jnp.repeat(mask, 2, axis=1)
  b, v, length = ids.shape
  # Rows of one example stay adjacent, so the reshape keeps the batch sharding.
  return ids.reshape(b * v, length), mask.reshape(b * v, length), b, v


def embed_views(
  module: models.PooledBackbone,
  params,
  batch: dict,
  rng: jax.Array,
  *,
  train: bool = True,
  same_dropout_mask: bool = False,
  two_views: bool = True,
) -> jax.Array:
  """Embeds every sentence of the batch in one forward pass, with dropout when ``train``.

  ``batch`` holds ``[batch, columns, len]`` arrays. A one-column batch
  (unsupervised) is duplicated into two views (with ``two_views``, the default),
  which get independent dropout masks because they are different rows of one
  forward pass (SimCSE's formulation). Returns ``[batch, views, hidden]``.

  With ``batch["packed"]`` (``PackedViews.lay_out``), the packed rows are embedded instead of the padded ones:
  the same embeddings in exact arithmetic, other dropout masks.

  ``same_dropout_mask`` (SimCSE's "fixed 0.1", one-column batches only): both
  views get one dropout mask. Two passes of the same sentence with the same mask
  compute the same vector, so the sentence is embedded once and the vector used
  for both views: the same values, and the same gradient (the sum of both
  views' contributions through the one computation), at half the cost.
  """
  if same_dropout_mask:
    if batch["input_ids"].shape[1] != 1:
      raise ValueError(
        f"augment.same_dropout_mask needs one sentence per example (its views are copies of it); "
        f"this batch has {batch['input_ids'].shape[1]} columns"
      )
    z = module.apply(
      {"params": params},
      batch["input_ids"][:, 0],
      batch["attention_mask"][:, 0],
      train=train,
      rngs={"dropout": rng} if train else {},
    )
    return jnp.stack([z, z], axis=1)
  # PackedViews.lay_out's rows of the same views, in the same order, when they hold as many texts as asked for (a
  # one-column batch laid out as two views, while a caller wants one, as GISTEmbed's guide: the padded rows).
  ids, views = batch["input_ids"], batch["input_ids"].shape[1]
  views = 2 if views == 1 and two_views else views
  if "packed" in batch and batch["packed"]["places"].row.size == ids.shape[0] * views:
    rows = batch["packed"]
    z = module.apply(
      {"params": params},
      rows["input_ids"],
      rows["segment_ids"],
      places=rows["places"],
      train=train,
      rngs={"dropout": rng} if train else {},
    )
    return z.reshape(ids.shape[0], views, -1)
  ids, mask, b, v = flat_views(batch, two_views=two_views)
  z = module.apply({"params": params}, ids, mask, train=train, rngs={"dropout": rng} if train else {})
  return z.reshape(b, v, -1)
