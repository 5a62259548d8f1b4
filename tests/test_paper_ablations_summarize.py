"""experiments/paper_ablations/summarize.py on a small fake study: tables, Kendall's tau, best rates, plots, errors."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest
from scipy import stats

from tests import helpers

SCRIPT = os.path.join(helpers.REPO, "experiments", "paper_ablations", "summarize.py")


@pytest.fixture(scope="module")
def summarize():
  spec = importlib.util.spec_from_file_location("paper_ablations_summarize", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # Its dataclasses look their module up while it loads.
  spec.loader.exec_module(module)
  yield module
  del sys.modules[spec.name]


def _write(path, data):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    if isinstance(data, list):
      f.writelines(json.dumps(r) + "\n" for r in data)
    else:
      json.dump(data, f)


def _fake_run(
  out,
  group,
  name,
  *,
  avg,
  stsb_dev,
  selection=None,
  steps=(0, 125, 250),
  best_step=250,
  scores=False,
  temperature=0.05,
  align_uniform=None,
):
  """A finished run as run_study.sh leaves it: results JSON, and metrics/summary/config under runs/."""
  selection = stsb_dev if selection is None else selection
  _write(
    os.path.join(out, "results", group, f"{name}.json"),
    {"model": f"workdirs/{group}/{name}", "summary": {"Avg": avg, "alignment": 0.2, "uniformity": -2.0}},
  )
  records = []
  for i, step in enumerate(steps):
    if step:
      record = {"step": step, "loss": 1.0 / step}
      if scores:
        record.update(pos_score=0.9, neg_score=0.3 - 0.001 * step, mix_score=0.5 - 0.001 * step)
      records.append(record)
    record = {
      "step": step,
      "eval/stsb_dev": (stsb_dev if step == best_step else stsb_dev - 5) / 100,
      "eval/metric": (selection if step == best_step else selection - 5) / 100,
    }
    if align_uniform is not None:
      record.update({"eval/alignment": align_uniform[i][0], "eval/uniformity": align_uniform[i][1]})
    records.append(record)
  run_dir = os.path.join(out, "runs", group, name)
  _write(os.path.join(run_dir, "metrics.jsonl"), records)
  _write(os.path.join(run_dir, "summary.json"), {"best_step": best_step, "best_metric": selection / 100})
  _write(os.path.join(run_dir, "config.json"), {"loss": {"temperature": temperature}})


AVG_WOBBLE = {"p0.0": {1: 0.5, 2: -0.5, 3: 1.0}, "p0.2": {1: -1.0, 2: 0.25, 3: 0.5}}


@pytest.fixture
def study(tmp_path):
  out = str(tmp_path / "study")
  # The grid: SimCSE's best rate is 3e-4 (selection 60 > 55), MixCSE's 1e-3, DCLR's 1e-4 (its own metric).
  for name, dev, sel, avg in [
    ("simcse-lr1e-4-seed1", 55.0, None, 45.0),
    ("simcse-lr3e-4-seed1", 60.0, None, 50.0),
    ("mixcse-lr1e-3-seed1", 61.0, None, 51.0),
    ("dclr-lr1e-4-seed1", 58.0, 56.0, 48.0),
    ("dclr-lr3e-4-seed1", 59.0, 54.0, 49.0),
  ]:
    _fake_run(out, "lr_grid", name, avg=avg, stsb_dev=dev, selection=sel, scores=name.startswith("mixcse"))
  for seed, avg in [(2, 52.0), (3, 54.0)]:
    _fake_run(out, "main", f"simcse-lr3e-4-seed{seed}", avg=avg, stsb_dev=60.0)
  # DCLR clipped as SimCSE (main_clip): its own grid at seed 1 (1e-4 beats 1e-3 by the selection metric), then
  # seeds 2-3 at 1e-4.
  _fake_run(out, "main_clip", "dclr-lr1e-3-seed1", avg=53.0, stsb_dev=59.0, selection=55.0)
  for seed, avg in [(1, 49.0), (2, 50.0), (3, 51.0)]:
    _fake_run(out, "main_clip", f"dclr-lr1e-4-seed{seed}", avg=avg, stsb_dev=58.0, selection=57.0)
  # Dropout rows, ours: fixed 0.1 < p 0.0 < p 0.5 < p 0.1 (STS-B dev), v1's order; the published table has
  # p 0.0 (71.1) just above p 0.5 (71.0).
  # p 0.2 sits between p 0.5 and p 0.1 in both. STS avg: each row base - 10 plus the seed's shared delta, plus, for
  # p 0.0 and p 0.2, a seed-to-seed wobble of its own (AVG_WOBBLE) so that their paired t is finite.
  for row, base in [("fixed0.1", 40.0), ("p0.0", 50.0), ("p0.5", 51.0), ("p0.2", 55.0), ("p0.1", 60.0)]:
    for seed, delta in [(1, -2.0), (2, 0.0), (3, 2.0)]:
      wobble = AVG_WOBBLE.get(row, {}).get(seed, 0.0)
      _fake_run(out, "dropout", f"{row}-lr3e-4-seed{seed}", avg=base - 10 + delta + wobble, stsb_dev=base + delta)
  # Dynamics: the four runs of SimCSE's Fig. 2 and DCLR's three, with alignment and uniformity at every evaluation.
  for i, name in enumerate(
    [
      "simcse-lr3e-4-seed1",
      "no_dropout-lr3e-4-seed1",
      "fixed0.1-lr3e-4-seed1",
      "delete_one_word-lr3e-4-seed1",
      "dclr-lr1e-4-seed1",
      "dclr_loss_x128-lr1e-4-seed1",
      "dclr_eps_div128-lr1e-4-seed1",
    ]
  ):
    trajectory = [(0.10, -1.5), (0.15 + 0.1 * i, -2.0 - 0.1 * i), (0.18 + 0.2 * i, -2.4 - 0.1 * i)]
    _fake_run(out, "dynamics", name, avg=50.0 + i, stsb_dev=60.0, align_uniform=trajectory)
  return out


def test_tables_and_plots_of_a_fake_study(summarize, study, capsys):
  assert summarize.main(["--out", study]) == 0
  text = open(os.path.join(study, "tables.md")).read()
  assert capsys.readouterr().out == text
  # The grid marks each method's best rate by its own selection metric (DCLR: 56 at 1e-4 beats 54 at 3e-4).
  assert "| simcse | 3e-4 | 60.00 | 60.00 | 50.00 | yes |" in text
  assert "| simcse | 1e-4 | 55.00 | 55.00 | 45.00 |  |" in text
  assert "| dclr | 1e-4 | 56.00 | 58.00 | 48.00 | yes |" in text
  # Main: SimCSE at its best rate, the grid's seed 1 and the main seeds 2 and 3: STS avg 50, 52, 54.
  assert "| simcse | 3e-4 | 3 | 60.00 ± 0.00 | 52.00 ± 2.00 | 76.25 (SimCSE, EMNLP 2021, Table 5) |" in text
  # DCLR clipped as SimCSE: its grid rows beside the grid's, and a main row of its own at its best rate (the seeds
  # at 1e-4 only), no paper number.
  assert "| dclr, clipped as SimCSE | 1e-4 | 57.00 | 58.00 | 49.00 | yes |" in text
  assert "| dclr, clipped as SimCSE | 1e-3 | 55.00 | 59.00 | 53.00 |  |" in text
  assert "| dclr, clipped as SimCSE (max_grad_norm / 128) | 1e-4 | 3 | 58.00 ± 0.00 | 50.00 ± 1.00 | – |" in text
  # Dropout table: the paper's numbers (published and v1) beside ours, mean ± std over the three seeds, STS avg
  # (primary) first, then its paired difference from p 0.1 with the Holm-corrected p, then STS-B dev.
  p00 = [40.0 + d + AVG_WOBBLE["p0.0"][s] for s, d in [(1, -2.0), (2, 0.0), (3, 2.0)]]
  assert (f"| p = 0.0 (no dropout) | `model.dropout=0.0` | 71.1 | 64.9 | {summarize.cell(p00)} | ") in text
  assert "| p = 0.01 | `model.dropout=0.01` | 72.6 | 69.5 | – | – | – |" in text  # Not run: dashes, 0 seeds.
  # Paired against p 0.1 seed by seed. fixed 0.1 and p 0.5 differ by the same amount in every seed (t infinite,
  # p 0); p 0.0 and p 0.2 wobble, so Holm multiplies the smaller of their two p values by 2 (two tests rank
  # below it: p 0) and keeps the larger (times 1) unless it is below that.
  p_00 = stats.ttest_rel(p00, [48.0, 50.0, 52.0]).pvalue
  p_02 = stats.ttest_rel(
    [45.0 + d + AVG_WOBBLE["p0.2"][s] for s, d in [(1, -2.0), (2, 0.0), (3, 2.0)]], [48.0, 50.0, 52.0]
  ).pvalue
  low, high = sorted([p_00, p_02])
  holm_00 = 2 * low if p_00 == low else max(2 * low, high)
  assert f"| {summarize.cell(p00)} | {np.mean(p00) - 50.0:+.2f} (p Holm {holm_00:.3f}) | 50.00 ± 2.00 |" in text
  assert "| -20.00 (p Holm 0.000) | 40.00 ± 2.00 |" in text  # fixed 0.1
  assert "| p = 0.1 (SimCSE) | `model.dropout=0.1` | 82.5 | 79.1 | 50.00 ± 2.00 | baseline | 60.00 ± 2.00 |" in text
  # The untrained encoder's row (experiments/positive_control/results/untrained-encoder.json) under every table.
  assert text.count("| untrained encoder (no training) |  |  |  | 38.21 |  | 53.17 |") == 2  # dropout, augment
  # Published order fixed < p 0.5 < p 0.0 < p 0.2 < p 0.1; ours has p 0.0 < p 0.5: one discordant pair of ten.
  tau = stats.kendalltau([71.1, 71.0, 80.5, 82.5, 43.6], [50.0, 51.0, 55.0, 60.0, 40.0])
  assert tau.statistic == pytest.approx(0.8)
  assert f"Kendall's tau (published paper vs ours, STS-B dev): +0.800 (p = {tau.pvalue:.3g}, 5 rows)." in text
  tau_v1 = stats.kendalltau([64.9, 67.4, 78.2, 79.1, 45.2], [50.0, 51.0, 55.0, 60.0, 40.0])
  assert f"Kendall's tau (v1 paper vs ours, STS-B dev): +1.000 (p = {tau_v1.pvalue:.3g}, 5 rows)." in text
  # The augment table's None row is the dropout stage's p 0.1 runs; its other rows have no runs, so no tau (below 5
  # rows); MixCSE and DCLR have no runs yet.
  assert "| None (SimCSE, dropout 0.1) |  | 82.5 | 79.1 | 50.00 ± 2.00 | baseline | 60.00 ± 2.00 |" in text
  assert "Kendall's tau (published paper vs ours, STS-B dev): not given (fewer than 5 rows with both numbers)." in text
  for name in ("simcse_fig2_align_uniform.png", "dclr_fig4_uniformity.png", "mixcse_fig4a_scores.png"):
    path = os.path.join(study, "plots", name)
    assert os.path.getsize(path) > 10_000, name
    assert f"](plots/{name})" in text


def test_kendall_is_scipys_tau_on_the_rows_with_both_numbers(summarize):
  paper = [71.1, 72.6, None, 82.5, 81.4, 43.6, 80.5]
  ours = [50.0, 49.0, 55.0, None, 58.0, 30.0, 57.0]
  tau, p, n = summarize.kendall(paper, ours)
  expected = stats.kendalltau([71.1, 72.6, 81.4, 43.6, 80.5], [50.0, 49.0, 58.0, 30.0, 57.0])
  assert n == 5 and tau == pytest.approx(expected.statistic) and p == pytest.approx(expected.pvalue)
  assert tau == pytest.approx(8 / 10)  # One discordant pair of ten.
  # Below 5 rows with both numbers: no tau (4 rows order too little; its smallest two-sided p is 1/12).
  assert summarize.kendall(paper[:-1], ours[:-1]) is None


def test_holm_is_the_step_down_correction(summarize):
  # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (never below an earlier one).
  assert summarize.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert summarize.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_cell_is_mean_and_sample_std(summarize):
  assert summarize.cell([]) == "–"
  assert summarize.cell([51.234]) == "51.23"
  assert summarize.cell([50.0, 51.0, 54.0]) == f"51.67 ± {np.std([50.0, 51.0, 54.0], ddof=1):.2f}"


def test_a_broken_results_file_is_one_error_naming_it(summarize, study, capsys):
  broken = os.path.join(study, "results", "dropout", "p0.2-lr3e-4-seed1.json")
  with open(broken, "w") as f:
    f.write("{not json")
  assert summarize.main(["--out", study]) == 1
  assert broken in capsys.readouterr().err
  assert summarize.main(["--out", os.path.join(study, "absent")]) == 1
  assert "no results/ folder" in capsys.readouterr().err


def test_the_horizon_and_mask_stages_apply_their_preregistered_rules(summarize, study):
  for seed, base in [(1, 48.0), (2, 50.0), (3, 52.0)]:  # The study's dropout/p0.1: 48, 50, 52 (seeds 1-3).
    _fake_run(study, "augment", f"crop10-lr3e-4-seed{seed}", avg=base + 3.0, stsb_dev=60.0)
    none = 54.0 + seed
    for row, gain in [
      ("none", 0.0),
      ("crop10", {1: 0.2, 2: 0.4, 3: 0.3}[seed]),
      ("crop30", {1: 0.0, 2: 0.1, 3: -0.1}[seed]),
    ]:
      _fake_run(study, "horizon", f"{row}-lr3e-4-seed{seed}", avg=none + gain, stsb_dev=61.0, best_step=125)
      _write(
        os.path.join(study, "results", "horizon", f"{row}-lr3e-4-seed{seed}-last.json"),
        {"summary": {"Avg": none + gain - 1.0}},
      )
    _fake_run(study, "mask", f"p0.1-lr3e-4-seed{seed}", avg=base + 1.0, stsb_dev=59.0)
    _fake_run(
      study, "mask", f"crop10-lr3e-4-seed{seed}", avg=base + 1.0 + {1: 2.5, 2: 2.1, 3: 3.0}[seed], stsb_dev=60.0
    )
  official = os.path.join(study, "official-seed{}.json")
  for seed, avg in [(1, 49.0), (2, 51.0), (3, 52.0)]:
    _write(official.format(seed), {"summary": {"Avg": avg}})
  runs = summarize.load_runs(study)
  horizon = "\n".join(summarize.horizon_table(study, runs))
  crop10 = [55.2, 56.4, 57.3]  # None (54 + seed) plus its gains; the last step 1 below each.
  assert (
    f"| crop 10% | 3 | {summarize.cell(crop10)} | {summarize.cell([v - 1.0 for v in crop10])} | 61.00 ± 0.00 | "
    "125, 125, 125 | +0.20, +0.40, +0.30 | +3.00, +3.00, +3.00 |"
  ) in horizon
  assert "| untrained encoder (no training) | – | 38.21 | – | 53.17 | – | – | – |" in "\n".join(
    summarize.horizon_table(study, runs, {"sts_avg": 38.21, "stsb_dev": 53.17})
  )
  assert "| untrained encoder (no training) | – | 38.21 | – | – | 53.17 |" in "\n".join(
    summarize.mask_table(runs, official, {"sts_avg": 38.21, "stsb_dev": 53.17})
  )
  half = stats.t.ppf(0.975, 2) * np.std([0.2, 0.4, 0.3], ddof=1) / np.sqrt(3)
  assert (
    f"mean 0.30, 95% interval [{0.3 - half:+.2f}, {0.3 + half:+.2f}] over 3 seeds; crop 30% below crop 10%: yes"
    in horizon
  )
  assert "Verdict by the pre-registered rule: the horizon (mean paired gain <= +0.5)." in horizon
  mask = "\n".join(summarize.mask_table(runs, official))
  assert "| None (dropout 0.1) | 3 | 51.00 ± 2.00 | 50.00 ± 2.00 | +1.00, +1.00, +1.00 | 59.00 ± 0.00 |" in mask
  pooled = np.sqrt((4.0 + np.var([49.0, 51.0, 52.0], ddof=1)) / 2)
  assert f"d = {51.0 - np.mean([49.0, 51.0, 52.0]):+.2f}, pooled SD {pooled:.2f}: equivalent" in mask
  assert "Crop 10%'s paired gain with the per-element mask: +2.50, +2.10, +3.00" in mask
  assert "with the shared mask, the same seeds: +3.00, +3.00, +3.00." in mask
  assert "Verdict by the pre-registered rule: not the mask (>= +2.0 in every seed)." in mask
  # Two seeds decide nothing; a gain between the two thresholds is "in part".
  assert summarize.reversal_verdict({1: 3.0, 2: 3.0}) == "no decision: 2 of 3 seeds finished"
  assert summarize.reversal_verdict({1: 3.0, 2: 1.0, 3: 0.4}) == "undecided (between the two)"
  assert summarize.reversal_verdict({1: 0.2, 2: 0.4, 3: 0.3}, extra_condition=False) == "undecided (between the two)"
  # The horizon's "gain gone" needs crop 30% measured on the same seeds: untested is not "undecided".
  assert summarize.horizon_verdict({1: 0.2, 2: 0.4, 3: 0.3}, {1: 0.0}, True).startswith(
    "no decision: crop 10%'s condition for the horizon is met (mean paired gain <= +0.5), crop 30%'s is untested "
    "(seed(s) 2, 3 not run)"
  )
  assert (
    summarize.horizon_verdict({1: 0.2, 2: 0.4, 3: 0.3}, {1: 0.0, 2: 0.1, 3: -0.1}, True)
    == "the horizon (mean paired gain <= +0.5)"
  )
  assert summarize.horizon_verdict({1: 2.2, 2: 2.4, 3: 2.3}, {}, False) == "not the horizon (>= +2.0 in every seed)"


def _runs(summarize, group: str, row: str, lr: str, scores: dict[int, float]) -> list:
  return [summarize.Run(group, row, lr, seed, avg, 60.0, 60.0, 0.5, -3.0, None) for seed, avg in scores.items()]


@pytest.mark.parametrize(
  "before, verdict",
  [
    ({1: 53.0, 2: 52.5, 3: 52.0}, "the crop's semantics explain the reversal"),  # Gains +0, -0.5, -1: mean <= 0.
    ({1: 54.0, 2: 54.1, 3: 53.5}, "not the crop's semantics"),  # Gains +1.0, +1.6, +1.5: all >= +1.0.
    ({1: 54.0, 2: 53.0, 3: 53.5}, "in part"),  # Gains +1.0, +0.5, +1.5: mean > 0, one below +1.0.
    ({1: 54.0, 2: 54.1}, "no decision: 2 of 3 seeds finished"),
  ],
)
def test_the_crop_regime_test_reads_its_pre_registered_rule(summarize, before, verdict):
  runs = (
    _runs(summarize, "mask", "p0.1", "1e-3", {1: 53.0, 2: 52.5, 3: 52.0, 4: 53.1})
    + _runs(summarize, "mask", "crop10", "1e-3", {1: 55.0, 2: 55.1, 3: 55.2})
    + _runs(summarize, "regime_crop", "crop10_before", "1e-3", before)
  )
  text = "\n".join(summarize.regime_table(runs))
  assert f"Verdict by the pre-registered rule: {verdict}" in text
  assert "(a): crop before truncation" in text and "(b)" not in text


@pytest.mark.parametrize(
  "crop, deletion, verdict",
  [
    ({1: 88.0, 2: 88.0, 3: 88.0}, {1: 87.6, 2: 87.6, 3: 87.6}, "against the regime explanation"),  # All >= +0.5.
    ({1: 86.0, 2: 86.0, 3: 86.0}, {1: 86.5, 2: 86.5, 3: 86.5}, "for the regime explanation"),  # All <= -0.5.
    ({1: 88.0, 2: 88.0, 3: 88.0}, {1: 87.4, 2: 87.6, 3: 87.6}, "not decided"),  # One gain +0.4.
    ({1: 88.0, 2: 88.0}, {1: 87.6, 2: 87.6, 3: 87.6}, "no decision: 2 of 3 paired seeds finished for both rows."),
    # Seeds still to run cannot decide once a finished gain has ruled out each side (+0.4 < +0.5, and > -0.5).
    ({1: 88.0, 2: 87.4}, {1: 87.6, 2: 87.6}, "no decision: 2 of 3 paired seeds finished for both rows; the rule can"),
    (
      {1: 88.0, 2: 88.0},
      {1: 87.6, 2: 87.6},
      "no decision: 2 of 3 paired seeds finished for both rows.",
    ),  # 'against' open.
    ({1: 86.0, 2: 86.0}, {1: 86.4, 2: 86.4}, "no decision: 2 of 3 paired seeds finished for both rows."),  # 'for' open.
  ],
)
def test_the_minilm_regime_test_reads_its_pre_registered_rule(summarize, crop, deletion, verdict):
  runs = (
    _runs(summarize, "regime_minilm", "none", "3e-5", {1: 87.0, 2: 87.0, 3: 87.0})
    + _runs(summarize, "regime_minilm", "crop10", "3e-5", crop)
    + _runs(summarize, "regime_minilm", "word_deletion10", "3e-5", deletion)
  )
  text = "\n".join(summarize.regime_table(runs))
  assert f"Verdict by the pre-registered rule: {verdict}" in text


def test_the_mask_stage_reads_its_pre_registered_seeds_only(summarize):
  runs = (
    _runs(summarize, "mask", "p0.1", "1e-3", {1: 53.0, 2: 53.0, 3: 53.0, 4: 60.0, 5: 60.0})
    + _runs(summarize, "mask", "crop10", "1e-3", {1: 55.5, 2: 55.5, 3: 55.5, 4: 50.0, 5: 50.0})
    + _runs(summarize, "dropout", "p0.1", "1e-3", {1: 51.0, 2: 51.0, 3: 51.0})
    + _runs(summarize, "augment", "crop10", "1e-3", {1: 54.0, 2: 54.0, 3: 54.0})
  )
  text = "\n".join(summarize.mask_table(runs, official_path="/nonexistent-{}"))
  assert "+2.50, +2.50, +2.50" in text and "not the mask" in text  # Seeds 4-5 would have made it "in part".


def test_the_sign_question_pools_the_crop_and_deletion_rows_over_seeds_1_to_3(summarize):
  base = {1: 50.0, 2: 51.0, 3: 52.0, 4: 90.0, 5: 90.0}  # Seeds 4-5 (the key rows have them) must not enter.
  gains = {row: {1: 1.0 + i, 2: -0.5 + i, 3: 2.0 - i} for i, row in enumerate(summarize.SIGN_ROWS)}
  runs = _runs(summarize, "mask", "p0.1", "1e-3", base)
  for row, by_seed in gains.items():
    extra = {4: 0.0, 5: 0.0} if row == "crop10" else {}
    runs += _runs(summarize, "mask", row, "1e-3", {s: base[s] + g for s, g in {**by_seed, **extra}.items()})
  result = summarize.pooled_sign(runs, "mask", "mask")
  expected = np.array([[by_seed[s] for s in (1, 2, 3)] for by_seed in gains.values()])
  np.testing.assert_allclose(result["gains"], expected, atol=1e-12)
  assert result["above"] == int((expected > 0).sum())
  t = stats.ttest_1samp(expected.mean(axis=0), 0.0)
  assert result["t"] == pytest.approx(t.statistic, rel=1e-12) and result["p"] == pytest.approx(t.pvalue, rel=1e-12)
  line = summarize.pooled_sign_line(runs, "mask", "mask")
  assert f"above None in {result['above']} of 21 row-seeds" in line and f"t {t.statistic:.2f}" in line
  # One row missing a seed: no pooled number yet, said so.
  partial = [r for r in runs if not (r.row == "delete_one_word" and r.seed == 3)]
  assert summarize.pooled_sign(partial, "mask", "mask") is None
  assert "not yet" in summarize.pooled_sign_line(partial, "mask", "mask")


def test_a_per_element_table_shows_each_rows_shared_mask_score_beside_it(summarize):
  runs = (
    _runs(summarize, "mask", "p0.1", "1e-3", {1: 53.0, 2: 54.0, 3: 55.0})
    + _runs(summarize, "mask", "crop10", "1e-3", {1: 56.0, 2: 55.0, 3: 57.0})
    + _runs(summarize, "dropout", "p0.1", "1e-3", {1: 51.0, 2: 52.0, 3: 50.0})
    + _runs(summarize, "augment", "crop10", "1e-3", {1: 54.0, 2: 54.5})
  )
  name = "augment" + summarize.PER_ELEMENT
  text = "\n".join(summarize.experiment_table(name, summarize.EXPERIMENTS[name], runs))
  assert "| ours: STS avg | STS avg, shared mask | STS avg: paired d vs p0.1 |" in text
  none = f"| {summarize.cell([53.0, 54.0, 55.0])} | {summarize.cell([51.0, 52.0, 50.0])} | baseline |"
  crop = f"| {summarize.cell([56.0, 55.0, 57.0])} | {summarize.cell([54.0, 54.5])} | +2.00 (p Holm"
  assert none in text and crop in text
  assert "| crop 20% | `augment.crop=0.2` | 71.4 | 70.1 | – | – | – |" in text  # Run with neither mask.
  # The shared-mask table has no such column.
  assert "shared mask" not in "\n".join(summarize.experiment_table("augment", summarize.EXPERIMENTS["augment"], runs))


@pytest.mark.parametrize(
  "result, verdict",
  [
    (None, "no decision"),
    ({"t": 5.0, "p": 0.04}, "the reversal holds (crop and deletion gain)"),
    ({"t": -5.0, "p": 0.04}, "the paper's direction (they lose)"),
    ({"t": 3.0, "p": 0.096}, "not decided"),
    ({"t": -1.0, "p": 0.42}, "not decided"),
  ],
)
def test_the_sign_question_reads_its_fixed_rule(summarize, result, verdict):
  assert summarize.sign_verdict(result).startswith(verdict)


@pytest.mark.parametrize(
  "tau, verdict",
  [((0.71, 0.014, 8), "the paper's order"), ((0.71, 0.06, 8), "not"), ((-0.8, 0.01, 8), "not"), (None, "not")],
)
def test_a_tables_order_reads_its_fixed_rule(summarize, tau, verdict):
  assert summarize.order_verdict(tau).startswith(verdict)
