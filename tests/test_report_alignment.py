"""Alignment and uniformity (hand-computed on toy embeddings, STS-B toy files, the CLI) and the Markdown report."""

from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest

from jaxcse import evaluate, report
from jaxcse.evaluation import sts_data, sts_metrics
from tests import helpers

# Three unit vectors in 2-d: a = (1, 0), b = (0, 1), c = (-1, 0).
A, B, C = [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]


_write = helpers.write_text
_numeric_embed = helpers.numeric_embed


# --- alignment and uniformity -----------------------------------------------------------------------------------


def test_alignment_matches_hand_computed_values():
  x, y = np.array([A, A, A]), np.array([A, B, C])
  # ||a - a||^2 = 0, ||a - b||^2 = 1 + 1 = 2, ||a - c||^2 = 2^2 = 4: mean 6 / 3 = 2.
  assert sts_metrics.alignment(x, y) == pytest.approx(2.0)
  # alpha = 1: the distances 0, sqrt(2), 2.
  assert sts_metrics.alignment(x, y, alpha=1) == pytest.approx((0 + np.sqrt(2) + 2) / 3)


def test_uniformity_matches_hand_computed_value():
  # Pairs i < j: ||a - b||^2 = 2, ||a - c||^2 = 4, ||b - c||^2 = 2; log mean exp(-2 d) = log((2 e^-4 + e^-8) / 3).
  expected = np.log((2 * np.exp(-4) + np.exp(-8)) / 3)
  assert sts_metrics.uniformity(np.array([A, B, C])) == pytest.approx(expected)
  # t = 1: log((2 e^-2 + e^-4) / 3).
  assert sts_metrics.uniformity(np.array([A, B, C]), t=1) == pytest.approx(np.log((2 * np.exp(-2) + np.exp(-4)) / 3))


def test_both_normalise_rows_so_scaling_changes_nothing():
  x, y = np.array([A, A, A]), np.array([A, B, C])
  scale = np.array([[2.0], [0.5], [30.0]])
  assert sts_metrics.alignment(x * scale, y * scale[::-1]) == pytest.approx(sts_metrics.alignment(x, y))
  assert sts_metrics.uniformity(y * scale) == pytest.approx(sts_metrics.uniformity(y))
  rng = np.random.default_rng(0)
  z = rng.normal(size=(20, 8))
  assert sts_metrics.uniformity(z * rng.uniform(0.1, 10, size=(20, 1))) == pytest.approx(sts_metrics.uniformity(z))


def test_identical_pairs_align_perfectly_and_identical_vectors_are_not_uniform():
  z = np.random.default_rng(1).normal(size=(5, 4))
  assert sts_metrics.alignment(z, z) == pytest.approx(0.0, abs=1e-12)
  # Every distance is 0: log(mean(exp(0))) = log(1) = 0, the worst possible uniformity.
  same = np.tile([[3.0, 4.0]], (6, 1))
  assert sts_metrics.uniformity(same) == pytest.approx(0.0, abs=1e-12)
  # Spreading the vectors lowers it: a tight cluster < 0, the three spread vectors lower still.
  cluster = np.array([[1.0, 0.0], [1.0, 0.1], [1.0, -0.1]])
  assert sts_metrics.uniformity(np.array([A, B, C])) < sts_metrics.uniformity(cluster) < 0


def test_bad_inputs_are_errors():
  with pytest.raises(ValueError, match="non-zero"):
    sts_metrics.uniformity(np.array([A, [0.0, 0.0]]))
  with pytest.raises(ValueError, match="at least 2"):
    sts_metrics.uniformity(np.array([A]))
  with pytest.raises(ValueError, match="same shape"):
    sts_metrics.alignment(np.array([A, B]), np.array([A]))


# --- on STS-B files and through the CLI -------------------------------------------------------------------------


@pytest.fixture
def stsb_root(tmp_path):
  """STS-B in SentEval's format (genre, file, year, id, score, sentence 1, sentence 2) with 2-d "sentences"."""
  folder = os.path.join(str(tmp_path), "senteval", "downstream", "STS", "STSBenchmark")
  rows = [
    ("5.000", "1 0", "1 0"),  # positive, ||a - a||^2 = 0
    ("4.000", "1 0", "0 1"),  # positive (>= 4), ||a - b||^2 = 2
    ("3.999", "0 1", "-1 0"),  # not positive
    ("0.500", "1  1", "-1 0"),  # not positive; "1  1" is read as "1 1"
  ]
  _write(
    os.path.join(folder, "sts-test.csv"),
    "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{s1}\t{s2}\n" for i, (s, s1, s2) in enumerate(rows)),
  )
  _write(
    os.path.join(folder, "sts-dev.csv"),
    "main-captions\tMSRvid\t2012test\t0001\t5.000\t1 0\t1 0\n"
    "main-captions\tMSRvid\t2012test\t0002\t1.000\t1 0\t0 1\n"
    "main-captions\tMSRvid\t2012test\t0003\t0.000\t1 0\t-1 0\n",
  )
  return str(tmp_path)


