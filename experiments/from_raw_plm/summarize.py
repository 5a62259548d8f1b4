r"""The study's summary table from its committed raw results (no recomputation).

  python experiments/from_raw_plm/summarize.py [--out experiments/from_raw_plm/table_summary.md]

Reads ``results/raw-*.json`` (the raw encoder per pooler), ``results/<method>-seed<N>.json`` (jaxcse.evaluate
after training), ``results/transfer/*.json`` and ``runs/<method>-seed<N>/metrics.jsonl`` + ``summary.json`` and
prints, per method: STS avg mean +- std over seeds, its gain over the best raw baseline, alignment and uniformity,
the best step (STS-B dev) per seed, the transfer average where it was run, and for DCLR the fraction of zero
instance weights over training.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def mean_std(values: list[float], digits: int = 2) -> str:
  if not values:
    return ""
  if len(values) == 1:
    return f"{values[0]:.{digits}f} (1 run)"
  return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=os.path.join(HERE, "table_summary.md"))
  args = parser.parse_args(argv)
  results = os.path.join(HERE, "results")
  raw = {os.path.basename(p)[4:-5]: json.load(open(p))["summary"] for p in sorted(glob.glob(f"{results}/raw-*.json"))}
  if not raw:
    print(f"no raw baselines in {results} (run_study.sh baselines)", file=sys.stderr)
    return 1
  best_pooler = max(raw, key=lambda k: raw[k]["Avg"])
  best_raw = raw[best_pooler]["Avg"]
  lines = ["| raw encoder, pooler | STS avg | alignment | uniformity |", "|---|---:|---:|---:|"]
  for pooler, s in sorted(raw.items(), key=lambda kv: -kv[1]["Avg"]):
    lines.append(
      f"| {pooler} | {s['Avg']:.2f} | {s.get('alignment', float('nan')):.3f} | "
      f"{s.get('uniformity', float('nan')):.3f} |"
    )
  by_method: dict[str, list[tuple[int, dict]]] = collections.defaultdict(list)
  for path in sorted(glob.glob(f"{results}/*-seed*.json")):
    m = re.fullmatch(r"(.+)-seed(\d+)\.json", os.path.basename(path))
    by_method[m.group(1)].append((int(m.group(2)), json.load(open(path))["summary"]))
  lines += [
    "",
    f"Best raw baseline: {best_pooler}, STS avg {best_raw:.2f}.",
    "",
    "| method | seeds | STS avg | gain over best raw | alignment | uniformity | best step per seed "
    "| transfer avg (seed 1) | DCLR zero-weight fraction |",
    "|---|---:|---:|---:|---:|---:|---|---:|---:|",
  ]
  for method, runs in sorted(by_method.items()):
    avgs = [s["Avg"] for _, s in runs]
    best_steps, zero_fracs = [], []
    for seed, _ in runs:
      run_dir = os.path.join(HERE, "runs", f"{method}-seed{seed}")
      if os.path.exists(os.path.join(run_dir, "summary.json")):
        best_steps.append(str(json.load(open(os.path.join(run_dir, "summary.json")))["best_step"]))
      metrics = os.path.join(run_dir, "metrics.jsonl")
      if os.path.exists(metrics):
        fracs = [r["dclr/weight_zero_frac"] for r in map(json.loads, open(metrics)) if "dclr/weight_zero_frac" in r]
        if fracs:
          zero_fracs.append(float(np.mean(fracs)))
    transfer = os.path.join(results, "transfer", f"{method}-seed1.json")
    transfer_avg = f"{json.load(open(transfer))['summary']['Avg_transfer']:.2f}" if os.path.exists(transfer) else ""
    lines.append(
      f"| {method} | {len(runs)} | {mean_std(avgs)} | {mean_std([a - best_raw for a in avgs])} | "
      f"{mean_std([s['alignment'] for _, s in runs if 'alignment' in s], 3)} | "
      f"{mean_std([s['uniformity'] for _, s in runs if 'uniformity' in s], 3)} | {', '.join(best_steps)} | "
      f"{transfer_avg} | {mean_std(zero_fracs, 3) if zero_fracs else ''} |"
    )
  raw_transfer = os.path.join(results, "transfer", "raw-avg.json")
  if os.path.exists(raw_transfer):
    lines += ["", f"Raw encoder (avg) transfer avg: {json.load(open(raw_transfer))['summary']['Avg_transfer']:.2f}."]
  text = "\n".join(lines) + "\n"
  with open(args.out, "w") as f:
    f.write(text)
  print(text, end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
