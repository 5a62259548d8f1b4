#!/bin/bash
# The CPU table of docs/benchmarks.md, one row per command, each process pinned to core 1 (--threads 1: torch and XLA
# one thread each), CPU seconds; the load average is in each log's first and last lines.
# usage: bash experiments/bench/logs/cpu_pinned_2026-11-27/run.sh  (from the checkout's root, the torch and minilm extras)
set -u
out=$(dirname "$0")
export JAXCSE_DATA_DIR=${JAXCSE_DATA_DIR:-../shared/data}
for shape in tiny mini minilm; do
  taskset -c 1 python -m benchmarks.bench train --shape "$shape" > "$out/train_$shape.txt" 2>&1
done
taskset -c 1 python -m benchmarks.bench pretrain --shape mini > "$out/pretrain_mini.txt" 2>&1
taskset -c 1 python -m benchmarks.bench encode --limit 2048 > "$out/encode_2048.txt" 2>&1
