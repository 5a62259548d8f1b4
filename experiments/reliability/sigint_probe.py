"""Sends SIGINT to the train command after a delay (and optionally a second one); prints rc and what it said.

  python sigint_probe.py TRIES LO HI [TAG] [--entry module|script] [--second LO2 HI2] [--budget S]

The first SIGINT comes a random LO..HI seconds after the start, the second (``--second``) LO2..HI2 seconds after the
first. ``--entry script`` runs the ``jaxcse-train`` console script's entry point (``jaxcse.entry.train``), the
default ``python -m jaxcse.train``. A run still going ``--budget`` seconds after the last signal (default 180) is
counted as "ignored" and killed. Each try's stderr is kept in PROBE_DIR/err-TAG-I.txt.
"""

import argparse
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
parser = argparse.ArgumentParser()
parser.add_argument("tries", type=int)
parser.add_argument("lo", type=float)
parser.add_argument("hi", type=float)
parser.add_argument("tag", nargs="?", default="t")
parser.add_argument("--entry", choices=["module", "script"], default="module")
parser.add_argument("--second", type=float, nargs=2, default=None)
parser.add_argument("--budget", type=float, default=180)
parser.add_argument("--seed", type=int, default=None)
opts = parser.parse_args()
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
command = (
  [sys.executable, "-m", "jaxcse.train"]
  if opts.entry == "module"
  else [sys.executable, "-c", "import sys; from jaxcse.entry import train; sys.argv[0] = 'jaxcse-train'; train()"]
)
rng = random.Random(opts.seed if opts.seed is not None else int(time.time()))
counts = {}
for i in range(opts.tries):
  wd = f"{WORK}/w-{opts.tag}-{i}"
  shutil.rmtree(wd, ignore_errors=True)
  t0 = time.time()
  # A terminal's Ctrl-C reaches a process started with Python's own handler; a job started in the background of a
  # non-interactive shell inherits SIGINT ignored instead, so the child starts with the default disposition here.
  p = subprocess.Popen(
    [*command, *args, "--workdir", wd],
    env=env,
    cwd=WORK,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
  )
  delay = rng.uniform(opts.lo, opts.hi)
  time.sleep(delay)
  p.send_signal(signal.SIGINT)
  second = None
  if opts.second:
    second = rng.uniform(*opts.second)
    time.sleep(second)
    if p.poll() is None:
      p.send_signal(signal.SIGINT)
  try:
    out, err = p.communicate(timeout=opts.budget)
    rc = p.returncode
  except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
    rc = "ignored"
  said = [l for l in err.splitlines() if l.strip() and not (l[:1] in "IW" and l[1:5].isdigit()) and "train:" not in l]
  outcome = "held" if rc == 130 and len(said) == 1 else "DEFECT"
  counts[outcome] = counts.get(outcome, 0) + 1
  timing = f"delay {delay:.2f}s" + (f" second +{second:.2f}s" if second is not None else "")
  print(f"try {i}: {timing} rc {rc} wall {time.time() - t0:.1f}s {outcome} said {said[-3:]}", flush=True)
  with open(f"{WORK}/err-{opts.tag}-{i}.txt", "w") as f:
    f.write(err)
print(f"{opts.tag}: {opts.tries} tries, {counts.get('held', 0)} held, {counts.get('DEFECT', 0)} defects", flush=True)
