#!/bin/bash
# The word-deletion step check (README, "Word-deletion step check"; issue 69 item 7): jaxcse's train step with word
# deletion 10% and the official code's (its own data path deleting the same words), from the same raw encoder, on
# jaxcse's batches SEEDS x STEPS, dropout 0, float64; writes word_deletion_step_check.txt.
#   bash word_deletion_step_check.sh    (environment: paths.sh; SIMCSE with the three patches applied; SEEDS and
#                                        STEPS, comma-separated, default 1,2,3,4,5 and 0,1,2)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/paths.sh"
SEEDS=${SEEDS:-1,2,3,4,5}; STEPS=${STEPS:-0,1,2}
mkdir -p "$WORK/wdcheck"
npz="$WORK/wdcheck/jaxcse-seeds${SEEDS//,/_}-steps${STEPS//,/_}.npz"
out="$HERE/word_deletion_step_check.txt.partial"
{
  echo "# written by word_deletion_step_check.sh, $(date -u +%Y-%m-%dT%H:%MZ), jaxcse $(git -C "$JAXCSE_CODE" rev-parse --short HEAD),"
  echo "# official checkout $(git -C "$SIMCSE" rev-parse --short HEAD 2>/dev/null || echo '(not a git folder)'), CPU: $(lscpu | sed -n 's/^Model name: *//p')"
  start=$SECONDS
  PYTHONPATH="$JAXCSE_CODE" JAXCSE_DATA_DIR="$DATA" nice -n 19 "$JAXCSE_VENV/bin/python" \
    "$HERE/word_deletion_step_jaxcse.py" "$SEEDS" "$STEPS" "$npz" 2>/dev/null
  echo "# jaxcse side: $((SECONDS - start)) s wall"; start=$SECONDS
  (cd "$SIMCSE" && nice -n 19 "$VENV/bin/python" "$HERE/word_deletion_step_official.py" "$ENCODER" "$npz" 2>/dev/null)
  echo "# official side: $((SECONDS - start)) s wall"
} > "$out"
mv "$out" "$HERE/word_deletion_step_check.txt"
cat "$HERE/word_deletion_step_check.txt"
