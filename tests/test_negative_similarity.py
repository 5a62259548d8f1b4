"""experiments/paper_ablations/negative_similarity.py: in-batch pairs only, the diagonal out, and a run on a tiny model."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from tests import helpers

SCRIPT = os.path.join(helpers.REPO, "experiments", "paper_ablations", "negative_similarity.py")


@pytest.fixture(scope="module")
def negative_similarity():
  spec = importlib.util.spec_from_file_location("negative_similarity", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_only_different_sentences_of_one_batch_are_paired(negative_similarity):
  # Batch 1 holds two copies of one direction and an orthogonal one; batch 2 repeats batch 1's first direction,
  # which must never be paired with it (different batches).
  e = np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
  cosines = negative_similarity.in_batch_negative_cosines(e, batch_size=3)
  assert cosines.size == 2 * 3 * 2  # Ordered pairs i != j in each batch.
  np.testing.assert_allclose(
    np.sort(cosines), np.sort([1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.5**0.5, 0.5**0.5]), atol=4 * 2.0**-24
  )  # A few float32 roundings.
  stats = negative_similarity.describe(cosines, phi=0.9)
  assert stats["share_above_phi"] == pytest.approx(2 / 12)
  assert stats["max"] == pytest.approx(1.0)


def test_a_run_on_a_tiny_model_writes_its_report(negative_similarity, tiny_model_dir, tmp_path, capsys):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("".join(f"sentence number {i} about topic {i % 7}\n" for i in range(40)))
  out = tmp_path / "report.json"
  assert (
    negative_similarity.main(
      [
        "--corpus",
        str(corpus),
        "--model",
        f"tiny={tiny_model_dir}",
        "--pooler",
        "avg",
        "--sentences",
        "32",
        "--batch_size",
        "8",
        "--json",
        str(out),
      ]
    )
    == 0
  )
  report = json.loads(out.read_text())["models"]["tiny"]
  assert report["pooler"] == "avg" and report["pairs"] == 4 * 8 * 7
  assert -1 <= report["mean"] <= report["max"] <= 1
  assert "tiny (avg): mean" in capsys.readouterr().out
  with pytest.raises(SystemExit):
    negative_similarity.main(
      ["--corpus", str(corpus), "--model", f"tiny={tiny_model_dir}", "--sentences", "30", "--batch_size", "8"]
    )
