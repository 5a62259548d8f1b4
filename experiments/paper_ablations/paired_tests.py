"""Paired-by-seed tests of every ablation row against its table's baseline, Holm-corrected per table (issue 38, 3).

The rows of one table share their seeds and, per seed, their data order (jaxcse's ``Batches`` order depends only
on the seed), so a row and its baseline are compared seed by seed: the paired t over the seeds both have
(``scipy.stats.ttest_rel``). Primary metric: STS avg of the seven test sets (x100), as the papers report;
secondary: STS-B dev at the kept checkpoint. Within each table and metric the p values of its contrasts are
Holm-corrected (family-wise error 0.05). With n = 3 seeds a paired t has 2 degrees of freedom: only large,
consistent differences can reach significance, and a non-significant row is not evidence of no effect. The
untrained encoder (before any SimCSE step) is given in every table as the floor.

  python paired_tests.py [--study DIR] [--untrained FILE] [--out paired_tests.md]
"""
import argparse
import json
import os
import sys

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import summarize  # noqa: E402  (the study's own run loading and row definitions)

# Each table's baseline row (the method as published): the row the others change one thing of.
BASELINES = {"dropout": "p0.1", "augment": "p0.1", "mixcse": "lam0.2", "dclr": "full"}
METRICS = (("sts_avg", "STS avg (primary)"), ("stsb_dev", "STS-B dev (secondary)"))


def holm(p_values: list[float]) -> list[float]:
  """Holm's step-down adjusted p values (scipy has Benjamini-Hochberg, not Holm)."""
  order = np.argsort(p_values)
  m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (m - rank) * p_values[i]))  # monotone: never below an earlier adjusted p
    adjusted[i] = running
  return adjusted


def test_cells(d: float, t: float, p: float, p_holm: float | None) -> list[str]:
  if not np.isfinite(t):  # every paired difference equal (here: all 0): no variance, no t
    return [f"{d:+.2f}", "equal in every seed", "–", "–"]
  return [f"{d:+.2f}", f"{t:.2f}", f"{p:.3f}", f"{p_holm:.3f}"]


def table(name: str, experiment, runs, untrained: dict | None) -> list[str]:
  base_group = next(r.group for r in experiment.rows if r.row == BASELINES[name])
  base_runs, base_lr, _ = summarize._row_runs(runs, base_group, BASELINES[name])
  base = {r.seed: r for r in base_runs}
  lines = [f"### {experiment.title} (`{name}`): against {BASELINES[name]} (lr {base_lr})", "",
           "| row | seeds paired | STS avg: row (mean) | d (paired mean) | t | p | p Holm | STS-B dev: d | t | p | "
           "p Holm |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  contrasts = []
  for row in experiment.rows:
    if row.row == BASELINES[name] and row.group == base_group:
      continue
    row_runs, _, _ = summarize._row_runs(runs, row.group, row.row)
    per_metric = {}
    for key, _ in METRICS:
      seeds = [r.seed for r in row_runs if r.seed in base and getattr(r, key) is not None
               and getattr(base[r.seed], key) is not None]
      a = [getattr(r, key) for r in row_runs if r.seed in seeds]
      b = [getattr(base[s], key) for s in seeds]
      if len(seeds) >= 2:
        t = stats.ttest_rel(a, b)
        per_metric[key] = (len(seeds), float(np.mean(a)), float(np.mean(np.subtract(a, b))), float(t.statistic),
                           float(t.pvalue))
    contrasts.append((row, per_metric))
  adjusted = {}
  for key, _ in METRICS:
    tested = [(row.row, m[key][4]) for row, m in contrasts if key in m and np.isfinite(m[key][4])]
    adjusted[key] = dict(zip([r for r, _ in tested], holm([p for _, p in tested]))) if tested else {}
  for row, m in contrasts:
    cells = [row.label]
    if "sts_avg" in m:
      n, mean_a, d, t, p = m["sts_avg"]
      cells += [str(n), f"{mean_a:.2f}", *test_cells(d, t, p, adjusted["sts_avg"].get(row.row))]
    else:
      cells += ["<2", "–", "–", "–", "–", "–"]
    if "stsb_dev" in m:
      _, _, d, t, p = m["stsb_dev"]
      cells += test_cells(d, t, p, adjusted["stsb_dev"].get(row.row))
    else:
      cells += ["–"] * 4
    lines.append("| " + " | ".join(cells) + " |")
  base_avg = np.mean([r.sts_avg for r in base_runs])
  base_dev = np.mean([r.stsb_dev for r in base_runs if r.stsb_dev is not None])
  lines += ["", f"Baseline ({BASELINES[name]}): STS avg {base_avg:.2f}, STS-B dev {base_dev:.2f} (mean of "
            f"{len(base_runs)} seeds)."]
  if untrained is not None:
    lines.append(f"The untrained encoder (no training): STS avg {untrained['avg']:.2f}, STS-B dev "
                 f"{untrained['dev']:.2f}.")
  return lines + [""]


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--study", default=HERE, help="the study's folder (results/ and runs/)")
  p.add_argument("--untrained", default=os.path.join(HERE, "..", "positive_control", "results",
                                                     "untrained-encoder.json"))
  p.add_argument("--out", default=os.path.join(HERE, "paired_tests.md"))
  a = p.parse_args()
  runs = summarize.load_runs(a.study)
  untrained = None
  if os.path.exists(a.untrained):
    u = json.load(open(a.untrained))
    untrained = {"avg": u["summary"]["Avg"], "dev": u["tasks"]["STSBenchmark"]["dev"]["spearman"] * 100}
  lines = ["# paper_ablations: paired tests against each table's baseline", "",
           "Generated by `paired_tests.py`. Primary metric: STS avg of the seven test sets (x100); secondary: STS-B "
           "dev at the kept checkpoint. d = mean over the shared seeds of (row − baseline), seed by seed (the rows "
           "share seeds and data order); t, p: paired t test (`scipy.stats.ttest_rel`); p Holm: Holm-corrected "
           "within the table, per metric. n = 3 seeds gives the paired t 2 degrees of freedom: only large and "
           "consistent differences reach significance, and a non-significant row is not evidence of no effect. Rows "
           "equal to the baseline in every seed have no t (they enter no Holm family). Not covered here: the "
           "learning-rate grid (one seed) and the main comparison across methods (different learning rates, so "
           "not one family of shared runs); Kendall's tau (tables.md, summarize.py) is not recomputed here.", ""]
  for name, experiment in summarize.EXPERIMENTS.items():
    lines += table(name, experiment, runs, untrained)
  with open(a.out, "w") as f:
    f.write("\n".join(lines))
  print("\n".join(lines))


if __name__ == "__main__":
  main()
