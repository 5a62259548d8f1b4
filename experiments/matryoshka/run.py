r"""The Matryoshka experiment of README.md: 3 seeds x {plain, matryoshka} quickstart runs, STS at 256/128/64/32 dims.

  taskset -c 0 python experiments/matryoshka/run.py [--workdirs FOLDER] [--analyze]

Resumable: a run whose ``results/<arm>_seed<N>/sts.json`` exists is skipped; a killed training resumes in its
workdir (jaxcse-train resumes). Workdirs (checkpoints) stay outside git; each run's config, metrics and STS scores
are written under ``results/``. ``--analyze`` prints the README's table and tests from the results alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")
SEEDS = (1, 2, 3)
ARMS = {"plain": [], "matryoshka": ["--config.matryoshka.dims=256,128,64,32"]}
DIMS = (256, 128, 64, 32)


def train(arm: str, seed: int, workdir: str) -> None:
  command = [
    sys.executable,
    "-m",
    "jaxcse.train",
    "--config",
    os.path.join(REPO, "configs", "quickstart.py"),
    "--workdir",
    workdir,
    f"--config.seed={seed}",
    "--config.model.attention_dropout_per_element=False",  # jaxcse's default when these runs were made.
    *ARMS[arm],
  ]
  subprocess.run(command, check=True, cwd=REPO)


def score(workdir: str) -> dict:
  """STS (SentEval's seven test sets) of the last step's model at each size: embedded once, then cut."""
  sys.path.insert(0, REPO)
  from jaxcse import Encoder, evaluate

  encoder = Encoder.load(workdir, checkpoint="latest")
  cache: dict = {}

  def full(sentences):
    key = hash(tuple(sentences))
    if key not in cache:
      cache[key] = encoder.embed(sentences)
    return cache[key]

  out = {"step": encoder.step}
  for dim in DIMS:
    results = evaluate.evaluate_sts(lambda s, d=dim: np.ascontiguousarray(full(s)[:, :d]), None)
    out[str(dim)] = evaluate.summarize(results)
  return out


def run(arm: str, seed: int, workdirs: str) -> None:
  name = f"{arm}_seed{seed}"
  folder = os.path.join(RESULTS, name)
  if os.path.exists(os.path.join(folder, "sts.json")):
    print(f"{name}: done already")
    return
  workdir = os.path.join(workdirs, name)
  cpu, wall = time.process_time(), time.time()
  children = os.times()
  train(arm, seed, workdir)
  after = os.times()
  train_cpu = (after.children_user + after.children_system) - (children.children_user + children.children_system)
  train_wall = time.time() - wall
  scores = score(workdir)
  scores.update(
    train_cpu_seconds=round(train_cpu, 1),
    train_wall_seconds=round(train_wall, 1),
    score_cpu_seconds=round(time.process_time() - cpu, 1),
    load_average=os.getloadavg(),
  )
  os.makedirs(folder, exist_ok=True)
  for file in ("config.json", "metrics.jsonl", "summary.json"):
    if os.path.exists(os.path.join(workdir, file)):
      shutil.copy(os.path.join(workdir, file), os.path.join(folder, file))
  with open(os.path.join(folder, "sts.json.tmp"), "w") as f:
    json.dump(scores, f, indent=1)
  os.replace(os.path.join(folder, "sts.json.tmp"), os.path.join(folder, "sts.json"))
  print(f"{name}: " + "  ".join(f"{d}: {scores[str(d)]['Avg']:.2f}" for d in DIMS))


def analyze() -> None:
  from scipy import stats

  avg = {}
  for arm in ARMS:
    for seed in SEEDS:
      path = os.path.join(RESULTS, f"{arm}_seed{seed}", "sts.json")
      if os.path.exists(path):
        with open(path) as f:
          record = json.load(f)
        avg[arm, seed] = {d: record[str(d)]["Avg"] for d in DIMS}
  seeds = [s for s in SEEDS if ("plain", s) in avg and ("matryoshka", s) in avg]
  print("| dims | plain (seeds 1-3) | matryoshka (seeds 1-3) | D = matryoshka - plain, mean | 90% CI | one-sided p |")
  print("|---|---|---|---|---|---|")
  for d in DIMS:
    plain = [avg["plain", s][d] for s in seeds]
    nested = [avg["matryoshka", s][d] for s in seeds]
    diff = np.subtract(nested, plain)
    if len(diff) >= 2:
      sem = diff.std(ddof=1) / np.sqrt(len(diff))
      half = stats.t.ppf(0.95, len(diff) - 1) * sem
      p = stats.ttest_rel(nested, plain, alternative="greater").pvalue
      interval, p_text = f"[{diff.mean() - half:+.2f}, {diff.mean() + half:+.2f}]", f"{p:.3f}"
    else:
      interval, p_text = "n/a", "n/a"
    print(
      f"| {d} | {' / '.join(f'{v:.2f}' for v in plain)} | {' / '.join(f'{v:.2f}' for v in nested)} | "
      f"{diff.mean():+.2f} | {interval} | {p_text} |"
    )


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--workdirs", default=os.path.join(tempfile.gettempdir(), "jaxcse_matryoshka_workdirs"))
  parser.add_argument("--analyze", action="store_true")
  parser.add_argument("--reverse", action="store_true", help="the runs in reverse order (a second process's share)")
  args = parser.parse_args()
  if not args.analyze:
    order = [(arm, seed) for seed in SEEDS for arm in ARMS]
    for arm, seed in reversed(order) if args.reverse else order:
      run(arm, seed, args.workdirs)
  analyze()


if __name__ == "__main__":
  main()
