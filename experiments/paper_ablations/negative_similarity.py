r"""How similar are in-batch negatives? The measurement behind DCLR's instance-weighting rows.

DCLR gives weight 0 to an in-batch negative whose cosine to the anchor, by a frozen complementary model, exceeds
phi = 0.9. Whether that ever happens depends on the model's similarity distribution over pairs of different
training sentences. This embeds a random sample of the training corpus with each model given (its test pooler,
no dropout: as the train step embeds the complementary model, ``dclr.complementary_dropout=False``), splits it
into batches of the training batch size as the trainer would, and reports the distribution of the cosines of
all different-sentence pairs inside each batch (the in-batch negatives), with the share above phi and the
phi that would zero a given share (the quantiles: q0.99 zeroes 1% of the negatives).

  python experiments/paper_ablations/negative_similarity.py --corpus ../shared/data/corpora/wiki_offline.txt \
      --model lr_grid/simcse=workdirs/paper_ablations/lr_grid/simcse-lr3e-4-seed1 \
      --model raw=jaxcse/bert-mini-wiki-uncased --pooler avg --json experiments/paper_ablations/negative_similarity.json
"""

import argparse
import json
import sys

import numpy as np

from jaxcse.training import losses
from jaxcse.encode import Encoder

QUANTILES = (0.5, 0.9, 0.99, 0.999, 0.9999)


def in_batch_negative_cosines(embeddings: np.ndarray, batch_size: int) -> np.ndarray:
  """Cosines of every ordered pair (i, j), i != j, inside each consecutive batch of ``[n, dim]`` embeddings."""
  # The cosine DCLR's instance weights compare with phi (dclr_losses.dclr_instance_weights), float32 as in training.
  off_diagonal = ~np.eye(batch_size, dtype=bool)
  cosines = [
    np.asarray(losses.cosine_similarity_matrix(block, block))[off_diagonal]
    for block in np.split(np.asarray(embeddings, np.float32), len(embeddings) // batch_size)
  ]
  return np.concatenate(cosines)


def describe(cosines: np.ndarray, phi: float) -> dict:
  return {
    "pairs": int(cosines.size),
    "mean": float(cosines.mean()),
    "max": float(cosines.max()),
    "quantiles": {str(q): float(np.quantile(cosines, q)) for q in QUANTILES},
    "share_above_phi": float((cosines > phi).mean()),
    "phi": phi,
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--corpus", required=True, help="the training text, a sentence a line")
  parser.add_argument("--model", action="append", required=True, help="NAME=PATH (a workdir, HF folder or hub id)")
  parser.add_argument("--sentences", type=int, default=12800, help="sample size (a multiple of --batch_size)")
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--max_seq_len", type=int, default=32)
  parser.add_argument("--pooler", help="for every model (default: each model's test pooler)")
  parser.add_argument("--phi", type=float, default=0.9)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--json", help="write the report here too")
  args = parser.parse_args(argv)
  if args.sentences % args.batch_size:
    parser.error(f"--sentences {args.sentences} is not a multiple of --batch_size {args.batch_size}")
  with open(args.corpus, encoding="utf-8") as f:
    corpus = f.read().splitlines()
  rows = np.random.default_rng(args.seed).choice(len(corpus), size=args.sentences, replace=False)
  sample = [corpus[i] for i in rows]
  report = {
    "corpus": args.corpus,
    "sentences": args.sentences,
    "batch_size": args.batch_size,
    "max_seq_len": args.max_seq_len,
    "seed": args.seed,
    "models": {},
  }
  for spec in args.model:
    name, _, path = spec.partition("=")
    encoder = Encoder.load(path, args.pooler, max_seq_len=args.max_seq_len)
    stats = describe(in_batch_negative_cosines(encoder.embed(sample), args.batch_size), args.phi)
    report["models"][name] = {"path": path, "pooler": encoder.pooler, **stats}
    quantiles = "  ".join(f"q{q}: {v:.3f}" for q, v in stats["quantiles"].items())
    print(
      f"{name} ({encoder.pooler}): mean {stats['mean']:.3f}  {quantiles}  max {stats['max']:.3f}  "
      f"above phi {args.phi}: {stats['share_above_phi']:.2e} of {stats['pairs']} pairs",
      flush=True,
    )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
