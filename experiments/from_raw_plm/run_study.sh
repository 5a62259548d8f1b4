#!/usr/bin/env bash
# The papers' comparison from a raw MLM encoder: jaxcse/bert-mini-wiki-uncased (pretrained by
# configs/pretrain_mlm.py, see README.md here), no training -> SimCSE, MixCSE, DCLR, 3 seeds each.
#
#   JAXCSE_DATA_DIR=../shared/data bash experiments/from_raw_plm/run_study.sh [stage ...]
#
# Stages (default: all, in order): baselines, probe, runs, as_released, transfer, longer, report. Every stage skips what is done (a results
# file exists) and every training run resumes from its latest checkpoint, so the same command continues a
# killed study. All methods share steps, batch, length, learning rate and the evaluation schedule (STS-B dev
# every 125 steps, best checkpoint kept); each keeps its paper's selection metric (DCLR: STS-B + SICK-R dev).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-jaxcse/bert-mini-wiki-uncased}
STEPS=${STEPS:-500}        # 32k sentences (0.21 epoch of corpora/wiki_offline.txt) at batch 64: ~10 min a run here.
LR=${LR:-3e-4}             # Chosen by the probe stage (SimCSE seed 1, three rates, PROBE_STEPS); see README.md.
# avg for every method, where the papers use [CLS]: this encoder's [CLS] was never trained for anything (MLM
# pretraining has no next-sentence task), and the probe measured SimCSE with [CLS] far below the raw encoder.
POOLER=${POOLER:-avg}
PROBE_LRS=${PROBE_LRS:-"3e-5 1e-4 3e-4"}
PROBE_STEPS=${PROBE_STEPS:-250}
SEEDS=${SEEDS:-"1 2 3"}
W=${WORKDIRS:-workdirs/from_raw_plm}
OUT=experiments/from_raw_plm
LONG_STEPS=${LONG_STEPS:-2000}  # The longer stage: is 500 steps what limits SimCSE's gain?
STAGES=${*:-"baselines probe runs as_released transfer longer report"}
mkdir -p "$OUT/results" "$OUT/logs"

# The attention-dropout mask shared across the batch, jaxcse's default when these runs were made (now per element):
# pinned so that this script reproduces the committed results.
shared=(--config.model.name="$MODEL" --config.data.train=corpora/wiki_offline.txt --config.train.batch_size=64
        --config.data.max_seq_len=32 --config.train.max_steps="$STEPS" --config.train.learning_rate="$LR"
        --config.eval.every=125 --config.eval.at_end=False --config.checkpoint.every=250
        --config.model.attention_dropout_per_element=False)
common=("${shared[@]}" --config.model.pooler="$POOLER" --config.model.test_pooler="$POOLER" --config.model.mlp_only_train=False)

