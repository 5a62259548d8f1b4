"""The official code at the tables' budget: experiments/positive_control/tost.py's ``budget_verdict`` reads the
committed rule (positive_control README, "Verdict rule") on synthetic runs, one case per verdict branch."""

import importlib.util
import os

import numpy as np
import pytest

from tests import helpers

TOST = os.path.join(helpers.REPO, "experiments", "positive_control", "tost.py")


@pytest.fixture(scope="module")
def tost():
  spec = importlib.util.spec_from_file_location("verdict_tost", TOST)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _runs(values) -> dict:
  return {seed: {"sts_avg": float(v)} for seed, v in zip((1, 2, 3, 4, 5), values)}


NOISE = np.array([0.05, -0.03, 0.01, -0.04, 0.02])  # A small paired spread: d's 90% CI well inside +-0.5.
BASE = np.array([52.9, 53.1, 52.7, 53.0, 52.8])


def _sides(official_shift: dict, gains: dict) -> tuple[dict, dict]:
  """jaxcse's rows (None at BASE, each augmented row at BASE + its gain) and the official's (jaxcse + shift)."""
  jaxcse = {"none": _runs(BASE)}
  for row, gain in gains.items():
    jaxcse[row] = _runs(BASE + gain)
  official = {
    row: _runs(np.array([v["sts_avg"] for v in runs.values()]) + official_shift[row]) for row, runs in jaxcse.items()
  }
  return official, jaxcse


def test_holm_is_the_tables_holm(tost):
  adjusted = tost.holm({"a": 0.01, "b": 0.04, "c": 0.03})
  assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_no_verdict_before_every_seed_of_every_row(tost):
  official, jaxcse = _sides(
    {r: NOISE for r in ("none", "crop10", "word_deletion10")}, {"crop10": 2.0, "word_deletion10": 1.0}
  )
  del official["word_deletion10"][5]
  assert tost.budget_verdict(official, jaxcse) is None
  assert tost.budget_lines(None, 0.5) == ["budget verdict: not yet (needs seeds 1-5 of every row on both sides)"]


def test_equivalent_rows_support_the_claim_and_positive_gains_are_a_reversal(tost):
  gains = {"crop10": np.array([2.0, 2.3, 1.8, 2.1, 1.9]), "word_deletion10": np.array([1.0, 1.2, 0.9, 1.1, 0.8])}
  official, jaxcse = _sides({r: NOISE for r in ("none", "crop10", "word_deletion10")}, gains)
  verdict = tost.budget_verdict(official, jaxcse)
  assert [r["verdict"] for r in verdict["rows"].values()] == ["equivalent"] * 3
  assert verdict["overall"] == "supported"
  assert verdict["reversal"] == "the official code reverses too"
  lines = tost.budget_lines(verdict, 0.5)
  assert "jaxcse trains what the official code trains: supported" in lines


def test_one_different_row_contradicts_the_claim(tost):
  shifts = {"none": NOISE, "crop10": 3.0 + NOISE, "word_deletion10": NOISE}
  official, jaxcse = _sides(shifts, {"crop10": 2.0 + NOISE, "word_deletion10": -0.5 + NOISE})
  verdict = tost.budget_verdict(official, jaxcse)
  assert verdict["rows"]["crop10"]["verdict"] == "different (official higher)"
  assert verdict["rows"]["crop10"]["p_holm"] < 0.05
  assert verdict["overall"] == "contradicted"
  # Official gains: crop10 +5 (official) -> positive; word deletion -0.5 -> not positive: mixed.
  assert verdict["reversal"] == "mixed"


def test_noisy_rows_are_not_decided_and_losses_are_no_reversal(tost):
  noisy = np.array([1.5, -1.2, 0.9, -1.4, 0.3])
  official, jaxcse = _sides(
    {r: noisy for r in ("none", "crop10", "word_deletion10")},
    {"crop10": np.array([-0.5, -0.2, -0.9, -0.1, -0.3]), "word_deletion10": np.array([-0.4, 0.0, -0.6, -0.2, -0.3])},
  )
  verdict = tost.budget_verdict(official, jaxcse)
  assert [r["verdict"] for r in verdict["rows"].values()] == ["not decided"] * 3
  assert verdict["overall"] == "not decided"
  assert verdict["reversal"] == "the official code does not reverse"


def test_a_difference_that_holm_does_not_confirm_is_not_different(tost):
  # Unadjusted p just under 0.05 in one row, the others far from significant: Holm multiplies it by 3.
  shifts = {"none": np.array([0.9, 0.1, 0.6, 0.2, 0.7]), "crop10": NOISE * 20, "word_deletion10": NOISE * 20}
  official, jaxcse = _sides(shifts, {"crop10": 2.0, "word_deletion10": 1.0})
  row = tost.budget_verdict(official, jaxcse)["rows"]["none"]
  assert row["p_diff"] < 0.05 <= row["p_holm"]
  assert row["verdict"] == "not decided"
