#!/bin/bash
# The data-subset control (README, "Data-subset control"): princeton-nlp/SimCSE's train.py (pinned commit +
# simcse_official.patch, as run_official.sh) fed jaxcse's own training sentences of seed S in jaxcse's batch order
# (jaxcse_sentences.py; official_launch.py makes the sampler sequential and records the first batches, which
# check_official_batches.py compares with jaxcse's loader's), torch seed S for dropout; then jaxcse's scorer on
# both checkpoints, the better STS-B dev kept. No evaluation during training (it costs 2-4 min a run here and
# its STS-B dev equalled jaxcse's scorer's to every digit in seeds 1-3 of run_official.sh).
# Resumable: a seed whose results/official_jaxdata-seedS.json exists is skipped.
#   bash run_official_jaxdata.sh [SEED ...]    (default 1 2 3; environment as run_official.sh, plus JAXCSE_CODE,
#   the jaxcse whose data code writes the sentences, and JAXCSE_VENV)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
SEEDS=${*:-1 2 3}
mkdir -p "$WORK/jaxdata" "$HERE/logs" "$HERE/results"
for S in $SEEDS; do
  [ -f "$HERE/results/official_jaxdata-seed$S.json" ] && { echo "official_jaxdata seed $S: done, skipped"; continue; }
  W="$WORK/official_jaxdata-seed$S"; TXT="$WORK/jaxdata/jaxcse-seed$S.txt"; JNPZ="$WORK/jaxdata/jaxcse-seed$S.batches.npz"
  if [ ! -f "$TXT" ] || [ ! -f "$JNPZ" ]; then
    PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" "$HERE/jaxcse_sentences.py" \
      "$S" "$TXT" "$JNPZ" > "$HERE/logs/official_jaxdata-seed$S.sentences.log" 2>&1
  fi
  if [ -f "$W/train/checkpoint-250/config.json" ] && [ -f "$W/train_seconds" ]; then
    train_s=$(cat "$W/train_seconds")
  else
    rm -rf "$W"; mkdir -p "$W"
    start=$(date +%s)
    (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/official_launch.py" "$W/official-batches.npz" train.py \
      --model_name_or_path "$ENCODER" --train_file "$TXT" --output_dir "$W/train" \
      --max_seq_length 32 --per_device_train_batch_size 64 --learning_rate 1e-3 --max_steps 250 \
      --pooler_type avg --temp 0.05 --do_train --seed "$S" \
      --eval_strategy no --save_strategy steps --save_steps 125 \
      --logging_steps 10 --report_to none --overwrite_output_dir --overwrite_cache) 2>&1 \
      | grep --line-buffered -v "Trainer.tokenizer is now deprecated" > "$HERE/logs/official_jaxdata-seed$S.train.log"
    train_s=$(( $(date +%s) - start ))
    echo "$train_s" > "$W/train_seconds"
  fi
  "$VENV/bin/python" "$HERE/check_official_batches.py" "$JNPZ" "$W/official-batches.npz" \
    > "$HERE/logs/official_jaxdata-seed$S.batch-check.log" 2>&1 || { cat "$HERE/logs/official_jaxdata-seed$S.batch-check.log"; exit 1; }
  for step in 125 250; do
    "$VENV/bin/python" "$HERE/export_encoder.py" "$W/train/checkpoint-$step" "$W/encoder-step$step"
    PYTHONPATH="$PC_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$PC_VENV/bin/python" -m jaxcse.evaluate \
      --model "$W/encoder-step$step" --pooler avg --tasks sts --output "$W/eval-step$step.json" \
      > "$HERE/logs/official_jaxdata-seed$S.eval-step$step.log" 2>&1
  done
  "$VENV/bin/python" "$HERE/finish_run.py" official_jaxdata "$S" "$W" "$HERE/results" "$train_s"
done