# Distinct test sentences: a = (1,0), b = (0,1), c = (-1,0), d = (1,1)/sqrt2. Squared distances 2 - 2 cos:
# a-b 2, a-c 4, b-c 2, a-d 2 - sqrt2, b-d 2 - sqrt2, c-d 2 + sqrt2.
TOY_UNIFORMITY = np.log(np.mean(np.exp(-2 * np.array([2, 4, 2, 2 - np.sqrt(2), 2 - np.sqrt(2), 2 + np.sqrt(2)]))))


def test_evaluate_align_uniform_on_toy_stsb(stsb_root):
  calls = []

  def embed(sentences):
    calls.append(list(sentences))
    return _numeric_embed(sentences)

  result = evaluate.evaluate_align_uniform(embed, stsb_root)
  assert result["n_positive_pairs"] == 2 and result["n_sentences"] == 4
  assert result["alignment"] == pytest.approx((0 + 2) / 2)
  assert result["uniformity"] == pytest.approx(TOY_UNIFORMITY)
  # One call, each distinct test sentence once (dev sentences are not used).
  assert len(calls) == 1 and sorted(calls[0]) == sorted(["1 0", "0 1", "-1 0", "1 1"])


def test_expand_tasks_accepts_align_uniform():
  assert evaluate.expand_tasks("align_uniform") == ["align_uniform"]
  assert evaluate.expand_tasks("sts,align_uniform") == [*sts_data.STS_TASKS, "align_uniform"]
  assert evaluate.expand_tasks("STSBenchmark, align_uniform,align_uniform") == ["STSBenchmark", "align_uniform"]
  with pytest.raises(ValueError, match="unknown task 'alignment'"):
    evaluate.expand_tasks("sts,alignment")


@pytest.mark.parametrize("tasks", ["align_uniform", "STSBenchmark,align_uniform"])
def test_cli_writes_align_uniform_results_and_summary(stsb_root, tmp_path, monkeypatch, capsys, tasks):
  from jaxcse.inference import embedder
  from jaxcse.storage import loading

  # No model: the CLI's loading and embedding are replaced by the toy embedder.
  fake_spec = types.SimpleNamespace(pooling=types.SimpleNamespace(test_pooler="avg"), revision=None)
  monkeypatch.setattr(
    loading, "load_model", lambda path, checkpoint, pooler, revision: loading.Loaded(fake_spec, None, described=True)
  )

  class ToyEmbedder:  # BucketedEmbedder's call, padded (evaluate records only a packed layout).
    packed = False

    def __init__(self, spec, pooler, batch_size, packed=False):
      assert packed is False

    def __call__(self, sentences, params, progress=None):
      return _numeric_embed(sentences)

  monkeypatch.setattr(embedder, "BucketedEmbedder", ToyEmbedder)
  out = str(tmp_path / "out" / "results.json")
  assert evaluate.main(["--model", "fake", "--tasks", tasks, "--data_dir", stsb_root, "--output", out]) == 0
  result = json.load(open(out))
  assert (
    result["provenance"]["model"] == "fake" and "STS/STSBenchmark/sts-test.csv" in result["provenance"]["data_sha256"]
  )
  au = result["tasks"]["align_uniform"]
  assert au["alignment"] == pytest.approx(1.0) and au["uniformity"] == pytest.approx(TOY_UNIFORMITY)
  assert result["summary"]["alignment"] == 1.0
  assert result["summary"]["uniformity"] == round(TOY_UNIFORMITY, 4)
  printed = capsys.readouterr().out
  assert f"alignment: 1.0000  uniformity: {TOY_UNIFORMITY:.4f}" in printed
  assert ("STSBenchmark" in result["summary"]) == ("STSBenchmark" in tasks) == ("STSBenchmark" in printed)


# --- report ------------------------------------------------------------------------------------------------------

STS_KEYS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "Avg")


def _result(base, **extra):
  """A results JSON whose summary has STS values base, base + 1, ..., base + 7."""
  return {"summary": {k: base + i for i, k in enumerate(STS_KEYS)} | extra}


def _rows(table):
  """Markdown table -> {label: cells after the label}."""
  lines = table.splitlines()
  return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


