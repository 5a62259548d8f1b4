"""GFLOP/s of the MiniLM step's dense matmul shapes (2B*L tokens x hidden x hidden/intermediate) under XLA_FLAGS.

XLA_FLAGS=--xla_cpu_use_onednn=true python experiments/bench/tries/matmul_flags.py
"""

import os
import time
import jax

for m, k, n in [(4096, 384, 384), (4096, 384, 1536), (4096, 1536, 384), (384, 4096, 384)]:
  a = jax.random.normal(jax.random.key(0), (m, k))
  b = jax.random.normal(jax.random.key(1), (k, n))
  f = jax.jit(lambda a, b: a @ b)
  f(a, b).block_until_ready()
  best = 1e9
  for _ in range(20):
    t = time.perf_counter()
    f(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t)
  print(os.environ.get("XLA_FLAGS", ""), (m, k, n), "%.1f GFLOP/s" % (2 * m * k * n / best / 1e9))
