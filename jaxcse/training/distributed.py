"""Data parallelism across devices and processes: the mesh, joining a multi-host run, and agreement checks.

One program runs on every process (``jax.distributed``); the 1-axis ``data``
mesh spans every device of every process, params are replicated and the global
batch is split along ``data``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

log = logging.getLogger("jaxcse")


def make_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
  """A 1-axis ``data`` mesh over ``devices`` (default: all devices of all processes): pure data parallelism.

  ``jaxcse.compile`` passes the compile-only devices of a TPU slice or GPU it compiles for.
  """
  devices = jax.devices() if devices is None else list(devices)
  return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def data_shardings(mesh: jax.sharding.Mesh) -> tuple[NamedSharding, NamedSharding]:
  """``(replicated, batch)``: params and train state on every device; arrays split along their first axis."""
  return NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))


def initialize_distributed(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  *,
  auto: bool = False,
) -> None:
  """Joins a multi-process run through ``jax.distributed.initialize``; does nothing for a single process.

  Give all three of ``coordinator_address`` (``host:port`` of process 0),
  ``num_processes`` and ``process_id`` for plain multi-node GPU or several
  processes on one machine; or ``auto=True`` to let JAX detect them (Cloud TPU
  pods, SLURM, Open MPI, GKE), with any of the three as overrides. Must run
  before anything touches a device.
  """
  given = (coordinator_address, num_processes, process_id)
  if not auto and all(v is None for v in given):
    return
  if not auto and None in given:
    raise ValueError(
      "multi-process training needs all of --coordinator_address, --num_processes and --process_id "
      f"(got {given}), or --distributed to detect them (TPU pods, SLURM, Open MPI)"
    )
  jax.distributed.initialize(coordinator_address, num_processes, process_id)
  log.info(
    "process %d of %d; %d local of %d devices",
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
  )


def process_rows(sharding: jax.sharding.Sharding, batch_size: int) -> np.ndarray:
  """Positions in the global batch that this process's devices hold: ``[local rows]`` int.

  In the order ``jax.make_array_from_process_local_data`` reads local rows
  (ascending). Taken from the sharding rather than computed as ``process_index
  * rows``, so it stays right for meshes whose device order interleaves hosts.
  One process holds every row.
  """
  spans = sorted(
    {
      (s.start or 0, batch_size if s.stop is None else s.stop)
      for (s, *_) in sharding.addressable_devices_indices_map((batch_size,)).values()
    }
  )
  return np.concatenate([np.arange(start, stop) for start, stop in spans])


def check_processes_agree(**values: int) -> None:
  """Fails fast, naming the value, when processes differ in what must be equal (config, data, workdir).

  A host with another config, corpus or checkpoint folder would otherwise
  train on a silently inconsistent global batch, or deadlock in a checkpoint.
  """
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils

  every = multihost_utils.process_allgather(np.asarray(list(values.values()), np.uint32))  # [processes, values]
  for column, name in enumerate(values):
    seen = every[:, column].tolist()
    if len(set(seen)) > 1:
      raise RuntimeError(
        f"the {jax.process_count()} processes disagree on {name} ({seen} by process index): every "
        "host must run the same code and config, with the same data and model files, and one "
        "workdir on storage that all hosts share"
      )
