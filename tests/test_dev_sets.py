"""Your own dev sets (jaxcse.evaluation.dev_sets): the files' layouts, their errors, and sentence-transformers 6.2's evaluators'
numbers on the same embeddings."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jaxcse.training import configuration
from jaxcse import data as data_lib, evaluate, train
from jaxcse.evaluation import dev_sets, sts_metrics
from tests import helpers


class _Vectors:
  """Stands for a SentenceTransformer in s-t's evaluators: ``encode`` looks the given vectors up (float64)."""

  similarity_fn_name = "cosine"

  def __init__(self, table: dict[str, np.ndarray]):
    import torch
    from sentence_transformers.util import cos_sim

    self.table, self.similarity, self._torch = table, cos_sim, torch
    self.model_card_data = type("CardData", (), {"set_evaluation_metrics": lambda *args: None})()

  def encode(self, sentences, **kwargs):
    return self._torch.tensor(np.stack([self.table[s] for s in sentences]), dtype=self._torch.float64)

  encode_query = encode_document = encode


def _table(texts, dim: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {t: rng.normal(size=dim) for t in dict.fromkeys(texts)}


def _write(path: str, rows: list[dict]) -> str:
  """A .jsonl, .csv or .parquet file of ``rows``, by the path's suffix."""
  import pandas as pd

  os.makedirs(os.path.dirname(path), exist_ok=True)
  frame = pd.DataFrame(rows)
  if path.endswith(".jsonl"):
    helpers.write_jsonl(path, rows)
  elif path.endswith(".csv"):
    frame.to_csv(path, index=False)
  else:
    frame.to_parquet(path)
  return path


def _pairs(n: int = 40, seed: int = 0) -> list[dict]:
  rng = np.random.default_rng(seed)
  # Some repeated sentences and tied scores, as real STS data has.
  return [
    {"sentence1": f"first {i % 30}", "sentence2": f"second {i}", "score": float(rng.integers(0, 6))} for i in range(n)
  ]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_scored_pairs_equal_embedding_similarity_evaluator(tmp_path, suffix):
  st_eval = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
  rows = _pairs()
  pairs = dev_sets.load_pairs(_write(str(tmp_path / f"dev{suffix}"), rows))
  assert pairs.sent1 == [r["sentence1"] for r in rows] and list(pairs.gold) == [r["score"] for r in rows]
  table = _table([*pairs.sent1, *pairs.sent2])
  ours = dev_sets.OwnDevSets(pairs=pairs).scores(table)
  theirs = st_eval.EmbeddingSimilarityEvaluator(pairs.sent1, pairs.sent2, list(pairs.gold), name="dev")(_Vectors(table))
  assert set(ours) == {"pairs_spearman", "pairs_pearson"}
  # The same formula on the same float64 numbers (scipy's correlations of cosines): ~1e-16 apart.
  np.testing.assert_allclose(ours["pairs_spearman"], theirs["dev_spearman_cosine"], rtol=1e-12)
  np.testing.assert_allclose(ours["pairs_pearson"], theirs["dev_pearson_cosine"], rtol=1e-12)


def _retrieval_folder(folder: str, suffix: str = ".jsonl", seed: int = 0) -> str:
  rng = np.random.default_rng(seed)
  queries = [{"id": f"q{i}", "text": f"query {i}"} for i in range(25)]
  # 150 documents (more than MAP's 100), ids that sort otherwise as strings than as numbers; two identical texts,
  # so tied scores meet the tie-break by corpus id.
  corpus = [{"id": str(j), "text": f"document {j if j != 7 else 8}"} for j in range(150)]
  qrels = [
    {"query_id": f"q{i}", "corpus_id": str(j), "score": 1}
    for i in range(25)
    for j in rng.choice(150, size=rng.integers(1, 4), replace=False)
  ]
  qrels.append({"query_id": "q0", "corpus_id": "149", "score": 0})  # Not relevant.
  for name, rows in (("queries", queries), ("corpus", corpus), ("qrels", qrels)):
    _write(os.path.join(folder, name + suffix), rows)
  return folder


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_retrieval_equals_information_retrieval_evaluator(tmp_path, suffix):
  st_eval = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
  retrieval = dev_sets.load_retrieval(_retrieval_folder(str(tmp_path / "ir"), suffix))
  table = _table([*retrieval.queries.values(), *retrieval.corpus.values()], seed=1)
  ours = dev_sets.OwnDevSets(retrieval=retrieval).scores(table)
  theirs = st_eval.InformationRetrievalEvaluator(retrieval.queries, retrieval.corpus, retrieval.relevant, name="dev")(
    _Vectors(table)
  )
  assert set(ours) == {f"retrieval_{m}" for m in sts_metrics.OWN_RETRIEVAL_METRICS}
  for name in sts_metrics.OWN_RETRIEVAL_METRICS:
    # Means of the same per-query numbers over the same rankings: equal to float64 rounding.
    np.testing.assert_allclose(ours[f"retrieval_{name}"], theirs[f"dev_cosine_{name}"], rtol=1e-12, err_msg=name)
  assert 0 < ours["retrieval_ndcg@10"] < 1


def test_retrieval_ties_break_by_corpus_id():
  # Two documents with one vector: the one whose id sorts first (as a string) ranks first, as in s-t.
  found = dev_sets.retrieval_metrics(
    np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 0.0]]), ["q"], ["b", "a"], {"q": {"b"}}
  )
  assert found["mrr@10"] == 0.5 and found["accuracy@1"] == 0.0


