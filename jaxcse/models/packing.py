"""Packed rows: the real tokens of many texts laid end to end in a few fixed-length rows, so the encoder computes
no padding.

A batch of ``n`` texts padded to ``width`` costs ``n * width`` token positions in every layer; packed, it costs
``rows * row_len``, about its real tokens. Each text keeps its own attention (segment ids: ``attention.visible``)
and positions (numbered from its own first token), so in exact arithmetic a packed text's token states are its
padded token states; the poolers read them through ``PackedTokens`` (a text's first token by its place, the mean
over its tokens by a segment sum), so every pooler pools a packed batch as it pools a padded one.

``pack`` lays texts out on the host (numpy, first fit over the texts longest first: deterministic for the same
texts), ``Packed`` holds the layout (ids and segment ids ``[rows, row_len]``, each text's ``Places``), and
``rows_needed`` says how many rows a set of lengths takes, to pick a shape from a few buckets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class Places:
  """Where each of ``texts`` packed texts lies: ``row``, ``start`` (its first column) and ``length``, each
  ``[texts]`` int32, and ``text`` ``[rows, row_len]``, the text each token belongs to (``texts`` at padding). A
  text of length 0 (a filler for a fixed number of texts) has no tokens: it pools to zeros or to some row's first
  state, and its caller discards it.

  Sharded (``pack_shards``: one layout per device of a data-parallel batch), ``row``, ``start`` and ``length`` are
  ``[shards, texts per shard]`` and every index is local to its shard's block of ``rows / shards`` rows, so a
  device pools its own texts from its own rows, with no communication."""

  row: jax.Array
  start: jax.Array
  length: jax.Array
  text: jax.Array


@dataclasses.dataclass(frozen=True)
class PackedTokens:
  """``poolers.Tokens`` of a packed batch: the token states ``[rows, row_len, hidden]`` of each text."""

  places: Places

  def first(self, h: jax.Array) -> jax.Array:
    """``[texts, ...]``: each text's first token's state of ``h`` ``[rows, row_len, ...]``."""
    return self._per_shard(lambda h, p: h[p.row, p.start], h)

  def mean(self, h: jax.Array) -> jax.Array:
    def mean(h, p):
      texts = p.length.shape[0]
      # Padding's text id is `texts`, past the last segment: segment_sum drops it.
      sums = jax.ops.segment_sum(h.reshape(-1, h.shape[-1]), p.text.reshape(-1), num_segments=texts)
      return sums / jnp.maximum(p.length, 1).astype(h.dtype)[:, None]

    return self._per_shard(mean, h)

  def _per_shard(self, fn, h: jax.Array) -> jax.Array:
    """``fn(h, places)`` of one layout, or of each shard's (vmapped: a gather and a segment sum with the shard as
    a batch dimension, which XLA partitions along the data axis without moving rows between devices)."""
    places = self.places
    if places.row.ndim == 1:
      return fn(h, places)
    shards = places.row.shape[0]
    local = Places(places.row, places.start, places.length, places.text.reshape(shards, -1, places.text.shape[-1]))
    out = jax.vmap(fn)(h.reshape(shards, -1, *h.shape[1:]), local)
    return out.reshape(-1, *out.shape[2:])


class Packed(NamedTuple):
  """A packed batch: ``input_ids`` and ``segment_ids`` ``[rows, row_len]`` (segments ``1, 2, ...`` in a row, 0 at
  padding), and the texts' ``places``."""

  input_ids: np.ndarray
  segment_ids: np.ndarray
  places: Places


