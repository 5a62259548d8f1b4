#!/bin/bash
# The mini train step with XLA:CPU's other matmul paths (oneDNN, XNNPACK, YNNPACK dot fusions), pinned as run.sh.
set -u
out=$(dirname "$0")
export JAXCSE_DATA_DIR=${JAXCSE_DATA_DIR:-../shared/data}
for flag in "" --xla_cpu_use_onednn=true --xla_cpu_experimental_xnn_fusion_type=dot --xla_cpu_experimental_ynn_fusion_type=dot; do
  name=${flag#--xla_cpu_}; name=${name%%=*}
  XLA_FLAGS="$flag" taskset -c 1 python -m benchmarks.bench train --shape mini > "$out/train_mini_flag_${name:-none}.txt" 2>&1
done
# encode again, now that it reports CPU seconds too
taskset -c 1 python -m benchmarks.bench encode --limit 2048 > "$out/encode_2048_cpu.txt" 2>&1
