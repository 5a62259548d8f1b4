"""Sends SIGINT to the train command after a delay; prints rc and what it said."""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.environ.get("PROBE_DIR", os.path.join(tempfile.gettempdir(), "jaxcse-probe"))  # setup_probe.py writes here.
tries = int(sys.argv[1])
lo, hi = float(sys.argv[2]), float(sys.argv[3])
tag = sys.argv[4] if len(sys.argv) > 4 else "t"
args = ["--config", os.path.join(REPO, "configs", "base.py")]
for k, v in {
  "model.name": os.path.join(WORK, "tiny"),
  "data.data_dir": os.path.join(WORK, "data"),
  "data.train": "corpora/small.txt",
  "data.max_seq_len": 16,
  "train.batch_size": 8,
  "eval.batch_size": 32,
  "train.max_steps": 400,
  "eval.every": 25,
  "checkpoint.every": 10,
  "train.log_every": 5,
}.items():
  args.append(f"--config.{k}={v}")
env = {**os.environ, "PYTHONPATH": os.environ.get("CODE", REPO), "JAXCSE_DATA_DIR": os.path.join(WORK, "data")}
rng = random.Random(int(time.time()))
for i in range(tries):
  wd = f"{WORK}/w-{tag}-{i}"
  shutil.rmtree(wd, ignore_errors=True)
  t0 = time.time()
  p = subprocess.Popen(
    [sys.executable, "-m", "jaxcse.train", *args, "--workdir", wd],
    env=env,
    cwd=WORK,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
  )
  delay = rng.uniform(lo, hi)
  time.sleep(delay)
  p.send_signal(signal.SIGINT)
  out, err = p.communicate()
  said = [l for l in err.splitlines() if l.strip() and not (l[:1] in "IW" and l[1:5].isdigit()) and "train:" not in l]
  print(f"try {i}: delay {delay:.1f}s rc {p.returncode} wall {time.time() - t0:.1f}s said {said[-3:]}", flush=True)
  if p.returncode != 130:
    open(f"{WORK}/err-{tag}-{i}.txt", "w").write(err)