def first_fit(lengths: Sequence[int], row_len: int, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Each text's row and start column under first fit, longest first (ties in input order): ``([n], [n])``.

  First fit decreasing uses at most 11/9 of the fewest rows possible plus one; a row holds whole texts only, so a
  text is never split. A length over ``row_len`` is a ValueError. With ``max_rows``, placing stops at the first
  text (longest first) that fits none of ``max_rows`` rows: it and every text after it get row -1.
  """
  lengths = np.asarray(lengths, np.int64)
  if lengths.size and lengths.max() > row_len:
    raise ValueError(f"a text of {int(lengths.max())} tokens cannot be packed into rows of {row_len}")
  rows = np.zeros(len(lengths), np.int32)
  starts = np.zeros(len(lengths), np.int32)
  used: list[int] = []  # Tokens used in each row so far.
  order = np.argsort(-lengths, kind="stable")
  for k, i in enumerate(order):
    n = int(lengths[i])
    for r, filled in enumerate(used):
      if filled + n <= row_len:
        break
    else:
      if max_rows is not None and len(used) == max_rows:
        rows[order[k:]] = -1  # This text and every shorter one after it.
        return rows, starts
      r = len(used)
      used.append(0)
    rows[i], starts[i] = r, used[r]
    used[r] += n
  return rows, starts


def rows_needed(lengths: Sequence[int], row_len: int) -> int:
  """The rows ``first_fit`` packs ``lengths`` into (0 for no text, or only empty ones)."""
  rows, _ = first_fit(lengths, row_len)
  nonempty = np.asarray(lengths) > 0
  return int(rows[nonempty].max()) + 1 if nonempty.any() else 0


def pack(
  texts: Sequence[Sequence[int]],
  *,
  rows: int,
  row_len: int,
  pad_id: int,
) -> Packed:
  """Packs token id sequences into ``rows`` rows of ``row_len`` (first fit, longest first).

  A ValueError if the texts need more rows than ``rows`` (``rows_needed`` says how many) or one is longer than
  ``row_len``.
  """
  lengths = np.fromiter((len(t) for t in texts), np.int32, len(texts))
  row, start = first_fit(lengths, row_len)
  row[lengths == 0], start[lengths == 0] = 0, 0
  if lengths.size and row.max() >= rows:
    raise ValueError(f"these texts need {int(row.max()) + 1} rows of {row_len}, not {rows}")
  ids = np.full((rows, row_len), pad_id, np.int32)
  segments = np.zeros((rows, row_len), np.int32)
  text = np.full((rows, row_len), len(texts), np.int32)
  in_row = np.zeros(rows, np.int32)  # Segments so far in each row: a text's segment id is its rank in its row.
  for i in np.lexsort((start, row)):  # Row by row, left to right: segment ids increase along a row.
    n = lengths[i]
    if n == 0:
      continue
    r, s = row[i], start[i]
    in_row[r] += 1
    ids[r, s : s + n] = texts[i]
    segments[r, s : s + n] = in_row[r]
    text[r, s : s + n] = i
  return Packed(ids, segments, Places(row, start, lengths, text))


def pack_shards(
  shards: Sequence[Sequence[Sequence[int]]],
  *,
  rows: int,
  row_len: int,
  pad_id: int,
  chunks: int = 1,
) -> Packed:
  """Packs each shard's texts (one device's part of a data-parallel batch; every shard the same number of texts)
  into ``rows`` rows of its own, as ``pack`` does: ``input_ids``, ``segment_ids`` and ``places.text``
  ``[len(shards) * rows, row_len]`` (shard by shard, so splitting their first axis over the devices gives each
  device its rows), ``places.row/start/length`` ``[len(shards), texts per shard]``, indices local to the shard.

  ``chunks > 1`` (GradCache's): ``shards`` holds ``devices * chunks`` parts, device by device and chunk by chunk
  within it, and the arrays interleave the chunks (rows ``[devices * rows * chunks, row_len]``, places
  ``[devices * chunks, texts]``) so that ``gradcache.to_chunks``' strided split gives chunk ``c`` every device's
  part ``c``: a packed layout of its own, ``[devices * rows, row_len]`` with places ``[devices, texts]``.
  """
  parts = [pack(texts, rows=rows, row_len=row_len, pad_id=pad_id) for texts in shards]
  if len({p.places.row.shape[0] for p in parts}) > 1:
    raise ValueError(f"every shard needs the same number of texts, not {[len(t) for t in shards]}")
  if len(parts) % chunks:
    raise ValueError(f"{len(parts)} parts are not devices x {chunks} chunks")
  devices = len(parts) // chunks

  def tokens(field):  # [devices, chunks, rows, row_len] -> rows of every chunk interleaved.
    x = np.stack([field(p) for p in parts]).reshape(devices, chunks, rows, row_len)
    return x.transpose(0, 2, 1, 3).reshape(devices * rows * chunks, row_len)

  return Packed(
    tokens(lambda p: p.input_ids),
    tokens(lambda p: p.segment_ids),
    Places(
      *(np.stack([getattr(p.places, f) for p in parts]) for f in ("row", "start", "length")),
      tokens(lambda p: p.places.text),
    ),
  )
