"""Your own dev sets: scored pairs and a retrieval set, read from JSONL/CSV/Parquet, scored as sentence-transformers 6.

* **Scored pairs**: a file with columns ``sentence1``, ``sentence2`` and ``score`` (or ``label``): Pearson and
  Spearman of the pairs' cosines against the scores, as s-t's ``EmbeddingSimilarityEvaluator`` (cosine).
* **Retrieval**: a folder holding ``queries``, ``corpus`` and ``qrels`` files (each ``.jsonl``, ``.csv`` or
  ``.parquet``): ``queries`` and ``corpus`` with columns ``id`` and ``text``, ``qrels`` with ``query_id`` and
  ``corpus_id`` (one relevant document a row; a ``score`` column, if any, keeps the rows with score > 0), as s-t's
  ``InformationRetrievalEvaluator`` takes its ``queries``, ``corpus`` and ``relevant_docs``. Each query is ranked
  against the whole corpus by cosine (ties by ascending corpus id), for nDCG@10, MRR@10, MAP@100 and accuracy,
  precision and recall at 1, 3, 5 and 10, s-t's defaults.

``tests/test_dev_sets.py`` checks both against the s-t 6.2 evaluators on the same embeddings.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence

import numpy as np

from jaxcse import data as data_lib
from jaxcse.data import pairs as pairs_lib
from jaxcse.evaluation.sts_data import PairSet
from jaxcse.evaluation.sts_metrics import OWN_PAIR_METRICS, OWN_RETRIEVAL_METRICS, correlations, cosine_scores
from jaxcse.inference import embedder as embedder_lib

Embed = Callable[[Sequence[str]], np.ndarray]  # Sentences -> [n, hidden] embeddings.

TABLE_SUFFIXES = (".jsonl", ".csv", ".parquet")
PAIR_COLUMNS = ("sentence1", "sentence2")
SCORE_COLUMNS = ("score", "label")
# s-t's InformationRetrievalEvaluator defaults.
ACCURACY_AT = (1, 3, 5, 10)
PRECISION_RECALL_AT = (1, 3, 5, 10)
MRR_AT, NDCG_AT, MAP_AT = 10, 10, 100
# The names this module reports, prefixed pairs_ and retrieval_ (pairs_spearman, retrieval_ndcg@10, ...): model
# selection's names (sts_metrics.SELECTION_METRICS).
PAIR_METRICS = OWN_PAIR_METRICS
RETRIEVAL_METRICS = OWN_RETRIEVAL_METRICS


def read_table(path: str) -> dict[str, list]:
  """A ``.jsonl``, ``.csv`` or ``.parquet`` file's columns as lists (pandas reads it; ids and texts as written).

  Raises ``DataError`` naming the file for a missing or unreadable file or another suffix.
  """
  import pandas as pd

  suffix = os.path.splitext(path)[1].lower()
  if suffix not in TABLE_SUFFIXES:
    raise data_lib.DataError(f"{path}: a dev-set file must be {', '.join(TABLE_SUFFIXES)}, not {suffix or 'no suffix'}")
  if not os.path.isfile(path):
    raise data_lib.DataError(f"{path}: no such file")
  try:
    if suffix == ".jsonl":
      frame = pd.read_json(path, lines=True, dtype=False)
    elif suffix == ".csv":
      frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    else:
      frame = pd.read_parquet(path)
  except Exception as e:  # pandas' parsers raise many types; each is the file's problem.
    raise data_lib.DataError(
      f"{path}: cannot be read as {suffix[1:]} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    ) from None
  return {str(name): frame[name].tolist() for name in frame.columns}


def _column(table: dict[str, list], path: str, names: Sequence[str]) -> tuple[str, list]:
  for name in names:
    if name in table:
      return name, table[name]
  raise data_lib.DataError(f"{path}: no column {' or '.join(names)} (its columns: {', '.join(table) or 'none'})")


def _texts(values: list, path: str, column: str) -> list[str]:
  """The column's values, each a text with a visible character (``data.pairs.visible``, as the training data)."""
  for row, value in enumerate(values, start=1):
    if not isinstance(value, str) or not value.strip():
      raise data_lib.DataError(
        f"{path}: row {row}, column {column}: {'empty' if value == '' else repr(value)} is not a text"
      )
    if not pairs_lib.visible(value):  # Only control or format characters: the tokenizer drops them all.
      raise data_lib.DataError(f"{path}: row {row}, column {column}: {value!r} is not a text (no visible character)")
  return list(values)


