#!/usr/bin/env bash
# Short MLM probes that chose the pretraining setting, each 500 steps of 32 x 128 tokens (2.05M tokens), warmup 50,
# the same held-out evaluation every 100 steps. Resumable (the same command continues a killed run).
# Raw metrics are copied to experiments/from_raw_plm/choices/<name>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WORKDIRS:-workdirs/choices}
run() {
  name=$1; shift
  python -m jaxcse.train --config configs/pretrain_mlm.py --workdir "$W/$name" --config.train.batch_size=32 \
      --config.train.max_steps=500 --config.train.warmup_steps=50 --config.eval.every=100 --config.train.log_every=20 \
      --config.checkpoint.every=500 --config.eval.batch_size=64 \
      --config.model.attention_dropout_per_element=False "$@"  # jaxcse's default when these runs were made
  mkdir -p "experiments/from_raw_plm/choices/$name"
  cp "$W/$name/metrics.jsonl" "$W/$name/summary.json" "$W/$name/config.json" "experiments/from_raw_plm/choices/$name/"
}
run b32_lr1e-3 --config.train.learning_rate=1e-3                      # the 8k WordPiece trained on the corpus
run b32_lr5e-4 --config.train.learning_rate=5e-4
run b32_lr1e-3_wp30k --config.train.learning_rate=1e-3 \
    --config.model.tokenizer=sentence-transformers/all-MiniLM-L6-v2     # bert-base-uncased's 30,522 WordPieces
