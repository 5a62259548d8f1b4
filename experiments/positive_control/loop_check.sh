#!/bin/bash
# The loop check (README, "Loop check"): jaxcse's train step and the official code + HF Trainer's optimizer, from
# the same raw encoder, on jaxcse's batches 0-2 of seed 1, dropout 0, float64; writes loop_check.txt.
#   bash loop_check.sh     (environment as run_official_jaxdata.sh; needs WORK/jaxdata/jaxcse-seed1.batches.npz,
#                           which jaxcse_sentences.py writes)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
BATCHES="$WORK/jaxdata/jaxcse-seed1.batches.npz"; mkdir -p "$WORK/loopcheck"
[ -f "$BATCHES" ] || PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" "$JAXCSE_VENV/bin/python" "$HERE/jaxcse_sentences.py" \
  1 "$WORK/jaxdata/jaxcse-seed1.txt" "$BATCHES"
out="$HERE/loop_check.txt.partial"
{
  echo "# written by loop_check.sh, $(date -u +%Y-%m-%dT%H:%MZ)"
  PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" "$HERE/loop_check_jaxcse.py" \
    "$BATCHES" "$WORK/loopcheck/jaxcse.npz" 2>/dev/null
  for variant in hf as_optax; do
    (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/loop_check_official.py" "$ENCODER" "$BATCHES" \
      "$WORK/loopcheck/jaxcse.npz" "$variant" 2>/dev/null)
  done
} > "$out"
mv "$out" "$HERE/loop_check.txt"
cat "$HERE/loop_check.txt"
