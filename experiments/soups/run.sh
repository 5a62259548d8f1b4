#!/usr/bin/env bash
# The soups study (README.md): three quickstart seeds, their uniform and greedy soups, the seven STS tasks each.
# Resumable: what is finished is skipped. CORE=N pins every command to that core.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=experiments/soups
runs=$here/runs
results=$here/results
mkdir -p "$runs" "$results"
pin=()
if [ -n "${CORE:-}" ]; then pin=(taskset -c "$CORE"); fi
for seed in 1 2 3; do
  if [ ! -f "$runs/seed$seed/summary.json" ]; then
    "${pin[@]}" jaxcse-train --config quickstart --workdir "$runs/seed$seed" --config.seed=$seed 2>&1 |
      tee "$results/train-seed$seed.log"
  fi
done
ingredients=("$runs/seed1" "$runs/seed2" "$runs/seed3")
if [ ! -d "$runs/uniform" ]; then
  "${pin[@]}" jaxcse-soup "${ingredients[@]}" --output "$runs/uniform" 2>&1 | tee "$results/soup-uniform.log"
fi
if [ ! -d "$runs/greedy" ]; then
  "${pin[@]}" jaxcse-soup "${ingredients[@]}" --greedy --output "$runs/greedy" 2>&1 | tee "$results/soup-greedy.log"
fi
for model in seed1 seed2 seed3 uniform greedy; do
  if [ ! -f "$results/$model.json" ]; then
    "${pin[@]}" jaxcse-evaluate --model "$runs/$model" --tasks sts --output "$results/$model.json" 2>&1 |
      tee "$results/eval-$model.log"
  fi
done
jaxcse-report "$results"/seed1.json "$results"/seed2.json "$results"/seed3.json "$results"/uniform.json \
  "$results"/greedy.json > "$results/table.md"
cat "$results/table.md"
