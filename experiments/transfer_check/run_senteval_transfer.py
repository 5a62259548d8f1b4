"""SentEval's own transfer-task probe (SimCSE's copy) on embeddings precomputed by jaxcse.

The batcher only looks sentences up in the npz written by embed_cache.py (tokens joined with ' ', as
SimCSE's batcher joins them), so the encoder is identical and only the probe differs from jaxcse.evaluation.transfer.

Run with the SentEval venv (torch CPU, scikit-learn); SentEval's classifier calls .cuda() unconditionally,
so on a CPU-only torch those calls are made no-ops here (nothing else is changed):

  SIMCSE_DIR=PATH/TO/SimCSE JAXCSE_DATA_DIR=PATH/TO/data nice -n 10 SENTEVAL_VENV/bin/python \
      experiments/transfer_check/run_senteval_transfer.py --cache transfer_cache/minilm_avg.npz \
      --mode dev --seed 1111 --tasks MR,CR,SUBJ,MPQA,SST2,TREC,MRPC --out senteval_dev_seed1111.json
"""

import argparse
import json
import logging
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("SIMCSE_DIR") or not os.environ.get("JAXCSE_DATA_DIR"):
  sys.exit("set SIMCSE_DIR (a clone of princeton-nlp/SimCSE, for its SentEval) and JAXCSE_DATA_DIR (the data root)")
sys.path.insert(0, os.path.join(os.environ["SIMCSE_DIR"], "SentEval"))
import senteval  # noqa: E402
from senteval.tools import classifier as senteval_classifier  # noqa: E402

DATA_ROOT = os.path.join(os.environ["JAXCSE_DATA_DIR"], "senteval")

# SentEval calls inspect.getargspec, removed in Python 3.11; getfullargspec's first field is the same list.
import inspect  # noqa: E402

inspect.getargspec = inspect.getfullargspec

# CPU-only torch: make SentEval's .cuda() calls identities and keep its tensors on the CPU.
torch.Tensor.cuda = lambda self, *a, **k: self
torch.nn.Module.cuda = lambda self, *a, **k: self
_init = senteval_classifier.PyTorchClassifier.__init__


def _cpu_init(self, *args, **kwargs):
  _init(self, *args, **kwargs)
  self.cudaEfficient = True  # prepare_split then uses torch.device('cpu').


senteval_classifier.PyTorchClassifier.__init__ = _cpu_init


def to_plain(x):
  if isinstance(x, dict):
    return {k: to_plain(v) for k, v in x.items()}
  if isinstance(x, (tuple, list)):
    return [to_plain(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  return x


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cache", required=True)
  ap.add_argument("--mode", choices=("dev", "test"), default="test")
  ap.add_argument("--seed", type=int, default=1111)
  ap.add_argument("--tasks", default="MR,CR,SUBJ,MPQA,SST2,TREC,MRPC")
  ap.add_argument("--out", required=True)
  args = ap.parse_args()
  logging.basicConfig(format="%(asctime)s : %(message)s", level=logging.INFO)
  torch.set_num_threads(1)

  cache = np.load(args.cache)
  table = dict(zip(cache["sentences"].tolist(), cache["embeddings"]))

  def batcher(params, batch):
    return np.stack([table[" ".join(tokens)] for tokens in batch])

  if args.mode == "test":
    params = {
      "task_path": DATA_ROOT,
      "usepytorch": True,
      "kfold": 10,
      "seed": args.seed,
      "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4},
    }
  else:
    params = {
      "task_path": DATA_ROOT,
      "usepytorch": True,
      "kfold": 5,
      "seed": args.seed,
      "classifier": {"nhid": 0, "optim": "rmsprop", "batch_size": 128, "tenacity": 3, "epoch_size": 2},
    }
  results, walls = {}, {}
  for task in args.tasks.split(","):
    start = time.time()
    results[task] = to_plain(senteval.engine.SE(params, batcher).eval(task))
    walls[task] = round(time.time() - start, 1)
    print(task, results[task], walls[task], "s", flush=True)
  with open(args.out, "w") as f:
    json.dump(
      {
        "mode": args.mode,
        "seed": args.seed,
        "tasks": results,
        "wall_seconds": walls,
        "summary": {t: results[t]["acc"] for t in results},
      },
      f,
      indent=2,
    )


if __name__ == "__main__":
  main()
