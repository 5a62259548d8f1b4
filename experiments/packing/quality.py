"""Runs and analyses the pre-registered quality comparison (README.md, section 2): the quickstart packed vs padded.

  python experiments/packing/quality.py run [--seeds 1 2 3 4 5] [--sides padded packed] [--work DIR]
  python experiments/packing/quality.py analyze

``run`` trains each (side, seed) with ``jaxcse-train --config quickstart --config.seed=N`` (``packed`` adds
``--config.train.packed=True``), scores the trained model on SentEval's seven STS test sets, and copies the run's
records to ``runs/<side>_seed<N>/``; workdirs (checkpoints) stay in ``--work`` (``jaxcse_packing_quality`` in the temporary folder by
default, not committed). Resumable: a run whose ``runs/<side>_seed<N>/sts.json`` exists is skipped; one without it
starts again from an empty workdir. Two shells may split the seeds between the two cores (``taskset -c 0 ...
--seeds 1 3 5``, ``taskset -c 1 ... --seeds 2 4``): every run is its own folder.

``analyze`` reads ``runs/`` and writes ``analysis.json``: per seed the primary metric (``eval/stsb_dev`` at step 250,
x100) and the secondary (the seven STS tests' average, x100) on each side, their paired differences (packed minus
padded), the two one-sided tests at the registered margin (0.5) with their 90% interval, the two-sided test, the
verdict by the registered rule, and the number of pairs the observed paired SD would need for 80% power.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RUNS = os.path.join(HERE, "runs")
SEEDS = (1, 2, 3, 4, 5)
SIDES = ("padded", "packed")
MARGIN = 0.5  # STS-B dev points (x100): registered in README.md before the first run.
FINAL_STEP = 250
RECORDS = ("config.json", "metrics.jsonl", "summary.json")


def _command(name: str) -> str:
  return os.path.join(os.path.dirname(sys.executable), name)


def run_one(side: str, seed: int, work: str) -> None:
  record = os.path.join(RUNS, f"{side}_seed{seed}")
  if os.path.exists(os.path.join(record, "sts.json")):
    print(f"{side}_seed{seed}: done before, skipped", flush=True)
    return
  workdir = os.path.join(work, f"{side}_seed{seed}")
  shutil.rmtree(workdir, ignore_errors=True)  # A killed run starts again: its records are not half of two runs.
  shutil.rmtree(record, ignore_errors=True)
  os.makedirs(record)
  train = [_command("jaxcse-train"), "--config", "quickstart", "--workdir", workdir, f"--config.seed={seed}"]
  if side == "packed":
    train.append("--config.train.packed=True")
  evaluate = [
    _command("jaxcse-evaluate"),
    "--model",
    workdir,
    "--checkpoint",
    "latest",
    "--tasks",
    "sts",
    "--output",
    os.path.join(workdir, "sts.json"),
  ]
  start = time.time()
  with open(os.path.join(record, "log.txt"), "w") as log:
    for argv in (train, evaluate):
      log.write("$ " + " ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in argv) + "\n")
      log.flush()
      subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
  for name in RECORDS:
    shutil.copy(os.path.join(workdir, name), record)
  shutil.copy(os.path.join(workdir, "sts.json"), record)  # Last: its presence marks the run complete.
  print(f"{side}_seed{seed}: {time.time() - start:.0f} s", flush=True)


def primary(record: str) -> float:
  """STS-B dev Spearman x100 of the model after the last step, from the run's metrics.jsonl."""
  with open(os.path.join(record, "metrics.jsonl")) as f:
    for line in f:
      row = json.loads(line)
      if row.get("step") == FINAL_STEP and "eval/stsb_dev" in row:
        return 100 * row["eval/stsb_dev"]
  raise ValueError(f"{record}/metrics.jsonl: no eval/stsb_dev at step {FINAL_STEP}")


def secondary(record: str) -> float:
  """The average of SentEval's seven STS test sets x100: the ``Avg`` of jaxcse-evaluate's summary (each task's
  Spearman x100 rounded to 2 decimals, then averaged, as the papers' tables)."""
  with open(os.path.join(record, "sts.json")) as f:
    return float(json.load(f)["summary"]["Avg"])


