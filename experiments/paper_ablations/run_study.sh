#!/usr/bin/env bash
# The papers' own experiments, reproduced from jaxcse's raw encoder (jaxcse/bert-mini-wiki-uncased), in the
# setting of experiments/from_raw_plm (batch 64, length 32, mean pooling, STS-B dev every 125 steps, best
# checkpoint kept). See README.md here for the tables.
#
#   JAXCSE_DATA_DIR=../shared/data bash experiments/paper_ablations/run_study.sh [stage ...]
#
# Stages, in order: lr_grid (every method at three learning rates, seed 1), main (each method at its own best
# rate, seeds 2-3), the ablations (dropout, augment, mixcse, dclr: every row for ABLATION_SEEDS at
# ABLATION_STEPS, each method at its lr_grid best rate), dynamics (SimCSE's Fig. 2 runs and DCLR, evaluated every
# 25 steps), main_clip (DCLR with its loss clipped as SimCSE's, its own rate grid and main result: see README),
# and report (summarize.py: tables and plots). Every run is skipped when its results file exists and resumes from
# its latest checkpoint otherwise, so the same command continues a killed study. OUT (default: this
# folder) receives results/, runs/ (metrics, summary, config) and logs/; the ablations need lr_grid done first.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-jaxcse/bert-mini-wiki-uncased}
STEPS=${STEPS:-500}                   # The raw-encoder study's budget: 32k sentences at batch 64.
GRID_LRS=${GRID_LRS:-"1e-4 3e-4 1e-3"}
METHODS=${METHODS:-"simcse mixcse dclr"}
MAIN_SEEDS=${MAIN_SEEDS:-"2 3"}       # Seed 1 of each method's main result is its lr_grid run.
POOLER=avg                            # The raw-encoder study's pooler for every method (its [CLS] is untrained).
EVAL_EVERY=${EVAL_EVERY:-125}         # Evaluations (and checkpoints) of every run; smaller for smoke tests.
W=${WORKDIRS:-workdirs/paper_ablations}
OUT=${OUT:-experiments/paper_ablations}
ABLATION_STEPS=${ABLATION_STEPS:-250}  # Every ablation row's budget: the same for all rows (16k sentences).
ABLATION_SEEDS=${ABLATION_SEEDS:-"1 2 3"}
DYNAMICS_EVERY=${DYNAMICS_EVERY:-25}  # The dynamics stage's evaluation interval (SimCSE's Fig. 2 used 10 steps).
HORIZON_STEPS=${HORIZON_STEPS:-1500}  # The horizon stage's budget: 6x ABLATION_STEPS (issue 38).
HORIZON_EVERY=${HORIZON_EVERY:-250}   # Its evaluations and checkpoints.
# Its runs as ROW:SEED, in this order (whole seeds first, so that a stopped stage leaves complete pairs); two
# processes may split the list between them (each run is skipped once its results exist).
HORIZON_RUNS=${HORIZON_RUNS:-"none:1 crop10:1 crop30:1 none:2 crop10:2 crop30:2 none:3 crop10:3 crop30:3"}
# The faithful stage's runs as ROW:SEED (issue 50): the rows the conclusions rest on (None, crop 10%, word
# deletion 10%) to 5 seeds first, then every other row of the dropout and augmentation tables at seeds 1-3. Seeds
# 1-3 of None and crop 10% are the mask stage's runs (the same command, skipped). Two processes may split the list.
FAITHFUL_RUNS=${FAITHFUL_RUNS:-"p0.1:4 crop10:4 word_deletion10:1 p0.1:5 crop10:5 word_deletion10:2 \
word_deletion10:3 word_deletion10:4 word_deletion10:5 \
p0.0:1 p0.01:1 p0.05:1 p0.15:1 p0.2:1 p0.5:1 fixed0.1:1 crop20:1 crop30:1 word_deletion20:1 word_deletion30:1 \
delete_one_word:1 delete_one_word_no_dropout:1 mlm15:1 crop10_mlm15:1 \
p0.0:2 p0.01:2 p0.05:2 p0.15:2 p0.2:2 p0.5:2 fixed0.1:2 crop20:2 crop30:2 word_deletion20:2 word_deletion30:2 \
delete_one_word:2 delete_one_word_no_dropout:2 mlm15:2 crop10_mlm15:2 \
p0.0:3 p0.01:3 p0.05:3 p0.15:3 p0.2:3 p0.5:3 fixed0.1:3 crop20:3 crop30:3 word_deletion20:3 word_deletion30:3 \
delete_one_word:3 delete_one_word_no_dropout:3 mlm15:3 crop10_mlm15:3"}
# The regime stages' runs as ROW:SEED (issue 50; README, "The regime, put to a test"), whole seeds first.
REGIME_CROP_RUNS=${REGIME_CROP_RUNS:-"crop10_before:1 crop10_before:2 crop10_before:3"}
REGIME_MINILM_RUNS=${REGIME_MINILM_RUNS:-"none:1 crop10:1 word_deletion10:1 none:2 crop10:2 word_deletion10:2 \
none:3 crop10:3 word_deletion10:3"}
MINILM=sentence-transformers/all-MiniLM-L6-v2
MINILM_LR=3e-5                        # The paper's rate for unsupervised BERT-base (33x below this study's 1e-3).
STAGES=${*:-"lr_grid main dropout augment mixcse dclr dynamics main_clip horizon mask faithful regime_crop regime_minilm report"}
mkdir -p "$OUT/results" "$OUT/logs" "$OUT/runs"

