#!/bin/bash
# XLA's XNNPACK dot fusion against the default, alternated 3 times (the mini train step, pinned as run.sh).
set -u
out=$(dirname "$0")
export JAXCSE_DATA_DIR=${JAXCSE_DATA_DIR:-../shared/data}
for i in 1 2 3; do
  for flag in "" --xla_cpu_experimental_xnn_fusion_type=dot; do
    name=${flag:+xnn}; name=${name:-none}
    XLA_FLAGS="$flag" taskset -c 1 python -m benchmarks.bench train --shape mini --rounds 2 --repeats 2 > "$out/pair${i}_mini_$name.txt" 2>&1
  done
done