@pytest.mark.parametrize(
  "rows,message",
  [
    ([{"sentence1": "a", "sentence2": "b"}], "no column score or label"),
    (
      [{"sentence1": "a", "sentence2": "b", "score": "high"}, {"sentence1": "c", "sentence2": "d", "score": 1}],
      "row 1, column score: 'high' is not a number",
    ),
    (
      [{"sentence1": "a", "sentence2": "", "score": 1}, {"sentence1": "c", "sentence2": "d", "score": 1}],
      "row 1, column sentence2: empty is not a text",
    ),
    # A text of only format characters is empty, as in the training data (docs/own_data.md).
    (
      [{"sentence1": "a", "sentence2": "\u200b", "score": 1}, {"sentence1": "c", "sentence2": "d", "score": 2}],
      r"row 1, column sentence2: '\\u200b' is not a text \(no visible character\)",
    ),
    # Every score the same: Spearman is NaN at every evaluation, so no best would ever be saved (before: exit 0).
    (
      [{"sentence1": "a", "sentence2": "b", "score": 3}, {"sentence1": "c", "sentence2": "d", "score": 3}],
      r"every score is 3.0: a correlation needs two different scores",
    ),
  ],
)
def test_a_bad_pairs_file_names_the_row_and_column(tmp_path, rows, message):
  path = str(tmp_path / "dev.jsonl")
  helpers.write_jsonl(path, rows)
  with pytest.raises(data_lib.DataError, match=message) as raised:
    dev_sets.load_pairs(path)
  assert path in str(raised.value) and "\n" not in str(raised.value)


def test_a_qrels_row_naming_an_unknown_document_is_an_error(tmp_path):
  folder = _retrieval_folder(str(tmp_path / "ir"))
  helpers.write_jsonl(os.path.join(folder, "qrels.jsonl"), [{"query_id": "q1", "corpus_id": "nope"}])
  with pytest.raises(data_lib.DataError, match="row 1, column corpus_id: 'nope' is not a corpus id"):
    dev_sets.load_retrieval(folder)


def test_qrels_scores_nan_is_refused_and_booleans_are_1_and_0(tmp_path):
  """Decided (docs/evaluation.md): a qrels score must be a finite number (NaN was silently "not relevant"); JSON
  booleans read as 1 and 0 (true relevant, false not), as in a scored-pairs file and the training labels."""
  folder = _retrieval_folder(str(tmp_path / "ir"))
  qrels = os.path.join(folder, "qrels.jsonl")
  with open(qrels, "w", encoding="utf-8") as f:
    f.write('{"query_id": "q1", "corpus_id": "1", "score": 1}\n{"query_id": "q2", "corpus_id": "2", "score": NaN}\n')
  with pytest.raises(data_lib.DataError, match=r"qrels.jsonl: row 2, column score: nan is not a finite number"):
    dev_sets.load_retrieval(folder)
  with open(qrels, "w", encoding="utf-8") as f:
    f.write(
      '{"query_id": "q1", "corpus_id": "1", "score": true}\n{"query_id": "q2", "corpus_id": "2", "score": false}\n'
    )
  assert dev_sets.load_retrieval(folder).relevant == {"q1": {"1"}}
  pairs_file = str(tmp_path / "pairs.jsonl")
  helpers.write_jsonl(
    pairs_file,
    [{"sentence1": "a", "sentence2": "b", "score": True}, {"sentence1": "c", "sentence2": "d", "score": False}],
  )
  assert dev_sets.load_pairs(pairs_file).gold.tolist() == [1.0, 0.0]


def test_selection_by_an_own_dev_set_needs_it():
  config = helpers.tiny_config("model", "data", **{"eval.metric": "retrieval_ndcg@10"})
  with pytest.raises(configuration.ConfigError, match="eval.metric=retrieval_ndcg@10 needs eval.retrieval"):
    configuration.validate(config)
  config.eval.retrieval = "ir"
  configuration.validate(config)