common=(--config.model.name="$MODEL" --config.data.train=corpora/wiki_offline.txt --config.train.batch_size=64
        --config.data.max_seq_len=32 --config.eval.every="$EVAL_EVERY" --config.eval.at_end=False
        --config.checkpoint.every="$EVAL_EVERY" --config.model.pooler="$POOLER" --config.model.test_pooler="$POOLER"
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

# Flags placed after the common ones (so they override them) by the runs of one stage; empty elsewhere.
after=()
# The attention-dropout mask, placed after everything else. Every stage before issue 50 ran with jaxcse's old
# default, one mask shared across the batch (flax's broadcast_dropout), and stays pinned to it so that its
# committed results are what this script reproduces; the mask and faithful stages draw it per element, as
# PyTorch's BERT (jaxcse's default since issue 50).
SHARED_MASK=(--config.model.attention_dropout_per_element=False)
PER_ELEMENT_MASK=(--config.model.attention_dropout_per_element=True)
mask_flag=("${SHARED_MASK[@]}")

# run GROUP NAME STEPS ARGS...: trains WORKDIRS/GROUP/NAME unless OUT/results/GROUP/NAME.json exists, copies its
# metrics, summary and config to OUT/runs/GROUP/NAME and evaluates it on the STS tasks (+ alignment/uniformity).
# Logs are appended to: a resumed run (or a second process that the workdir's lock turns away) adds to the log
# instead of truncating what the first segment wrote.
run() {
  group=$1 name=$2 steps=$3; shift 3
  f=$OUT/results/$group/$name.json
  [ -f "$f" ] && return 0
  mkdir -p "$OUT/results/$group" "$OUT/logs/$group" "$OUT/runs/$group/$name"
  case " $* " in *" configs/dclr.py "*) complementary ;; esac
  wd=$W/$group/$name
  python -m jaxcse.train "$@" "${common[@]}" "${after[@]}" "${mask_flag[@]}" --config.train.max_steps="$steps" \
      --workdir "$wd" \
      2>&1 | tee -a "$OUT/logs/$group/train-$name.log"
  cp "$wd/metrics.jsonl" "$wd/summary.json" "$wd/config.json" "$OUT/runs/$group/$name/"
  python -m jaxcse.evaluate --model "$wd" --tasks sts,align_uniform --output "$f.partial" --overwrite \
      2>&1 | tee -a "$OUT/logs/$group/eval-$name.log"
  mv "$f.partial" "$f"
}

# complementary: makes sure DCLR's complementary model is on disk. It is a workdir (WORKDIRS), not part of the
# repository: a fresh clone has the committed results of lr_grid/simcse-lr3e-4-seed1 (so run skips it) but not its
# weights. Trains it again with the lr_grid command and checks that its metrics (losses, evaluations) equal the
# committed run's; training is deterministic (on a fresh machine they matched bit for bit), so a difference means a
# different library or CPU, and the DCLR runs after it would not be the committed ones': warn loudly.
complementary() {
  [ -f "$COMPLEMENTARY/summary.json" ] && return 0
  echo "DCLR's complementary model $COMPLEMENTARY is not on disk: training it again (lr_grid/simcse-lr3e-4-seed1)"
  mkdir -p "$(dirname "$COMPLEMENTARY")"
  python -m jaxcse.train $(method_config simcse) --config.train.learning_rate=3e-4 --config.seed=1 "${common[@]}" \
      "${SHARED_MASK[@]}" --config.train.max_steps="$STEPS" --workdir "$COMPLEMENTARY" 2>&1 | tee "$COMPLEMENTARY.log"
  python - "$COMPLEMENTARY/metrics.jsonl" "$OUT/runs/lr_grid/simcse-lr3e-4-seed1/metrics.jsonl" <<'PY'
import json, os, sys
if not os.path.exists(sys.argv[2]):
  sys.exit(0)  # Nothing committed to compare with: this study trained the grid itself.
def values(path):  # Every logged number except timings, which differ between any two runs.
  return [{k: v for k, v in json.loads(line).items() if k not in ("steps_per_sec", "eval/seconds")}
          for line in open(path)]
if values(sys.argv[1]) == values(sys.argv[2]):
  print(f"the complementary model's metrics equal {sys.argv[2]}'s: the same model")
else:
  print(f"WARNING: the complementary model trained again differs from {sys.argv[2]} (another jax or CPU?): "
        "DCLR runs from here on use a different complementary model than the committed ones", file=sys.stderr)
PY
}

