#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
HERE=$PWD
run() { name=$1; root=$2; lim=$3; shift 3; start=$(date +%s)
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $lim python3 -m benchmarks.bench "$@") > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - start )) s"
  grep -E "^(profile|jaxcse|pytorch|per-element|train_|warm-up|peak)" $OUT/$name.log | cut -c1-230; }
B512="train --shape base --batch_size 512 --max_seq_len 32 --torch_compile off --rounds 2 --repeats 10"
run b512_before $HERE/.gpu/before 120 $B512 --profile
run b512_after_masks $HERE 140 $B512 --shared_mask_side
echo done
