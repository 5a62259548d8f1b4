"""CPU seconds per train step with the exact GELU as jax.nn.gelu(approximate=False) (old) vs PyTorch's form (new),
both in one process, alternated."""

import functools
import os
import resource
import sys

sys.path.insert(0, os.getcwd())
import jax
import numpy as np
from jaxcse.models import common
from benchmarks import bench


def pytorch_gelu(x):
  """The exact GELU as PyTorch writes it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
  return x * 0.5 * (1 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


shape_name, rounds, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shape = bench.SHAPES[shape_name]
ids, mask = bench.random_batch(shape, 64, 32)
sides = {}
for name, fn in (("old erfc", functools.partial(jax.nn.gelu, approximate=False)), ("new erf", pytorch_gelu)):
  common.ACTIVATIONS["gelu"] = fn
  side = bench.jaxcse_train_step(shape, ids, mask, steps=1000)
  side.run()
  side.run()
  sides[name] = side
cpu = {n: [] for n in sides}
for r in range(rounds):
  for n in list(sides) if r % 2 == 0 else list(reversed(sides)):
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
      sides[n].run()
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu[n].append((u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) / repeats)
import statistics

for n, v in cpu.items():
  print(
    f"{shape_name} {n}: median {statistics.median(v):.3f} CPU-s/step  min {min(v):.3f}  all {' '.join(f'{x:.3f}' for x in v)}"
  )
print(
  f"{shape_name} new/old median {statistics.median(cpu['new erf']) / statistics.median(cpu['old erfc']):.3f}  load {os.getloadavg()[0]:.2f}"
)
