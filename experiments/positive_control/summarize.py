"""The positive control's table and the pre-registered criterion's verdicts (README.md) -> results.md.

jaxcse's seeds are read with paper_ablations/summarize.py's own load_runs (STS avg = the results file's
summary.Avg; STS-B dev = the kept checkpoint's evaluation in its metrics.jsonl); the PyTorch runs from
results/IMPL-seedS.json (summary.Avg; STS-B dev = tasks.STSBenchmark.dev.spearman of the selected checkpoint,
jaxcse's scorer).

  python summarize.py [--ablations ../paper_ablations] [--out results.md]
"""

import argparse
import glob
import importlib.util
import json
import math
import os
import re
import sys

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
JAXCSE_ROW = ("dropout", "p0.1", "1e-3")
IMPLS = (
  ("official", "(a) princeton-nlp/SimCSE train.py"),
  ("st", "(b) sentence-transformers MNRL"),
  ("official_jaxdata", "(a') official train.py on jaxcse's sentences and batches"),
)
METRICS = (("sts_avg", "STS avg (primary)"), ("stsb_dev", "STS-B dev (secondary)"))


def jaxcse_runs(ablations: str, row: tuple[str, str, str] | None = None, seeds=None) -> dict:
  """jaxcse's runs of the study's ``row`` (group, row, lr; default ``JAXCSE_ROW``), by seed (all, or ``seeds``)."""
  spec = importlib.util.spec_from_file_location("ablation_summarize", os.path.join(ablations, "summarize.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # its dataclasses look their module up there
  spec.loader.exec_module(module)
  runs = [
    r
    for r in module.load_runs(ablations)
    if (r.group, r.row, r.lr) == (row or JAXCSE_ROW) and (seeds is None or r.seed in seeds)
  ]
  return {r.seed: {"sts_avg": r.sts_avg, "stsb_dev": r.stsb_dev, "step": None} for r in runs}


def pytorch_runs(impl: str) -> dict:
  out = {}
  for path in sorted(glob.glob(os.path.join(HERE, "results", f"{impl}-seed*.json"))):
    seed = int(re.search(r"seed(\d+)\.json$", path).group(1))
    d = json.load(open(path))
    pc = d["positive_control"]
    out[seed] = {
      "sts_avg": d["summary"]["Avg"],
      "stsb_dev": d["tasks"]["STSBenchmark"]["dev"]["spearman"] * 100,
      "step": pc["selected_step"],
      "train_s": pc["train_wall_seconds"],
      "other_step_sts_avg": pc["sts_avg"][str(375 - pc["selected_step"])],
      "jaxcse_would_select": pc.get("jaxcse_scorer_would_select"),
    }
  return out


def compare(other_runs: dict, base_runs: dict, key: str) -> dict:
  """The criterion (|d| <= pooled SD) and the statistics reported beside it; the paired t over the seeds both
  groups have (at least 2)."""
  a = np.asarray([other_runs[s][key] for s in sorted(other_runs)], float)
  b = np.asarray([base_runs[s][key] for s in sorted(base_runs)], float)
  if len(a) == 0 or len(b) < 2:
    return {"d": float("nan"), "n": (len(a), len(b))}
  d = a.mean() - b.mean()
  res = {"d": d, "n": (len(a), len(b))}
  # With one seed in `other` its variance has weight n1 - 1 = 0: the pooled SD is the base group's SD.
  sa, sb = (a.std(ddof=1) if len(a) > 1 else 0.0), b.std(ddof=1)
  sp = math.sqrt(((len(a) - 1) * sa**2 + (len(b) - 1) * sb**2) / (len(a) + len(b) - 2))
  res.update(sp=sp, equivalent=abs(d) <= sp)
  if len(a) < 2:
    return res
  se = math.sqrt(sa**2 / len(a) + sb**2 / len(b))
  df = se**4 / ((sa**2 / len(a)) ** 2 / (len(a) - 1) + (sb**2 / len(b)) ** 2 / (len(b) - 1))
  half = stats.t.ppf(0.975, df) * se
  welch = stats.ttest_ind(a, b, equal_var=False)
  res.update(welch_t=float(welch.statistic), welch_p=float(welch.pvalue), df=df, ci=(d - half, d + half))
  common = sorted(set(other_runs) & set(base_runs))
  if len(common) >= 2:
    paired = stats.ttest_rel([other_runs[s][key] for s in common], [base_runs[s][key] for s in common])
    res.update(paired_t=float(paired.statistic), paired_p=float(paired.pvalue), paired_n=len(common))
  return res


def criterion_rows(name: str, other_runs: dict, base_runs: dict) -> list[str]:
  rows = []
  for key, label in METRICS:
    c = compare(other_runs, base_runs, key)
    if "sp" not in c:
      rows.append(f"| {name} | {label} | {c['n'][0]} vs {c['n'][1]} | – | – | no runs yet | – | – | – |")
      continue
    verdict = "**equivalent**" if c["equivalent"] else f"**not equivalent** ({'higher' if c['d'] > 0 else 'lower'})"
    if c["n"][0] < 3:
      verdict += f", provisional ({c['n'][0]} seed{'s' if c['n'][0] > 1 else ''})"
    paired = f"{c['paired_t']:.2f}, {c['paired_p']:.3f} (n {c['paired_n']})" if "paired_t" in c else "–"
    welch = (
      f"[{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] | {c['welch_t']:.2f} ({c['df']:.1f}), {c['welch_p']:.3f}"
      if "welch_t" in c
      else "– | –"
    )
    rows.append(
      f"| {name} | {label} | {c['n'][0]} vs {c['n'][1]} | {c['d']:+.2f} | {c['sp']:.2f} | "
      f"{verdict} | {welch} | {paired} |"
    )
  return rows


HORIZON_ROWS = (("none", "None (dropout 0.1)"), ("crop10", "crop 10%"), ("crop30", "crop 30%"))
HORIZON_SEED, HORIZON_LR = 1, "1e-3"
HORIZON_BAND = (
  1.4  # README, "The horizon slice through the official code": 2 x 0.71, the data-subset control's pooled SD
)


def _read(path: str) -> dict | None:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def horizon_runs(ablations: str) -> dict:
  """{implementation: {row: run}} for the horizon slice's seed, each run {kept, last (STS avg), step (kept),
  dev ({step: STS-B dev x100})}; rows not finished are absent."""
  found = {"official": {}, "jaxcse": {}}
  for row, _ in HORIZON_ROWS:
    prefix = os.path.join(HERE, "results", f"official_horizon-{row}-seed{HORIZON_SEED}")
    kept, last = _read(prefix + ".json"), _read(prefix + "-last.json")
    if kept and last:
      pc = kept["positive_control"]
      found["official"][row] = {
        "kept": kept["summary"]["Avg"],
        "last": last["summary"]["Avg"],
        "step": pc["selected_step"],
        "dev": {int(s): v * 100 for s, v in pc["jaxcse_stsb_dev"].items()},
      }
    name = f"{row}-lr{HORIZON_LR}-seed{HORIZON_SEED}"
    kept = _read(os.path.join(ablations, "results", "horizon", name + ".json"))
    last = _read(os.path.join(ablations, "results", "horizon", name + "-last.json"))
    summary = _read(os.path.join(ablations, "runs", "horizon", name, "summary.json"))
    if kept and last and summary:
      with open(os.path.join(ablations, "runs", "horizon", name, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
      found["jaxcse"][row] = {
        "kept": kept["summary"]["Avg"],
        "last": last["summary"]["Avg"],
        "step": summary["best_step"],
        "dev": {r["step"]: r["eval/stsb_dev"] * 100 for r in records if "eval/stsb_dev" in r},
      }
  return found


def horizon_lines(ablations: str) -> list[str]:
  """The horizon slice through the official code (seed 1) beside jaxcse's seed 1, and the pre-registered verdict."""
  runs = horizon_runs(ablations)
  if not runs["official"]:
    return []
  lines = [
    "",
    f"## The horizon slice through the official code (seed {HORIZON_SEED}, 1,500 steps; rule pre-registered "
    "in README.md)",
    "",
    "Official = princeton-nlp/SimCSE `train.py` + simcse_crop.patch on jaxcse's seed-1 sentences and batches; "
    "jaxcse = the study's horizon runs of the same seed (`../paper_ablations/results/horizon/`). STS avg at the "
    "kept checkpoint (best STS-B dev) and at step 1,500; STS-B dev every 250 steps.",
    "",
    "| row | implementation | STS avg, kept (step) | STS avg, last | STS-B dev at 250 / 500 / ... / 1,500 |",
    "|---|---|---:|---:|---|",
  ]
  for row, label in HORIZON_ROWS:
    for impl in ("official", "jaxcse"):
      r = runs[impl].get(row)
      if r is None:
        lines.append(f"| {label} | {impl} | not run | – | – |")
        continue
      dev = " / ".join(f"{r['dev'][s]:.2f}" for s in sorted(r["dev"]))
      lines.append(f"| {label} | {impl} | {r['kept']:.2f} ({r['step']}) | {r['last']:.2f} | {dev} |")
  lines += [
    "",
    f"| gain over None | official | jaxcse | official − jaxcse | reading (band ±{HORIZON_BAND}) |",
    "|---|---:|---:|---:|---|",
  ]
  for row, label in HORIZON_ROWS[1:]:
    gains = {}
    for impl in ("official", "jaxcse"):
      if row in runs[impl] and "none" in runs[impl]:
        gains[impl] = {k: runs[impl][row][k] - runs[impl]["none"][k] for k in ("kept", "last")}
    if len(gains) < 2:
      lines.append(
        f"| {label} | {'–' if 'official' not in gains else format(gains['official']['kept'], '+.2f')} | "
        f"{'–' if 'jaxcse' not in gains else format(gains['jaxcse']['kept'], '+.2f')} | – | "
        "not both run: no reading |"
      )
      continue
    diff = gains["official"]["kept"] - gains["jaxcse"]["kept"]
    reading = (
      "the official code agrees"
      if abs(diff) <= HORIZON_BAND
      else f"the official code disagrees (its gain {'higher' if diff > 0 else 'lower'})"
    )
    if row != "crop10":
      reading += " (secondary)"
    lines.append(
      f"| {label}, kept | {gains['official']['kept']:+.2f} | {gains['jaxcse']['kept']:+.2f} | "
      f"{diff:+.2f} | **{reading}** |"
    )
    last_diff = gains["official"]["last"] - gains["jaxcse"]["last"]
    lines.append(
      f"| {label}, last step (secondary) | {gains['official']['last']:+.2f} | "
      f"{gains['jaxcse']['last']:+.2f} | {last_diff:+.2f} | – |"
    )
  lines += [
    "",
    "One seed: a single-run comparison, as pre-registered; the band is the SD of a difference of two gains "
    "(2 x 0.71), not a test.",
  ]
  return lines


def fmt(values: list) -> str:
  if not values:
    return "–"
  if len(values) == 1:
    return f"{values[0]:.2f}"
  return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--ablations", default=os.path.join(os.path.dirname(HERE), "paper_ablations"))
  p.add_argument("--out", default=os.path.join(HERE, "results.md"))
  a = p.parse_args()
  groups = {"jaxcse": jaxcse_runs(a.ablations)}
  for impl, _ in IMPLS:
    groups[impl] = pytorch_runs(impl)
  names = {"jaxcse": "jaxcse (committed `dropout/p0.1-lr1e-3`)", **dict(IMPLS)}

  lines = [
    "# Positive control: results",
    "",
    "Generated by `summarize.py` from `results/*.json` and jaxcse's committed runs. x100; mean ± sample SD "
    "(ddof 1) over seeds (with one seed in a group, the pooled SD is the other group's SD). Every model scored by jaxcse's evaluator (`--pooler avg --tasks sts`).",
    "",
    "## Per seed",
    "",
    "| implementation | seed | selected step | STS-B dev | STS avg | STS avg at the other step | train wall s |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  for g, runs in groups.items():
    for seed in sorted(runs):
      r = runs[seed]
      step = r["step"] if r["step"] is not None else "250 (jaxcse's best_step)"
      other = f"{r['other_step_sts_avg']:.2f}" if "other_step_sts_avg" in r else "–"
      wall = f"{r['train_s']:.0f}" if "train_s" in r else "–"
      lines.append(f"| {names[g]} | {seed} | {step} | {r['stsb_dev']:.2f} | {r['sts_avg']:.2f} | {other} | {wall} |")
  lines += ["", "## Means", "", "| implementation | seeds | STS-B dev | STS avg |", "|---|---:|---:|---:|"]
  for g, runs in groups.items():
    lines.append(
      f"| {names[g]} | {len(runs)} | {fmt([r['stsb_dev'] for r in runs.values()])} | "
      f"{fmt([r['sts_avg'] for r in runs.values()])} |"
    )
  untrained = os.path.join(HERE, "results", "untrained-encoder.json")
  if os.path.exists(untrained):  # the raw encoder, before any SimCSE step: the floor every row is read against
    u = json.load(open(untrained))
    lines.append(
      f"| the untrained encoder (`results/untrained-encoder.json`) | – | "
      f"{u['tasks']['STSBenchmark']['dev']['spearman'] * 100:.2f} | {u['summary']['Avg']:.2f} |"
    )
  lines += [
    "",
    "## The pre-registered criterion: equivalent when |d| <= pooled SD (d = other − jaxcse)",
    "",
    "| implementation | metric | n | d | pooled SD | verdict | 95% CI of d (Welch) | Welch t (df), p | "
    "paired-by-seed-number t, p |",
    "|---|---|---|---:|---:|---|---|---|---|",
  ]
  for impl, _ in IMPLS:
    lines += criterion_rows(names[impl], groups[impl], groups["jaxcse"])
  lines += [
    "",
    "## The data-subset control: (a') against (a) (d = (a') − (a); same rule)",
    "",
    "| implementation | metric | n | d | pooled SD | verdict | 95% CI of d (Welch) | Welch t (df), p | "
    "paired-by-seed-number t, p |",
    "|---|---|---|---:|---:|---|---|---|---|",
  ]
  lines += criterion_rows(names["official_jaxdata"] + " vs (a)", groups["official_jaxdata"], groups["official"])
  if groups["official_jaxdata"]:
    mean = lambda g: np.mean([r["sts_avg"] for r in groups[g].values()])  # noqa: E731
    gap = mean("official") - mean("jaxcse")
    lines += [
      "",
      f"Share of (a)'s STS avg gap over jaxcse ({gap:+.2f}) that the training sentences explain, "
      f"((a) − (a')) / ((a) − jaxcse): {(mean('official') - mean('official_jaxdata')) / gap:.2f} "
      f"(over {len(groups['official_jaxdata'])} seed(s) of (a')).",
    ]
  lines += [
    "",
    "Pooled SD: sqrt(((n1-1) s1² + (n2-1) s2²) / (n1 + n2 - 2)), which is sqrt((s1² + s2²) / 2) at n = 3 "
    "each. With 2-3 seeds per group the t tests have little power and the intervals are wide; the verdict is "
    "the pre-registered |d| <= pooled SD rule alone. The paired t pairs the seeds both groups have: a real pairing "
    "of data only for (a') against jaxcse (same sentences and batches per seed); elsewhere by seed number "
    "only.",
  ]
  lines += horizon_lines(a.ablations) + [""]
  with open(a.out, "w") as f:
    f.write("\n".join(lines))
  print("\n".join(lines))


if __name__ == "__main__":
  main()
