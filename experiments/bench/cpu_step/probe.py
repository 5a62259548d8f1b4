"""Minor faults and CPU seconds per quickstart-shaped train step under one malloc setting (argv[1])."""

import ctypes
import os
import resource
import sys
import time

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
M_TRIM_THRESHOLD, M_MMAP_MAX, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -4, -3, -8
libc = ctypes.CDLL("libc.so.6")
opts = {
  "none": [],
  "arena1": [(M_ARENA_MAX, 1)],
  "mmap0_trim": [(M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 34)],
  "arena1_mmap0": [(M_ARENA_MAX, 1), (M_MMAP_MAX, 0)],
  "arena1_trim": [(M_ARENA_MAX, 1), (M_TRIM_THRESHOLD, 1 << 34)],
  "all": [(M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 34)],
  "tunables": [],
  "jaxcse": [],
}[mode]
for k, v in opts:
  assert libc.mallopt(k, ctypes.c_int(v) if v < 2**31 else ctypes.c_int(2**31 - 1)) == 1, (k, v)
if mode == "jaxcse":
  pass
sys.path.insert(0, os.getcwd())
from benchmarks import bench

ids, mask = bench.random_batch(bench.SHAPES["mini"], batch, 32)
side = bench.jaxcse_train_step(bench.SHAPES["mini"], ids, mask, steps=100)
for _ in range(3):
  side.run()
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
for _ in range(steps):
  side.run()
r1 = resource.getrusage(resource.RUSAGE_SELF)
t1 = time.perf_counter()
cpu_u = (r1.ru_utime - r0.ru_utime) / steps
cpu_s = (r1.ru_stime - r0.ru_stime) / steps
print(
  f"{mode:14s} batch {batch}: minflt/step {(r1.ru_minflt - r0.ru_minflt) / steps:9.0f}  user {cpu_u:.3f} sys {cpu_s:.3f} "
  f"cpu {cpu_u + cpu_s:.3f} s/step  wall {(t1 - t0) / steps:.3f}  maxrss {r1.ru_maxrss / 1024:.0f} MiB  load {os.getloadavg()[0]:.2f}",
  flush=True,
)
