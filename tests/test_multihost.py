"""Multi-process training through jax.distributed: 2 CPU processes on 127.0.0.1 equal a 1-process run.

Each process is a subprocess with one CPU device and its own
``jax.distributed.initialize``; cross-process collectives go through gloo
(JAX's default CPU collectives, ``jax_cpu_collectives_implementation``; no
setting needed). The first run is interrupted after its step-3 checkpoint; the
second, launched through ``python -m jaxcse.train`` with the process settings
in the environment, resumes it. The reference is one process with two
simulated devices. Every launch has a deadline, and a failed process ends its
launch at once: its peers would otherwise wait in a collective.

``python tests/test_multihost.py worker ...`` is the first run's process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, CHECKPOINT_EVERY, INTERRUPT_AT = 6, 3, 4
# The tiny config (tests/helpers.tiny_config) with a checkpoint and an evaluation every 3 steps.
OVERRIDES = {"train.max_steps": STEPS, "checkpoint.every": CHECKPOINT_EVERY, "eval.every": 3}
# Per launch. Measured on the 2-core dev machine at load average ~12: 87-130 s a launch (15-30 s of CPU per process).
DEADLINE_S = 180


def _worker(argv: list[str]) -> None:
  """One process of the first run: joins the 2-process job, trains, crashes before step ``--interrupt_at``."""
  parser = argparse.ArgumentParser()
  for name in ("coordinator_address", "model_dir", "data_dir", "workdir"):
    parser.add_argument(f"--{name}", required=True)
  parser.add_argument("--process_id", type=int, required=True)
  parser.add_argument("--interrupt_at", type=int, required=True)
  args = parser.parse_args(argv)
  sys.path.insert(0, REPO)
  from jaxcse import data as data_lib, train
  from jaxcse.training import distributed
  from tests import helpers

  distributed.initialize_distributed(args.coordinator_address, 2, args.process_id)
  data_lib.Batches.iterate = helpers.interrupting(data_lib.Batches.iterate, args.interrupt_at)
  try:
    train.train_and_evaluate(helpers.tiny_config(args.model_dir, args.data_dir, **OVERRIDES), args.workdir)
  except helpers.Interrupted as e:
    print(f"process {args.process_id}: {e}", flush=True)
    return
  raise SystemExit(f"process {args.process_id}: the run was not interrupted")


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
  _worker(sys.argv[2:])
  sys.exit(0)


import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxcse.storage import workdir as workdir_lib  # noqa: E402
from jaxcse.training import distributed
from tests import helpers  # noqa: E402


def _env(**extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != "XLA_FLAGS"}
  return {
    **env,
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": helpers.simulated_devices(1),
    "PYTHONPATH": REPO,
    **extra,
  }


def _launch(commands: list[tuple[list[str], dict[str, str]]], tmp_path, name: str) -> list[str]:
  """Runs the processes of one job together; returns their outputs. Fails (killing all) on error or deadline."""
  procs, logs = [], []
  for i, (cmd, env) in enumerate(commands):
    log_path = tmp_path / f"{name}.{i}.log"
    logs.append(log_path)
    procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT))
  deadline = time.time() + DEADLINE_S
  try:
    while time.time() < deadline and any(p.poll() is None for p in procs):
      # One process failing leaves its peers in a collective: stop waiting at the first failure.
      if any(p.poll() not in (None, 0) for p in procs):
        break
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  outputs = [path.read_text() for path in logs]
  codes = [p.returncode for p in procs]
  if codes != [0] * len(procs):
    tails = "\n".join(f"--- process {i} (exit {c}):\n{out[-3000:]}" for i, (c, out) in enumerate(zip(codes, outputs)))
    pytest.fail(f"{name}: exit codes {codes} (negative: killed at the {DEADLINE_S} s deadline)\n{tails}")
  return outputs


def _cli(workdir: str, model_dir: str, data_dir: str, **extra) -> list[str]:
  """``python -m jaxcse.train`` with the same config as the worker's ``tiny_config(..., **OVERRIDES)``."""
  args = helpers.train_cli_args(workdir, model_dir, data_dir, **OVERRIDES, **extra)
  return [sys.executable, "-m", "jaxcse.train", *args]