def _ids(values: list, path: str, column: str) -> list[str]:
  out = []
  for row, value in enumerate(values, start=1):
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value) == "":
      raise data_lib.DataError(f"{path}: row {row}, column {column}: an empty id")
    out.append(str(value))  # Ids compare as strings, however the file typed them.
  return out


def load_pairs(path: str) -> PairSet:
  """A scored-pairs file: columns ``sentence1``, ``sentence2``, ``score`` (or ``label``), every score a number."""
  table = read_table(path)
  first, second = (_texts(_column(table, path, (name,))[1], path, name) for name in PAIR_COLUMNS)
  name, raw = _column(table, path, SCORE_COLUMNS)
  scores = []
  for row, value in enumerate(raw, start=1):
    try:
      score = float(value)
    except (TypeError, ValueError):
      score = math.nan
    if not math.isfinite(score):
      raise data_lib.DataError(f"{path}: row {row}, column {name}: {value!r} is not a number")
    scores.append(score)
  if len(scores) < 2:
    raise data_lib.DataError(f"{path}: {len(scores)} pair(s); a correlation needs at least 2")
  if len(set(scores)) == 1:  # Spearman and Pearson would be NaN at every evaluation: no best is ever saved.
    raise data_lib.DataError(
      f"{path}: every score is {scores[0]}: a correlation needs two different scores (column {name})"
    )
  return PairSet(first, second, np.asarray(scores, np.float64))


@dataclasses.dataclass(frozen=True)
class RetrievalSet:
  """Queries, a corpus and the relevant documents of each query, keyed by id (s-t's three dicts)."""

  queries: dict[str, str]
  corpus: dict[str, str]
  relevant: dict[str, set[str]]  # Query id -> relevant corpus ids; every query here has one at least.


def _table_in(folder: str, name: str) -> str:
  found = [os.path.join(folder, name + s) for s in TABLE_SUFFIXES if os.path.isfile(os.path.join(folder, name + s))]
  if len(found) != 1:
    raise data_lib.DataError(
      f"{folder}: {'no' if not found else 'more than one'} {name} file (one of "
      f"{', '.join(name + s for s in TABLE_SUFFIXES)})"
    )
  return found[0]


def _id_texts(path: str) -> dict[str, str]:
  table = read_table(path)
  ids = _ids(_column(table, path, ("id",))[1], path, "id")
  texts = _texts(_column(table, path, ("text",))[1], path, "text")
  if len(set(ids)) != len(ids):
    duplicate = next(i for i in ids if ids.count(i) > 1)
    raise data_lib.DataError(f"{path}: id {duplicate!r} appears twice")
  return dict(zip(ids, texts))


