r"""Hard negatives mined for (anchor, positive) pairs, as sentence-transformers 6.2's mine_hard_negatives mines them.

  jaxcse-mine --model M --input pairs.jsonl --output mined.jsonl [--corpus FILE] \
      --num_negatives 3 --range_max 20 --relative_margin 0.05 [--sampling_strategy random --seed 0] \
      [--output_format triplet|n-tuple|labeled-pair|labeled-list] [--output_scores]

  from jaxcse.mining import mine_hard_negatives
  mined = mine_hard_negatives("pairs.jsonl", "sentence-transformers/all-MiniLM-L6-v2", relative_margin=0.05)

Given the same embeddings, the selection is sentence-transformers 6.2's (``tests/test_mining.py``): the corpus is
the positives (deduplicated, first occurrence kept) or the given corpus followed by the positives; duplicate
anchors are one query whose positives are all of theirs; each query's ``range_max + max_positives`` most similar
corpus texts (cosine) are the candidates, its positives are taken out, then the margins (against the query's
lowest positive score), ``max_score`` and ``min_score``; ``range_min`` skips the best remaining candidates, and
``num_negatives`` are taken from the next ones (``top``), or drawn (``random``: ``random.Random(seed).sample``,
query by query, as sentence-transformers' ``random.sample`` draws after ``random.seed(seed)``).

Where it differs: a named anchor or positive column that the data lacks is an error (sentence-transformers falls
back to the first two columns); the data's columns are read as the pair reader reads them (``data.pairs``: a
``label``/``score`` or ``dataset_name`` column is never a text column); an invalid ``sampling_strategy`` is an
error; a cross-encoder, ``include_positives`` and prompt names (rather than prompt strings) are not offered. The
search is exact: ``jax.lax.top_k`` over the whole corpus for a block of queries at a time (memory: one block of
scores, ``SCORE_BLOCK_BYTES``); equal scores keep the earlier corpus text first.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import random
import sys
from collections.abc import Sequence

import numpy as np

from jaxcse.core import errors, files
from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress

OUTPUT_FORMATS = ("triplet", "n-tuple", "labeled-pair", "labeled-list")
SAMPLING_STRATEGIES = ("top", "random")
OUTPUT_SUFFIXES = {".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
SCORE_BLOCK_BYTES = 256 << 20  # One block of query-corpus scores (float32) at most, whatever the sizes.
FILTERS = ("absolute_margin", "relative_margin", "max_score", "min_score")


class MiningError(JaxcseError, ValueError):
  """Mining options that cannot work together, or data that cannot be mined; the message names the option."""


# --------------------------------------------------------------------------
# The options.


@dataclasses.dataclass(frozen=True)
class Options:
  """sentence-transformers' ``mine_hard_negatives`` options (its names and defaults), and the search's block.

  ``range_max`` None takes sentence-transformers' default (``resolved``). ``seed`` seeds ``random`` sampling.
  ``block_rows``: queries scored against the whole corpus at a time (None: as many as ``SCORE_BLOCK_BYTES`` holds).
  ``use_faiss``: search with FAISS's exact inner-product index (``IndexFlatIP``, the ``faiss`` extra), as
  sentence-transformers' ``use_faiss=True`` does, instead of jaxcse's blocked ``jax.lax.top_k``.
  """

  range_min: int = 0
  range_max: int | None = None
  max_score: float | None = None
  min_score: float | None = None
  absolute_margin: float | None = None
  relative_margin: float | None = None
  num_negatives: int = 3
  sampling_strategy: str = "top"
  output_format: str = "triplet"
  output_scores: bool = False
  seed: int = 0
  block_rows: int | None = None
  use_faiss: bool = False

  def check(self) -> None:
    """Raises ``MiningError`` for what no data can make work (run before anything is read)."""
    if self.output_format not in OUTPUT_FORMATS:
      raise MiningError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, not {self.output_format!r}")
    if self.sampling_strategy not in SAMPLING_STRATEGIES:
      raise MiningError(f"sampling_strategy must be top or random, not {self.sampling_strategy!r}")
    if self.num_negatives < 1:
      raise MiningError(f"num_negatives must be at least 1, got num_negatives={self.num_negatives}")
    if self.range_min < 0:
      raise MiningError(f"range_min must be non-negative, got range_min={self.range_min}")
    for name in FILTERS:
      value = getattr(self, name)
      if value is not None and not math.isfinite(value):
        raise MiningError(f"{name} must be a finite number, not {value}")
    if self.block_rows is not None and self.block_rows < 1:
      raise MiningError(f"block_rows must be at least 1, not {self.block_rows}")
    if self.use_faiss:
      _faiss()  # Missing: one line now, before the data is read and the model loads.
    if self.range_max is not None:
      self._check_window(self.range_max)

  def _check_window(self, range_max: int) -> None:
    if self.range_min >= range_max:
      raise MiningError(
        f"range_min must be smaller than range_max, got range_min={self.range_min} and range_max={range_max}"
      )
    if self.num_negatives > range_max - self.range_min:
      raise MiningError(
        f"cannot mine {self.num_negatives} negatives per query: only {range_max - self.range_min} "
        f"candidates remain after skipping the first range_min={self.range_min} of "
        f"range_max={range_max}; decrease num_negatives or range_min, or increase range_max"
      )

  def resolved(self, max_positives: int) -> Options:
    """These options with ``range_max`` set (sentence-transformers' rule when None), checked.

    ``max_positives``: the most rows any one anchor has (sentence-transformers counts rows, duplicates included).
    The default ``range_max`` is ``range_min + num_negatives + max_positives``, with ``10 * num_negatives`` in place
    of ``num_negatives`` when a margin or ``max_score`` may skip candidates.
    """
    self.check()
    range_max = self.range_max
    if range_max is None:
      filtered = self.absolute_margin is not None or self.relative_margin is not None or self.max_score is not None
      range_max = self.range_min + self.num_negatives * (10 if filtered else 1) + max_positives
      self._check_window(range_max)
    return dataclasses.replace(self, range_max=range_max)


# --------------------------------------------------------------------------
# The selection, on embeddings.


@dataclasses.dataclass(frozen=True)
class Selection:
  """The negatives chosen for each query, best first.

  negatives: int64 ``[queries, num_negatives]``, corpus rows; -1 where a query has fewer than ``num_negatives``.
  scores: float32 ``[queries, num_negatives]``, their cosine similarities to the query; -inf where none.
  positive_scores: float32, one per (query, positive), query by query, each query's positives in their order.
  skipped: per filter that removed candidates, ``(count, ratio)`` as sentence-transformers reports them.
  options: the options used (``range_max`` resolved).
  """

  negatives: np.ndarray
  scores: np.ndarray
  positive_scores: np.ndarray
  skipped: dict
  options: Options


def _unit_rows(x) -> np.ndarray:
  """float32 rows of unit length, as torch's ``F.normalize`` (eps 1e-12) that sentence-transformers' cosine uses."""
  x = np.asarray(x, np.float32)
  return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.float32(1e-12))


@functools.cache
def _search():
  """The jitted ``(queries, corpus, k) -> top k of queries @ corpus.T`` (float32 products, on any device)."""
  import jax
  import jax.numpy as jnp

  def search(queries, corpus, k):
    return jax.lax.top_k(jnp.matmul(queries, corpus.T, precision="highest"), k)

  return jax.jit(search, static_argnames="k")


def _faiss():
  """The ``faiss`` module, or ``MiningError`` saying how to install it."""
  try:
    import faiss
  except ImportError:
    raise MiningError('use_faiss needs FAISS: pip install "jaxcse[faiss]" (or faiss-cpu)') from None
  return faiss


def top_k(
  queries: np.ndarray,
  corpus: np.ndarray,
  k: int,
  *,
  block_rows: int | None = None,
  progress: Progress | None = None,
  use_faiss: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
  """Exact top ``k`` of ``queries @ corpus.T`` per query: ``(scores float32, indices int64)``, each ``[n, k]``.

  Best first; equal scores keep the lower corpus index first (``jax.lax.top_k``; FAISS's order among equal scores
  is its own). Queries go ``block_rows`` at a time against the whole corpus (default: as many as
  ``SCORE_BLOCK_BYTES`` of scores), all blocks of one shape. ``use_faiss``: FAISS's ``IndexFlatIP`` (exact, on the
  CPU) does the search instead.
  """
  n, size = len(queries), len(corpus)
  if not 0 < k <= size:
    raise ValueError(f"k must be in 1..{size}, not {k}")
  rows = min(n, block_rows or max(1, SCORE_BLOCK_BYTES // (4 * size)))
  if use_faiss:
    return _faiss_top_k(queries, corpus, k, rows, progress)
  import jax

  search = functools.partial(_search(), k=k)
  corpus_on_device = jax.device_put(np.asarray(corpus, np.float32))
  scores, indices = np.empty((n, k), np.float32), np.empty((n, k), np.int64)
  block = np.zeros((rows, queries.shape[1]), np.float32)  # The last block padded: one compiled shape.
  for start in range(0, n, rows):
    part = queries[start : start + rows]
    block[: len(part)] = part
    block[len(part) :] = 0
    s, i = search(block, corpus_on_device)
    scores[start : start + len(part)] = np.asarray(s)[: len(part)]
    indices[start : start + len(part)] = np.asarray(i)[: len(part)]
    if progress is not None:
      progress.update(len(part))
  return scores, indices


def _faiss_top_k(queries: np.ndarray, corpus: np.ndarray, k: int, rows: int, progress: Progress | None):
  index = _faiss().IndexFlatIP(corpus.shape[1])
  index.add(np.ascontiguousarray(corpus, np.float32))
  scores, indices = np.empty((len(queries), k), np.float32), np.empty((len(queries), k), np.int64)
  for start in range(0, len(queries), rows):
    s, i = index.search(np.ascontiguousarray(queries[start : start + rows], np.float32), k)
    scores[start : start + len(s)], indices[start : start + len(s)] = s, i
    if progress is not None:
      progress.update(len(s))
  return scores, indices


def select_negatives(
  query_embeddings,
  corpus_embeddings,
  positive_indices: Sequence[Sequence[int]],
  options: Options = Options(),
  *,
  max_positives: int | None = None,
  progress: Progress | None = None,
) -> Selection:
  """Chooses hard negatives for each query among the corpus, as sentence-transformers 6.2 does (module docstring).

  Args:
    query_embeddings: ``[queries, dim]``, one row per distinct query.
    corpus_embeddings: ``[corpus, dim]``, one row per distinct corpus text.
    positive_indices: per query, the corpus rows of its positives (distinct, in order).
    options: the mining options; their ``output_*`` fields do not matter here.
    max_positives: the most dataset rows of one anchor, for the search's width and the default ``range_max``
      (default: the most positives of a query).
    progress: counts the queries searched.

  Raises:
    MiningError: options that cannot work together (see ``Options.resolved``).
  """
  queries, corpus = _unit_rows(query_embeddings), _unit_rows(corpus_embeddings)
  n_queries = len(queries)
  if len(positive_indices) != n_queries:
    raise ValueError(f"{len(positive_indices)} lists of positives for {n_queries} queries")
  n_positives = np.array([len(p) for p in positive_indices], np.int64)
  if n_queries == 0 or (n_positives == 0).any():
    raise ValueError("every query needs a positive")
  if max_positives is None:
    max_positives = int(n_positives.max())
  options = options.resolved(max_positives)
  width = options.range_max + max_positives  # The positives may take up to max_positives of the candidates.
  scores, indices = top_k(
    queries,
    corpus,
    min(width, len(corpus)),
    block_rows=options.block_rows,
    progress=progress,
    use_faiss=options.use_faiss,
  )
  if scores.shape[1] < width:  # A corpus smaller than the window: the missing candidates are none (-1, -inf).
    missing = width - scores.shape[1]
    scores = np.concatenate([scores, np.full((n_queries, missing), -np.inf, np.float32)], axis=1)
    indices = np.concatenate([indices, np.full((n_queries, missing), -1, np.int64)], axis=1)

  flat_positives = np.concatenate([np.asarray(p, np.int64) for p in positive_indices])
  owner = np.repeat(np.arange(n_queries), n_positives)
  positive_scores = (queries[owner] * corpus[flat_positives]).sum(axis=1, dtype=np.float32)

  scores[indices == -1] = -np.inf
  starts = np.cumsum(n_positives) - n_positives  # Each query's first positive in the flat list.
  padded = np.full((n_queries, int(n_positives.max())), -2, np.int64)  # -2: no corpus row, never a candidate.
  padded[owner, np.arange(len(owner)) - starts[owner]] = flat_positives
  is_positive = np.zeros(indices.shape, bool)
  for column in padded.T:  # One positive column at a time: memory stays at the candidates' size.
    is_positive |= indices == column[:, None]
  scores[is_positive] = -np.inf

  skipped, candidates = {}, scores.size
  if options.absolute_margin is not None or options.relative_margin is not None:
    lowest_positive = np.minimum.reduceat(positive_scores, starts)[:, None]
    if options.absolute_margin is not None:
      removed = scores + np.float32(options.absolute_margin) > lowest_positive
      candidates = _remove(scores, removed, "absolute_margin", skipped, candidates)
    if options.relative_margin is not None:
      # |positive| * margin below the positive, not (1 - margin) times it, which rises for negative positives.
      threshold = lowest_positive - np.abs(lowest_positive) * np.float32(options.relative_margin)
      candidates = _remove(scores, scores > threshold, "relative_margin", skipped, candidates)
  if options.max_score is not None:
    _remove(scores, scores > np.float32(options.max_score), "max_score", skipped, candidates)
  if options.min_score is not None:
    _remove(scores, scores < np.float32(options.min_score), "min_score", skipped, candidates)

  # The candidates left, best first (a stable order: the search's order among equal scores), then range_min's cut.
  order = np.argsort(-scores, axis=1, kind="stable")[:, options.range_min : options.range_max]
  scores = np.take_along_axis(scores, order, axis=1)
  indices = np.take_along_axis(indices, order, axis=1)
  if options.sampling_strategy == "top":
    chosen = np.broadcast_to(np.arange(options.num_negatives), (n_queries, options.num_negatives))
  else:
    rng = random.Random(options.seed)
    available = np.maximum(scores.shape[1] - np.isinf(scores).sum(axis=1), options.num_negatives)
    # Sorted positions of a row sorted best first: the draw re-sorted by score, as sentence-transformers does.
    chosen = np.array([sorted(rng.sample(range(int(a)), k=options.num_negatives)) for a in available], np.int64)
  scores = np.take_along_axis(scores, chosen, axis=1)
  indices = np.where(np.isinf(scores), -1, np.take_along_axis(indices, chosen, axis=1))
  return Selection(indices, scores, positive_scores, skipped, options)


def _remove(scores: np.ndarray, removed: np.ndarray, name: str, skipped: dict, candidates: int) -> int:
  """Sets the removed candidates' scores to -inf and counts them as sentence-transformers does; returns the
  candidates left by its count (a margin's removals are taken off; max_score's and min_score's are not)."""
  scores[removed] = -np.inf
  count = int(removed.sum())
  if count:
    skipped[name] = (count, count / candidates)
  return candidates - count if name.endswith("margin") else candidates


# --------------------------------------------------------------------------
# Texts: grouping the pairs, the output rows.


@dataclasses.dataclass(frozen=True)
class Grouped:
  """The pairs as sentence-transformers groups them: distinct queries, the corpus, each query's positives."""

  queries: list[str]  # Distinct anchors, in order of first occurrence.
  corpus: list[str]  # The given corpus then the positives, distinct, in order of first occurrence.
  positive_indices: list[list[int]]  # Per query, its distinct positives' corpus rows, in order.
  max_positives: int  # The most rows of one anchor (duplicate rows included).
  rows: int  # The dataset's rows.


def group_pairs(anchors: Sequence[str], positives: Sequence[str], corpus: Sequence[str] | None = None) -> Grouped:
  """Distinct queries, the corpus and each query's positives, from the dataset's anchor and positive columns."""
  texts = list(dict.fromkeys(list(corpus or ()) + list(positives)))
  row_of = {text: i for i, text in enumerate(texts)}
  queries = list(dict.fromkeys(anchors))
  query_of = {text: i for i, text in enumerate(queries)}
  positive_indices = [{} for _ in queries]  # Ordered sets (dict keys).
  for anchor, positive in zip(anchors, positives):
    positive_indices[query_of[anchor]][row_of[positive]] = None
  return Grouped(
    queries, texts, [list(p) for p in positive_indices], max(collections.Counter(anchors).values()), len(anchors)
  )


def output_columns(grouped: Grouped, selection: Selection, anchor_column: str, positive_column: str) -> dict:
  """The mined dataset's columns (name -> list), in sentence-transformers' ``output_format`` layout and row order.

  triplet: a row per (query, positive, negative found); n-tuple: a row per (query, positive) with all its
  ``num_negatives`` found; labeled-pair: per query, its positives (label 1) then the negatives found (label 0);
  labeled-list: per (query, positive) with a negative found, the positive and the negatives as one list. With
  ``output_scores`` the labels are the similarities (a ``scores`` list column for triplet and n-tuple).
  """
  options, corpus = selection.options, grouped.corpus
  found = np.isfinite(selection.scores)
  pairs = [(q, p) for q, positives in enumerate(grouped.positive_indices) for p in positives]
  positive_scores = selection.positive_scores.tolist()
  negatives, negative_scores = selection.negatives.tolist(), selection.scores.tolist()
  if options.output_format == "triplet":
    rows = [(q, p, s, t) for s, (q, p) in enumerate(pairs) for t in range(options.num_negatives) if found[q, t]]
    columns = {
      anchor_column: [grouped.queries[q] for q, _, _, _ in rows],
      positive_column: [corpus[p] for _, p, _, _ in rows],
      "negative": [corpus[negatives[q][t]] for q, _, _, t in rows],
    }
    if options.output_scores:
      columns["scores"] = [[positive_scores[s], negative_scores[q][t]] for q, _, s, t in rows]
  elif options.output_format == "n-tuple":
    kept = [(s, q, p) for s, (q, p) in enumerate(pairs) if found[q].all()]
    columns = {
      anchor_column: [grouped.queries[q] for _, q, _ in kept],
      positive_column: [corpus[p] for _, _, p in kept],
    }
    for t in range(options.num_negatives):
      columns[f"negative_{t + 1}"] = [corpus[negatives[q][t]] for _, q, _ in kept]
    if options.output_scores:
      columns["scores"] = [[positive_scores[s]] + negative_scores[q] for s, q, _ in kept]
  elif options.output_format == "labeled-pair":
    texts, labels, s = [], [], 0
    for q, positives in enumerate(grouped.positive_indices):
      for p in positives:
        texts.append((q, corpus[p]))
        labels.append(positive_scores[s] if options.output_scores else 1)
        s += 1
      for t in np.flatnonzero(found[q]):
        texts.append((q, corpus[negatives[q][t]]))
        labels.append(negative_scores[q][t] if options.output_scores else 0)
    columns = {
      anchor_column: [grouped.queries[q] for q, _ in texts],
      positive_column: [t for _, t in texts],
      "score" if options.output_scores else "label": labels,
    }
  else:  # labeled-list
    kept = [(s, q, p) for s, (q, p) in enumerate(pairs) if found[q].any()]
    columns = {
      anchor_column: [grouped.queries[q] for _, q, _ in kept],
      positive_column: [[corpus[p]] + [corpus[negatives[q][t]] for t in np.flatnonzero(found[q])] for _, q, p in kept],
    }
    if options.output_scores:
      columns["scores"] = [
        [positive_scores[s]] + [negative_scores[q][t] for t in np.flatnonzero(found[q])] for s, q, _ in kept
      ]
    else:
      columns["labels"] = [[1] + [0] * int(found[q].sum()) for _, q, _ in kept]
  return columns


def summary(grouped: Grouped, selection: Selection, output_rows: int) -> list[str]:
  """What was mined, in lines: the rows, the candidates each filter skipped, the samples short of negatives."""
  options = selection.options
  found = int(np.isfinite(selection.scores).sum())
  lines = [
    (
      f"{len(grouped.queries)} distinct queries of {grouped.rows} rows, a corpus of {len(grouped.corpus)} "
      f"texts (range_max {options.range_max}): {found} negatives, {output_rows} {options.output_format} rows"
    )
  ]
  for name in FILTERS:
    if name in selection.skipped:
      count, ratio = selection.skipped[name]
      lines.append(f"skipped {count:,} potential negatives ({ratio:.2%}) due to the {name} of {getattr(options, name)}")
  n_total = sum(len(p) for p in grouped.positive_indices)
  possible = {
    "triplet": n_total * options.num_negatives,
    "n-tuple": n_total,
    "labeled-list": n_total,
    "labeled-pair": len(grouped.queries) * options.num_negatives + grouped.rows,
  }[options.output_format]
  missing = possible - output_rows
  if missing > 0:
    lines.append(
      f"could not find enough negatives for {missing} samples ({missing / possible:.2%}); a larger "
      "range_max, or a smaller range_min, margin or max_score, finds more"
    )
  return lines


# --------------------------------------------------------------------------
# From a dataset and an encoder.


def _embed(
  encoder, texts: list[str], prompt: str | None, what: str, progress: bool, batch_size: int | None
) -> np.ndarray:
  """Unit-length float32 embeddings of ``prompt + text`` for each text."""
  from jaxcse.inference import embedder as embedder_lib
  from jaxcse.inference.encoder import Encoder

  if prompt:
    texts = [prompt + text for text in texts]
  if isinstance(encoder, Encoder):
    with Progress(len(texts), unit="sent", desc=f"embedding the {what}", enabled=progress) as bar:
      vectors = embedder_lib.normalize_rows(encoder.embed(texts, batch_size=batch_size, progress=bar))
  else:  # Any encoder with sentence-transformers' call shape.
    vectors = np.asarray(encoder.encode(texts, normalize_embeddings=True), np.float32)
  if vectors.ndim != 2 or vectors.shape[0] != len(texts):
    raise ValueError(f"the encoder gave embeddings of shape {vectors.shape} for {len(texts)} texts")
  if not np.isfinite(vectors).all():
    raise MiningError(f"the model gives non-finite embeddings for the {what}; nothing was mined")
  return vectors


def read_corpus(corpus, column: str | None = None, *, root: str | None = None) -> list[str]:
  """The extra corpus: a list of texts, a ``.txt`` file (a text a line, empty lines skipped), or any source the
  pair reader reads (``data.load_pairs``), its ``column`` (default: the first text column)."""
  from jaxcse import data as data_lib

  if corpus is None or isinstance(corpus, (list, tuple)):
    if column:
      raise MiningError("corpus_column names a column of a corpus file, but the corpus is not a file")
    return list(corpus or ())
  if isinstance(corpus, str) and corpus.endswith(".txt"):
    if column:
      raise MiningError(f"{corpus}: a .txt corpus is one text a line, it has no columns (corpus_column {column!r})")
    return data_lib.read_text_lines(data_lib.resolve(corpus, root)).columns["sent0"]
  pairs = data_lib.load_pairs(corpus, root=root)
  if column and column not in pairs.text_columns:
    raise MiningError(f"{pairs.path}: no text column {column!r} (its text columns: {', '.join(pairs.text_columns)})")
  return pairs.dataset[0 : len(pairs)].column(column or pairs.text_columns[0]).to_pylist()


def _columns(pairs, anchor_column: str | None, positive_column: str | None) -> tuple[str, str]:
  names = pairs.text_columns
  if len(names) < 2:
    raise MiningError(
      f"{pairs.path}: mining needs an anchor and a positive column; its only text column is {names[0]!r}"
    )
  for given, what in ((anchor_column, "anchor_column"), (positive_column, "positive_column")):
    if given and given not in names:
      raise MiningError(f"{pairs.path}: no text column {given!r} ({what}); its text columns: {', '.join(names)}")
  anchor = anchor_column or names[0]
  positive = positive_column or next(n for n in names if n != anchor)
  if anchor == positive:
    raise MiningError(f"{pairs.path}: anchor_column and positive_column are both {anchor!r}")
  return anchor, positive


def mine_hard_negatives(
  dataset,
  encoder,
  *,
  anchor_column: str | None = None,
  positive_column: str | None = None,
  corpus=None,
  corpus_column: str | None = None,
  query_prompt: str | None = None,
  corpus_prompt: str | None = None,
  range_min: int = 0,
  range_max: int | None = None,
  max_score: float | None = None,
  min_score: float | None = None,
  absolute_margin: float | None = None,
  relative_margin: float | None = None,
  num_negatives: int = 3,
  sampling_strategy: str = "top",
  output_format: str = "triplet",
  output_scores: bool = False,
  seed: int = 0,
  batch_size: int | None = None,
  block_rows: int | None = None,
  use_faiss: bool = False,
  root: str | None = None,
  verbose: bool = True,
  progress: bool = True,
):
  """Hard negatives for a dataset of (anchor, positive) pairs: a ``datasets.Dataset`` in ``output_format``.

  The options are sentence-transformers 6.2's (``Options``, the module's docstring); given the same embeddings,
  the rows are its rows, in its order.

  Args:
    dataset: a ``datasets.Dataset``, or a source the pair reader reads (``.jsonl``/``.csv``/``.parquet``, a
      ``save_to_disk`` folder, ``hf:NAME[:CONFIG[:SPLIT]]``; ``data.load_pairs``), every row checked.
    encoder: a jaxcse ``Encoder``, a model ``Encoder.load`` loads (a workdir, a Hugging Face folder or hub id;
      loaded after the data and options are checked), or any object with ``encode(texts,
      normalize_embeddings=True)``.
    anchor_column, positive_column: default the first two text columns.
    corpus: more candidate texts besides the positives: a list, a ``.txt`` file (a text a line) or a pair-reader
      source (its ``corpus_column``, default its first text column).
    query_prompt, corpus_prompt: prepended to each anchor / corpus text before embedding.
    seed: the draw of ``sampling_strategy="random"``.
    batch_size: sentences per forward pass (default: the encoder's).
    block_rows: queries searched at a time (default: as many as ``SCORE_BLOCK_BYTES`` of scores hold).
    use_faiss: search with FAISS's exact ``IndexFlatIP`` (``pip install "jaxcse[faiss]"``), as s-t's ``use_faiss``.
    root: the data root that relative paths resolve under (default ``$JAXCSE_DATA_DIR``).
    verbose: print what was mined (``summary``).
    progress: progress bars while embedding and searching.

  Raises:
    MiningError, data.DataError: bad options or data, before the model is loaded.
  """
  options = Options(
    range_min=range_min,
    range_max=range_max,
    max_score=max_score,
    min_score=min_score,
    absolute_margin=absolute_margin,
    relative_margin=relative_margin,
    num_negatives=num_negatives,
    sampling_strategy=sampling_strategy,
    output_format=output_format,
    output_scores=output_scores,
    seed=seed,
    block_rows=block_rows,
    use_faiss=use_faiss,
  )
  job = prepare(
    dataset,
    options,
    anchor_column=anchor_column,
    positive_column=positive_column,
    corpus=corpus,
    corpus_column=corpus_column,
    root=root,
  )
  if isinstance(encoder, str):
    from jaxcse.inference.encoder import Encoder

    encoder = Encoder.load(encoder)
  return mine(
    job,
    encoder,
    query_prompt=query_prompt,
    corpus_prompt=corpus_prompt,
    batch_size=batch_size,
    verbose=verbose,
    progress=progress,
  )


@dataclasses.dataclass(frozen=True)
class Job:
  """A mining job, its data read and its options checked: all that is left is the model."""

  grouped: Grouped
  options: Options  # range_max resolved.
  anchor_column: str
  positive_column: str


def prepare(
  dataset,
  options: Options,
  *,
  anchor_column: str | None = None,
  positive_column: str | None = None,
  corpus=None,
  corpus_column: str | None = None,
  root: str | None = None,
) -> Job:
  """Reads and checks the data and the options (``mine_hard_negatives``' arguments), loading no model."""
  from jaxcse import data as data_lib

  options.check()
  pairs = data_lib.load_pairs(dataset, root=root)
  anchor, positive = _columns(pairs, anchor_column, positive_column)
  table = pairs.dataset[0 : len(pairs)]
  grouped = group_pairs(
    table.column(anchor).to_pylist(), table.column(positive).to_pylist(), read_corpus(corpus, corpus_column, root=root)
  )
  return Job(grouped, options.resolved(grouped.max_positives), anchor, positive)


def mine(
  job: Job,
  encoder,
  *,
  query_prompt: str | None = None,
  corpus_prompt: str | None = None,
  batch_size: int | None = None,
  verbose: bool = True,
  progress: bool = True,
):
  """Embeds the job's queries and corpus with ``encoder`` and mines: the ``datasets.Dataset`` of
  ``mine_hard_negatives``."""
  import datasets

  grouped = job.grouped
  corpus_embeddings = _embed(encoder, grouped.corpus, corpus_prompt, "corpus", progress, batch_size)
  query_embeddings = _embed(encoder, grouped.queries, query_prompt, "queries", progress, batch_size)
  with Progress(len(grouped.queries), unit="query", desc="searching", enabled=progress) as bar:
    selection = select_negatives(
      query_embeddings,
      corpus_embeddings,
      grouped.positive_indices,
      job.options,
      max_positives=grouped.max_positives,
      progress=bar,
    )
  mined = datasets.Dataset.from_dict(output_columns(grouped, selection, job.anchor_column, job.positive_column))
  if verbose:
    print("\n".join(summary(grouped, selection, len(mined))))
  return mined


def write_dataset(dataset, path: str) -> None:
  """Writes ``dataset`` as ``.jsonl``, ``.csv`` or ``.parquet`` (by ``path``'s extension), whole or not at all."""
  kind = OUTPUT_SUFFIXES.get(os.path.splitext(path)[1].lower())
  if kind is None:
    raise MiningError(f"{path}: the output must end in {', '.join(OUTPUT_SUFFIXES)}")
  if kind == "json":
    files.write_atomically(path, lambda tmp: dataset.to_json(tmp, lines=True, force_ascii=False))
  elif kind == "csv":
    files.write_atomically(path, lambda tmp: dataset.to_csv(tmp, index=False))
  else:
    files.write_atomically(path, dataset.to_parquet)


def has_list_columns(output_format: str, output_scores: bool) -> bool:
  """Whether that format's dataset has a column of lists (which a ``.csv`` cannot hold)."""
  return output_format == "labeled-list" or (output_scores and output_format in ("triplet", "n-tuple"))


# --------------------------------------------------------------------------
# The command.


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  from jaxcse.core import platforms
  from jaxcse.inference import embedder as embedder_lib
  from jaxcse.inference.encoder import Encoder
  from jaxcse.models import poolers

  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.mining"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument(
    "--input",
    required=True,
    help="the (anchor, positive) pairs: .jsonl, .csv (with a header), .parquet, a save_to_disk "
    "folder or hf:NAME[:CONFIG[:SPLIT]]",
  )
  parser.add_argument("--output", required=True, help="the mined dataset: .jsonl, .csv or .parquet")
  parser.add_argument(
    "--corpus",
    default=None,
    help="more candidate negatives besides the positives: a .txt file (a text a line) or any "
    "source --input takes (its --corpus_column)",
  )
  parser.add_argument("--corpus_column", default=None, help="text column of --corpus (default: its first)")
  parser.add_argument("--anchor_column", default=None, help="default: the first text column")
  parser.add_argument("--positive_column", default=None, help="default: the second text column")
  parser.add_argument("--num_negatives", type=int, default=3, help="negatives per query (default 3)")
  parser.add_argument("--range_min", type=int, default=0, help="skip this many best candidates (default 0)")
  parser.add_argument(
    "--range_max",
    type=int,
    default=None,
    help="candidates considered per query (default: range_min + num_negatives + the most rows of "
    "an anchor, with 10 * num_negatives if a margin or --max_score is set)",
  )
  parser.add_argument("--max_score", type=float, default=None, help="drop candidates scoring above this")
  parser.add_argument("--min_score", type=float, default=None, help="drop candidates scoring below this")
  parser.add_argument(
    "--absolute_margin", type=float, default=None, help="drop candidates scoring above (lowest positive score - margin)"
  )
  parser.add_argument(
    "--relative_margin",
    type=float,
    default=None,
    help="drop candidates scoring above (lowest positive score - |its score| * margin)",
  )
  parser.add_argument(
    "--sampling_strategy",
    choices=SAMPLING_STRATEGIES,
    default="top",
    help="top: the best candidates left; random: drawn among them (--seed)",
  )
  parser.add_argument("--seed", type=int, default=0, help="seed of --sampling_strategy random (default 0)")
  parser.add_argument("--output_format", choices=OUTPUT_FORMATS, default="triplet")
  parser.add_argument("--output_scores", action="store_true", help="add the similarities (see docs/own_data.md)")
  parser.add_argument("--query_prompt", default=None, help="prepended to each anchor before embedding")
  parser.add_argument("--corpus_prompt", default=None, help="prepended to each corpus text before embedding")
  parser.add_argument("--pooler", choices=poolers.names(), default=None, help="default: the model's test pooler")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per forward pass (at least 1)")
  parser.add_argument("--max_seq_len", type=int, default=None, help="cut texts to this many tokens (at least 3)")
  parser.add_argument(
    "--block_rows",
    type=int,
    default=None,
    help="queries searched at a time (default: as many as 256 MiB of scores hold)",
  )
  parser.add_argument(
    "--use_faiss",
    action="store_true",
    help="search with FAISS's exact inner-product index (pip install \"jaxcse[faiss]\"), as sentence-transformers' "
    "use_faiss; default: jaxcse's exact blocked top-k",
  )
  parser.add_argument("--data_dir", default=None, help="data root for relative paths (default $JAXCSE_DATA_DIR)")
  parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()

  # Everything that can be checked before the data is read and the model loads.
  if os.path.splitext(args.output)[1].lower() not in OUTPUT_SUFFIXES:
    raise MiningError(f"{args.output}: --output must end in {', '.join(OUTPUT_SUFFIXES)}")
  if args.output.lower().endswith(".csv") and has_list_columns(args.output_format, args.output_scores):
    raise MiningError(
      f"{args.output}: --output_format {args.output_format}"
      f"{' with --output_scores' if args.output_scores else ''} has a column of lists, which a .csv "
      "cannot hold; write .jsonl or .parquet"
    )
  errors.check_output(args.output, folder=False)
  if os.path.exists(args.output) and not args.overwrite:
    raise MiningError(f"{args.output} exists; pass --overwrite to replace it, or choose another --output")
  embedder_lib.check_settings(args.batch_size, args.max_seq_len)

  options = Options(
    range_min=args.range_min,
    range_max=args.range_max,
    max_score=args.max_score,
    min_score=args.min_score,
    absolute_margin=args.absolute_margin,
    relative_margin=args.relative_margin,
    num_negatives=args.num_negatives,
    sampling_strategy=args.sampling_strategy,
    output_format=args.output_format,
    output_scores=args.output_scores,
    seed=args.seed,
    block_rows=args.block_rows,
    use_faiss=args.use_faiss,
  )
  job = prepare(
    args.input,
    options,
    anchor_column=args.anchor_column,
    positive_column=args.positive_column,
    corpus=args.corpus,
    corpus_column=args.corpus_column,
    root=args.data_dir,
  )
  encoder = Encoder.load(
    args.model,
    args.pooler,
    checkpoint=args.checkpoint,
    revision=args.revision,
    batch_size=args.batch_size,
    max_seq_len=args.max_seq_len,
  )
  mined = mine(job, encoder, query_prompt=args.query_prompt, corpus_prompt=args.corpus_prompt)
  os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
  write_dataset(mined, args.output)
  print(f"wrote {args.output}: {len(mined)} rows, columns {', '.join(mined.column_names)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
