"""The third probe's attack families on a tiny run, each case judged "held" or "DEFECT"; one line per case.

  python attack_probe.py [FAMILY ...]    (default: all; families: damage swapped disk workdirs inputs growth exploded)

Run after setup_probe.py, from a checkout, with JAXCSE_DATA_DIR set as for it; CODE=/path/to/checkout runs another
checkout's jaxcse. Full disks and read-only workdirs are tmpfs mounts: the disk and read-only cases need root (they
are reported as skipped otherwise). kill -9 and SIGINT are kill9_probe.py's and sigint_probe.py's.

What "held" means: no traceback, no crash (rc 0, 1 or 130), and the case's own expectation: a refusal is exit 1
and one line (``error: ...``; warnings and notes may precede it) with the named folder unchanged; a resume reaches
the reference run's final latest parameters bit for bit; a reader either serves (rc 0) or refuses in one line.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE = os.environ.get("CODE", REPO)
WORK = os.environ.get("PROBE_DIR", os.path.join(tempfile.gettempdir(), "jaxcse-probe"))  # setup_probe.py writes here.
HERE = os.path.join(WORK, "attack")
TINY, DATA = os.path.join(WORK, "tiny"), os.path.join(WORK, "data")
ENV = {**os.environ, "PYTHONPATH": CODE, "JAXCSE_DATA_DIR": DATA}
SETTINGS = {
  "model.name": TINY,
  "data.data_dir": DATA,
  "data.train": "corpora/small.txt",
  "data.max_seq_len": 16,
  "train.batch_size": 8,
  "eval.batch_size": 32,
  "train.max_steps": 20,
  "eval.every": 5,
  "checkpoint.every": 5,
  "train.log_every": 5,
  "train.learning_rate": 3e-3,
}
SENTENCES = os.path.join(WORK, "sentences.txt")
results = []  # (family, case, outcome, detail)


def train_args(workdir: str, **overrides) -> list[str]:
  args = ["--config", os.path.join(REPO, "configs", "base.py")]
  for k, v in {**SETTINGS, **overrides}.items():
    args.append(f"--config.{k}={v}")
  return [*args, "--workdir", workdir]


def command(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
  """``jaxcse-NAME ARGS`` (its console script's entry point), with stderr captured."""
  script = f"import sys; from jaxcse import entry; sys.argv[0] = 'jaxcse-{name}'; sys.exit(entry.{name}())"
  return subprocess.run(
    [sys.executable, "-c", script, *args], env=ENV, cwd=WORK, capture_output=True, text=True, timeout=timeout
  )


def said(stderr: str) -> list[str]:
  """What the command told the user: not absl's log lines, not progress lines."""
  return [
    line
    for line in stderr.splitlines()
    if line.strip() and not re.match(r"[IWE]\d{4} ", line) and "elapsed" not in line and "it/s" not in line
  ]


def crashed(run: subprocess.CompletedProcess) -> str | None:
  if run.returncode not in (0, 1, 130):
    return f"rc {run.returncode}"
  if "Traceback (most recent call last)" in run.stderr or "Fatal Python error" in run.stderr:
    return "traceback"
  return None


def tree(folder: str) -> dict[str, str]:
  """Every file under ``folder`` and its sha256 (a file's absence is a difference too), but the workdir's empty
  ``.lock``: a run takes the lock of a workdir that holds a run before it reads the start point, and leaves the
  file (docs/reliability.md)."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      if name == ".lock" and os.path.getsize(os.path.join(root, name)) == 0:
        continue
      path = os.path.join(root, name)
      if os.path.isfile(path):
        with open(path, "rb") as f:
          out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def fingerprint(workdir: str) -> str | None:
  """The final latest checkpoint's parameters' fingerprint (jaxcse's own), in a subprocess of the code probed."""
  script = (
    "import sys; from jaxcse.storage import loading; from jaxcse import models; "
    "m = loading.load_model(sys.argv[1], checkpoint='latest'); print(m.step, models.params_fingerprint(m.params))"
  )
  run = subprocess.run([sys.executable, "-c", script, workdir], env=ENV, capture_output=True, text=True)
  return run.stdout.strip().splitlines()[-1] if run.returncode == 0 and run.stdout.strip() else None


def record(family: str, case: str, ok: bool, detail: str) -> None:
  outcome = "held" if ok else "DEFECT"
  results.append((family, case, outcome, detail))
  print(f"{family} | {case} | {outcome} | {detail}", flush=True)


def judge_refusal(family: str, case: str, run, unchanged: tuple[str, dict] | None = None, absent: str | None = None):
  """Held: exit 1, one ``error:`` line (warnings and notes may precede it), nothing changed or created."""
  lines = said(run.stderr)
  errors = [line for line in lines if line.startswith("error:")]
  others = [line for line in lines if not line.startswith(("error:", "warning", "note:", "WARNING"))]
  problem = crashed(run)
  if problem is None and run.returncode != 1:
    problem = f"rc {run.returncode}, not refused"
  if problem is None and (len(errors) != 1 or others):
    problem = f"not one error line: {lines[-3:]}"
  if problem is None and unchanged is not None and tree(unchanged[0]) != unchanged[1]:
    problem = f"{unchanged[0]} changed"
  if problem is None and absent is not None and os.path.exists(absent):
    problem = f"{absent} was created"
  record(family, case, problem is None, problem or (errors[0][:160] if errors else ""))


def judge_served(family: str, case: str, run):
  """A reader: held when it served (rc 0) or refused in one line; never a traceback."""
  lines = said(run.stderr)
  problem = crashed(run)
  errors = [line for line in lines if line.startswith("error:")]
  if problem is None and run.returncode == 1 and len(errors) != 1:
    problem = f"refused without one error line: {lines[-3:]}"
  warned = [line for line in lines if "warning" in line.lower()]
  detail = f"rc {run.returncode}; " + (errors[0][:140] if errors else (warned[0][:140] if warned else "no warning"))
  record(family, case, problem is None, problem or detail)


def judge_not_served(family: str, case: str, run):
  """A reader given a workdir whose newest best checkpoint is not this run's at this step: held when it refused in
  one line, or served an older best after one warning, naming why ("another run" / "saved as step"); never when it
  served without saying so."""
  lines = said(run.stderr)
  problem = crashed(run)
  errors = [line for line in lines if line.startswith("error:")]
  why = [line for line in lines if re.search(r"another run|saved as step", line)]
  if problem is None and run.returncode == 0 and not why:
    problem = "served without a word"
  elif problem is None and run.returncode != 0 and (len(errors) != 1 or not why):
    problem = f"refused without one error line naming why: {lines[-3:]}"
  elif problem is None and any(line.startswith(("WARNING:", "W1", "W0")) for line in why):
    problem = f"the warning is not a plain line: {why[0][:80]}"
  record(family, case, problem is None, problem or f"rc {run.returncode}: {why[0][:150]}")


def judge_resumed(family: str, case: str, run, workdir: str):
  """Held: rc 0, no traceback, the final latest parameters the reference's bit for bit."""
  problem = crashed(run)
  if problem is None and run.returncode != 0:
    problem = f"rc {run.returncode}: {said(run.stderr)[-2:]}"
  if problem is None and fingerprint(workdir) != REFERENCE_PRINT:
    problem = "final parameters differ from the reference's"
  warned = [line for line in said(run.stderr) if re.search(r"warning|set.aside", line, re.I)]
  record(family, case, problem is None, problem or f"same parameters; {len(warned)} warning line(s)")


def copy_reference(name: str) -> str:
  workdir = os.path.join(HERE, name)
  shutil.rmtree(workdir, ignore_errors=True)
  shutil.copytree(REF, workdir)
  os.remove(os.path.join(workdir, ".lock")) if os.path.exists(os.path.join(workdir, ".lock")) else None
  return workdir


def steps(workdir: str, sub: str) -> list[int]:
  folder = os.path.join(workdir, "checkpoints", sub)
  return sorted(int(d) for d in os.listdir(folder) if d.isdigit()) if os.path.isdir(folder) else []


def largest_file(folder: str) -> str:
  files = [os.path.join(r, n) for r, _, ns in os.walk(folder) for n in ns if n != "sha256.json"]
  return max(files, key=os.path.getsize)


def flip(path: str, at: int | None = None) -> None:
  with open(path, "r+b") as f:
    size = os.path.getsize(path)
    f.seek(at if at is not None else size // 2)
    chunk = f.read(4)
    f.seek(at if at is not None else size // 2)
    f.write(bytes(b ^ 0xFF for b in chunk))


def truncate(path: str, keep: float = 0.5) -> None:
  with open(path, "r+b") as f:
    f.truncate(int(os.path.getsize(path) * keep))


class Tmpfs:
  """A tmpfs of ``size`` at ``path`` (root only), remountable bigger or read-only."""

  def __init__(self, path: str, size: str, read_only: bool = False):
    self.path = path
    os.makedirs(path, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], check=True)

  def remount(self, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", self.path], check=True)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    subprocess.run(["umount", self.path], check=False)


def can_mount() -> bool:
  return os.geteuid() == 0


# --------------------------------------------------------------------------
# The families.


def damage():
  f = "damage"
  latest_newest = lambda wd: os.path.join(wd, "checkpoints/latest", str(steps(wd, "latest")[-1]))  # noqa: E731
  best_newest = lambda wd: os.path.join(wd, "checkpoints/best", str(steps(wd, "best")[-1]))  # noqa: E731
  for case, act in [
    ("newest latest: 4 bytes flipped in its largest file", lambda wd: flip(largest_file(latest_newest(wd)))),
    ("newest latest: largest file truncated", lambda wd: truncate(largest_file(latest_newest(wd)))),
    (
      "newest latest: sha256.json is {}",
      lambda wd: open(os.path.join(latest_newest(wd), "sha256.json"), "w").write("{}"),
    ),
    ("newest latest: sha256.json deleted", lambda wd: os.remove(os.path.join(latest_newest(wd), "sha256.json"))),
    (
      "every latest flipped",
      lambda wd: [flip(largest_file(os.path.join(wd, "checkpoints/latest", str(s)))) for s in steps(wd, "latest")],
    ),
    ("newest best flipped, then resumed", lambda wd: flip(largest_file(best_newest(wd)))),
    ("metrics.jsonl: torn last line", lambda wd: open(os.path.join(wd, "metrics.jsonl"), "a").write('{"step": 2')),
  ]:
    wd = copy_reference(f"d-{len(results)}")
    act(wd)
    judge_resumed(f, f"{case} -> train", command("train", *train_args(wd)), wd)
  # Readers on a damaged best checkpoint: the previous one with a warning, or one line.
  for case, act in [
    ("newest best flipped", lambda wd: flip(largest_file(best_newest(wd)))),
    ("newest best: sha256.json is {}", lambda wd: open(os.path.join(best_newest(wd), "sha256.json"), "w").write("{}")),
    (
      "every best truncated",
      lambda wd: [truncate(largest_file(os.path.join(wd, "checkpoints/best", str(s)))) for s in steps(wd, "best")],
    ),
  ]:
    wd = copy_reference(f"d-{len(results)}")
    act(wd)
    out = os.path.join(HERE, f"enc-{len(results)}.npy")
    judge_served(f, f"{case} -> encode", command("encode", "--model", wd, "--input", SENTENCES, "--output", out))

  # The model description: every reader refuses, the trainer too, and nothing is rewritten.
  def hidden_act(wd):
    path = os.path.join(wd, "model", "config.json")
    config = json.load(open(path))
    config["hidden_act"] = "relu"
    json.dump(config, open(path, "w"))

  for case, act, readers in [
    ("model/config.json: hidden_act changed", hidden_act, ("encode", "train", "export")),
    (
      "model/sha256.json {} and hidden_act changed",
      lambda wd: (hidden_act(wd), open(os.path.join(wd, "model/sha256.json"), "w").write("{}")),
      ("encode", "train"),
    ),
    (
      "model/sha256.json deleted and hidden_act changed",
      lambda wd: (hidden_act(wd), os.remove(os.path.join(wd, "model/sha256.json"))),
      ("encode", "train"),
    ),
    (
      "model/tokenizer.json truncated",
      lambda wd: truncate(os.path.join(wd, "model", "tokenizer.json")),
      ("encode", "export", "evaluate"),
    ),
    ("inputs.json deleted", lambda wd: os.remove(os.path.join(wd, "inputs.json")), ("train",)),
    ("config.json truncated", lambda wd: truncate(os.path.join(wd, "config.json")), ("train", "evaluate")),
  ]:
    wd = copy_reference(f"d-{len(results)}")
    act(wd)
    before = tree(wd)
    for reader in readers:
      n = len(results)
      if reader == "train":
        run = command("train", *train_args(wd))
      elif reader == "encode":
        run = command("encode", "--model", wd, "--input", SENTENCES, "--output", os.path.join(HERE, f"enc-{n}.npy"))
      elif reader == "export":
        run = command("export", wd, os.path.join(HERE, f"export-{n}"))
      else:
        run = command(
          "evaluate", "--model", wd, "--tasks", "STSBenchmark", "--output", os.path.join(HERE, f"ev-{n}.json")
        )
      judge_refusal(f, f"{case} -> {reader}", run, unchanged=(wd, before))
  # A truncated base model: train and encode refuse in one line.
  broken = os.path.join(HERE, "tiny-truncated")
  shutil.rmtree(broken, ignore_errors=True)
  shutil.copytree(TINY, broken)
  truncate(os.path.join(broken, "model.safetensors"))
  wd = os.path.join(HERE, f"d-{len(results)}")
  shutil.rmtree(wd, ignore_errors=True)
  judge_refusal(
    f,
    "base model.safetensors truncated -> train",
    command("train", *train_args(wd, **{"model.name": broken})),
    absent=wd,
  )
  judge_refusal(
    f,
    "base model.safetensors truncated -> encode",
    command("encode", "--model", broken, "--input", SENTENCES, "--output", os.path.join(HERE, "enc-broken.npy")),
    absent=os.path.join(HERE, "enc-broken.npy"),
  )
  # Readers name exactly what they serve: a set-aside checkpoint, the description, the checkpoints folder.
  wd = copy_reference(f"d-{len(results)}")
  flip(largest_file(latest_newest(wd)))
  command("train", *train_args(wd))  # Sets the damaged one aside.
  aside = os.path.join(wd, "checkpoints", "set_aside")
  named = [os.path.join(aside, sorted(os.listdir(aside))[0])] if os.path.isdir(aside) and os.listdir(aside) else []
  for folder in [*named, os.path.join(wd, "model"), os.path.join(wd, "checkpoints")]:
    run = command(
      "encode", "--model", folder, "--input", SENTENCES, "--output", os.path.join(HERE, f"enc-{len(results)}.npy")
    )
    judge_refusal(f, f"--model {os.path.relpath(folder, wd)} -> encode", run)


def swapped():
  """Checkpoint folders that are whole but not this run's at this step (issue 69): one copied in from another run
  (the same config with seed 7; its own sha256.json intact), or one renamed from another step."""
  f = "swapped"
  other = os.path.join(HERE, "other-run")
  if not os.path.exists(os.path.join(other, "summary.json")):
    shutil.rmtree(other, ignore_errors=True)
    assert command("train", *train_args(other, seed=7)).returncode == 0

  def swap(wd, sub, source):
    target = os.path.join(wd, "checkpoints", sub, str(steps(wd, sub)[-1]))
    shutil.rmtree(target)
    shutil.copytree(source, target)

  def renamed(wd):
    best = steps(wd, "best")
    assert len(best) >= 2, best
    newest = os.path.join(wd, "checkpoints/best", str(best[-1]))
    shutil.rmtree(newest)
    os.rename(os.path.join(wd, "checkpoints/best", str(best[0])), newest)

  other_best = lambda: os.path.join(other, "checkpoints/best", str(steps(other, "best")[-1]))  # noqa: E731
  other_latest = lambda: os.path.join(other, "checkpoints/latest", str(steps(other, "latest")[-1]))  # noqa: E731
  for case, act in [
    ("newest best replaced by another run's newest best", lambda wd: swap(wd, "best", other_best())),
    ("oldest best renamed as the newest", renamed),
  ]:
    for reader in ("encode", "export"):
      wd = copy_reference(f"d-{len(results)}")
      act(wd)
      n = len(results)
      if reader == "encode":
        run = command("encode", "--model", wd, "--input", SENTENCES, "--output", os.path.join(HERE, f"enc-{n}.npy"))
      else:
        run = command("export", wd, os.path.join(HERE, f"export-{n}"))
      judge_not_served(f, f"{case} -> {reader}", run)
  for case, act in [
    ("newest latest replaced by another run's newest latest", lambda wd: swap(wd, "latest", other_latest())),
    ("newest best replaced by another run's newest best", lambda wd: swap(wd, "best", other_best())),
  ]:
    wd = copy_reference(f"d-{len(results)}")
    os.remove(os.path.join(wd, "summary.json"))  # So the same command resumes, not leaves a finished run as it is.
    act(wd)
    judge_resumed(f, f"{case}, summary.json removed -> train", command("train", *train_args(wd)), wd)


def disk():
  f = "disk"
  if not can_mount():
    record(f, "all", True, "skipped: mounting a tmpfs needs root")
    return
  mount = os.path.join(HERE, "mnt")
  # A fresh run on a disk that fills at a save, then the same command with room: the reference's parameters.
  for size in ("600k", "3m", "8m"):
    with Tmpfs(mount, size) as fs:
      wd = os.path.join(mount, "w")
      run = command("train", *train_args(wd))
      if run.returncode == 0:
        record(f, f"train on a {size} tmpfs", crashed(run) is None, f"rc 0: it fit ({tree_size(mount)} bytes)")
      else:
        judge_refusal(f, f"train on a {size} tmpfs (full)", run)
      fs.remount("size=256m")
      judge_resumed(
        f, f"train on a {size} tmpfs, then with room -> same command", command("train", *train_args(wd)), wd
      )
  # Readers and writers of outputs.
  with Tmpfs(mount, "64k"):
    out = os.path.join(mount, "enc.npy")
    filler = fill(mount, leave=2048)  # The output (50 x 32 float32) needs 6.5 KB.
    run = command("encode", "--model", REF, "--input", SENTENCES, "--output", out)
    judge_refusal(f, "encode to a tmpfs with 2 KB free", run, absent=out)
    os.remove(filler)
    run = command("encode", "--model", REF, "--input", SENTENCES, "--output", out)
    record(f, "encode with room -> same command", run.returncode == 0 and crashed(run) is None, f"rc {run.returncode}")
  with Tmpfs(mount, "1m") as fs:
    out = os.path.join(mount, "export")
    judge_refusal(f, "export to a 1m tmpfs", command("export", REF, out), absent=out)
    fs.remount("size=64m")
    run = command("export", REF, out)
    record(f, "export with room -> same command", run.returncode == 0 and crashed(run) is None, f"rc {run.returncode}")
  with Tmpfs(mount, "16k") as fs:
    out = os.path.join(mount, "sub", "ev.json")
    with open(os.path.join(mount, "filler"), "wb") as filler:
      try:
        filler.write(b"\0" * 16384)
      except OSError:
        pass
    run = command("evaluate", "--model", REF, "--tasks", "STSBenchmark", "--output", out)
    judge_refusal(f, "evaluate --output to a full tmpfs", run, absent=out)


def fill(folder: str, leave: int) -> str:
  """A file that leaves ``leave`` bytes free on ``folder``'s file system; returns its path."""
  path = os.path.join(folder, "filler")
  free = os.statvfs(folder)
  with open(path, "wb") as out:
    out.write(b"\0" * max(0, free.f_bavail * free.f_frsize - leave))
  return path


def tree_size(folder: str) -> int:
  return sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(folder) for n in ns)


def workdirs():
  f = "workdirs"
  if can_mount():
    mount = os.path.join(HERE, "ro")
    with Tmpfs(mount, "1m", read_only=True):
      judge_refusal(f, "fresh run on a read-only tmpfs", command("train", *train_args(os.path.join(mount, "w"))))
    with Tmpfs(mount, "64m") as fs:
      wd = os.path.join(mount, "w")
      shutil.copytree(REF, wd)
      for lock in [os.path.join(wd, ".lock")]:
        if os.path.exists(lock):
          os.remove(lock)
      fs.remount("ro")
      before = tree(wd)
      judge_refusal(
        f, "finished run on a read-only tmpfs -> train", command("train", *train_args(wd)), unchanged=(wd, before)
      )
      out = os.path.join(HERE, "enc-ro.npy")
      if os.path.exists(out):  # An earlier run's.
        os.remove(out)
      run = command("encode", "--model", wd, "--input", SENTENCES, "--output", out)
      record(
        f,
        "finished run on a read-only tmpfs -> encode",
        run.returncode == 0 and crashed(run) is None,
        f"rc {run.returncode}: {said(run.stderr)[-1:]}",
      )
  else:
    record(f, "read-only mounts", True, "skipped: mounting needs root")
  # Wrong folders, with and without --restart: refused, left as they were.
  a_file = os.path.join(HERE, "a-file")
  open(a_file, "w").write("not a folder\n")
  hf = os.path.join(HERE, "hf-folder")
  shutil.rmtree(hf, ignore_errors=True)
  shutil.copytree(TINY, hf)
  for name in ("model", "tensorboard"):
    os.makedirs(os.path.join(hf, name), exist_ok=True)
    open(os.path.join(hf, name, "keep.txt"), "w").write("keep\n")
  for extra in ("metrics.jsonl", "summary.json"):
    open(os.path.join(hf, extra), "w").write("{}\n")
  other = copy_reference("w-other")
  for case, wd, extra in [
    ("--workdir a file", a_file, []),
    ("--workdir a file below a file", os.path.join(a_file, "w"), []),
    ("--workdir a Hugging Face model folder", hf, []),
    ("--workdir a Hugging Face model folder --restart", hf, ["--restart"]),
    ("--workdir another run (another learning rate)", other, []),
  ]:
    folder = wd if os.path.isdir(wd) else os.path.dirname(wd) if os.path.isdir(os.path.dirname(wd)) else HERE
    before = tree(folder) if os.path.isdir(folder) else {}
    overrides = {"train.learning_rate": 1e-4} if "another run" in case else {}
    run = command("train", *train_args(wd, **overrides), *extra)
    judge_refusal(f, case, run, unchanged=(folder, before) if os.path.isdir(folder) else None)
  empty = os.path.join(HERE, "empty-folder")
  os.makedirs(empty, exist_ok=True)
  for case, model in [
    ("--model an empty folder", empty),
    ("--model a file", a_file),
    ("--model a missing path", os.path.join(HERE, "missing")),
  ]:
    out = os.path.join(HERE, f"enc-{len(results)}.npy")
    judge_refusal(
      f, f"encode {case}", command("encode", "--model", model, "--input", SENTENCES, "--output", out), absent=out
    )


def inputs():
  f = "inputs"
  bad_config = os.path.join(HERE, "bad_config.py")
  open(bad_config, "w").write("def get_config(:\n")
  no_get = os.path.join(HERE, "no_get_config.py")
  open(no_get, "w").write("x = 1\n")
  lacks = os.path.join(HERE, "lacks_a_field.py")
  open(lacks, "w").write(
    "from jaxcse.configs import base\n\ndef get_config():\n  c = base.get_config()\n  del c.eval['sickr_dev']\n  return c\n"
  )
  corpora = {
    "empty": b"",
    "one_line": b"one sentence only\n",
    "binary": bytes(range(256)) * 64,
    "latin1": "caf\xe9 cr\xe8me\n".encode("latin-1") * 50,
  }
  for name, content in corpora.items():
    with open(os.path.join(DATA, "corpora", f"bad_{name}.txt"), "wb") as out:
      out.write(content)
  cases = [
    ("train.learning_rate=nan", {"train.learning_rate": "nan"}),
    ("train.learning_rate=inf", {"train.learning_rate": "inf"}),
    ("train.learning_rate=-1", {"train.learning_rate": -1}),
    ("loss.temperature=0", {"loss.temperature": 0.0}),
    ("loss.temperature=-1", {"loss.temperature": -1.0}),
    ("model.dropout=2.0", {"model.dropout": 2.0}),
    ("train.warmup_steps=-5", {"train.warmup_steps": -5}),
    ("data.max_seq_len=100000", {"data.max_seq_len": 100000}),
    ("data.max_seq_len=0", {"data.max_seq_len": 0}),
    ("train.batch_size=0", {"train.batch_size": 0}),
    ("train.batch_size=1", {"train.batch_size": 1}),
    ("train.max_steps=-5", {"train.max_steps": -5}),
    ("eval.every=0", {"eval.every": 0}),
    ("eval.batch_size=0", {"eval.batch_size": 0}),
    ("checkpoint.every=0", {"checkpoint.every": 0}),
    ("seed=-1", {"seed": -1}),
    ("train.adam_eps=0", {"train.adam_eps": 0.0}),
    ("an unknown field", {"train.no_such_field": 1}),
    ("a missing corpus", {"data.train": "corpora/missing.txt"}),
    *[(f"a corpus: {name}", {"data.train": f"corpora/bad_{name}.txt"}) for name in corpora],
    ("a missing model", {"model.name": os.path.join(HERE, "no-model")}),
    ("a missing data root", {"data.data_dir": os.path.join(HERE, "no-data")}),
  ]
  for case, overrides in cases:
    wd = os.path.join(HERE, f"i-{len(results)}")
    shutil.rmtree(wd, ignore_errors=True)
    judge_refusal(f, f"train {case}", command("train", *train_args(wd, **overrides)), absent=wd)
  for case, config in [
    ("a config with a syntax error", bad_config),
    ("a config without get_config", no_get),
    ("a config lacking a field", lacks),
    ("a missing config file", os.path.join(HERE, "missing.py")),
  ]:
    wd = os.path.join(HERE, f"i-{len(results)}")
    run = command(
      "train", "--config", config, "--workdir", wd, f"--config.model.name={TINY}", f"--config.data.data_dir={DATA}"
    )
    judge_refusal(f, f"train {case}", run, absent=wd)
  binary = os.path.join(HERE, "binary.txt")
  open(binary, "wb").write(bytes(range(256)) * 8)
  empty = os.path.join(HERE, "empty.txt")
  open(empty, "w").close()
  csv = os.path.join(HERE, "s.csv")
  open(csv, "w").write("text,label\nhello,1\n")
  for case, extra in [
    ("--input missing", ["--input", os.path.join(HERE, "missing.txt")]),
    ("--input binary", ["--input", binary]),
    ("--input empty", ["--input", empty]),
    ("--batch_size 0", ["--input", SENTENCES, "--batch_size", "0"]),
    ("--max_seq_len 0", ["--input", SENTENCES, "--max_seq_len", "0"]),
    ("--truncate_dim 100000", ["--input", SENTENCES, "--truncate_dim", "100000"]),
    ("--column on a csv without it", ["--input", csv, "--column", "sentence"]),
    ("--checkpoint 999", ["--input", SENTENCES, "--checkpoint", "999"]),
  ]:
    out = os.path.join(HERE, f"enc-{len(results)}.npy")
    run = command("encode", "--model", REF, *extra, "--output", out)
    if case == "--input empty" and run.returncode == 0:
      record(f, f"encode {case}", crashed(run) is None, "rc 0: an empty output")
    else:
      judge_refusal(f, f"encode {case}", run, absent=out)
  out = os.path.join(HERE, f"ev-{len(results)}.json")
  judge_refusal(
    f,
    "evaluate --tasks NoSuchTask",
    command("evaluate", "--model", REF, "--tasks", "NoSuchTask", "--output", out),
    absent=out,
  )
  out = os.path.join(HERE, f"ev-{len(results)}.json")
  judge_refusal(
    f, "evaluate --batch_size 0", command("evaluate", "--model", REF, "--batch_size", "0", "--output", out), absent=out
  )
  full = os.path.join(HERE, "nonempty")
  os.makedirs(full, exist_ok=True)
  open(os.path.join(full, "x.txt"), "w").write("x\n")
  before = tree(full)
  judge_refusal(f, "export into a folder that is not empty", command("export", REF, full), unchanged=(full, before))


def growth():
  f = "growth"
  wd = copy_reference("g")
  sizes = []
  for cycle in range(8):
    latest = steps(wd, "latest")
    flip(largest_file(os.path.join(wd, "checkpoints/latest", str(latest[-1]))), at=None)
    run = command("train", *train_args(wd))
    aside = os.path.join(wd, "checkpoints", "set_aside")
    entries = sorted(os.listdir(aside)) if os.path.isdir(aside) else []
    sizes.append((len(entries), tree_size(aside) if entries else 0))
    if crashed(run) or run.returncode != 0:
      record(f, f"cycle {cycle}", False, f"rc {run.returncode}: {said(run.stderr)[-2:]}")
      return
  # Intact copies are kept once: what grows is one damaged latest a cycle (kept: damage is evidence), and the
  # intact best checkpoints saved after the resume point at most once each.
  best_entries = [e for e in os.listdir(aside) if e.startswith("best-")]
  best_steps = {e.split("-")[1] for e in best_entries}
  record(
    f,
    "8 damage/rerun cycles",
    len(best_entries) == len(best_steps) and fingerprint(wd) == REFERENCE_PRINT,
    f"set-aside entries and bytes per cycle {sizes}; best entries {len(best_entries)} for {len(best_steps)} steps; "
    f"run {tree_size(wd) - sizes[-1][1]} bytes",
  )
  before = {k: v for k, v in tree(wd).items() if not k.startswith("checkpoints/set_aside")}
  run = command("train", "--workdir", wd, "--prune_set_aside")
  after = tree(wd)
  ok = run.returncode == 0 and not crashed(run) and not os.path.exists(aside) and after == before
  record(
    f, "--prune_set_aside", ok, f"rc {run.returncode}: {said(run.stderr)[-1:]}; run files unchanged: {after == before}"
  )


def exploded():
  f = "exploded"
  for lr in (1e4, 1e8):
    wd = os.path.join(HERE, f"x-{lr:g}")
    shutil.rmtree(wd, ignore_errors=True)
    run = command("train", *train_args(wd, **{"train.learning_rate": lr}))
    lines = said(run.stderr)
    if run.returncode == 0:
      record(f, f"train at learning rate {lr:g}", crashed(run) is None, "rc 0: trained (finite)")
    else:
      judge_refusal(f, f"train at learning rate {lr:g}", run)
    # Whatever it left is servable, or refused in one line.
    if os.path.isdir(wd):
      out = os.path.join(HERE, f"enc-x-{lr:g}.npy")
      judge_served(
        f, f"encode after learning rate {lr:g}", command("encode", "--model", wd, "--input", SENTENCES, "--output", out)
      )
      out = os.path.join(HERE, f"export-x-{lr:g}")
      shutil.rmtree(out, ignore_errors=True)
      judge_served(f, f"export after learning rate {lr:g}", command("export", wd, out))
    del lines


FAMILIES = {
  "damage": damage,
  "swapped": swapped,
  "disk": disk,
  "workdirs": workdirs,
  "inputs": inputs,
  "growth": growth,
  "exploded": exploded,
}

if __name__ == "__main__":
  chosen = sys.argv[1:] or list(FAMILIES)
  os.makedirs(HERE, exist_ok=True)
  for name in os.listdir(HERE):  # An earlier run's outputs: each case writes to a new name.
    if name.startswith(("enc-", "ev-", "export-")):
      path = os.path.join(HERE, name)
      shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
  with open(os.path.join(DATA, "corpora", "small.txt"), encoding="utf-8") as src:
    open(SENTENCES, "w", encoding="utf-8").writelines(list(src)[:50])
  REF = os.path.join(HERE, "reference")
  if not os.path.exists(os.path.join(REF, "summary.json")):
    shutil.rmtree(REF, ignore_errors=True)
    t0 = time.time()
    run = command("train", *train_args(REF))
    print(f"reference: rc {run.returncode} in {time.time() - t0:.0f}s", flush=True)
    assert run.returncode == 0, run.stderr[-2000:]
  REFERENCE_PRINT = fingerprint(REF)
  print(f"reference latest: {REFERENCE_PRINT}", flush=True)
  for name in chosen:
    t0 = time.time()
    FAMILIES[name]()
    mine = [r for r in results if r[0] == name]
    held = sum(r[2] == "held" for r in mine)
    print(f"== {name}: {len(mine)} tries, {held} held, {len(mine) - held} defects, {time.time() - t0:.0f}s", flush=True)
