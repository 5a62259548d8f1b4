#!/usr/bin/env bash
# The papers' own experiments, reproduced from jaxcse's raw encoder (jaxcse/bert-mini-wiki-uncased), in the
# setting of experiments/from_raw_plm (batch 64, length 32, mean pooling, STS-B dev every 125 steps, best
# checkpoint kept). See README.md here for the tables.
#
#   JAXCSE_DATA_DIR=../shared/data bash experiments/paper_ablations/run_study.sh [stage ...]
#
# Stages, in order: lr_grid (every method at three learning rates, seed 1), main (each method at its own best
# rate, seeds 2-3), then the ablation stages added as their switches land, and report. Every run is skipped when
# its results file exists and resumes from its latest checkpoint otherwise, so the same command continues a
# killed study. OUT (default: this folder) receives results/, runs/ (metrics, summary, config) and logs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-jaxcse/bert-mini-wiki-uncased}
STEPS=${STEPS:-500}                   # The raw-encoder study's budget: 32k sentences at batch 64.
GRID_LRS=${GRID_LRS:-"1e-4 3e-4 1e-3"}
METHODS=${METHODS:-"simcse mixcse dclr"}
MAIN_SEEDS=${MAIN_SEEDS:-"2 3"}       # Seed 1 of each method's main result is its lr_grid run.
POOLER=avg                            # The raw-encoder study's pooler for every method (its [CLS] is untrained).
W=${WORKDIRS:-workdirs/paper_ablations}
OUT=${OUT:-experiments/paper_ablations}
STAGES=${*:-"lr_grid main report"}
mkdir -p "$OUT/results" "$OUT/logs" "$OUT/runs"

common=(--config.model.name="$MODEL" --config.data.train=corpora/wiki_offline.txt --config.train.batch_size=64
        --config.data.max_seq_len=32 --config.eval.every=125 --config.eval.at_end=False
        --config.checkpoint.every=125 --config.model.pooler="$POOLER" --config.model.test_pooler="$POOLER"
        --config.model.mlp_only_train=False)

# DCLR's complementary model, fixed for every DCLR run of the study: unsupervised SimCSE seed 1 at lr 3e-4 (the
# raw-encoder study's SimCSE run), embedded with its training pooler.
COMPLEMENTARY=$W/lr_grid/simcse-lr3e-4-seed1

method_config() {  # The method's config file and its own fields.
  case $1 in
    simcse) echo "--config configs/base.py" ;;
    mixcse) echo "--config configs/mixcse.py" ;;
    dclr) echo "--config configs/dclr.py --config.dclr.complementary_model=$COMPLEMENTARY" ;;
    *) echo "unknown method $1" >&2; exit 2 ;;
  esac
}

# run GROUP NAME STEPS ARGS...: trains WORKDIRS/GROUP/NAME unless OUT/results/GROUP/NAME.json exists, copies its
# metrics, summary and config to OUT/runs/GROUP/NAME and evaluates it on the STS tasks (+ alignment/uniformity).
run() {
  group=$1 name=$2 steps=$3; shift 3
  f=$OUT/results/$group/$name.json
  [ -f "$f" ] && return 0
  mkdir -p "$OUT/results/$group" "$OUT/logs/$group" "$OUT/runs/$group/$name"
  wd=$W/$group/$name
  python -m jaxcse.train "$@" "${common[@]}" --config.train.max_steps="$steps" --workdir "$wd" \
      2>&1 | tee "$OUT/logs/$group/train-$name.log"
  cp "$wd/metrics.jsonl" "$wd/summary.json" "$wd/config.json" "$OUT/runs/$group/$name/"
  python -m jaxcse.evaluate --model "$wd" --tasks sts,align_uniform --output "$f.partial" \
      2>&1 | tee "$OUT/logs/$group/eval-$name.log"
  mv "$f.partial" "$f"
}

best_lr() {  # The grid's learning rate with the best selection metric (dev) for a method, seed 1.
  python - "$OUT/runs/lr_grid" "$1" <<'PY'
import glob, json, re, sys
runs = {}
for path in glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-lr*-seed1/summary.json"):
  lr = re.search(r"-lr([^-]+)-seed1", path).group(1)
  runs[lr] = json.load(open(path))["best_metric"]
if not runs:
  sys.exit(f"no lr_grid runs of {sys.argv[2]} yet")
print(max(runs, key=runs.get))
PY
}

for stage in $STAGES; do
  case $stage in
  lr_grid)
    # SimCSE first: its lr 3e-4 run is DCLR's complementary model.
    for method in $METHODS; do
      for lr in $GRID_LRS; do
        run lr_grid "$method-lr$lr-seed1" "$STEPS" $(method_config "$method") \
            --config.train.learning_rate="$lr" --config.seed=1
      done
    done ;;
  main)
    for method in $METHODS; do
      lr=$(best_lr "$method")
      for seed in $MAIN_SEEDS; do
        run main "$method-lr$lr-seed$seed" "$STEPS" $(method_config "$method") \
            --config.train.learning_rate="$lr" --config.seed="$seed"
      done
    done ;;
  report)
    python experiments/paper_ablations/summarize.py --out "$OUT" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
