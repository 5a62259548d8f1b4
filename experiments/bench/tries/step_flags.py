"""Median seconds of jaxcse's real train step (bench.jaxcse_train_step, MiniLM shape, batch 64, len 32) under
the XLA_FLAGS of the environment; one flag setting per process:

  for f in "" --xla_cpu_use_onednn=true \
      --xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT \
      --xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT \
      --xla_cpu_experimental_ynn_fusion_type=; do XLA_FLAGS="$f" python experiments/bench/tries/step_flags.py; done
"""

import os
import statistics
import time
from jaxcse import bench

shape = bench.SHAPES[os.environ.get("SHAPE", "minilm")]
ids, mask = bench.random_batch(shape, 64, 32)
t0 = time.time()
run, loss, _ = bench.jaxcse_train_step(shape, ids, mask, steps=20)
run()
run()
print("compile+2", round(time.time() - t0, 1), "loss", loss())
ts = []
for _ in range(int(os.environ.get("N", 5))):
  t = time.perf_counter()
  run()
  ts.append(time.perf_counter() - t)
print(
  os.environ.get("XLA_FLAGS", ""), "median %.3f min %.3f" % (statistics.median(ts), min(ts)), "loss", loss(), flush=True
)