def test_report_single_results_in_the_papers_layout():
  text = report.format_report({"simcse": _result(70.0), "dclr": {"summary": {"STS12": 71.234}}})
  assert "\n\n" not in text  # No transfer scores: one table.
  lines = text.splitlines()
  assert lines[0] == "| model | STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg |"
  assert lines[1] == "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  rows = _rows(text)
  assert rows["simcse"] == ["70.00", "71.00", "72.00", "73.00", "74.00", "75.00", "76.00", "77.00"]
  assert rows["dclr"] == ["71.23"] + ["–"] * 7
  assert "Alignment" not in text and "runs" not in text


def test_report_groups_seed_suffixes_into_mean_and_sample_std():
  results = {
    "mixcse-seed1": _result(70.0, alignment=0.2, uniformity=-2.5),
    "mixcse-seed2": _result(71.0, alignment=0.3, uniformity=-2.0),
    "mixcse-seed13": _result(75.0),
    "simcse-seed1": _result(60.0),
    "baseline": _result(50.0),
  }
  text = report.format_report(results, group_by_seed=True)
  assert text.splitlines()[0].startswith("| model | runs | STS12 |")
  assert text.splitlines()[0].endswith("| Avg | Alignment | Uniformity |")
  rows = _rows(text)
  assert list(rows) == ["mixcse", "simcse", "baseline"]
  # STS12 of mixcse: 70, 71, 75 -> mean 72, sample std sqrt(((-2)^2 + (-1)^2 + 3^2) / 2) = sqrt(7) = 2.6458.
  assert rows["mixcse"][0] == "3"
  assert rows["mixcse"][1] == f"72.00 ± {np.sqrt(7):.2f}" == "72.00 ± 2.65"
  assert rows["mixcse"][8] == "79.00 ± 2.65"  # Avg: 77, 78, 82.
  # Alignment in 2 of 3 runs: 0.2, 0.3 -> mean 0.25, std sqrt(2 * 0.05^2) = 0.0707, marked with its count.
  assert rows["mixcse"][9] == "0.2500 ± 0.0707 (n=2)"
  assert rows["mixcse"][10] == "-2.2500 ± 0.3536 (n=2)"
  # One run: just the value.
  assert rows["simcse"][:2] == ["1", "60.00"] and rows["simcse"][9:] == ["–", "–"]
  assert rows["baseline"][:2] == ["1", "50.00"]


def test_report_without_grouping_keeps_one_row_per_file():
  rows = _rows(report.format_report({"mixcse-seed1": _result(70.0), "mixcse-seed2": _result(71.0)}))
  assert list(rows) == ["mixcse-seed1", "mixcse-seed2"] and rows["mixcse-seed2"][0] == "71.00"


def test_report_transfer_table_only_with_transfer_keys():
  transfer = {
    "MR": 81.18,
    "CR": 86.46,
    "SUBJ": 94.45,
    "MPQA": 88.88,
    "SST2": 85.5,
    "TREC": 89.8,
    "MRPC": 74.43,
    "Avg_transfer": 85.81,
  }
  text = report.format_report({"simcse": _result(70.0, **transfer), "sts-only": _result(60.0)})
  sts_table, transfer_table = text.split("\n\n")
  assert transfer_table.splitlines()[0] == "| model | MR | CR | SUBJ | MPQA | SST-2 | TREC | MRPC | Avg |"
  rows = _rows(transfer_table)
  assert rows["simcse"] == ["81.18", "86.46", "94.45", "88.88", "85.50", "89.80", "74.43", "85.81"]
  assert rows["sts-only"] == ["–"] * 8
  assert _rows(sts_table)["sts-only"][0] == "60.00"


def test_report_of_transfer_results_only_has_no_empty_sts_table():
  transfer = {
    "MR": 61.2,
    "CR": 68.0,
    "SUBJ": 77.97,
    "MPQA": 73.78,
    "SST2": 63.65,
    "TREC": 65.4,
    "MRPC": 71.42,
    "Avg_transfer": 68.77,
  }
  text = report.format_report({"raw-avg": {"summary": transfer}})
  assert "\n\n" not in text and text.splitlines()[0].startswith("| model | MR |")
  assert _rows(text)["raw-avg"][-1] == "68.77"


def test_report_cli_reads_files_and_rejects_files_without_summary(tmp_path, capsys):
  for name, base in [("mixcse-seed1", 70.0), ("mixcse-seed2", 72.0)]:
    (tmp_path / f"{name}.json").write_text(json.dumps(_result(base)))
  paths = [str(tmp_path / "mixcse-seed1.json"), str(tmp_path / "mixcse-seed2.json")]
  assert report.main([*paths, "--group-by-seed-suffix"]) == 0
  # STS12: 70, 72 -> mean 71, sample std sqrt(2) = 1.41.
  assert _rows(capsys.readouterr().out.strip())["mixcse"][:2] == ["2", "71.00 ± 1.41"]
  with pytest.raises(ValueError, match="bad: no 'summary'"):
    report.format_report({"bad": {"tasks": {}}})
