#!/usr/bin/env bash
# The README's table of issue 21: each config compiled for each target by jaxcse-compile (no accelerator used),
# one at a time, each report written to results/<config>/<target>.json. Compilations already done are found in
# jaxcse-compile's cache (by the program's fingerprint) and not run again. Needs: pip install -e ".[aot]".
#
#   bash experiments/aot/run.sh [table|max_batch|inference|all]
#   CONFIGS="base dclr" TARGETS="v5e-1 h100" bash experiments/aot/run.sh table   # a part of the grid
#   CONFIGS=mixcse TARGETS=v5e-8 NEAR=9920 bash experiments/aot/run.sh max_batch   # search around a guess
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/aot/results
PY=${PYTHON:-python}
read -ra CONFIGS <<< "${CONFIGS:-base simcse_sup mixcse dclr}"
read -ra TARGETS <<< "${TARGETS:-v5e-1 h100 a100-40gb a100-80gb v5e-8 v4-8 v6e-8 v3-8 v2-8 v5e-16}"

compile() {  # config target [extra flags...]
  local config=$1 target=$2
  shift 2
  mkdir -p "$OUT/$config"
  nice -n 5 "$PY" -m jaxcse.compile --config "$config" --config.model.dtype=bfloat16 --target "$target" "$@"
}

stage=${1:-all}
if [[ $stage == table || $stage == all ]]; then
  for config in "${CONFIGS[@]}"; do
    for target in "${TARGETS[@]}"; do
      compile "$config" "$target" --json "$OUT/$config/$target.json"
    done
  done
fi
if [[ $stage == max_batch || $stage == all ]]; then
  for config in "${CONFIGS[@]}"; do
    for target in "${TARGETS[@]}"; do
      compile "$config" "$target" --find_max_batch --variants=plain ${NEAR:+--max_batch_near="$NEAR"} \
        --json "$OUT/$config/$target.max_batch.json"
    done
  done
fi
if [[ $stage == inference || $stage == all ]]; then
  for target in v5e-1 h100; do  # The Evaluator's forward (eval.batch_size 128 rows) at three length buckets.
    compile base "$target" --inference --inference_lengths=32,128,512 --json "$OUT/base/$target.inference.json"
  done
fi