def paired_tost(diffs: np.ndarray, margin: float) -> dict:
  n = len(diffs)
  d, sd = float(diffs.mean()), float(diffs.std(ddof=1))
  se, df = sd / math.sqrt(n), n - 1
  # Every difference equal (se 0): the t statistics are infinite, with d's sign (a zero-width interval at d).
  tiny = np.finfo(float).tiny
  p_low = float(stats.t.sf((d + margin) / max(se, tiny), df))  # H0: d <= -margin
  p_high = float(stats.t.cdf((d - margin) / max(se, tiny), df))  # H0: d >= +margin
  p_diff = float(2 * stats.t.sf(abs(d) / max(se, tiny), df)) if d or se else 1.0
  ci90 = (float(d - stats.t.ppf(0.95, df) * se), float(d + stats.t.ppf(0.95, df) * se))
  ci95 = (float(d - stats.t.ppf(0.975, df) * se), float(d + stats.t.ppf(0.975, df) * se))
  if max(p_low, p_high) < 0.05:
    verdict = "equivalent"
  elif p_diff < 0.05 and (ci95[0] > margin or ci95[1] < -margin):
    verdict = "different"
  else:
    verdict = "undecided"
  return {
    "n": n,
    "mean_diff": d,
    "paired_sd": sd,
    "p_low": p_low,
    "p_high": p_high,
    "p_tost": max(p_low, p_high),
    "p_two_sided": p_diff,
    "ci90": list(ci90),
    "ci95": list(ci95),
    "verdict": verdict,
    "pairs_for_80pct_power": pairs_needed(sd, margin),
  }


def pairs_needed(sd: float, margin: float, power: float = 0.8, draws: int = 20_000) -> int:
  """The fewest pairs at which paired TOST (alpha 0.05 a side) shows equivalence with probability ``power`` when
  the true difference is 0 and the paired SD is ``sd``: by simulation (fixed seed), vectorised over the draws."""
  rng = np.random.default_rng(0)
  for n in range(3, 1001):
    diffs = rng.normal(0.0, sd, size=(draws, n))
    d, se = diffs.mean(axis=1), diffs.std(axis=1, ddof=1) / math.sqrt(n)
    half = stats.t.ppf(0.95, n - 1) * se
    if np.mean((d - half > -margin) & (d + half < margin)) >= power:
      return n
  return -1


def analyze(runs: str = RUNS, output: str = os.path.join(HERE, "analysis.json")) -> dict:
  """The registered analysis of the complete pairs under ``runs``, written to ``output``."""
  seeds = sorted(
    int(name.split("seed")[1])
    for name in os.listdir(runs)
    if name.startswith("packed_seed")
    and os.path.exists(os.path.join(runs, name, "sts.json"))
    and os.path.exists(os.path.join(runs, f"padded_seed{name.split('seed')[1]}", "sts.json"))
  )
  per_seed = {}
  for seed in seeds:
    row = {}
    for side in SIDES:
      record = os.path.join(runs, f"{side}_seed{seed}")
      row[side] = {"stsb_dev": primary(record), "sts_avg": secondary(record)}
    row["diff"] = {k: row["packed"][k] - row["padded"][k] for k in ("stsb_dev", "sts_avg")}
    per_seed[seed] = row
  result = {"margin": MARGIN, "seeds": seeds, "per_seed": per_seed}
  if len(seeds) >= 2:
    for key in ("stsb_dev", "sts_avg"):
      result[key] = paired_tost(np.array([per_seed[s]["diff"][key] for s in seeds]), MARGIN)
  with open(output, "w") as f:
    json.dump(result, f, indent=1)
  return result


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("action", choices=("run", "analyze"))
  parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
  parser.add_argument("--sides", nargs="+", choices=SIDES, default=SIDES)
  parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "jaxcse_packing_quality"))
  args = parser.parse_args(argv)
  if args.action == "run":
    for seed in args.seeds:
      for side in args.sides:
        run_one(side, seed, args.work)
  else:
    print(json.dumps(analyze(), indent=1))


if __name__ == "__main__":
  main()
