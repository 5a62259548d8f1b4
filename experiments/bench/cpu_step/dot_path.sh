#!/usr/bin/env bash
# Alternates dot_path.py's sides, one process each, pinned to one core: ROUNDS rounds of every SIDE on SHAPE.
#   bash experiments/bench/cpu_step/dot_path.sh SHAPE ROUNDS SIDE... >> experiments/bench/cpu_step/dot_path.txt
# The order of the sides turns each round (a, b, c; b, c, a; ...) so that no side always runs first after a pause.
set -euo pipefail
shape=$1 rounds=$2
shift 2
sides=("$@")
core=${CORE:-1}
echo "# $(date -u +%F' '%H:%M) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), core $core, $(python -c 'import jaxlib; print("jaxlib", jaxlib.__version__)'), cpu kind $(python -c 'from jaxcse.core import platforms as p; print(p.cpu_kind(p.read_cpuinfo()))')"
for ((r = 0; r < rounds; r++)); do
  n=${#sides[@]}
  for ((i = 0; i < n; i++)); do
    side=${sides[$(((i + r) % n))]}
    taskset -c "$core" python experiments/bench/cpu_step/dot_path.py "$side" "$shape" "${STEPS:-6}"
  done
done
