#!/bin/bash
# usage: ttfs.sh LABEL XDG_CACHE_HOME [env assignments...]: CPU seconds of a fresh 2-step quickstart process.
label=$1; cache=$2; shift 2
cd "$(dirname "$0")/../../.."
wd=$(mktemp -d)
start=$(date +%s.%N)
out=$(env -u JAX_COMPILATION_CACHE_DIR -u JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS -u JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES \
  XDG_CACHE_HOME=$cache PYTHONPATH=$PWD "$@" /usr/bin/time -f "%U %S %e" taskset -c 0 ${PYTHON:-python} -m jaxcse.train --config quickstart --workdir $wd/q \
  --config.train.max_steps=2 --config.eval.every=2 --config.checkpoint.every=2 --config.train.log_every=1 2>&1 >/dev/null | tail -1)
set -- $out
echo "$label: user $1 sys $2 cpu $(echo "$1 + $2" | bc) wall $3 load $(cut -d' ' -f1 /proc/loadavg) cache $(du -sh $cache/jaxcse/jax 2>/dev/null | cut -f1)"
rm -rf $wd
