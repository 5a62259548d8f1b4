#!/usr/bin/env bash
# SimCSE vs MixCSE vs DCLR from the same start encoder, on the same offline corpus, same steps, 3 seeds each.
# Usage: JAXCSE_DATA_DIR=../shared/data bash experiments/compare_methods/run.sh [STEPS] [SEEDS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-50}; shift || true
seeds=${*:-"1 2 3"}
out=experiments/compare_methods
common=(--config.model.name=sentence-transformers/all-MiniLM-L6-v2 --config.data.train=corpora/wiki_offline.txt
        --config.train.batch_size=64 --config.train.max_steps="$steps" --config.eval.every=1000000
        --config.eval.at_end=True --config.checkpoint.every="$steps"
        --config.model.attention_dropout_per_element=False)  # jaxcse's default when these runs were made
for seed in $seeds; do
  for method in simcse mixcse dclr; do
    wd=workdirs/compare/$method-seed$seed
    case $method in
      simcse) cfg=(--config configs/base.py) ;;
      mixcse) cfg=(--config configs/mixcse.py) ;;
      # The frozen complementary model is the start encoder itself (no unsup-SimCSE MiniLM exists offline).
      dclr) cfg=(--config configs/dclr.py --config.dclr.complementary_model=sentence-transformers/all-MiniLM-L6-v2
                 --config.train.learning_rate=3e-5) ;;
    esac
    [ -f "$out/results/$method-seed$seed.json" ] && continue
    python -m jaxcse.train "${cfg[@]}" "${common[@]}" --config.seed="$seed" --workdir "$wd"
    python -m jaxcse.evaluate --model "$wd" --tasks sts --output "$out/results/$method-seed$seed.json"
  done
done
python -m jaxcse.report --group-by-seed-suffix "$out"/results/*.json | tee "$out/table.md"