def test_evaluate_tasks_take_own_dev_sets(tmp_path, tiny_model_dir, capsys):
  pairs = _write(str(tmp_path / "pairs.csv"), _pairs())
  folder = _retrieval_folder(str(tmp_path / "ir"))
  out = str(tmp_path / "results.json")
  assert (
    evaluate.main(
      ["--model", tiny_model_dir, "--pooler", "avg", "--tasks", f"pairs={pairs},retrieval={folder}", "--output", out]
    )
    == 0
  )
  with open(out) as f:
    record = json.load(f)
  assert set(record["tasks"]["pairs"]) == {"spearman", "pearson", "path", "nsamples"}
  assert set(sts_metrics.OWN_RETRIEVAL_METRICS) <= set(record["tasks"]["retrieval"])
  assert "pairs_spearman" in record["summary"] and "retrieval_ndcg@10" in record["summary"]
  assert {pairs, *(f"{folder}/{name}.jsonl" for name in ("queries", "corpus", "qrels"))} <= set(
    record["provenance"]["data_sha256"]
  )
  assert "retrieval_ndcg@10" in capsys.readouterr().out


def test_evaluate_refuses_a_missing_dev_set_before_loading_the_model(tmp_path, capsys):
  # The model does not exist either: the dev set's error comes first, one line.
  missing = str(tmp_path / "missing.csv")
  assert evaluate.main(["--model", str(tmp_path / "no_model"), "--tasks", f"pairs={missing}"]) == 1
  assert capsys.readouterr().err.strip().splitlines() == [f"error: {missing}: no such file"]


def test_evaluate_refuses_an_own_task_without_a_path():
  with pytest.raises(evaluate.TaskError, match="task 'pairs=' names no file"):
    evaluate.expand_tasks("sts,pairs=")


def test_training_scores_own_dev_sets_and_selects_by_them(tiny_model_dir, small_data_dir, fresh_workdir, tmp_path):
  pairs = _write(str(tmp_path / "pairs.parquet"), _pairs())
  folder = _retrieval_folder(str(tmp_path / "ir"), ".csv")
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{
      "train.max_steps": 4,
      "eval.every": 2,
      "eval.pairs": pairs,
      "eval.retrieval": folder,
      "eval.metric": "retrieval_ndcg@10",
    },
  )
  summary = train.train_and_evaluate(config, fresh_workdir)
  evaluations = [r for r in helpers.metrics_records(fresh_workdir) if "eval/metric" in r]
  assert [r["step"] for r in evaluations] == [2, 4]
  for record in evaluations:
    assert record["eval/metric"] == record["eval/retrieval_ndcg@10"]
    assert {"eval/pairs_spearman", "eval/pairs_pearson", "eval/retrieval_mrr@10", "eval/stsb_dev"} <= set(record)
  best = max(evaluations, key=lambda r: r["eval/retrieval_ndcg@10"])
  assert summary["best_step"] == best["step"]


@pytest.mark.parametrize(
  "scores,message",
  [("n/a", "row 1, column score: 'n/a' is not a number"), (1, "every score is 1.0: a correlation needs two")],
)
def test_a_bad_own_dev_set_stops_training_before_anything_is_written(
  tiny_model_dir, small_data_dir, tmp_path, scores, message
):
  bad = str(tmp_path / "pairs.jsonl")
  helpers.write_jsonl(
    bad, [{"sentence1": "a", "sentence2": "b", "score": scores}, {"sentence1": "c", "sentence2": "d", "score": 1}]
  )
  workdir = str(tmp_path / "run")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"eval.pairs": bad})
  with pytest.raises(data_lib.DataError, match=message):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(workdir) or not os.listdir(workdir)


class _PromptedVectors(_Vectors):
  """Like ``_Vectors``, with s-t's ``prompt`` put before each sentence, as its ``encode`` does."""

  def encode(self, sentences, prompt=None, **kwargs):
    return super().encode([(prompt or "") + s for s in sentences], **kwargs)

  encode_query = encode_document = encode


def test_retrieval_with_the_models_prompts_equals_the_evaluator_given_them(tmp_path):
  st_eval = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
  retrieval = dev_sets.load_retrieval(_retrieval_folder(str(tmp_path / "ir")))
  texts = [*("query: " + t for t in retrieval.queries.values()), *("passage: " + t for t in retrieval.corpus.values())]
  table = _table(texts, seed=2)  # Only prompted texts have vectors: a text embedded without its prompt fails.
  own = dev_sets.OwnDevSets(retrieval=retrieval, query_prompt="query: ", document_prompt="passage: ")
  assert set(own.sentences()) == set(texts)
  ours = own.scores(table)
  theirs = st_eval.InformationRetrievalEvaluator(
    retrieval.queries,
    retrieval.corpus,
    retrieval.relevant,
    name="dev",
    query_prompt="query: ",
    corpus_prompt="passage: ",
  )(_PromptedVectors(table))
  for name in sts_metrics.OWN_RETRIEVAL_METRICS:
    np.testing.assert_allclose(ours[f"retrieval_{name}"], theirs[f"dev_cosine_{name}"], rtol=1e-12, err_msg=name)