def test_two_processes_equal_one_process_and_resume(tiny_model_dir, small_data_dir, tmp_path):
  # The reference: one process with two (simulated) devices, the same 2-way data mesh.
  reference = str(tmp_path / "reference")
  _launch(
    [(_cli(reference, tiny_model_dir, small_data_dir), _env(XLA_FLAGS=helpers.simulated_devices(2)))],
    tmp_path,
    "reference",
  )

  # Two processes with one device each; the first run stops (as if it crashed) before step index 4.
  workdir = str(tmp_path / "two_processes")
  address = f"127.0.0.1:{helpers.unused_port()}"
  worker = [
    sys.executable,
    os.path.abspath(__file__),
    "worker",
    "--coordinator_address",
    address,
    "--model_dir",
    tiny_model_dir,
    "--data_dir",
    small_data_dir,
    "--workdir",
    workdir,
    "--interrupt_at",
    str(INTERRUPT_AT),
    "--process_id",
  ]
  outputs = _launch([(worker + [str(i)], _env()) for i in range(2)], tmp_path, "interrupted")
  for i, out in enumerate(outputs):
    assert f"process {i}: interrupted before step index {INTERRUPT_AT}" in out
  assert os.listdir(os.path.join(workdir, workdir_lib.LATEST_DIR)) == [str(CHECKPOINT_EVERY)]
  # Steps 2, 3 and 4 were logged; the resumed run starts again after the checkpoint at 3 and drops the line of 4.
  assert [r["step"] for r in helpers.metrics_records(workdir) if "loss" in r] == [2, 3, 4]

  # The resumed run: the CLI, with the process settings in the environment as a launcher would set them.
  address = f"127.0.0.1:{helpers.unused_port()}"
  outputs = _launch(
    [
      (
        _cli(workdir, tiny_model_dir, small_data_dir),
        _env(JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)),
      )
      for i in range(2)
    ],
    tmp_path,
    "resumed",
  )
  for i, out in enumerate(outputs):
    assert f"process {i} of 2; 1 local of 2 devices" in out and "resumed" in out
    assert "differs from the saved config.json" not in out  # The CLI flags rebuild the worker's config.
  assert "best stsb_dev" in outputs[0] and "best stsb_dev" not in outputs[1]  # Process 0 reports.

  # Exactly the reference's numbers: the SPMD program is the same as on one process's two devices, and the
  # gradient's all-reduce over two participants is one float addition, commutative, so the bits match whether
  # it runs inside a process or across processes (through gloo). Against one device the params differ by up to
  # ~4e-6 (the per-device partial sums associate differently); test_train covers that comparison.
  ref_records, records = helpers.metrics_records(reference), helpers.metrics_records(workdir)
  assert len(records) == len(ref_records)  # Only process 0 wrote metrics.jsonl: no line twice.
  for ref, got in zip(ref_records, records):
    assert ref.keys() == got.keys()
    for key in ref:
      if key not in ("steps_per_sec", "eval/seconds"):
        assert got[key] == ref[key], (ref["step"], key)
  summary, ref_summary = (json.load(open(os.path.join(w, "summary.json"))) for w in (workdir, reference))
  # The same summary (provenance aside: its wall time and command differ).
  assert {**summary, "workdir": None, "provenance": None} == {**ref_summary, "workdir": None, "provenance": None}
  helpers.assert_same_params(helpers.saved_params(workdir), helpers.saved_params(reference))


def test_two_processes_pack_their_rows_as_one_process_with_two_devices(tiny_model_dir, small_data_dir, tmp_path):
  """train.packed across processes: each device packs its own examples into rows of its own, the processes agree on
  the most rows any device needs, and the run equals one process's two devices, bit for bit (the same global
  program, rows and dropout stream)."""
  packed = {"train.packed": True}
  reference = str(tmp_path / "reference")
  reference_env = _env(XLA_FLAGS=helpers.simulated_devices(2))
  _launch([(_cli(reference, tiny_model_dir, small_data_dir, **packed), reference_env)], tmp_path, "packed_reference")
  workdir = str(tmp_path / "two_processes")
  address = f"127.0.0.1:{helpers.unused_port()}"
  _launch(
    [
      (
        _cli(workdir, tiny_model_dir, small_data_dir, **packed),
        _env(JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)),
      )
      for i in range(2)
    ],
    tmp_path,
    "packed_two_processes",
  )
  ref_records, records = helpers.metrics_records(reference), helpers.metrics_records(workdir)
  assert len(records) == len(ref_records) and any("loss" in r for r in records)
  for ref, got in zip(ref_records, records):
    assert {k: v for k, v in got.items() if k not in ("steps_per_sec", "eval/seconds")} == {
      k: v for k, v in ref.items() if k not in ("steps_per_sec", "eval/seconds")
    }
  helpers.assert_same_params(helpers.saved_params(workdir), helpers.saved_params(reference))


def test_partial_process_settings_are_an_error():
  with pytest.raises(ValueError, match="needs all of --coordinator_address, --num_processes and --process_id"):
    distributed.initialize_distributed("127.0.0.1:1234", 2, None)


class _Sharding:
  """What ``process_rows`` reads of a sharding: the slices of the batch that this process's devices hold."""

  def __init__(self, *slices: slice):
    self.slices = slices

  def addressable_devices_indices_map(self, shape):
    return {f"device{i}": (s,) for i, s in enumerate(self.slices)}


def test_process_rows_follow_the_sharding():
  # One process holds every row of the global batch, in order.
  mesh = distributed.make_mesh()
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  np.testing.assert_array_equal(distributed.process_rows(sharding, 8), np.arange(8))
  # A host whose devices are not adjacent in the mesh (TPU topologies): its slices, ascending, as
  # jax.make_array_from_process_local_data lays out local rows; a replicated slice counts once.
  np.testing.assert_array_equal(
    distributed.process_rows(_Sharding(slice(6, 8), slice(0, 2), slice(6, 8)), 8), [0, 1, 6, 7]
  )
  np.testing.assert_array_equal(distributed.process_rows(_Sharding(slice(None)), 4), np.arange(4))
