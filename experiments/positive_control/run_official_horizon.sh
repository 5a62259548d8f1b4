#!/bin/bash
# The study's longer-horizon slice through the official code (README, "The horizon slice through the official
# code"): princeton-nlp/SimCSE's train.py (pinned commit + simcse_official.patch + simcse_crop.patch) fed jaxcse's
# training sentences of seed S in jaxcse's batch order for 1,500 steps (jaxcse_sentences.py, official_launch.py),
# rows None, crop 10% and crop 30% (the crop: --crop, simcse_crop.patch), a checkpoint every 250 steps. jaxcse's
# scorer then reads STS-B dev at every checkpoint, keeps the best (the study's selection) and scores the seven STS
# test sets there and at the last step: results/official_horizon-ROW-seedS.json and ...-last.json.
# Resumable per run: a run whose two results files exist is skipped; a trained run is not retrained.
#   bash run_official_horizon.sh [ROW:SEED ...]    (default none:1 crop10:1 crop30:1; environment as
#   run_official_jaxdata.sh; SIMCSE must have both patches applied)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
STEPS=1500 EVERY=250  # as the study's horizon stage (run_study.sh HORIZON_STEPS, HORIZON_EVERY)
RUNS=${*:-none:1 crop10:1 crop30:1}
mkdir -p "$WORK/jaxdata" "$HERE/logs" "$HERE/results"
score() {  # score MODEL_FOLDER TASKS OUT.json LOG
  PYTHONPATH="$PC_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$PC_VENV/bin/python" -m jaxcse.evaluate \
    --model "$1" --pooler avg --tasks "$2" --output "$3" > "$4" 2>&1
}
for spec in $RUNS; do
  row=${spec%:*} S=${spec#*:}
  case $row in
    none) crop=0 views=both ;;
    crop10) crop=0.1 views=first ;;
    crop30) crop=0.3 views=first ;;
    *) echo "unknown row $row (none, crop10, crop30)" >&2; exit 2 ;;
  esac
  name=official_horizon-$row-seed$S
  if [ -f "$HERE/results/$name.json" ] && [ -f "$HERE/results/$name-last.json" ]; then
    echo "$name: done, skipped"; continue
  fi
  W="$WORK/$name"; TXT="$WORK/jaxdata/jaxcse-seed$S-steps$STEPS.txt"; JNPZ="$WORK/jaxdata/jaxcse-seed$S-steps$STEPS.batches.npz"
  if [ ! -f "$TXT" ] || [ ! -f "$JNPZ" ]; then
    PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" "$HERE/jaxcse_sentences.py" \
      "$S" "$TXT" "$JNPZ" "$STEPS" > "$HERE/logs/official_horizon-seed$S.sentences.log" 2>&1
  fi
  if [ ! -f "$W/train/checkpoint-$STEPS/config.json" ] || [ ! -f "$W/train_seconds" ]; then
    rm -rf "$W"; mkdir -p "$W"
    start=$(date +%s)
    (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/official_launch.py" "$W/official-batches.npz" train.py \
      --model_name_or_path "$ENCODER" --train_file "$TXT" --output_dir "$W/train" \
      --max_seq_length 32 --per_device_train_batch_size 64 --learning_rate 1e-3 --max_steps "$STEPS" \
      --pooler_type avg --temp 0.05 --do_train --seed "$S" --crop "$crop" \
      --eval_strategy no --save_strategy steps --save_steps "$EVERY" \
      --logging_steps 10 --report_to none --overwrite_output_dir --overwrite_cache) 2>&1 \
      | grep --line-buffered -v "Trainer.tokenizer is now deprecated" > "$HERE/logs/$name.train.log"
    echo $(( $(date +%s) - start )) > "$W/train_seconds"
  fi
  "$VENV/bin/python" "$HERE/check_official_batches.py" "$JNPZ" "$W/official-batches.npz" "$views" \
    > "$HERE/logs/$name.batch-check.log" 2>&1 || { cat "$HERE/logs/$name.batch-check.log"; exit 1; }
  for step in $(seq "$EVERY" "$EVERY" "$STEPS"); do
    [ -f "$W/dev-step$step.json" ] && continue
    "$VENV/bin/python" "$HERE/export_encoder.py" "$W/train/checkpoint-$step" "$W/encoder-step$step" > /dev/null
    score "$W/encoder-step$step" STSBenchmark "$W/dev-step$step.json" "$HERE/logs/$name.dev-step$step.log"
  done
  best=$("$VENV/bin/python" "$HERE/finish_horizon.py" best "$W" "$STEPS" "$EVERY")
  for step in $(printf "%s\n" "$best" "$STEPS" | sort -u); do
    [ -f "$W/eval-step$step.json" ] || score "$W/encoder-step$step" sts "$W/eval-step$step.json" "$HERE/logs/$name.eval-step$step.log"
  done
  "$VENV/bin/python" "$HERE/finish_horizon.py" write "$W" "$STEPS" "$EVERY" "$HERE/results/$name" "$(cat "$W/train_seconds")"
done
