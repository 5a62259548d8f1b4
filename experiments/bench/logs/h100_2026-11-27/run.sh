#!/bin/bash
# One GPU session: versions, then the benchmarks of experiments/bench's run-book that need no downloaded weights.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
L=$OUT/logs; mkdir -p $L
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv; nproc; uptime;
  python3 -c "import jax, jaxlib, flax, optax, torch, transformers, sentence_transformers as st; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'st', st.__version__); print(jax.devices(), jax.devices()[0].device_kind, torch.cuda.is_available())"; } 2>&1 | tee $L/machine.txt
run() { name=$1; lim=$2; shift 2; echo "=== $name"; timeout $lim python3 -m benchmarks.bench "$@" > $L/$name.log 2>&1; echo "rc=$?"; tail -4 $L/$name.log; }
run train_base 150 train --shape base --batch_size 64 --max_seq_len 32 --rounds 3 --repeats 20
run train_minilm 75 train --shape minilm --rounds 3 --repeats 20
run pretrain_mini 70 pretrain --shape mini --rounds 3 --repeats 10
run train_base_b512 90 train --shape base --batch_size 512 --max_seq_len 32 --rounds 3 --repeats 10 --torch_compile off
echo done
