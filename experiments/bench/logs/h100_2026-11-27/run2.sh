#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
L=$OUT/logs; mkdir -p $L
run() { name=$1; lim=$2; shift 2; echo "=== $name"; timeout $lim python3 -m benchmarks.bench "$@" > $L/$name.log 2>&1; echo "rc=$?"; grep -E "^(jaxcse|pytorch|train_)" $L/$name.log; }
JAX_DEFAULT_PRNG_IMPL=rbg run b512_rbg 75 train --shape base --batch_size 512 --max_seq_len 32 --rounds 2 --repeats 10 --torch_compile off
JAX_DEFAULT_PRNG_IMPL=unsafe_rbg run b512_unsafe_rbg 75 train --shape base --batch_size 512 --max_seq_len 32 --rounds 2 --repeats 10 --torch_compile off
JAX_DEFAULT_PRNG_IMPL=rbg run b64_rbg 75 train --shape base --batch_size 64 --max_seq_len 32 --rounds 2 --repeats 20 --torch_compile off