def load_retrieval(folder: str) -> RetrievalSet:
  """A retrieval folder: ``queries.*`` and ``corpus.*`` (``id``, ``text``) and ``qrels.*`` (``query_id``,
  ``corpus_id``[, ``score``: rows with score <= 0 are not relevant]).

  Queries without a relevant document are left out, as s-t's evaluator leaves them out; a qrels row naming an
  unknown query or document is an error.
  """
  if not os.path.isdir(folder):
    raise data_lib.DataError(
      f"{folder}: not a folder (a retrieval dev set is a folder with queries, corpus and qrels files)"
    )
  queries, corpus = _id_texts(_table_in(folder, "queries")), _id_texts(_table_in(folder, "corpus"))
  path = _table_in(folder, "qrels")
  table = read_table(path)
  query_ids = _ids(_column(table, path, ("query_id",))[1], path, "query_id")
  corpus_ids = _ids(_column(table, path, ("corpus_id",))[1], path, "corpus_id")
  scores = table.get("score", [1] * len(query_ids))
  relevant: dict[str, set[str]] = {}
  for row, (q, c, score) in enumerate(zip(query_ids, corpus_ids, scores), start=1):
    if q not in queries:
      raise data_lib.DataError(f"{path}: row {row}, column query_id: {q!r} is not a query's id")
    if c not in corpus:
      raise data_lib.DataError(f"{path}: row {row}, column corpus_id: {c!r} is not a corpus id")
    try:
      number = float(score)  # JSON's true and false are 1 and 0, as in a scored-pairs file.
    except (TypeError, ValueError):
      raise data_lib.DataError(f"{path}: row {row}, column score: {score!r} is not a number") from None
    if not math.isfinite(number):  # NaN > 0 is False: the row would silently be "not relevant".
      raise data_lib.DataError(f"{path}: row {row}, column score: {score!r} is not a finite number")
    relevant_row = number > 0
    if relevant_row:
      relevant.setdefault(q, set()).add(c)
  if not relevant:
    raise data_lib.DataError(f"{path}: no relevant (query, document) pair")
  return RetrievalSet({q: t for q, t in queries.items() if q in relevant}, corpus, relevant)


def pair_metrics(e1: np.ndarray, e2: np.ndarray, gold: np.ndarray) -> dict[str, float]:
  """Spearman and Pearson of the pairs' cosines against ``gold`` (s-t's ``spearman_cosine``, ``pearson_cosine``)."""
  found = correlations(cosine_scores(e1, e2), gold)
  return {"spearman": found["spearman"], "pearson": found["pearson"]}


def _dcg(relevances: Sequence[int], k: int) -> float:
  return sum(r / np.log2(i + 2) for i, r in enumerate(relevances[:k]))


def retrieval_metrics(
  query_embeddings: np.ndarray,
  corpus_embeddings: np.ndarray,
  query_ids: Sequence[str],
  corpus_ids: Sequence[str],
  relevant: dict[str, set[str]],
) -> dict[str, float]:
  """s-t's ``InformationRetrievalEvaluator.compute_metrics`` (cosine; its default ks) on given embeddings.

  Each query's ranking is the corpus by descending cosine, ties by ascending corpus id, cut at the largest k (100).

  Args:
    query_embeddings: ``[queries, dim]``, rows in ``query_ids``' order.
    corpus_embeddings: ``[documents, dim]``, rows in ``corpus_ids``' order.
    query_ids: the queries' ids.
    corpus_ids: the documents' ids.
    relevant: query id -> the ids of its relevant documents (at least one each).

  Returns:
    ``RETRIEVAL_METRICS`` -> value, each the mean over the queries.
  """
  # s-t's cos_sim (torch's F.normalize, then the dot products), in float64.
  scores = (
    embedder_lib.normalize_rows(np.asarray(query_embeddings, np.float64))
    @ embedder_lib.normalize_rows(np.asarray(corpus_embeddings, np.float64)).T
  )
  top = min(max(MAP_AT, MRR_AT, NDCG_AT, *ACCURACY_AT, *PRECISION_RECALL_AT), len(corpus_ids))
  ids = np.asarray(corpus_ids, dtype=object)
  id_rank = np.empty(len(corpus_ids), np.int64)
  id_rank[sorted(range(len(corpus_ids)), key=lambda i: corpus_ids[i])] = np.arange(len(corpus_ids))
  sums = {
    name: 0.0
    for name in (
      f"ndcg@{NDCG_AT}",
      f"mrr@{MRR_AT}",
      f"map@{MAP_AT}",
      *(f"accuracy@{k}" for k in ACCURACY_AT),
      *(f"precision@{k}" for k in PRECISION_RECALL_AT),
      *(f"recall@{k}" for k in PRECISION_RECALL_AT),
    )
  }
  for row, query in enumerate(query_ids):
    order = np.lexsort((id_rank, -scores[row]))[:top]  # Descending score, then ascending corpus id.
    hits = [int(doc in relevant[query]) for doc in ids[order]]
    n_relevant = len(relevant[query])
    for k in ACCURACY_AT:
      sums[f"accuracy@{k}"] += float(any(hits[:k]))
    for k in PRECISION_RECALL_AT:
      sums[f"precision@{k}"] += sum(hits[:k]) / k
      sums[f"recall@{k}"] += sum(hits[:k]) / n_relevant
    first = next((i for i, h in enumerate(hits[:MRR_AT]) if h), None)
    sums[f"mrr@{MRR_AT}"] += 0.0 if first is None else 1.0 / (first + 1)
    sums[f"ndcg@{NDCG_AT}"] += _dcg(hits, NDCG_AT) / _dcg([1] * n_relevant, NDCG_AT)
    found, precisions = 0, 0.0
    for i, h in enumerate(hits[:MAP_AT]):
      if h:
        found += 1
        precisions += found / (i + 1)
    sums[f"map@{MAP_AT}"] += precisions / min(MAP_AT, n_relevant)
  return {name: float(total / len(query_ids)) for name, total in sums.items()}


