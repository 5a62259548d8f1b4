"""Tables of jaxcse.evaluation.transfer against SentEval from the result files in results/.

  python experiments/transfer_check/compare.py [--results experiments/transfer_check/results]

Reads every ``{senteval,jaxcse}_{dev,test}_*.json`` written by run_senteval_transfer.py and
run_jaxcse_transfer.py, and prints per mode a Markdown table: each side's test accuracy per seed,
mean +- std over seeds, and whether jaxcse's mean falls inside SentEval's own seed-to-seed range
(min..max over its seeds). A task SentEval ran with one seed only has no spread, and its row says so.
"""

import argparse
import collections
import glob
import json
import os
import statistics

TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
SIDES = ("senteval", "jaxcse")
# Wall times that do not measure the probe: (mode, task, side, seed) -> why.
UNTIMED = {("test", "MR", "senteval", 1111): "process stopped for 28 min while `--tasks all` was timed alone"}


def _nested():
  return collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(dict)))


def load(results_dir: str) -> tuple[dict, dict]:
  """({mode: {task: {side: {seed: acc}}}}, the same with wall seconds) from every result file."""
  table, walls = _nested(), _nested()
  for side in SIDES:
    for path in sorted(glob.glob(os.path.join(results_dir, f"{side}_*.json"))):
      with open(path) as f:
        run = json.load(f)
      for task, result in run["tasks"].items():
        seeds = table[run["mode"]][task][side]
        if run["seed"] in seeds and seeds[run["seed"]] != result["acc"]:
          raise ValueError(f"{path}: {side} {task} seed {run['seed']} disagrees with an earlier file")
        seeds[run["seed"]] = result["acc"]
        if task in run.get("wall_seconds", {}) and (run["mode"], task, side, run["seed"]) not in UNTIMED:
          walls[run["mode"]][task][side][run["seed"]] = run["wall_seconds"][task]
  return table, walls


def describe(accs: dict) -> str:
  values = [accs[s] for s in sorted(accs)]
  if not values:
    return "-"
  spread = f"{statistics.mean(values):.2f} +- {statistics.stdev(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"
  return f"{' / '.join(f'{v:.2f}' for v in values)} ({spread})"


def verdict(senteval: dict, jaxcse: dict) -> str:
  if not senteval or not jaxcse:
    return "one side missing"
  delta = statistics.mean(jaxcse.values()) - statistics.mean(senteval.values())
  if len(senteval) < 2:
    return f"mean diff {delta:+.2f}; one SentEval seed: no spread of its own"
  lo, hi = min(senteval.values()), max(senteval.values())
  inside = "inside" if lo <= statistics.mean(jaxcse.values()) <= hi else "OUTSIDE"
  return f"mean diff {delta:+.2f}; jaxcse mean {inside} SentEval range {lo:.2f}..{hi:.2f}"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--results", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
  args = parser.parse_args()
  table, walls = load(args.results)
  for mode in ("dev", "test"):
    if mode not in table:
      continue
    print(f"\n### {mode} mode: test accuracy x100 per seed (seeds in increasing order: 2, 3, 1111), mean +- std\n")
    print("| task | SentEval | jaxcse | comparison |")
    print("|---|---|---|---|")
    for task in TASKS:
      sides = table[mode].get(task)
      if sides:
        print(
          f"| {task} | {describe(sides['senteval'])} | {describe(sides['jaxcse'])} | "
          f"{verdict(sides['senteval'], sides['jaxcse'])} |"
        )
    print("\nWall seconds per task, median over the timed runs (runs shared the machine unevenly: rough)\n")
    print("| task | SentEval | jaxcse | SentEval / jaxcse |")
    print("|---|---:|---:|---:|")
    for task in TASKS:
      timed = walls[mode].get(task, {})
      se, jx = (statistics.median(timed[side].values()) if timed.get(side) else None for side in SIDES)
      if se and jx:
        print(f"| {task} | {se:.1f} | {jx:.1f} | {se / jx:.2f}x |")
    for (m, task, side, seed), why in UNTIMED.items():
      if m == mode:
        print(f"\n{side} {task} seed {seed} is left out of the timings: {why}.")


if __name__ == "__main__":
  main()
