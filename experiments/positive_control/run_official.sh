#!/bin/bash
# (a) princeton-nlp/SimCSE's train.py (pinned commit + simcse_official.patch) in jaxcse's regime, then
# jaxcse's scorer on both checkpoints. Resumable: a seed whose results/official-seedS.json exists is skipped.
#   bash run_official.sh [SEED ...]        (default 1 2 3)
# Environment: SIMCSE (the patched checkout, default /work/simcse-official), VENV (default /work/venv-simcse),
# WORK (default /work/pc-runs), DATA (default /work/shared/data), PC_CODE and PC_VENV (the frozen jaxcse to score with).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
SEEDS=${*:-1 2 3}
FTZ_LAUNCH='import runpy, sys, torch; assert torch.set_flush_denormal(True); sys.argv[0] = "train.py"; runpy.run_path("train.py", run_name="__main__")'

mkdir -p "$WORK" "$HERE/logs" "$HERE/results"
head -n 16000 "$DATA/corpora/wiki_offline.txt" > "$WORK/wiki16k.txt"
# SentEval (inside the official checkout) reads SentEval/data/downstream/{STS,SICK}: the same files jaxcse scores on.
for d in STS SICK; do ln -sfn "$DATA/senteval/downstream/$d" "$SIMCSE/SentEval/data/downstream/$d"; done
for S in $SEEDS; do
  [ -f "$HERE/results/official-seed$S.json" ] && { echo "official seed $S: done, skipped"; continue; }
  W="$WORK/official-seed$S"
  if [ -f "$W/train/train_results.txt" ]; then  # trained already: score it
    train_s=$(sed -n "s/^train_runtime = //p" "$W/train/train_results.txt")
  else
  rm -rf "$W"; mkdir -p "$W"
  start=$(date +%s)
  # Launched with denormals flushed to zero (torch.set_flush_denormal), as XLA on CPU computes jaxcse's runs:
  # once the loss is ~1e-4 the gradients hold subnormal floats that make the CPU ~6x slower; no code change.
  (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" -c "$FTZ_LAUNCH" \
    --model_name_or_path "$ENCODER" --train_file "$WORK/wiki16k.txt" --output_dir "$W/train" \
    --max_seq_length 32 --per_device_train_batch_size 64 --learning_rate 1e-3 --max_steps 250 \
    --pooler_type avg --temp 0.05 --do_train --seed "$S" \
    --eval_strategy steps --eval_steps 125 --save_strategy steps --save_steps 125 \
    --metric_for_best_model stsb_spearman --load_best_model_at_end \
    --logging_steps 10 --report_to none --overwrite_output_dir --overwrite_cache) 2>&1 | grep --line-buffered -v "Trainer.tokenizer is now deprecated" > "$HERE/logs/official-seed$S.train.log"
  train_s=$(( $(date +%s) - start ))
  fi
  for step in 125 250; do
    "$VENV/bin/python" "$HERE/export_encoder.py" "$W/train/checkpoint-$step" "$W/encoder-step$step"
    PYTHONPATH="$PC_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$PC_VENV/bin/python" -m jaxcse.evaluate \
      --model "$W/encoder-step$step" --pooler avg --tasks sts --output "$W/eval-step$step.json" \
      > "$HERE/logs/official-seed$S.eval-step$step.log" 2>&1
  done
  "$VENV/bin/python" "$HERE/finish_run.py" official "$S" "$W" "$HERE/results" "$train_s"
done
