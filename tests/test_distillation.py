"""Learning from a teacher's labels: list labels in the training data (a teacher's scores or embeddings), read
strictly and row by row, and the distillation methods and the spread-out regulariser training on them.

The losses themselves are checked against sentence-transformers in tests/test_distill_losses.py; in the step (plain
vs GradCache, 1 vs 2 devices) in tests/test_ranking_losses.py's STEP_VARIANTS.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxcse import data as data_lib, train
from jaxcse.data import DataError
from jaxcse.training import configuration
from tests import helpers


def _write_jsonl(path, rows) -> str:
  path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
  return str(path)


def _teacher_rows(n: int, dim: int = 32, columns: int = 1, seed: int = 0) -> list[dict]:
  rng = np.random.default_rng(seed)
  rows = []
  for i in range(n):
    label = rng.normal(size=dim if columns == 1 else (columns, dim)).round(6).tolist()
    texts = {"english": f"sentence number {i} is here", "other": f"another text {i}"}
    rows.append(
      {**dict(list(texts.items())[:columns] if columns > 1 else [("english", texts["english"])]), "label": label}
    )
  return rows


def test_list_labels_are_read_row_by_row_as_written(tmp_path):
  rows = _teacher_rows(20, dim=5)
  corpus = data_lib.load_corpus(_write_jsonl(tmp_path / "teacher.jsonl", rows))
  assert corpus.label_shape == (5,) and corpus.labels.shape == (20, 5)
  picked = np.array([7, 0, 19, 7])
  np.testing.assert_array_equal(corpus.labels[picked], np.array([rows[i]["label"] for i in picked]))
  assert corpus.labels[picked].dtype == np.float64


def test_a_label_per_text_column_has_two_axes(tmp_path):
  rows = _teacher_rows(10, dim=4, columns=2)
  corpus = data_lib.load_corpus(_write_jsonl(tmp_path / "teacher.jsonl", rows))
  assert corpus.text_columns == ("english", "other") and corpus.label_shape == (2, 4)
  np.testing.assert_array_equal(corpus.labels[[3]][0], np.array(rows[3]["label"]))


def test_the_batches_carry_the_rows_labels(tiny_model_dir, tmp_path):
  from jaxcse import models

  rows = _teacher_rows(16, dim=3)
  corpus = data_lib.load_corpus(_write_jsonl(tmp_path / "teacher.jsonl", rows))
  spec, _ = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls"), seed=0)
  batches = data_lib.Batches(corpus, spec.tokenizer, batch_size=8, max_seq_len=16, seed=0)
  batch = batches.batch(1)
  assert batch["labels"].shape == (8, 3) and batch["labels"].dtype == np.float32
  texts = corpus.texts(batches.indices(1))[0]
  expected = {row["english"]: row["label"] for row in rows}
  np.testing.assert_array_equal(batch["labels"], np.array([expected[t] for t in texts], np.float32))


def test_the_content_digest_covers_list_labels(tmp_path):
  rows = _teacher_rows(6, dim=3)
  first = data_lib.load_corpus(_write_jsonl(tmp_path / "a.jsonl", rows)).content_sha256
  rows[4]["label"][2] += 1e-3
  assert data_lib.load_corpus(_write_jsonl(tmp_path / "b.jsonl", rows)).content_sha256 != first


@pytest.mark.parametrize(
  "change,message",
  [
    (lambda rows: rows[3].update(label=[1.0, 2.0]), r"row 3, column 'label': a list of 2 numbers, where row 0's has 3"),
    (lambda rows: rows[2].update(label=[]), r"row 2, column 'label': a list of 0 numbers, where row 0's has 3"),
    (lambda rows: rows[0].update(label=[]), r"row 0, column 'label': an empty list, not numbers"),
    (lambda rows: rows[5].update(label=[1.0, None, 2.0]), r"row 5, column 'label': a missing number in the label"),
    (lambda rows: rows[1].update(label=None), r"row 1, column 'label': missing label"),
    (lambda rows: [row.update(label=["a", "b", "c"]) for row in rows], r"holds list<item: string>, not numbers"),
  ],
  ids=["ragged", "empty_later", "empty_first", "null_inside", "null", "strings"],
)
def test_a_bad_list_label_names_its_file_line_and_row(tmp_path, change, message):
  rows = _teacher_rows(8, dim=3)
  change(rows)
  path = _write_jsonl(tmp_path / "teacher.jsonl", rows)
  with pytest.raises(DataError, match=message) as error:
    data_lib.load_corpus(path)
  assert str(error.value).startswith(path)


def test_a_non_finite_number_in_a_list_label_is_refused(tmp_path):
  pa = pytest.importorskip("pyarrow")
  import pyarrow.parquet as pq

  labels = [[0.5, 1.0], [0.0, float("nan")], [1.0, 2.0]]
  path = str(tmp_path / "teacher.parquet")
  pq.write_table(pa.table({"text": ["a b", "c d", "e f"], "label": labels}), path)
  with pytest.raises(DataError, match=r"row 1, column 'label': a number that is not finite \(nan or inf\)"):
    data_lib.load_corpus(path)


def _distill_config(model_dir, data_dir, train_path, method, **overrides):
  return helpers.tiny_config(
    model_dir,
    data_dir,
    "pairs",
    method=method,
    **{"data.train": train_path, "train.max_steps": 2, "train.log_every": 1, "checkpoint.every": 2, **overrides},
  )


def test_embed_distill_trains_on_teacher_embeddings(tiny_model_dir, small_data_dir, tmp_path):
  # MSELoss's use: one text column and its teacher embedding (the tiny model's width, 32).
  path = _write_jsonl(tmp_path / "teacher.jsonl", _teacher_rows(16))
  workdir = str(tmp_path / "w")
  summary = train.train_and_evaluate(_distill_config(tiny_model_dir, small_data_dir, path, "embed_distill"), workdir)
  assert summary["steps"] == 2
  records = [r for r in helpers.metrics_records(workdir) if "loss" in r]
  # Squared error to random N(0, 1) targets: about 1 per dimension, whatever the student's small embeddings.
  assert records and all(0.5 < r["loss"] < 2.0 for r in records), records
  assert "pos_score" not in records[0]  # One view of one column: no pair to score.


def test_margin_mse_and_the_regulariser_train_on_triplets(tiny_model_dir, small_data_dir, tmp_path):
  rows = [
    {"query": f"query {i}", "pos": f"a passage about {i}", "neg": f"something else {i}", "label": 0.1 * i}
    for i in range(16)
  ]
  path = _write_jsonl(tmp_path / "margins.jsonl", rows)
  for method, overrides in (("margin_mse", {"gor.enabled": True}), ("gor", {})):
    workdir = str(tmp_path / method)
    config = _distill_config(tiny_model_dir, small_data_dir, path, method, **overrides)
    if method == "gor":
      config.data.train = _write_jsonl(tmp_path / "texts.jsonl", [{"text": r["query"]} for r in rows])
    assert train.train_and_evaluate(config, workdir)["steps"] == 2
    records = [r for r in helpers.metrics_records(workdir) if "loss" in r]
    assert records and all(np.isfinite(r["loss"]) for r in records)
    assert {"gor_mean", "gor_second_moment"} <= set(records[0]), records[0]


def test_rankcse_trains_on_one_or_two_teachers_embeddings_of_their_own_width(tiny_model_dir, small_data_dir, tmp_path):
  # RankCSE's labels: each text's teacher embedding, of the teacher's width (16 here, the student's 32), or two
  # teachers' as [2, D]; the loss is SimCSE's plus the logged consistency and distillation terms.
  for name, columns in (("one", 1), ("two", 2)):
    rows = [{"text": row["english"], "label": row["label"]} for row in _teacher_rows(16, dim=16, columns=1)]
    if columns == 2:
      second = _teacher_rows(16, dim=16, seed=1)
      rows = [{**row, "label": [row["label"], other["label"]]} for row, other in zip(rows, second)]
    path = _write_jsonl(tmp_path / f"{name}.jsonl", rows)
    workdir = str(tmp_path / name)
    config = _distill_config(tiny_model_dir, small_data_dir, path, "rankcse", **{"rankcse.distillation": "listmle"})
    assert train.train_and_evaluate(config, workdir)["steps"] == 2
    records = [r for r in helpers.metrics_records(workdir) if "loss" in r]
    assert records and all(np.isfinite(r["loss"]) for r in records)
    assert {"infonce", "consistency", "distillation", "pos_score"} <= set(records[0]), records[0]


def test_rankcse_refuses_pairs_before_anything_is_written(tiny_model_dir, small_data_dir, tmp_path):
  rows = [{**row, "other": "a second text"} for row in _teacher_rows(16, dim=16)]
  workdir = tmp_path / "w"
  with pytest.raises(DataError, match=r"method rankcse reads 1 text column .*this data has 2 \(english, other\)"):
    train.train_and_evaluate(
      _distill_config(tiny_model_dir, small_data_dir, _write_jsonl(tmp_path / "t.jsonl", rows), "rankcse"),
      str(workdir),
    )
  assert not workdir.exists()


def test_a_teacher_of_another_width_is_refused_before_anything_is_written(tiny_model_dir, small_data_dir, tmp_path):
  path = _write_jsonl(tmp_path / "teacher.jsonl", _teacher_rows(16, dim=16))
  workdir = tmp_path / "w"
  with pytest.raises(
    DataError,
    match=r"teacher.jsonl: column 'label' holds a list of 16 numbers per row; method embed_distill with 1 text "
    r"columns and 32-dimensional embeddings reads a list of 32 numbers or a list of 1 x 32 numbers",
  ):
    train.train_and_evaluate(_distill_config(tiny_model_dir, small_data_dir, path, "embed_distill"), str(workdir))
  assert not workdir.exists()


def test_teacher_labels_for_a_method_without_labels_name_the_methods_that_read_them(
  tiny_model_dir, small_data_dir, tmp_path
):
  path = _write_jsonl(tmp_path / "teacher.jsonl", _teacher_rows(16))
  with pytest.raises(
    DataError,
    match=r"which method gor does not use: train them with --config.method=embed_distill or --config.method=rankcse, "
    r"or",
  ):
    train.train_and_evaluate(_distill_config(tiny_model_dir, small_data_dir, path, "gor"), str(tmp_path / "w"))


@pytest.mark.parametrize(
  "overrides,message",
  [
    ({"method": "gor", "gor.mean_weight": 0.0, "gor.second_moment_weight": 0.0}, "both 0"),
    ({"method": "gor", "gor.enabled": True}, "method gor is the regulariser alone"),
    ({"gor.enabled": True, "gor.aggregation": "max"}, "gor.aggregation must be one of mean, sum"),
    ({"gor.enabled": True, "gor.mean_weight": -1.0}, r"gor.mean_weight must be a number in \[0, 10000\]"),
    ({"method": "embed_distill", "distill.distance": "dot"}, "distill.distance must be one of mse, l2, cosine"),
    ({"method": "embed_distill", "matryoshka.dims": "32,16"}, "method embed_distill compares each whole embedding"),
    ({"method": "distill_kl_div", "distill.teacher_temperature": 0.0}, "distill.teacher_temperature must be"),
    ({"method": "margin_mse", "distill.similarity": "l1"}, "distill.similarity must be one of dot, cosine"),
    ({"method": "mlm", "gor.enabled": True}, "gor.enabled: method mlm has no sentence embeddings"),
    ({"method": "rankcse", "rankcse.distillation": "lambdarank"}, "rankcse.distillation must be one of listnet"),
    ({"method": "rankcse", "rankcse.consistency": "kl"}, "rankcse.consistency must be one of as_released, jsd"),
    ({"method": "rankcse", "rankcse.tau2": 0.0}, "rankcse.tau2 must be a finite number"),
    ({"method": "rankcse", "rankcse.alpha": 1.5}, r"rankcse.alpha must be a number in \[0, 1\]"),
  ],
)
def test_config_mistakes_are_one_line(tiny_model_dir, small_data_dir, overrides, message):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs", **overrides)
  with pytest.raises(configuration.ConfigError, match=message):
    configuration.validate(config)


@pytest.mark.parametrize(
  "method,columns,label_shape",
  [("distill_kl_div", 3, (8, 2)), ("margin_mse", 4, (8, 2)), ("embed_distill", 1, (8, 32)), ("rankcse", 1, (8, 32))],
)
def test_jaxcse_compile_lowers_the_labels_the_method_reads(
  tiny_model_dir, small_data_dir, method, columns, label_shape
):
  # Ahead of time the batch is shapes only: the label's is the first the method reads (teacher margins, scores, or
  # an embedding of the model's width).
  import jax

  from jaxcse.compile import lowering

  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs", method=method)
  program = lowering.train_step_program(config, jax.devices(), columns=columns)
  assert program.args[1]["labels"].shape == label_shape
  assert program.jitted.lower(*program.args).args_info[0][1]["labels"].shape == label_shape
