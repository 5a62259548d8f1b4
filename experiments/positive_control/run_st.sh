#!/bin/bash
# (b) sentence-transformers' unsupervised SimCSE (run_st.py) in jaxcse's regime, then jaxcse's scorer on both
# checkpoints; the one with the better STS-B dev is kept. Resumable: a seed whose results/st-seedS.json exists is
# skipped.   bash run_st.sh [SEED ...]   (default 1 2 3; environment as run_official.sh)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
SEEDS=${*:-1 2 3}
mkdir -p "$WORK" "$HERE/logs" "$HERE/results"
head -n 16000 "$DATA/corpora/wiki_offline.txt" > "$WORK/wiki16k.txt"
for S in $SEEDS; do
  [ -f "$HERE/results/st-seed$S.json" ] && { echo "st seed $S: done, skipped"; continue; }
  W="$WORK/st-seed$S"; rm -rf "$W"; mkdir -p "$W"
  start=$(date +%s)
  nice -n 19 "$VENV/bin/python" "$HERE/run_st.py" --encoder "$ENCODER" --data "$WORK/wiki16k.txt" \
    --output_dir "$W/train" --seed "$S" > "$HERE/logs/st-seed$S.train.log" 2>&1
  train_s=$(( $(date +%s) - start ))
  for step in 125 250; do
    "$VENV/bin/python" "$HERE/export_encoder.py" "$W/train/checkpoint-$step" "$W/encoder-step$step"
    PYTHONPATH="$PC_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$PC_VENV/bin/python" -m jaxcse.evaluate \
      --model "$W/encoder-step$step" --pooler avg --tasks sts --output "$W/eval-step$step.json" \
      > "$HERE/logs/st-seed$S.eval-step$step.log" 2>&1
  done
  "$VENV/bin/python" "$HERE/finish_run.py" st "$S" "$W" "$HERE/results" "$train_s"
done
