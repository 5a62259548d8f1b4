"""jaxcse.evaluation.transfer on the embeddings cached by embed_cache.py (the ones SentEval's probe also reads).

  JAXCSE_DATA_DIR=../shared/data nice -n 10 python experiments/transfer_check/run_jaxcse_transfer.py \
      --cache transfer_cache/minilm_avg.npz --mode test --seed 1111 --out jaxcse_test_seed1111.json

Writes a jaxcse.evaluate-shaped JSON ("tasks", "summary" with MR..MRPC and Avg_transfer) plus wall seconds per task.
"""

import argparse
import json
import time

import numpy as np

from jaxcse import data as data_lib
from jaxcse.evaluation import transfer


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--cache", required=True)
  parser.add_argument("--mode", choices=sorted(transfer.MODES), default="test")
  parser.add_argument("--seed", type=int, default=transfer.DEFAULT_SEED)
  parser.add_argument("--tasks", default=",".join(transfer.TRANSFER_TASKS))
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  root = data_lib.data_dir()
  cache = np.load(args.cache)
  table = dict(zip(cache["sentences"].tolist(), cache["embeddings"]))
  results, walls = {}, {}
  for name in args.tasks.split(","):
    start = time.time()
    results[name] = transfer.evaluate_task(
      transfer.load_transfer_task(root, name), table, mode=args.mode, seed=args.seed
    )
    walls[name] = round(time.time() - start, 1)
    print(name, results[name], walls[name], "s", flush=True)
  with open(args.out, "w") as f:
    json.dump(
      {
        "mode": args.mode,
        "seed": args.seed,
        "tasks": results,
        "wall_seconds": walls,
        "summary": transfer.summarize_transfer(results),
      },
      f,
      indent=2,
    )


if __name__ == "__main__":
  main()
