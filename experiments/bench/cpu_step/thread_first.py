"""Minor faults and CPU seconds per train step when a thread allocated before ``import jaxcse`` (issue 68 item 1).

  taskset -c 1 python experiments/bench/cpu_step/thread_first.py MODE [STEPS] [SHAPE]

MODE: ``plain`` (nothing before jaxcse), ``thread`` (a thread allocates first and stays alive, as a Jupyter kernel's
do), ``thread_exited`` (it allocates and exits: its arena waits on glibc's free list for the next new thread); with
``_sync`` appended, ``jax_cpu_enable_async_dispatch`` is set False before the first computation; ``JAXCSE_CPU_DISPATCH``
is left to the environment. SHAPE: a benchmarks.bench shape (``mini``, ``minilm``). One line per run.
"""

import os
import resource
import sys
import threading
import time

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
shape_name = sys.argv[3] if len(sys.argv) > 3 else "mini"
if mode.startswith("thread"):
  alive = threading.Event()

  def allocate():
    junk = [bytearray(1000) for _ in range(1000)]  # This thread's first mallocs: glibc gives it an arena of its own.
    del junk
    if "exited" not in mode:
      alive.wait()

  thread = threading.Thread(target=allocate, daemon=True)
  thread.start()
  time.sleep(0.2)
  if "exited" in mode:
    thread.join()

sys.path.insert(0, os.getcwd())
import jax  # noqa: E402

import jaxcse  # noqa: E402, F401

if mode.endswith("_sync"):
  jax.config.update("jax_cpu_enable_async_dispatch", False)
from benchmarks import bench  # noqa: E402

shape = bench.SHAPES[shape_name]
ids, mask = bench.random_batch(shape, 64, 32)
side = bench.jaxcse_train_step(shape, ids, mask, steps=100)
for _ in range(3):
  side.run()
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
for _ in range(steps):
  side.run()
r1 = resource.getrusage(resource.RUSAGE_SELF)
t1 = time.perf_counter()
user, system = (r1.ru_utime - r0.ru_utime) / steps, (r1.ru_stime - r0.ru_stime) / steps
print(
  f"{mode:20s} {shape_name}: minflt/step {(r1.ru_minflt - r0.ru_minflt) / steps:8.0f}  user {user:.3f} sys {system:.3f} "
  f"cpu {user + system:.3f} s/step  wall {(t1 - t0) / steps:.3f}  maxrss {r1.ru_maxrss / 1024:.0f} MiB  "
  f"load {os.getloadavg()[0]:.2f}  async {jax.config.read('jax_cpu_enable_async_dispatch')}",
  flush=True,
)
