"""CPU seconds per train step under one XLA:CPU dot path, or PyTorch's step, each in its own process (issue 68 item 2).

  taskset -c 1 python experiments/bench/cpu_step/dot_path.py SIDE [SHAPE] [STEPS]

SIDE: a dot path of ``jaxcse.core.platforms.DOT_PATHS`` (``xla``: XLA's own dots, YNNPACK's fusions where XLA picks
them, today's path; ``onednn``: every dot through oneDNN; ``no_ynn``: XLA's dots without YNNPACK), set with
``JAXCSE_CPU_DOTS`` before jax starts, or ``pytorch`` (``benchmarks.baselines.torch_train_step``, SimCSE's
step in PyTorch float32, with ``JAXCSE_MALLOPT=0`` so that the ``import jaxcse`` the shapes come with leaves
glibc's allocator as a PyTorch user has it). SHAPE: a ``benchmarks.bench`` shape (``mini``, ``minilm``); batch 64,
length 32 as the bench's default. One line per run; ``dot_path.sh`` alternates the sides.
"""

import os
import resource
import sys
import time

side_name = sys.argv[1]
shape_name = sys.argv[2] if len(sys.argv) > 2 else "mini"
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
if side_name == "pytorch":
  os.environ["JAXCSE_MALLOPT"] = "0"
  os.environ["JAXCSE_INLINE_CPU"] = "0"
else:
  os.environ["JAXCSE_CPU_DOTS"] = side_name
sys.path.insert(0, os.getcwd())
from benchmarks import bench  # noqa: E402

shape = bench.SHAPES[shape_name]
ids, mask = bench.random_batch(shape, 64, 32)
if side_name == "pytorch":
  from benchmarks import baselines

  baselines.set_threads(1)
  run = baselines.torch_train_step(shape, ids, mask, steps=100)[0]
  flags = "torch " + __import__("torch").__version__
else:
  run = bench.jaxcse_train_step(shape, ids, mask, steps=100).run
  flags = os.environ.get("XLA_FLAGS", "")
for _ in range(3):
  run()
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
for _ in range(steps):
  run()
r1 = resource.getrusage(resource.RUSAGE_SELF)
t1 = time.perf_counter()
user, system = (r1.ru_utime - r0.ru_utime) / steps, (r1.ru_stime - r0.ru_stime) / steps
print(
  f"{side_name:8s} {shape_name:7s} cpu {user + system:.3f} s/step (user {user:.3f} sys {system:.3f})  "
  f"wall {(t1 - t0) / steps:.3f}  minflt/step {(r1.ru_minflt - r0.ru_minflt) / steps:7.0f}  "
  f"maxrss {r1.ru_maxrss / 1024:.0f} MiB  load {os.getloadavg()[0]:.2f}  [{flags}]",
  flush=True,
)
