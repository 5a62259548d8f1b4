#!/usr/bin/env bash
# Short MLM runs that choose the pretraining setting (vocabulary, batch) at an equal token budget (2.95M tokens),
# each resumable (same command). Results: experiments/from_raw_plm/choices/<name>/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WORKDIRS:-/work/workdirs/choices}
run() {
  name=$1; shift
  python -m jaxcse.train --config configs/pretrain_mlm.py --workdir "$W/$name" "$@" \
      --config.train.log_every=10 --config.eval.at_end=True --config.checkpoint.every=60
  mkdir -p experiments/from_raw_plm/choices/$name
  cp "$W/$name/metrics.jsonl" "$W/$name/summary.json" "$W/$name/config.json" experiments/from_raw_plm/choices/$name/
}
# 8k WordPiece trained on the corpus, batch 128 x 128 tokens, 180 steps.
run wp8k_b128 --config.train.max_steps=180 --config.train.warmup_steps=11 --config.eval.every=180
# bert-base-uncased's 30,522-token WordPiece (shipped with all-MiniLM-L6-v2), same shape and steps.
run wp30k_b128 --config.model.tokenizer=sentence-transformers/all-MiniLM-L6-v2 --config.train.max_steps=180 \
    --config.train.warmup_steps=11 --config.eval.every=180
# 8k, batch 64: twice the steps for the same tokens.
run wp8k_b64 --config.train.batch_size=64 --config.train.max_steps=360 --config.train.warmup_steps=22 \
    --config.eval.every=360
