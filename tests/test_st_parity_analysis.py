"""experiments/st_parity/analyze.py: Welch's TOST, its intervals and verdicts, power, and the report, on fixed numbers."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import stats

from tests import helpers

SCRIPT = os.path.join(helpers.REPO, "experiments", "st_parity", "analyze.py")


@pytest.fixture(scope="module")
def analyze():
  spec = importlib.util.spec_from_file_location("st_parity_analyze", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # Its dataclasses look their module up while it loads.
  spec.loader.exec_module(module)
  yield module
  del sys.modules[spec.name]


def test_tost_is_welchs_by_hand(analyze):
  a, b = [85.12, 85.41, 84.93], [85.30, 85.02, 85.61]
  # Welch by hand: the means' difference, its standard error, Welch-Satterthwaite's degrees of freedom.
  ma, mb = sum(a) / 3, sum(b) / 3
  va = sum((x - ma) ** 2 for x in a) / 2 / 3
  vb = sum((x - mb) ** 2 for x in b) / 2 / 3
  d, se = ma - mb, math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
  t = analyze.tost(a, b, margin=0.5)
  assert t.difference == pytest.approx(d, abs=1e-12)
  assert t.se == pytest.approx(se, rel=1e-12)
  assert t.df == pytest.approx(df, rel=1e-12)
  assert t.p_lower == pytest.approx(stats.t.sf((d + 0.5) / se, df), rel=1e-10)
  assert t.p_upper == pytest.approx(stats.t.cdf((d - 0.5) / se, df), rel=1e-10)
  for level, (lo, hi) in ((0.90, t.ci90), (0.95, t.ci95)):
    half = stats.t.ppf(1 - (1 - level) / 2, df) * se
    assert (lo, hi) == pytest.approx((d - half, d + half), abs=1e-10)
  # The 90% interval inside +-margin is the same statement as both one-sided tests rejecting at 0.05.
  assert (t.p < 0.05) == (t.ci90[0] > -0.5 and t.ci90[1] < 0.5)


@pytest.mark.parametrize(
  "a, b, verdict",
  [
    ([85.00, 85.02, 84.98], [85.01, 84.99, 85.03], "equivalent"),  # SD 0.02: the 90% interval is inside +-0.5.
    ([83.00, 83.02, 82.98], [85.01, 84.99, 85.03], "different"),  # 2 points apart, tightly.
    ([85.0, 86.0, 84.0], [85.5, 84.5, 86.5], "undecided"),  # SD 1: the interval spans the margin.
    ([85.40, 85.45, 85.50], [85.01, 84.99, 85.03], "undecided"),  # 0.45 apart: not within, not beyond.
  ],
)
def test_verdicts(analyze, a, b, verdict):
  assert analyze.tost(a, b, margin=0.5).verdict == verdict


def test_vectorized_decisions_equal_scipys(analyze):
  rng = np.random.default_rng(1)
  a, b = rng.normal(0.1, 0.3, (400, 3)), rng.normal(0.0, 0.2, (400, 3))
  fast = analyze.tost_rejects(a, b, 0.5)
  slow = np.array([analyze.tost(x, y, 0.5).p < 0.05 for x, y in zip(a, b)])
  assert 0 < fast.sum() < len(fast)  # Both outcomes occur, so the comparison means something.
  np.testing.assert_array_equal(fast, slow)


def test_power_matches_the_normal_limit(analyze):
  # With 200 seeds a side the SD is nearly known: power = P(|d| < m - z se), d ~ N(0, se), se = sigma sqrt(2 / n).
  se, crit = math.sqrt(2 / 200), stats.t.ppf(0.95, 398)
  expected = 2 * stats.norm.cdf((0.3 - crit * se) / se) - 1
  assert analyze.tost_power(200, 1.0, margin=0.3, sims=20_000) == pytest.approx(expected, abs=0.015)
  assert analyze.tost_power(3, 10.0, margin=0.5, sims=20_000) < 0.01  # Hopeless: seed SD 20 times the margin.


def test_margin_for_power_is_where_power_crosses(analyze):
  m = analyze.margin_for_power(3, 0.2, power=0.8, sims=20_000)
  assert analyze.tost_power(3, 0.2, margin=m, sims=20_000) >= 0.8
  assert analyze.tost_power(3, 0.2, margin=m - 0.001, sims=20_000) < 0.8
  assert analyze.margin_for_power(5, 0.2, sims=20_000) < m  # More seeds, a narrower margin.


def _run(folder, name, spearman, sts, steps_per_s=None, cpu_per_step=None):
  os.makedirs(os.path.join(folder, name))
  process = {"wall_s": 100.0, "cpu_s": 90.0, "loadavg_before": [1.0, 1, 1], "loadavg_after": [2.0, 1, 1]}
  records = {
    "primary": {"pairs_spearman": spearman / 100, "process": process},
    "secondary": {"sts_avg_x100": sts, "process": process},
  }
  if steps_per_s:
    records["train"] = {"steps": 68, "process": process, "steps_per_s": steps_per_s, "cpu_s_per_step": cpu_per_step}
  for part, record in records.items():
    with open(os.path.join(folder, name, f"{part}.json"), "w") as f:
      json.dump(record, f)


def test_report(analyze, tmp_path):
  _run(tmp_path, "reference", 86.72, 80.0)
  for s, (j, t) in enumerate([(85.70, 85.75), (85.80, 85.72), (85.74, 85.78)], start=1):
    _run(tmp_path, f"jaxcse_seed{s}", j, 80.0 + s / 10, steps_per_s=0.2, cpu_per_step=5.0)
    _run(tmp_path, f"st_seed{s}", t, 80.0 + s / 10, steps_per_s=0.1 * s, cpu_per_step=10.0)
  text = analyze.report(analyze.load_runs(str(tmp_path)))
  assert "| jaxcse_seed1 | 85.70 | 80.10 | 68 |" in text
  assert "**equivalent**" in text
  assert "ratio jaxcse / s-t 1.222 (seed pairs 0.667-2.000)" in text  # mean of 2, 1, 2/3
  assert "jaxcse / s-t 0.500 (0.500-0.500" in text


def test_report_of_unfinished_runs(analyze, tmp_path):
  _run(tmp_path, "reference", 86.72, 80.0)
  _run(tmp_path, "jaxcse_seed1", 85.7, 80.0, steps_per_s=0.2, cpu_per_step=5.0)
  text = analyze.report(analyze.load_runs(str(tmp_path)))
  assert "Not finished (primary or secondary missing): st_seed1, jaxcse_seed2" in text
  assert "Needs at least 2 seeds a side." in text
