"""One jaxcse training run of the st_parity experiment, timed from inside the process.

  python experiments/st_parity/train_jaxcse.py --timing T.json -- jaxcse-train's flags...

Runs ``jaxcse.train.run`` in this process with a thread that watches ``WORKDIR/metrics.jsonl`` (the run logs every
step: ``train.log_every=1``) and records the wall clock and this process's CPU seconds (every thread) when each
step's line appears, so that the training loop's time excludes start-up, model loading and the first step (its
compilation) exactly as the sentence-transformers side's callback does. Writes the timing as JSON at the end.
(Since 2026-12-02 the watcher starts after ``import jaxcse``, as in a plain ``jaxcse-train``; the st_parity runs
of 2026-11-27 started it before, which costs jaxcse's steps their page-fault fix.)
"""

import json
import os
import sys
import threading
import time


def main() -> None:
  i = sys.argv.index("--")
  timing_path = sys.argv[sys.argv.index("--timing") + 1]
  train_argv = sys.argv[i + 1 :]
  workdir = next(a.split("=", 1)[1] for a in train_argv if a.startswith("--workdir="))
  metrics = os.path.join(workdir, "metrics.jsonl")
  t0, c0 = time.time(), time.process_time()
  steps = {}  # step -> (wall, cpu) when its line was first seen.
  stop = threading.Event()

  def watch() -> None:
    seen = 0
    while not stop.is_set():
      if os.path.exists(metrics):
        with open(metrics, encoding="utf-8") as f:
          lines = f.read().splitlines()
        if len(lines) > seen:
          now, cpu = time.time(), time.process_time()
          for line in lines[seen:]:
            step = json.loads(line).get("step")
            if step is not None and "loss" in json.loads(line):
              steps.setdefault(step, (now, cpu))
          seen = len(lines)
      stop.wait(0.05)

  # jaxcse first, then the watcher thread: import jaxcse sets glibc's allocator for the threads XLA starts, which a
  # thread started before it defeats (every step then pays ~15% in page faults; issue 68), and jaxcse-train, which
  # this times, starts no thread before it.
  sys.argv = ["jaxcse-train", *train_argv]
  from jaxcse import train

  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()

  code = 0
  try:
    train.run()
  except SystemExit as e:
    code = e.code or 0
  stop.set()
  watcher.join()
  t1, c1 = time.time(), time.process_time()
  if code:
    sys.exit(code)
  first, last = min(steps), max(steps)
  record = {
    "process_wall_s": t1 - t0,
    "process_cpu_s": c1 - c0,
    "steps": last,
    "loop_steps": last - first,  # From the end of the first step (compiled) to the end of the last.
    "loop_wall_s": steps[last][0] - steps[first][0],
    "loop_cpu_s": steps[last][1] - steps[first][1],
    "first_step_end_wall_s": steps[first][0] - t0,
  }
  with open(timing_path, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=2)


if __name__ == "__main__":
  main()
