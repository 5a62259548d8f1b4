#!/bin/bash
# The prepared device check of issue 64 (packed rows), one command of about 6 minutes on a GPU: jaxcse's SimCSE
# step padded, packed (train.packed) and PyTorch AMP (eager, fused AdamW) in the same process, BERT-base, batch 64
# and 512, texts of 8-32 and 8-64 tokens; then encoding, padded and packed against sentence-transformers. First, the
# fused-attention check (attention_fused.py: cuDNN's kernel against XLA's on packed and padded rows). Every log and a
# summary (numbers.txt) go to $OUT (the device tool's folder; DIR given as $1 elsewhere). TRAINS="512:64 64:32"
# (batch:length pairs) runs only those training benchmarks, for a short lease.
#
#   bash experiments/packing/device.sh [DIR]
#   SMOKE=1 bash experiments/packing/device.sh DIR     # tiny shapes, a minute on a CPU: tests/test_bench.py runs it
#
# On a lent machine whose image lacks packages jaxcse needs (ml_collections, datasets and its dill/multiprocess),
# carry them as wheels in .gpu/whl (ignored by git), made here once:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .gpu/whl \
#     ml_collections==1.1.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
# and run with the device tool: carry [".gpu"], command `bash experiments/packing/device.sh`.
set -u
export PYTHONUNBUFFERED=1
OUT_DIR=${1:-${OUT:-experiments/packing/device_out}}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
if [ -d .gpu/whl ] && [ "${SMOKE:-0}" != 1 ]; then  # The smoke run uses the environment it is given.
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv 2>/dev/null
  nproc; uptime; git log -1 --format='jaxcse at %h %cs' 2>/dev/null
  $PY -c "import jax, flax, optax, torch, transformers; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__); print(jax.devices(), jax.devices()[0].device_kind, torch.cuda.is_available())"
} > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"

if [ "${SMOKE:-0}" = 1 ]; then
  SHAPE=tiny; PAIRS=${TRAINS:-8:16}; TIMED="--warmup 1 --rounds 1 --repeats 1 --peak_size 256"; LIMIT=64; LIM=300
  ATTENTION=--smoke
else
  SHAPE=base; PAIRS=${TRAINS:-64:32 512:32 64:64 512:64}; TIMED="--rounds 2 --repeats 10"; LIMIT=8192; LIM=150
  ATTENTION=
fi
run() { name=$1; shift; start=$(date +%s)
  timeout $LIM $PY -m benchmarks.bench "$@" > "$OUT_DIR/$name.log" 2>&1
  rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - start )) s" | tee -a "$OUT_DIR/numbers.txt"
  grep -E "^(packed side|jaxcse|pytorch|sentence-transformers|packed over|by CPU|train_|encode|agreement)" \
    "$OUT_DIR/$name.log" | cut -c1-240 | tee -a "$OUT_DIR/numbers.txt"; }
: > "$OUT_DIR/numbers.txt"
start=$(date +%s)
timeout $LIM $PY experiments/packing/attention_fused.py $ATTENTION > "$OUT_DIR/attention.log" 2>&1
echo "=== attention rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT_DIR/numbers.txt"
grep -E "^(devices|packed|padded|attention check)" "$OUT_DIR/attention.log" | cut -c1-400 | tee -a "$OUT_DIR/numbers.txt"
for pair in $PAIRS; do
  batch=${pair%%:*}; length=${pair##*:}
  run "train_b${batch}_len${length}" train --shape $SHAPE --batch_size $batch --max_seq_len $length \
    --torch_compile off --packed_side $TIMED
done
# Encoding: the shipped 4-layer encoder on the shipped Wikipedia sentences (no download), padded and packed.
run encode encode --model jaxcse/bert-mini-wiki-uncased --input jaxcse/data/quickstart/corpora/wiki_offline_20k.txt \
  --limit $LIMIT --batch_size 256 --rounds 2
echo done | tee -a "$OUT_DIR/numbers.txt"
