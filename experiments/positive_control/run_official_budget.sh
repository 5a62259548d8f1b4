#!/bin/bash
# The official code at the tables' own budget, paired with jaxcse by seed (README, "The official code at the tables'
# budget"; issue 50 item 3): princeton-nlp/SimCSE's train.py (pinned commit + simcse_official.patch +
# simcse_crop.patch + simcse_word_deletion.patch) fed jaxcse's training sentences of seed S in jaxcse's batch order
# (jaxcse_sentences.py, official_launch.py, as run_official_jaxdata.sh), 250 steps, rows None, crop 10% and word
# deletion 10% of the second view (the study's faithful-stage rows mask/{p0.1,crop10,word_deletion10}), torch seed
# S for dropout. Checked before scoring: the first 3 batches are jaxcse's (check_official_batches.py: both views
# for None, the first view otherwise) and, for crop and word deletion, every recorded second view is its first view
# less jaxcse's number of whole words (check_second_views.py). Then jaxcse's scorer on both checkpoints (125, 250),
# the better STS-B dev kept, as run_official_jaxdata.sh: results/official_budget-ROW-seedS.json.
# Resumable per run: a run whose results file exists is skipped; a trained run is not retrained, a scored
# checkpoint not rescored.
#   bash run_official_budget.sh [ROW:SEED ...]    (default: seeds 1-5, each seed's none, crop10, word_deletion10
#   in turn, so that a seed's three rows finish together; environment as run_official_jaxdata.sh, plus STEPS
#   (default 250; checkpoints at STEPS/2 and STEPS) and OUT (where results/ and logs/ go, default this folder),
#   both for a smoke run only; SIMCSE must have the three patches applied)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
STEPS=${STEPS:-250}; OUT=${OUT:-$HERE}
HALF=$(( STEPS / 2 ))  # the jaxdata runs' and the study's selection: STS-B dev at the half and at the end
RUNS=${*:-$(for S in 1 2 3 4 5; do printf "none:$S crop10:$S word_deletion10:$S "; done)}
mkdir -p "$WORK/jaxdata" "$OUT/logs" "$OUT/results"
for spec in $RUNS; do
  row=${spec%:*} S=${spec#*:}
  case $row in
    none) aug=() views=both op= ;;
    crop10) aug=(--crop 0.1) views=first op=crop ;;
    word_deletion10) aug=(--word_deletion 0.1) views=first op=word_deletion ;;
    *) echo "unknown row $row (none, crop10, word_deletion10)" >&2; exit 2 ;;
  esac
  name=official_budget-$row-seed$S
  [ -f "$OUT/results/$name.json" ] && { echo "$name: done, skipped"; continue; }
  # The sentence file of run_official_jaxdata.sh (jaxcse's batches 0..249 of seed S), shared with it.
  W="$WORK/$name"; TXT="$WORK/jaxdata/jaxcse-seed$S.txt"; JNPZ="$WORK/jaxdata/jaxcse-seed$S.batches.npz"
  if [ ! -f "$TXT" ] || [ ! -f "$JNPZ" ]; then
    PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" "$HERE/jaxcse_sentences.py" \
      "$S" "$TXT" "$JNPZ" > "$OUT/logs/official_budget-seed$S.sentences.log" 2>&1
  fi
  if [ ! -f "$W/train/checkpoint-$STEPS/config.json" ] || [ ! -f "$W/train_seconds" ]; then
    rm -rf "$W"; mkdir -p "$W"
    start=$(date +%s)
    (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/official_launch.py" "$W/official-batches.npz" train.py \
      --model_name_or_path "$ENCODER" --train_file "$TXT" --output_dir "$W/train" \
      --max_seq_length 32 --per_device_train_batch_size 64 --learning_rate 1e-3 --max_steps "$STEPS" \
      --pooler_type avg --temp 0.05 --do_train --seed "$S" "${aug[@]}" \
      --eval_strategy no --save_strategy steps --save_steps "$HALF" \
      --logging_steps 10 --report_to none --overwrite_output_dir --overwrite_cache) 2>&1 \
      | grep --line-buffered -v "Trainer.tokenizer is now deprecated" > "$OUT/logs/$name.train.log"
    echo $(( $(date +%s) - start )) > "$W/train_seconds"
  fi
  check="$OUT/logs/$name.batch-check.log"
  "$VENV/bin/python" "$HERE/check_official_batches.py" "$JNPZ" "$W/official-batches.npz" "$views" > "$check" 2>&1 \
    || { cat "$check"; exit 1; }
  if [ -n "$op" ]; then
    PYTHONPATH="$JAXCSE_CODE" "$JAXCSE_VENV/bin/python" "$HERE/check_second_views.py" "$JNPZ" \
      "$W/official-batches.npz" "$ENCODER" "$op" 0.1 >> "$check" 2>&1 || { cat "$check"; exit 1; }
  fi
  for step in "$HALF" "$STEPS"; do
    [ -f "$W/eval-step$step.json" ] && continue
    "$VENV/bin/python" "$HERE/export_encoder.py" "$W/train/checkpoint-$step" "$W/encoder-step$step" > /dev/null
    PYTHONPATH="$PC_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$PC_VENV/bin/python" -m jaxcse.evaluate \
      --model "$W/encoder-step$step" --pooler avg --tasks sts --output "$W/eval-step$step.json" \
      > "$OUT/logs/$name.eval-step$step.log" 2>&1
  done
  "$VENV/bin/python" "$HERE/finish_run.py" "official_budget-$row" "$S" "$W" "$OUT/results" "$(cat "$W/train_seconds")" \
    "$HALF,$STEPS"
done
