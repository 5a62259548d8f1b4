#!/bin/bash
# The dropout check (README, "Dropout check"): the first step's loss under dropout 0.1 over 32 masks, on jaxcse's
# batch 0 of seed 1, from the raw encoder: jaxcse as it is, jaxcse with per-element attention-dropout masks (a
# diagnostic), the official code, the official code without attention dropout (a diagnostic). Each side's losses
# go to dropout_check/NAME.json (kept: a side whose file exists is not rerun); the comparisons to dropout_check.txt.
#   bash dropout_check.sh      (environment as loop_check.sh)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
BATCHES="$WORK/jaxdata/jaxcse-seed1.batches.npz"; N=32; D="$HERE/dropout_check"; mkdir -p "$D"
[ -f "$BATCHES" ] || PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" "$JAXCSE_VENV/bin/python" "$HERE/jaxcse_sentences.py" \
  1 "$WORK/jaxdata/jaxcse-seed1.txt" "$BATCHES"
for side in jaxcse jaxcse_per_element_attention_mask; do
  [ -f "$D/$side.json" ] || PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" \
    "$HERE/dropout_check.py" "$side" "$BATCHES" "$N" "$D/$side.json"
done
[ -f "$D/official.json" ] || (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/dropout_check.py" official "$BATCHES" "$N" \
  "$D/official.json" "$ENCODER")
[ -f "$D/official_attention_dropout0.json" ] || (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/dropout_check.py" \
  official "$BATCHES" "$N" "$D/official_attention_dropout0.json" "$ENCODER" 0.0)
{
  for pair in "jaxcse official" "jaxcse_per_element_attention_mask official" "jaxcse official_attention_dropout0"; do
    set -- $pair
    echo "## $1 vs $2"
    "$VENV/bin/python" "$HERE/dropout_check.py" compare "$D/$1.json" "$D/$2.json" | sed "s/^official:/$2:/; s/^jaxcse:/$1:/"
    echo
  done
} > "$HERE/dropout_check.txt"
cat "$HERE/dropout_check.txt"