best_lr() {  # best_lr METHOD [GROUP]: the rate of GROUP's (default lr_grid) seed-1 runs with the best dev metric.
  python - "$OUT/runs/${2:-lr_grid}" "$1" <<'PY'
import glob, json, os, re, sys
runs = {}
for path in glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-lr*-seed1/summary.json"):
  # The rate is everything between "-lr" and "-seed1": it may hold a "-" itself (3e-4).
  lr = re.fullmatch(rf"{re.escape(sys.argv[2])}-lr(.+)-seed1", os.path.basename(os.path.dirname(path))).group(1)
  runs[lr] = json.load(open(path))["best_metric"]
if not runs:
  sys.exit(f"no seed-1 runs of {sys.argv[2]} in {sys.argv[1]} yet")
print(max(runs, key=runs.get))
PY
}

# ablate GROUP ROW METHOD ARGS...: one row of an ablation table, METHOD at its lr_grid best rate with ARGS, for
# every ABLATION_SEEDS seed, ABLATION_STEPS steps each: runs GROUP/ROW-lrLR-seedS.
ablate() {
  local group=$1 row=$2 method=$3 lr seed
  shift 3
  lr=$(best_lr "$method")
  for seed in $ABLATION_SEEDS; do
    run "$group" "$row-lr$lr-seed$seed" "$ABLATION_STEPS" $(method_config "$method") \
        --config.train.learning_rate="$lr" --config.seed="$seed" "$@"
  done
}

