#!/usr/bin/env bash
# Issue 64's compile table: the unsupervised SimCSE step of configs/base.py (BERT-base, batch 64, two views, length
# 32, bfloat16) compiled by jaxcse-compile for each target, padded and packed at the same sentence count, the packed
# rows sized for texts of 28 tokens on average (the Wikipedia sentences' mean under the cut at 32: experiments/packing
# README) and of 16 (half full). Compiler facts and bounds, not run times: no accelerator is used. Needs the aot
# extra (pip install -e ".[aot]" -c requirements.txt; GPU targets: jaxcse-compile --install_gpu_compiler).
#
#   bash experiments/packing/compile.sh          # -> experiments/packing/compile/<target>_<variant>.json
#   TARGETS=h100 bash experiments/packing/compile.sh
#   python experiments/packing/compile_table.py  # the table in README.md, from those files
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/packing/compile
PY=${PYTHON:-python}
read -ra TARGETS <<< "${TARGETS:-h100 v5e-1}"
mkdir -p "$OUT"
for target in "${TARGETS[@]}"; do
  for variant in padded packed28 packed16; do
    [[ -f $OUT/${target}_$variant.json ]] && continue  # Done before: each report is a file of its own.
    flags=()
    [[ $variant == packed* ]] && flags=(--config.train.packed=True --packed_length "${variant#packed}")
    echo "== $target $variant"
    nice -n 5 "$PY" -m jaxcse.compile --config base --config.model.dtype=bfloat16 --target "$target" "${flags[@]}" \
      --json "$OUT/${target}_$variant.json.tmp" && mv "$OUT/${target}_$variant.json.tmp" "$OUT/${target}_$variant.json"
  done
done
