"""kill -9 a tiny training at random moments (N kills, each run resumed by the next), then finish it and compare
its final latest params, best step and metrics steps with an uninterrupted reference run."""

import json
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
sys.path.insert(0, REPO)
kills = int(sys.argv[1])
seed = int(sys.argv[2])
args = ["--config", os.path.join(REPO, "configs", "base.py")]
for k, v in {
  "model.name": os.path.join(WORK, "tiny"),
  "data.data_dir": os.path.join(WORK, "data"),
  "data.train": "corpora/small.txt",
  "data.max_seq_len": 16,
  "train.batch_size": 8,
  "eval.batch_size": 32,
  "train.max_steps": 60,
  "eval.every": 5,
  "checkpoint.every": 3,
  "train.log_every": 1,
  "train.learning_rate": 3e-3,
}.items():
  args.append(f"--config.{k}={v}")
env = {**os.environ, "PYTHONPATH": REPO, "JAXCSE_DATA_DIR": os.path.join(WORK, "data")}


def cmd(wd):
  return [sys.executable, "-m", "jaxcse.train", *args, "--workdir", wd]


ref, wd = os.path.join(WORK, "k-ref"), os.path.join(WORK, "k-run")
if not os.path.exists(os.path.join(ref, "summary.json")):
  shutil.rmtree(ref, ignore_errors=True)
  t = time.time()
  r = subprocess.run(cmd(ref), env=env, capture_output=True, text=True)
  print("reference rc", r.returncode, f"{time.time() - t:.0f}s", flush=True)
shutil.rmtree(wd, ignore_errors=True)
rng = random.Random(seed)
for i in range(kills):
  p = subprocess.Popen(cmd(wd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

  def last():
    try:
      return [json.loads(l)["step"] for l in open(os.path.join(wd, "metrics.jsonl")) if l.strip()][-1]
    except Exception:
      return 0

  target = last() + rng.randint(1, 10)
  t0 = time.time()
  while p.poll() is None and last() < target and time.time() - t0 < 300:
    time.sleep(0.02)
  time.sleep(rng.uniform(0, 0.6))
  delay = time.time() - t0
  if p.poll() is not None:
    print(f"kill {i}: finished before the kill (rc {p.returncode})", flush=True)
    break
  p.send_signal(signal.SIGKILL)
  _, err = p.communicate()
  latest = (
    sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints/latest")) if d.isdigit())
    if os.path.isdir(os.path.join(wd, "checkpoints/latest"))
    else []
  )
  lines = (
    [json.loads(l)["step"] for l in open(os.path.join(wd, "metrics.jsonl"))]
    if os.path.exists(os.path.join(wd, "metrics.jsonl"))
    else []
  )
  print(
    f"kill {i}: at {delay:.1f}s (metrics step {target} reached); latest {latest}; last metrics step {lines[-1] if lines else None}",
    flush=True,
  )
r = subprocess.run(cmd(wd), env=env, capture_output=True, text=True)
said = [
  l
  for l in r.stderr.splitlines()
  if l.strip() and not (l[:1] in "I" and l[1:5].isdigit()) and not l.startswith("train:")
]
print("final rc", r.returncode, "said", said[-5:], flush=True)
from jaxcse.storage import loading
from jaxcse import models

a = loading.load_model(wd, checkpoint="latest")
b = loading.load_model(ref, checkpoint="latest")
print(
  "latest params bit-equal:", models.params_fingerprint(a.params) == models.params_fingerprint(b.params), a.step, b.step
)
sa, sb = json.load(open(os.path.join(wd, "summary.json"))), json.load(open(os.path.join(ref, "summary.json")))
print(
  "best step/metric equal:",
  (sa["best_step"], sa["best_metric"]) == (sb["best_step"], sb["best_metric"]),
  sa["best_step"],
  sa["best_metric"],
)
ma = [(r["step"], "loss" in r) for r in map(json.loads, open(os.path.join(wd, "metrics.jsonl")))]
mb = [(r["step"], "loss" in r) for r in map(json.loads, open(os.path.join(ref, "metrics.jsonl")))]
print("metrics lines (step, kind) equal:", ma == mb, len(ma))
print(
  "set aside:",
  os.listdir(os.path.join(wd, "checkpoints/set_aside"))
  if os.path.isdir(os.path.join(wd, "checkpoints/set_aside"))
  else [],
)
