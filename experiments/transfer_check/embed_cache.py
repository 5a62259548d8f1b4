"""Embeds every sentence of the seven transfer tasks once with jaxcse and saves them, keyed by sentence.

Both probes (jaxcse.evaluation.transfer and SentEval) then read the same vectors, so only the probe differs.

  JAXCSE_DATA_DIR=../shared/data nice -n 10 python experiments/transfer_check/embed_cache.py \
      --model all-MiniLM-L6-v2 --pooler avg --out transfer_cache/minilm_avg.npz

The npz holds ``sentences`` (str array [n]) and ``embeddings`` (float32 [n, dim]), sentences already
whitespace-joined as SentEval's batcher joins its tokens.
"""

import argparse
import time

import numpy as np

from jaxcse.inference import embedder
from jaxcse.storage import loading
from jaxcse.evaluation import transfer
from jaxcse import data as data_lib


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--model", default="all-MiniLM-L6-v2")
  parser.add_argument("--pooler", default="avg")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  root = data_lib.data_dir()
  sentences = sorted(
    {s for name in transfer.TRANSFER_TASKS for s in transfer.task_sentences(transfer.load_transfer_task(root, name))}
  )
  print(f"{len(sentences)} distinct sentences", flush=True)
  start = time.time()
  loaded = loading.load_model(args.model, pooler=args.pooler)
  embeddings = embedder.BucketedEmbedder(loaded.spec, args.pooler, batch_size=args.batch_size)(sentences, loaded.params)
  print(f"embedded in {time.time() - start:.1f} s", flush=True)
  np.savez(args.out, sentences=np.asarray(sentences), embeddings=embeddings)


if __name__ == "__main__":
  main()
