"""The accelerators jaxcse compiles for ahead of time, and their peaks: the one table of hardware numbers.

A ``Target`` is a TPU slice or a GPU that ``jaxcse.compile`` builds compile-only
devices for on any x86-64 Linux machine (no accelerator needed), plus ``cpu``
(this machine's own CPU devices, which the trainer itself would use). TPU
devices come from libtpu (``pip install "jaxcse[tpu]"``) through
``jax.experimental.topologies``; a GPU is described to XLA by a
``GpuTargetConfigProto`` text file in ``gpu_targets/`` and needs the CUDA
plugin without NVIDIA's libraries (``pip install "jaxcse[aot]"``).

Numbers are per JAX device: a TPU v2/v3 chip is two devices (one per
TensorCore), a v4/v5p chip one (megacore), a v5e/v6e chip one.
``usable_bytes`` is what a program may occupy: on TPUs, the HBM that libtpu's
compiler makes available (its out-of-memory errors name it); on GPUs, the
share of the device's memory that JAX's allocator takes
(``XLA_PYTHON_CLIENT_MEM_FRACTION``, default 75%).
"""

from __future__ import annotations

import dataclasses
import os
import re

from jaxcse.core.errors import JaxcseError

GIB = 1 << 30

GPU_TARGETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_targets")

# Compiling for a GPU that is not here needs a jaxlib whose XLA reads the GpuTargetConfigProto files in gpu_targets/
# (written from XLA's specs of 2026) and whose CUDA plugin starts without NVIDIA's libraries. Found by trying
# (experiments/aot/README.md, "The GPU compile floor"): jaxlib 0.10.0 and 0.10.2 compile for the H100; 0.9.2 and
# 0.9.0 refuse the spec (their XLA lacks its thread_dim_limit_* fields), 0.7.2 (Colab's TPU image) lacks a dozen.
GPU_COMPILE_MIN_JAXLIB = "0.10.0"


