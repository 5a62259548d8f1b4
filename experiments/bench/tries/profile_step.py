"""Where the train step's time goes: a jax.profiler trace of 2 steps, summed per XLA thunk and per fusion kind.

XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true python experiments/bench/tries/profile_step.py
"""

import os
import glob
import gzip
import json
import collections
import re
import tempfile
import jax
from jaxcse import bench

shape = bench.SHAPES["minilm"]
ids, mask = bench.random_batch(shape, 64, 32)
run, loss, _ = bench.jaxcse_train_step(shape, ids, mask, steps=20)
run()
run()
d = os.environ.get("TRACE_DIR", os.path.join(tempfile.gettempdir(), "jaxcse_step_trace"))
jax.profiler.start_trace(d, create_perfetto_trace=True)
for _ in range(2):
  run()
jax.profiler.stop_trace()
f = sorted(glob.glob(d + "/**/*.trace.json.gz", recursive=True))[-1]
ev = json.load(gzip.open(f))
evs = ev["traceEvents"] if isinstance(ev, dict) else ev
agg = collections.Counter()
cnt = collections.Counter()
for e in evs:
  if e.get("ph") == "X":
    agg[e["name"]] += e.get("dur", 0)
    cnt[e["name"]] += 1
tot = sum(agg.values())
for n, t in agg.most_common(45):
  print(f"{t / 2e6:8.3f} s/step  {cnt[n] // 2:5d}x  {n[:110]}")
cat = collections.Counter()
for n, t in agg.items():
  if n.startswith("$") or "Thunk" in n or "Slinky" in n:
    continue
  cat[re.sub(r"[.\d]+$", "", n)] += t
for n, t in cat.most_common(20):
  print(f"CAT {t / 2e6:8.3f} s/step {n}")
