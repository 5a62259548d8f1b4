"""Hard negatives chosen from embeddings, by sentence-transformers 6.2's rules (``jaxcse.mining`` is the command and
the dataset-level API): the options, the exact top-k search (jax, or FAISS), the selection (positives out, margins,
score bounds, ``range_min``, top or random), and the output rows in s-t's four formats.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import random
from collections.abc import Sequence

import numpy as np

from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress

OUTPUT_FORMATS = ("triplet", "n-tuple", "labeled-pair", "labeled-list")
SAMPLING_STRATEGIES = ("top", "random")
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