@dataclasses.dataclass(frozen=True)
class OwnDevSets:
  """The dev sets a config or a command names: scored pairs and/or a retrieval set (each optional)."""

  pairs: PairSet | None = None
  retrieval: RetrievalSet | None = None
  # The model's prompts, put before the retrieval set's queries and its documents (s-t's InformationRetrievalEvaluator
  # with query_prompt/corpus_prompt); scored pairs take none, as s-t's EmbeddingSimilarityEvaluator by default.
  query_prompt: str = ""
  document_prompt: str = ""

  def _retrieval_texts(self) -> tuple[list[str], list[str]]:
    r = self.retrieval
    return ([self.query_prompt + t for t in r.queries.values()], [self.document_prompt + t for t in r.corpus.values()])

  @classmethod
  def load(cls, pairs: str = "", retrieval: str = "", root: str | None = None) -> OwnDevSets:
    """Reads the files (paths resolved by ``data.resolve``: as given, else under the data root); "" = none."""
    return cls(
      load_pairs(data_lib.resolve(pairs, root)) if pairs else None,
      load_retrieval(data_lib.resolve(retrieval, root)) if retrieval else None,
    )

  def sentences(self) -> list[str]:
    """Every text to embed, each once."""
    texts = []
    if self.pairs is not None:
      texts += [*self.pairs.sent1, *self.pairs.sent2]
    if self.retrieval is not None:
      queries, documents = self._retrieval_texts()
      texts += [*queries, *documents]
    return list(dict.fromkeys(texts))

  def scores(self, table: dict[str, np.ndarray]) -> dict[str, float]:
    """``pairs_<PAIR_METRICS>`` and ``retrieval_<RETRIEVAL_METRICS>`` from ``{text: vector}``."""
    out = {}
    if self.pairs is not None:
      p = self.pairs
      found = pair_metrics(np.stack([table[s] for s in p.sent1]), np.stack([table[s] for s in p.sent2]), p.gold)
      out.update({f"pairs_{k}": v for k, v in found.items()})
    if self.retrieval is not None:
      r = self.retrieval
      queries, documents = self._retrieval_texts()
      found = retrieval_metrics(
        np.stack([table[t] for t in queries]),
        np.stack([table[t] for t in documents]),
        list(r.queries),
        list(r.corpus),
        r.relevant,
      )
      out.update({f"retrieval_{k}": v for k, v in found.items()})
    return out

  def __call__(self, embed: Embed) -> dict[str, float]:
    """Embeds every text once and scores the sets."""
    sentences = self.sentences()
    return self.scores(embedder_lib.embed_each_once(embed, sentences)) if sentences else {}