for stage in $STAGES; do
  case $stage in
  baselines)
    # The raw encoder, no training: avg, both first-last averages (avg_embeddings_last is the SimCSE paper's
    # "first-last avg"), [CLS], and BERT's pooler layer (untrained here: MLM pretraining has no NSP task).
    for pooler in avg avg_embeddings_last avg_first_last cls_before_pooler bert_pooler; do
      f=$OUT/results/raw-$pooler.json
      [ -f "$f" ] || python -m jaxcse.evaluate --model "$MODEL" --pooler "$pooler" --tasks sts,align_uniform \
          --output "$f" 2>&1 | tee "$OUT/logs/raw-$pooler.log"
    done ;;
  probe)
    # Unsupervised SimCSE, seed 1, PROBE_STEPS steps, best STS-B dev: the learning rate with the paper's pooler
    # ([CLS] + MLP in training, [CLS] at test), then that pooler against avg at the best rate.
    probe() {
      name=$1; shift
      [ -f "$OUT/probe/$name/summary.json" ] && return
      python -m jaxcse.train --config configs/base.py "${shared[@]}" --config.train.max_steps="$PROBE_STEPS" \
          --config.seed=1 --config.eval.at_start=True --workdir "$W/probe/$name" "$@" 2>&1 | tee "$OUT/logs/probe-$name.log"
      mkdir -p "$OUT/probe/$name"
      cp "$W/probe/$name/metrics.jsonl" "$W/probe/$name/config.json" "$W/probe/$name/summary.json" "$OUT/probe/$name/"
    }
    for lr in $PROBE_LRS; do probe "simcse-cls-lr$lr" --config.train.learning_rate="$lr"; done
    probe simcse-avg-lr3e-4 --config.train.learning_rate=3e-4 --config.model.pooler=avg --config.model.mlp_only_train=False ;;
  runs)
    for seed in $SEEDS; do
      for method in simcse mixcse dclr; do
        f=$OUT/results/$method-seed$seed.json
        [ -f "$f" ] && continue
        wd=$W/$method-seed$seed
        case $method in
          simcse) cfg=(--config configs/base.py) ;;
          mixcse) cfg=(--config configs/mixcse.py) ;;
          # As the paper and the official code: the complementary model is an unsupervised SimCSE model trained
          # from the same encoder (here the SimCSE run of seed 1), embedded with its MLP output; phi 0.9.
          dclr) cfg=(--config configs/dclr.py --config.dclr.complementary_model="$W/simcse-seed1") ;;
        esac
        python -m jaxcse.train "${cfg[@]}" "${common[@]}" --config.seed="$seed" --workdir "$wd" \
            2>&1 | tee "$OUT/logs/train-$method-seed$seed.log"
        mkdir -p "$OUT/runs/$method-seed$seed"
        cp "$wd/metrics.jsonl" "$wd/summary.json" "$wd/config.json" "$OUT/runs/$method-seed$seed/"
        python -m jaxcse.evaluate --model "$wd" --tasks sts,align_uniform --output "$f" \
            2>&1 | tee "$OUT/logs/eval-$method-seed$seed.log"
      done
    done ;;
  as_released)
    # DCLR as the released code runs it (configs/dclr_as_released.py), seed 1, against the dclr-seed1 run above.
    f=$OUT/results/dclr_as_released-seed1.json
    if [ ! -f "$f" ]; then
      wd=$W/dclr_as_released-seed1
      # Its pooling is the released code's (BERT's pooler layer, untrained in this encoder, + MLP), not $POOLER.
      python -m jaxcse.train --config configs/dclr_as_released.py "${shared[@]}" --config.seed=1 \
          --config.dclr.complementary_model="$W/simcse-seed1" --workdir "$wd" 2>&1 | tee "$OUT/logs/train-dclr_as_released-seed1.log"
      mkdir -p "$OUT/runs/dclr_as_released-seed1"
      cp "$wd/metrics.jsonl" "$wd/summary.json" "$wd/config.json" "$OUT/runs/dclr_as_released-seed1/"
      python -m jaxcse.evaluate --model "$wd" --tasks sts,align_uniform --output "$f" \
          2>&1 | tee "$OUT/logs/eval-dclr_as_released-seed1.log"
    fi ;;
  transfer)
    # SentEval's seven transfer tasks (test mode), one seed of each method and the raw encoder's avg.
    for name in raw-avg simcse-seed1 mixcse-seed1 dclr-seed1; do
      f=$OUT/results/transfer/$name.json
      [ -f "$f" ] && continue
      mkdir -p "$OUT/results/transfer"
      # The pooler every model was trained and selected with: a workdir's saved test pooler may be a config's
      # default that the study's overrides did not replace (MixCSE seed 1: [CLS], see README.md).
      if [ "$name" = raw-avg ]; then model=$MODEL; else model=$W/$name; fi
      pooler=(--pooler "$POOLER")
      python -m jaxcse.evaluate --model "$model" "${pooler[@]}" --tasks transfer --output "$f" \
          2>&1 | tee "$OUT/logs/transfer-$name.log"
    done ;;
  longer)
    # SimCSE seed 1 for LONG_STEPS steps (4x the sentences), same schedule shape (linear decay to 0 at the end),
    # STS-B dev every 250 steps: does the gain keep growing with training, or has it levelled off at 500 steps?
    name=simcse-${LONG_STEPS}steps-seed1
    f=$OUT/results/longer/$name.json
    if [ ! -f "$f" ]; then
      mkdir -p "$OUT/results/longer"
      wd=$W/$name
      python -m jaxcse.train --config configs/base.py "${common[@]}" --config.train.max_steps="$LONG_STEPS" \
          --config.eval.every=250 --config.checkpoint.every=500 --config.seed=1 --workdir "$wd" \
          2>&1 | tee "$OUT/logs/train-$name.log"
      mkdir -p "$OUT/runs/$name"
      cp "$wd/metrics.jsonl" "$wd/summary.json" "$wd/config.json" "$OUT/runs/$name/"
      python -m jaxcse.evaluate --model "$wd" --tasks sts,align_uniform --output "$f" 2>&1 | tee "$OUT/logs/eval-$name.log"
    fi ;;
  report)
    python -m jaxcse.report --group-by-seed-suffix "$OUT"/results/*.json | tee "$OUT/table_sts.md"
    python -m jaxcse.report "$OUT"/results/transfer/*.json | tee "$OUT/table_transfer.md"
    python experiments/from_raw_plm/summarize.py
    python -m jaxcse.plot "$OUT"/runs/simcse-seed1 "$OUT"/runs/mixcse-seed1 "$OUT"/runs/dclr-seed1 --out "$OUT/plots" ;;
  *) echo "unknown stage $stage (baselines, probe, runs, as_released, transfer, longer, report)" >&2; exit 2 ;;
  esac
done