class TargetError(JaxcseError, ValueError):
  """A target name jaxcse does not know, or one whose compiler is not installed."""


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator model: its peaks per chip, how many JAX devices a chip is, and where the numbers come from.

  Attributes:
    name: how the table names it.
    devices_per_chip: JAX devices on one chip (TPU v2/v3: 2 TensorCores, each a device).
    bf16_flops: dense (no sparsity) bfloat16 matrix peak of one chip, FLOP/s.
    memory_bandwidth: HBM bandwidth of one chip, bytes/s.
    memory_bytes: HBM of one chip, bytes.
    source: where the three peaks come from.
    tpu_usable_gib: TPUs: the HBM per device libtpu's compiler makes available, in GiB as its out-of-memory
      error prints it ("exceeds available HBM (15.75G)"; libtpu 0.0.42, measured by compiling a buffer too large).
  """

  name: str
  devices_per_chip: int
  bf16_flops: float
  memory_bandwidth: float
  memory_bytes: int
  source: str
  tpu_usable_gib: float | None = None


CLOUD_TPU_DOCS = "https://cloud.google.com/tpu/docs/"
CHIPS = {
  # Jouppi et al., "A Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 63(7), 2020,
  # Table 3 (TPUv2: 46 TFLOPS bf16, 16 GiB HBM at 700 GB/s); jax's own pallas/mosaic/tpu_info.py has 4.6e13 too.
  "tpu_v2": Chip("TPU v2", 2, 46e12, 700e9, 16 * GIB, "Jouppi et al., CACM 2020, Table 3", 7.48),
  "tpu_v3": Chip("TPU v3", 2, 123e12, 900e9, 32 * GIB, CLOUD_TPU_DOCS + "v3", 15.48),
  "tpu_v4": Chip("TPU v4", 1, 275e12, 1200e9, 32 * GIB, CLOUD_TPU_DOCS + "v4", 30.75),
  "tpu_v5e": Chip("TPU v5e", 1, 197e12, 819e9, 16 * GIB, CLOUD_TPU_DOCS + "v5e", 15.75),
  # The docs say "16 GB", "32 GB", "95 GB" for v5e, v6e, v5p: libtpu makes 15.75, 31.25 and 95.74 GiB available,
  # so these are GiB (HBM stacks come in GiB; the v5p's 96 GiB holds 95.74 usable).
  "tpu_v5p": Chip("TPU v5p", 1, 459e12, 2765e9, 96 * GIB, CLOUD_TPU_DOCS + "v5p", 95.74),
  "tpu_v6e": Chip("TPU v6e", 1, 918e12, 1638e9, 32 * GIB, CLOUD_TPU_DOCS + "v6e", 31.25),
  # NVIDIA's datasheets give bf16 tensor-core peaks with 2:4 sparsity; the dense peak is half. HBM bandwidth and
  # size as XLA's target configs (gpu_targets/) state them: 3.35 TB/s, 2.04 TB/s, 1.56 TB/s.
  "h100_sxm": Chip(
    "H100 SXM 80GB",
    1,
    989.4e12,
    3352.32e9,
    84942979072,
    "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 1,979 TFLOPS bf16 with sparsity); gpu_targets/h100_sxm.txtpb",
  ),
  "a100_80gb": Chip(
    "A100 SXM 80GB",
    1,
    312e12,
    2039.04e9,
    85100068864,
    "NVIDIA A100 Tensor Core GPU datasheet (312 TFLOPS bf16 dense); gpu_targets/a100_sxm_80.txtpb",
  ),
  "a100_40gb": Chip(
    "A100 SXM 40GB",
    1,
    312e12,
    1555.2e9,
    42331013120,
    "NVIDIA A100 Tensor Core GPU datasheet (312 TFLOPS bf16 dense); gpu_targets/a100_sxm_40.txtpb",
  ),
}


@dataclasses.dataclass(frozen=True)
class Target:
  """A machine to compile for.

  Attributes:
    name: the ``--target`` name (``v5e-8``: Google's accelerator-type name, cores for v2-v4, chips after).
    platform: ``tpu``, ``gpu`` or ``cpu``.
    chip: a key of ``CHIPS`` (empty for ``cpu``).
    num_devices: JAX devices of the whole slice.
    num_hosts: processes (TPU VMs) the slice spans; a multi-host run has one process each.
    description: one line for ``--help`` and the report.
    topology: TPUs: ``get_topology_desc``'s ``topology_name`` and keyword arguments (MaxText's
      accelerator_to_spec_map.py uses the same ones).
    gpu_config: GPUs: the ``GpuTargetConfigProto`` text file in ``gpu_targets/``.
    accelerator_type: TPUs: the Cloud TPU accelerator type (libtpu reads it from ``TPU_ACCELERATOR_TYPE``).
  """

  name: str
  platform: str
  chip: str
  num_devices: int
  num_hosts: int
  description: str
  topology: tuple[str, dict] | None = None
  gpu_config: str = ""
  accelerator_type: str = ""

  @property
  def peaks(self) -> Chip | None:
    return CHIPS.get(self.chip)

  @property
  def bf16_flops_per_device(self) -> float | None:
    chip = self.peaks
    return None if chip is None else chip.bf16_flops / chip.devices_per_chip

  @property
  def memory_bandwidth_per_device(self) -> float | None:
    chip = self.peaks
    return None if chip is None else chip.memory_bandwidth / chip.devices_per_chip

  def usable_bytes(self) -> int:
    """Bytes one device's program may use (see the module docstring); ``cpu``: this machine's memory / devices."""
    if self.platform == "tpu":
      return int(self.peaks.tpu_usable_gib * GIB)
    if self.platform == "gpu":
      return int(gpu_memory_fraction() * gpu_device_memory(self.gpu_config))
    import jax

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // len(jax.devices("cpu"))


def _tpu(name, chip, devices, hosts, topology, accelerator_type, description, **kwargs) -> Target:
  return Target(name, "tpu", chip, devices, hosts, description, (topology, kwargs), accelerator_type=accelerator_type)


def _gpu(name, chip, config_file, description) -> Target:
  return Target(name, "gpu", chip, 1, 1, description, gpu_config=config_file)


TARGETS = {
  t.name: t
  for t in [
    Target("cpu", "cpu", "", 0, 1, "this machine's CPU devices (as the trainer would run here)"),
    _tpu(
      "v5e-1",
      "tpu_v5e",
      1,
      1,
      "v5e:1x1",
      "v5litepod-1",
      "one TPU v5e chip (Colab's free TPU)",
      chips_per_host_bounds=(1, 1, 1),
    ),
    _tpu("v5e-4", "tpu_v5e", 4, 1, "v5e:2x2", "v5litepod-4", "4 TPU v5e chips, one host"),
    _tpu(
      "v5e-8",
      "tpu_v5e",
      8,
      1,
      "v5e:2x4",
      "v5litepod-8",
      "8 TPU v5e chips, one host (Kaggle's TPU)",
      chip_config_name="default",
      chips_per_host_bounds=(2, 4, 1),
    ),
    _tpu(
      "v5e-16",
      "tpu_v5e",
      16,
      4,
      "v5e:4x4",
      "v5litepod-16",
      "16 TPU v5e chips on 4 hosts of 4 (multi-host)",
      chip_config_name="default",
      chips_per_host_bounds=(2, 2, 1),
    ),
    _tpu("v6e-1", "tpu_v6e", 1, 1, "v6e:1x1", "v6e-1", "one TPU v6e (Trillium) chip", chips_per_host_bounds=(1, 1, 1)),
    _tpu(
      "v6e-8",
      "tpu_v6e",
      8,
      1,
      "v6e:2x4",
      "v6e-8",
      "8 TPU v6e (Trillium) chips, one host",
      chip_config_name="default",
      chips_per_host_bounds=(2, 4, 1),
    ),
    _tpu(
      "v4-8",
      "tpu_v4",
      4,
      1,
      "v4:2x2x1",
      "v4-8",
      "4 TPU v4 chips (8 TensorCores as 4 megacore devices), one host",
      chip_config_name="megacore",
    ),
    _tpu(
      "v4-32",
      "tpu_v4",
      16,
      4,
      "v4:2x2x4",
      "v4-32",
      "16 TPU v4 chips on 4 hosts of 4 (multi-host)",
      chip_config_name="megacore",
      chips_per_host_bounds=(2, 2, 1),
    ),
    _tpu(
      "v5p-8",
      "tpu_v5p",
      4,
      1,
      "v5:2x2x1",
      "v5p-8",
      "4 TPU v5p chips (megacore devices), one host",
      chip_config_name="megacore",
    ),
    _tpu("v3-8", "tpu_v3", 8, 1, "v3:2x2", "v3-8", "4 TPU v3 chips = 8 TensorCore devices, one host"),
    _tpu("v2-8", "tpu_v2", 8, 1, "v2:2x2", "v2-8", "4 TPU v2 chips = 8 TensorCore devices, one host (Colab's old TPU)"),
    _gpu("h100", "h100_sxm", "h100_sxm.txtpb", "one NVIDIA H100 SXM 80GB"),
    _gpu("a100-80gb", "a100_80gb", "a100_sxm_80.txtpb", "one NVIDIA A100 SXM 80GB"),
    _gpu("a100-40gb", "a100_40gb", "a100_sxm_40.txtpb", "one NVIDIA A100 SXM 40GB"),
  ]
}


def get(name: str) -> Target:
  try:
    return TARGETS[name]
  except KeyError:
    raise TargetError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}") from None


def gpu_memory_fraction() -> float:
  """The share of GPU memory JAX's allocator takes: ``XLA_PYTHON_CLIENT_MEM_FRACTION``, 0.75 by default."""
  value = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "")
  try:
    return float(value) if value else 0.75
  except ValueError:
    raise TargetError(f"XLA_PYTHON_CLIENT_MEM_FRACTION={value!r} is not a number") from None


