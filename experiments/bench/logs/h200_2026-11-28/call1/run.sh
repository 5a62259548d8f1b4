#!/bin/bash
# One GPU session (issue #53's pending check and #50 item 1 on a real GPU): the embedding-gradient fix before
# (ff54556's tree) and after (this checkout), alternated on one machine, BERT-base batch 512 x 2 views, length 32,
# bfloat16, --profile; the after side also times the shared attention-dropout mask (--shared_mask_side). Then the
# issue's target shape, batch 64, against PyTorch AMP and torch.compile.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
HERE=$PWD
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv; nproc; uptime;
  PYTHONPATH=/tmp/site python3 -c "import jax, jaxlib, flax, optax, torch, transformers; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__); print(jax.devices(), jax.devices()[0].device_kind, torch.cuda.is_available())"; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
run() { name=$1; root=$2; lim=$3; shift 3; start=$(date +%s)
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $lim python3 -m benchmarks.bench "$@") > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - start )) s"
  grep -E "^(profile|jaxcse|pytorch|per-element|train_|warm-up|peak)" $OUT/$name.log | cut -c1-230; }
B512="train --shape base --batch_size 512 --max_seq_len 32 --torch_compile off --profile --rounds 2 --repeats 10"
run b512_before1 $HERE/.gpu/before 95 $B512
run b512_after1 $HERE 110 $B512 --shared_mask_side
run b512_before2 $HERE/.gpu/before 95 $B512
run b512_after2 $HERE 110 $B512 --shared_mask_side
run b64_after $HERE 120 train --shape base --batch_size 64 --max_seq_len 32 --rounds 3 --repeats 20 --shared_mask_side
echo done
