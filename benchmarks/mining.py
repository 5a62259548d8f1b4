r"""Hard-negative mining: jaxcse's ``mine_hard_negatives`` against sentence-transformers 6.2's, same data and model.

  taskset -c 0 python -m benchmarks.mining [--pairs 4500] [--batch_size 32]

SICK's training pairs (sentence_A as anchor, sentence_B as positive; ``$JAXCSE_DATA_DIR``), all-MiniLM-L6-v2 on
both sides (jaxcse's Flax BERT, sentence-transformers' PyTorch one), the issue's options (3 negatives, range_max
20, relative_margin 0.05). Each side runs twice and the second run is timed (the first compiles jaxcse's shapes
and warms PyTorch); CPU seconds of the whole process (``time.process_time``), so pin it to cores with taskset.
Two timings per side: end to end (embedding, search, selection, the dataset), and the selection alone on the same
embeddings (sentence-transformers reads them from its cache folder). The last line is
``mining: <x.xx>x``: sentence-transformers' CPU time over jaxcse's, end to end.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import random
import tempfile
import time

import numpy as np

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
OPTIONS = {"num_negatives": 3, "range_max": 20, "relative_margin": 0.05}


def _cpu(fn):
  fn()  # Warm-up: compilation, first calls.
  start = time.process_time()
  result = fn()
  return time.process_time() - start, result


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pairs", type=int, default=4500)
  parser.add_argument("--batch_size", type=int, default=32)
  args = parser.parse_args()

  import datasets
  import torch
  from sentence_transformers import SentenceTransformer
  from sentence_transformers.util import mine_hard_negatives as st_mine

  from jaxcse.storage import hub
  from jaxcse import mining
  from jaxcse.encode import Encoder

  root = os.environ["JAXCSE_DATA_DIR"]
  with open(os.path.join(root, "senteval/downstream/SICK/SICK_train.txt"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))[: args.pairs]
  dataset = datasets.Dataset.from_dict(
    {"anchor": [r["sentence_A"] for r in rows], "positive": [r["sentence_B"] for r in rows]}
  )
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  folder = hub.resolve_model_path(MINILM)
  st_model = SentenceTransformer(folder, device="cpu")
  encoder = Encoder.load(MINILM, batch_size=args.batch_size)

  ours, mined = _cpu(lambda: mining.mine_hard_negatives(dataset, encoder, verbose=False, progress=False, **OPTIONS))
  theirs, st_mined = _cpu(lambda: st_mine(dataset, st_model, batch_size=args.batch_size, verbose=False, **OPTIONS))

  # The selection alone, on jaxcse's embeddings (sentence-transformers reads them from its cache).
  grouped = mining.group_pairs(dataset["anchor"], dataset["positive"])
  queries = encoder.encode(grouped.queries, normalize_embeddings=True)
  corpus = encoder.encode(grouped.corpus, normalize_embeddings=True)
  options = mining.Options(**OPTIONS)

  def select():
    selection = mining.select_negatives(
      queries, corpus, grouped.positive_indices, options, max_positives=grouped.max_positives
    )
    return datasets.Dataset.from_dict(mining.output_columns(grouped, selection, "anchor", "positive"))

  ours_select, selected = _cpu(select)
  name = st_model.model_card_data.base_model or ""
  with tempfile.TemporaryDirectory() as cache:
    for kind, texts, vectors in (("query", grouped.queries, queries), ("corpus", grouped.corpus, corpus)):
      digest = hashlib.sha256(repr((name, None, None, texts)).encode()).hexdigest()
      np.save(os.path.join(cache, f"{kind}_embeddings_{digest}.npy"), vectors)
    random.seed(0)
    theirs_select, st_selected = _cpu(lambda: st_mine(dataset, st_model, cache_folder=cache, verbose=False, **OPTIONS))
  same = selected["negative"] == st_selected["negative"]
  print(
    f"{len(dataset)} pairs, {len(grouped.queries)} queries, a corpus of {len(grouped.corpus)}; "
    f"{len(os.sched_getaffinity(0))} core(s); load average {os.getloadavg()[0]:.1f}"
  )
  print(
    f"end to end (CPU s): jaxcse {ours:.2f} ({len(mined)} triplets), sentence-transformers {theirs:.2f} "
    f"({len(st_mined)} triplets)"
  )
  print(
    f"selection alone on the same embeddings (CPU s): jaxcse {ours_select:.3f}, sentence-transformers "
    f"{theirs_select:.3f} ({theirs_select / ours_select:.2f}x); same triplets: {same}"
  )
  # End to end, each side embeds with its own model code: float differences may reorder near-equal candidates.
  agree = sum(
    a == b for a, b in zip(zip(mined["anchor"], mined["negative"]), zip(st_mined["anchor"], st_mined["negative"]))
  )
  print(f"end to end, the same (anchor, negative) at the same row: {agree} of {max(len(mined), len(st_mined))}")
  print(f"jaxcse: {len(dataset) / ours:.0f} pairs per CPU second end to end")
  print(f"mining: {theirs / ours:.2f}x")


if __name__ == "__main__":
  main()