def gpu_config_text(config_file: str) -> str:
  with open(os.path.join(GPU_TARGETS_DIR, config_file)) as f:
    return f.read()


def gpu_device_memory(config_file: str) -> int:
  """``device_memory_size`` of a GPU target config: the bytes the device reports."""
  return int(re.search(r"device_memory_size:\s*(\d+)", gpu_config_text(config_file)).group(1))


# libtpu looks for the TPU it runs on (the GCE metadata server, the worker hostnames) when its plugin starts,
# and prints warnings when there is none. The values a one-host TPU VM would have keep it quiet; they change
# nothing in what it compiles for a topology it is given (checked: the same program whatever the type set).
# libtpu also takes /tmp/libtpu_lockfile, so that one process at a time drives a machine's TPU: compiling drives
# none, and two compilations (or one beside a training run on a TPU VM) may load it together.
_LIBTPU_ENV = {
  "TPU_SKIP_MDS_QUERY": "1",
  "TPU_WORKER_ID": "0",
  "TPU_WORKER_HOSTNAMES": "localhost",
  "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


def devices(target: Target) -> list:
  """The target's devices: compile-only ones for a TPU slice or GPU, this process's CPU devices for ``cpu``.

  Raises ``TargetError`` when the compiler for the target is not installed (libtpu, the CUDA plugin).
  """
  import jax

  if target.platform == "cpu":
    return jax.devices("cpu")
  from jax.experimental import topologies

  if target.platform == "tpu":
    import importlib.util

    if importlib.util.find_spec("libtpu") is None:
      raise TargetError(f'target {target.name} needs libtpu: pip install "jaxcse[tpu]" (or "jaxcse[aot]")')
    for key, value in {**_LIBTPU_ENV, "TPU_ACCELERATOR_TYPE": target.accelerator_type}.items():
      os.environ.setdefault(key, value)
    name, kwargs = target.topology
    found = topologies.get_topology_desc(topology_name=name, platform="tpu", **kwargs).devices
  else:
    _require_gpu_compiler(target)
    try:
      found = topologies.get_topology_desc(
        platform="cuda", topology_name="1x1x1", topology="1x1x1", target_config=gpu_config_text(target.gpu_config)
      ).devices
    except NotImplementedError:  # No CUDA plugin registered a topology factory.
      raise TargetError(
        f"target {target.name} needs jax's CUDA plugin: jaxcse-compile --install_gpu_compiler "
        f"(once; into {gpu_compiler_dir()}, seen by jaxcse-compile only)"
      ) from None
  if len(found) != target.num_devices:
    raise TargetError(f"target {target.name}: the compiler gave {len(found)} devices, not {target.num_devices}")
  return list(found)


def jaxlib_too_old_for_gpus() -> str | None:
  """The installed jaxlib's version when it is below ``GPU_COMPILE_MIN_JAXLIB``, else None."""
  import importlib.metadata

  from packaging.version import Version

  installed = importlib.metadata.version("jaxlib")
  return installed if Version(installed) < Version(GPU_COMPILE_MIN_JAXLIB) else None


def _require_gpu_compiler(target: Target) -> None:
  """One line instead of XLA's proto parse error (or the CUDA plugin's start-up traceback) with an older jaxlib."""
  installed = jaxlib_too_old_for_gpus()
  if installed:
    raise TargetError(
      f"target {target.name}: compiling for a GPU without one needs jax and jaxlib >= "
      f"{GPU_COMPILE_MIN_JAXLIB} (installed: jaxlib {installed}, whose XLA cannot read "
      f"gpu_targets/{os.path.basename(target.gpu_config)}); TPU targets work with this jaxlib"
    )


def gpu_compiler_dir() -> str:
  """Where ``jaxcse-compile --install_gpu_compiler`` puts jax's CUDA plugin for the installed jaxlib."""
  import importlib.metadata

  default = os.path.join("~", ".cache", "jaxcse", "gpu-compiler", f"jaxlib-{importlib.metadata.version('jaxlib')}")
  return os.path.expanduser(os.environ.get("JAXCSE_GPU_COMPILER_DIR") or default)


def use_gpu_compiler() -> bool:
  """Lets this process (jaxcse-compile's, before it imports jax) find the CUDA plugin installed for compiling.

  The plugin lives outside site-packages on purpose: jax starts every plugin it finds in every program, and on a
  machine without a GPU the CUDA plugin's start prints lines of errors. Out of the way, only jaxcse-compile (which
  calls this) and programs that call this see it. Returns whether the folder was added to ``sys.path``.
  """
  import sys

  folder = gpu_compiler_dir()
  if not os.path.isdir(os.path.join(folder, "jax_plugins")) or folder in sys.path:
    return False
  sys.path.insert(0, folder)  # jax_plugins is a namespace package: its path now includes the folder's.
  return True


def install_gpu_compiler(run=None) -> str:
  """Installs jax's CUDA plugin matching the installed jaxlib (no NVIDIA libraries) into ``gpu_compiler_dir()``.

  ptxas, which compiling for a GPU also needs, comes with the ``aot`` extra (nvidia-cuda-nvcc-cu12: executables
  only, nothing that other programs load). Returns the folder. Raises ``TargetError`` when this jaxlib cannot
  compile for GPUs or pip fails.
  """
  import importlib.metadata
  import subprocess
  import sys

  jaxlib = importlib.metadata.version("jaxlib")
  if jaxlib_too_old_for_gpus():
    raise TargetError(
      f"compiling for GPUs without one needs jax and jaxlib >= {GPU_COMPILE_MIN_JAXLIB} "
      f"(installed: jaxlib {jaxlib}); TPU targets work with this jaxlib"
    )
  folder = gpu_compiler_dir()
  command = [
    sys.executable,
    "-m",
    "pip",
    "install",
    "--quiet",
    "--no-deps",
    "--upgrade",
    "--target",
    folder,
    f"jax-cuda12-plugin=={jaxlib}",
    f"jax-cuda12-pjrt=={jaxlib}",
  ]
  result = (run or subprocess.run)(command, capture_output=True, text=True)
  if result.returncode != 0:
    last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
    raise TargetError(f"installing jax's CUDA plugin {jaxlib} into {folder} failed: {last}")
  return folder