# dynamic ROW METHOD ARGS...: one run of the dynamics stage, seed 1, METHOD at its best rate (dynamics/ROW-lrLR-seed1).
dynamic() {
  local row=$1 method=$2 lr
  shift 2
  lr=$(best_lr "$method")
  run dynamics "$row-lr$lr-seed1" "$ABLATION_STEPS" $(method_config "$method") --config.train.learning_rate="$lr" \
      --config.seed=1 "$@"
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
  dropout)
    # SimCSE Table 3 (v1: Table 4): the dropout rate, and "fixed 0.1" (both views, one mask). p0.1 is SimCSE
    # itself: also the "None" row of the augment table.
    for p in 0.0 0.01 0.05 0.1 0.15 0.2 0.5; do
      ablate dropout "p$p" simcse --config.model.dropout="$p"
    done
    ablate dropout fixed0.1 simcse --config.augment.same_dropout_mask=True ;;
  augment)
    # SimCSE Table 1 (v1: Table 2): discrete augmentations of the second view, all with dropout 0.1 except
    # "w/o dropout" (delete one word without dropout).
    for k in 10 20 30; do
      ablate augment "crop$k" simcse --config.augment.crop="0.$k"
      ablate augment "word_deletion$k" simcse --config.augment.word_deletion="0.$k"
    done
    ablate augment delete_one_word simcse --config.augment.delete_one_word=True
    ablate augment delete_one_word_no_dropout simcse --config.augment.delete_one_word=True --config.model.dropout=0.0
    ablate augment mlm15 simcse --config.augment.mlm=0.15
    ablate augment crop10_mlm15 simcse --config.augment.crop=0.1 --config.augment.mlm=0.15 ;;
  mixcse)
    # MixCSE Table 3 (single, w/o stop-gradient) and its mixing weight lambda (0.2 = the method itself).
    for lam in 0.1 0.2 0.3 0.5; do
      ablate mixcse "lam$lam" mixcse --config.mixcse.mix_lambda="$lam"
    done
    ablate mixcse single mixcse --config.mixcse.symmetric=False
    ablate mixcse no_stop_gradient mixcse --config.mixcse.stop_gradient=False ;;
  dclr)
    # DCLR Table 2: each component removed or replaced.
    ablate dclr full dclr
    ablate dclr no_instance_weighting dclr --config.dclr.instance_weighting=none
    ablate dclr no_noise_negatives dclr --config.dclr.noise_negatives=none
    ablate dclr random_noise dclr --config.dclr.noise_negatives=random
    ablate dclr self_instance_weighting dclr --config.dclr.instance_weighting=self
    # Not in the paper: at phi 0.9 our complementary model zeroes no negative (its largest in-batch cosine is
    # 0.78, negative_similarity.json), so the weighting is inert; phi 0.37 (its 99th percentile) zeroes 1%.
    ablate dclr phi0.37 dclr --config.dclr.phi=0.37 ;;
  dynamics)
    # SimCSE's Fig. 2 (alignment-uniformity trajectories of SimCSE, no dropout, fixed 0.1, delete one word) and
    # DCLR's Fig. 4 (uniformity during training, DCLR vs SimCSE): seed 1, evaluated from the start every
    # DYNAMICS_EVERY steps.
    after=(--config.eval.every="$DYNAMICS_EVERY" --config.eval.at_start=True)
    dynamic simcse simcse
    dynamic no_dropout simcse --config.model.dropout=0.0
    dynamic fixed0.1 simcse --config.augment.same_dropout_mask=True
    dynamic delete_one_word simcse --config.augment.delete_one_word=True
    dynamic dclr dclr
    # Not in the paper: DCLR's released loss averages over the B + k = 128 columns of each row, so its gradients
    # are about 1/100 of SimCSE's, and AdamW's epsilon and the clipping threshold act that much more. Dividing
    # both by 128 is exactly DCLR with its loss multiplied by 128 (clip(c g, 1) = c clip(g, 1/c), and Adam is
    # scale-free but for epsilon): does that scale explain DCLR's slower uniformity?
    dynamic dclr_loss_x128 dclr --config.train.max_grad_norm=0.0078125 --config.train.adam_eps=7.8125e-11
    dynamic dclr_eps_div128 dclr --config.train.adam_eps=7.8125e-11  # Which of the two: epsilon alone.
    after=() ;;
  main_clip)
    # Not in the papers: DCLR with its loss clipped as SimCSE's is (README: DCLR's Fig. 4): the clipping threshold
    # divided by batch + noise = 128. The grid above chose DCLR's rate unclipped, so the clipped method gets its
    # own grid (seed 1, GRID_LRS) and then seeds 2-3 at its best clipped rate, the main setting.
    clip=(--config.train.max_grad_norm=0.0078125)
    for lr in $GRID_LRS; do
      run main_clip "dclr-lr$lr-seed1" "$STEPS" $(method_config dclr) --config.train.learning_rate="$lr" \
          --config.seed=1 "${clip[@]}"
    done
    lr=$(best_lr dclr main_clip)
    for seed in $MAIN_SEEDS; do
      run main_clip "dclr-lr$lr-seed$seed" "$STEPS" $(method_config dclr) --config.train.learning_rate="$lr" \
          --config.seed="$seed" "${clip[@]}"
    done ;;
  horizon)
    # Not in the papers (issue 38): the augmentation table's reversal at 6x its budget. Rows None (dropout 0.1),
    # crop 10% and crop 30%, SimCSE at its grid rate, evaluated and saved every HORIZON_EVERY steps; STS at the
    # kept checkpoint (results/horizon/ROW-...json) and at the last step (ROW-...-last.json). The decision rule
    # was fixed before the first run: README, "The longer horizon".
    after=(--config.eval.every="$HORIZON_EVERY" --config.checkpoint.every="$HORIZON_EVERY")
    lr=$(best_lr simcse)
    for spec in $HORIZON_RUNS; do
      row=${spec%:*} seed=${spec#*:}
      case $row in
        none) extra=() ;;
        crop10) extra=(--config.augment.crop=0.1) ;;
        crop30) extra=(--config.augment.crop=0.3) ;;
        *) echo "unknown horizon row $row" >&2; exit 2 ;;
      esac
      name=$row-lr$lr-seed$seed
      run horizon "$name" "$HORIZON_STEPS" $(method_config simcse) --config.train.learning_rate="$lr" \
          --config.seed="$seed" "${extra[@]}"
      last=$OUT/results/horizon/$name-last.json
      if [ ! -f "$last" ]; then
        python -m jaxcse.evaluate --model "$W/horizon/$name" --checkpoint latest --tasks sts,align_uniform \
            --output "$last.partial" 2>&1 | tee -a "$OUT/logs/horizon/eval-$name-last.log"
        mv "$last.partial" "$last"
      fi
    done
    after=() ;;
  mask)
    # Not in the papers (issue 38): the augment table's None and crop 10% rows again with the attention-dropout
    # mask drawn per element, as PyTorch's BERT draws it (jaxcse's BERT shares one mask across the batch by
    # default; experiments/positive_control's Dropout check). The rule was fixed before the first run: README,
    # "The attention-dropout mask".
    mask_flag=("${PER_ELEMENT_MASK[@]}")
    ablate mask p0.1 simcse --config.model.attention_dropout_per_element=True
    ablate mask crop10 simcse --config.model.attention_dropout_per_element=True --config.augment.crop=0.1
    mask_flag=("${SHARED_MASK[@]}") ;;
  faithful)
    # Issue 50: the dropout and augmentation tables again with the per-element mask, jaxcse's default since then,
    # as group mask/ (its None and crop 10% seeds 1-3 are the mask stage's runs): FAITHFUL_RUNS, in order.
    mask_flag=("${PER_ELEMENT_MASK[@]}")
    lr=$(best_lr simcse)
    for spec in $FAITHFUL_RUNS; do
      row=${spec%:*} seed=${spec#*:}
      case $row in
        p*) extra=(--config.model.dropout="${row#p}") ;;
        fixed0.1) extra=(--config.augment.same_dropout_mask=True) ;;
        crop10_mlm15) extra=(--config.augment.crop=0.1 --config.augment.mlm=0.15) ;;
        crop*) extra=(--config.augment.crop="0.${row#crop}") ;;
        word_deletion*) extra=(--config.augment.word_deletion="0.${row#word_deletion}") ;;
        delete_one_word) extra=(--config.augment.delete_one_word=True) ;;
        delete_one_word_no_dropout) extra=(--config.augment.delete_one_word=True --config.model.dropout=0.0) ;;
        mlm15) extra=(--config.augment.mlm=0.15) ;;
        *) echo "unknown faithful row $row" >&2; exit 2 ;;
      esac
      run mask "$row-lr$lr-seed$seed" "$ABLATION_STEPS" $(method_config simcse) --config.train.learning_rate="$lr" \
          --config.seed="$seed" "${extra[@]}"
    done
    mask_flag=("${SHARED_MASK[@]}") ;;
  regime_crop)
    # Issue 50 (a): crop 10% of the whole sentence, then truncation to 32 tokens (both views), against the tables'
    # crop of the truncated rows (mask/crop10, the same seeds and batches). The rule: README, "The regime".
    mask_flag=("${PER_ELEMENT_MASK[@]}")
    lr=$(best_lr simcse)
    for spec in $REGIME_CROP_RUNS; do
      row=${spec%:*} seed=${spec#*:}
      case $row in
        crop10_before) extra=(--config.augment.crop=0.1 --config.augment.crop_before_truncation=128) ;;
        *) echo "unknown regime_crop row $row" >&2; exit 2 ;;
      esac
      run regime_crop "$row-lr$lr-seed$seed" "$ABLATION_STEPS" $(method_config simcse) \
          --config.train.learning_rate="$lr" --config.seed="$seed" "${extra[@]}"
    done
    mask_flag=("${SHARED_MASK[@]}") ;;
  regime_minilm)
    # Issue 50 (b): the augmentation rows on all-MiniLM-L6-v2 (30,522 WordPieces, well pretrained, but
    # sentence-tuned) at the paper's rate, its own mean pooling. The rule: README, "The regime".
    mask_flag=("${PER_ELEMENT_MASK[@]}")
    after=(--config.model.name="$MINILM")
    for spec in $REGIME_MINILM_RUNS; do
      row=${spec%:*} seed=${spec#*:}
      case $row in
        none) extra=() ;;
        crop10) extra=(--config.augment.crop=0.1) ;;
        word_deletion10) extra=(--config.augment.word_deletion=0.1) ;;
        *) echo "unknown regime_minilm row $row" >&2; exit 2 ;;
      esac
      run regime_minilm "$row-lr$MINILM_LR-seed$seed" "$ABLATION_STEPS" $(method_config simcse) \
          --config.train.learning_rate="$MINILM_LR" --config.seed="$seed" "${extra[@]}"
    done
    after=()
    mask_flag=("${SHARED_MASK[@]}") ;;
  report)
    python experiments/paper_ablations/summarize.py --out "$OUT" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
