r"""Benchmarks of jaxcse against the PyTorch originals, each measured in one run.

  python -m benchmarks.bench train    [--shape tiny|minilm|base] [--batch_size 64] [--max_seq_len 32] [--profile]
  python -m benchmarks.bench train    --find_max_batch [--shape base] [--max_batch_cap N] [--grad_cache_chunk C]
  python -m benchmarks.bench pretrain [--shape mini] [--batch_size 128] [--max_seq_len 128] [--dtype D]
  python -m benchmarks.bench encode   [--model all-MiniLM-L6-v2] [--input FILE] [--limit 2048] [--batch_size 64]
  python -m benchmarks.bench evaluate [--model all-MiniLM-L6-v2] [--tasks sts] --senteval_dir /path/to/SimCSE

Every benchmark runs jaxcse and its baseline in the same process, on the same
device, inputs and threads, excludes warm-up (compilation, first calls) from
the timings, and prints as its last line ``<name>: <x.xx>x``: baseline time
over jaxcse time, so above 1 means jaxcse is faster.

Like for like on a CPU: ``--threads N`` (default 1 on a machine without
accelerators) pins the whole process to N cores before jax starts, so XLA's
thread pool and torch (``torch.set_num_threads``) both get N threads on the same
cores; ``--threads 0`` leaves both to their defaults. The train and pretrain
benchmarks print CPU seconds per step beside wall time, and every benchmark
prints the load average and a warning when it exceeds the machine's cores (then
compare CPU seconds: wall time measures the queue).

The PyTorch side takes its fastest usual form for the device jax runs on
(``baselines.choose_torch_setup``): on a GPU, CUDA with automatic mixed
precision (bfloat16 autocast, or float16 with a GradScaler where the GPU has no
bfloat16, as SimCSE's ``--fp16``), fused AdamW, and ``torch.compile`` as a
second baseline (a compilation failure is reported and that side left out); on
a CPU, float32 eager. jaxcse computes in ``--dtype``: bfloat16 on a GPU/TPU,
float32 on a CPU by default (params and optimizer state stay float32). On a TPU,
which torch cannot use, jaxcse runs alone and the last line says so.

- ``train``: jaxcse's jitted train step (``train_step.make_train_step`` with the
  AdamW of ``train_step.make_optimizer``, SimCSE unsup config) against a PyTorch
  step in SimCSE's formulation: one ``BertModel`` forward over the stacked
  ``[2 * batch, len]`` views, [CLS] + MLP pooler, InfoNCE at temperature 0.05,
  gradient clipping at 1, AdamW with a linear schedule; both on randomly
  initialised weights of the shape. Prints s/step, sentences/s, model FLOPs
  utilisation against the device's dense bfloat16 peak (``known_peak``; on a
  CPU or an unknown device, a matmul peak measured in the same run) and each
  side's peak device memory. ``--find_max_batch`` instead finds the largest
  batch each side fits (jaxcse with and without GradCache and gradient
  checkpointing, PyTorch with and without gradient checkpointing).
- ``pretrain``: the same for an MLM pretraining step (tokens/s).
- ``encode``: ``embedder.BucketedEmbedder`` against sentence-transformers' ``encode``,
  same model, sentences and batch size; sentences per second.
- ``evaluate``: ``evaluate.evaluate_sts`` against SentEval driven as SimCSE's
  ``evaluation.py`` drives it (its batcher: a PyTorch ``AutoModel``, padding
  to the longest sentence of a batch, the same pooler), same model.

The benchmarks live beside their baselines (PyTorch, sentence-transformers,
SentEval: ``benchmarks/baselines.py``), outside the package, as flax and
MaxText keep theirs: run them from the root of a checkout with the ``torch``
extra installed (``pip install -e ".[torch]"``). The library never imports
this folder; the baselines are imported only when one runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import data as data_lib, evaluate, models
from jaxcse.inference import embedder as embedder_lib
from jaxcse.core import errors, platforms
from jaxcse.storage import hub
from jaxcse.training import objectives
from jaxcse.evaluation import sts_data
from jaxcse.training import train_step, views


def _baselines():
  """``benchmarks.baselines`` (torch, sentence-transformers, SentEval), imported only when a baseline runs."""
  try:
    from benchmarks import baselines
  except ImportError as e:
    raise SystemExit(f'error: the baselines need torch: pip install -e ".[torch]" ({e})') from None
  return baselines


@dataclasses.dataclass(frozen=True)
class Shape:
  """A BERT shape for the train benchmark."""

  layers: int
  hidden: int
  heads: int
  intermediate: int
  vocab: int = 30522

  def bert_config(self, dropout: float = 0.1):
    from transformers import BertConfig

    return BertConfig(
      vocab_size=self.vocab,
      hidden_size=self.hidden,
      num_hidden_layers=self.layers,
      num_attention_heads=self.heads,
      intermediate_size=self.intermediate,
      max_position_embeddings=512,
      hidden_dropout_prob=dropout,
      attention_probs_dropout_prob=dropout,
    )


SHAPES = {
  "tiny": Shape(layers=2, hidden=64, heads=2, intermediate=256, vocab=2000),
  "mini": Shape(layers=4, hidden=256, heads=4, intermediate=1024, vocab=8192),  # configs/pretrain_mlm.py
  "minilm": Shape(layers=6, hidden=384, heads=12, intermediate=1536),  # all-MiniLM-L6-v2
  "base": Shape(layers=12, hidden=768, heads=12, intermediate=3072),  # bert-base-uncased
}


def ratio_line(name: str, baseline_seconds: float, jaxcse_seconds: float) -> str:
  """The benchmark's last line: baseline time over jaxcse time (above 1 = jaxcse faster)."""
  return f"{name}: {baseline_seconds / jaxcse_seconds:.2f}x"


_MEMORY_ENV = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def load_warning(load: float, cores: int) -> str | None:
  """A warning when the 1-minute load average exceeds the machine's cores: wall times then measure the queue."""
  if load <= cores:
    return None
  return (
    f"warning: load average {load:.2f} exceeds this machine's {cores} cores: other processes share them, so "
    "wall times are inflated unevenly; compare the CPU seconds per step"
  )


def machine_line() -> str:
  """Load, cores and pinning next to every measurement (and a warning line when the load exceeds the cores)."""
  load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
  device = jax.devices()[0]
  memory = "".join(f", {k}={os.environ[k]}" for k in _MEMORY_ENV if k in os.environ)
  cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  cpuinfo = platforms.read_cpuinfo()
  model = next((line.partition(":")[2].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
  line = (
    f"machine: {os.cpu_count()} cpus{f' {model}' if model else ''} (kind {platforms.cpu_kind(cpuinfo)}; this "
    f"process on {cpus}), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, jax {jax.__version__} on "
    f"{device.platform} ({device.device_kind}), CPU dots {platforms.cpu_dot_path()}, "
    f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}{memory}"
  )
  warning = load_warning(load[0], os.cpu_count() or 1)
  return f"{line}\n{warning}" if warning else line


def pin_threads(threads: int) -> tuple[list[int], Callable[[], None]]:
  """Pins every thread of this process, and so every thread started later, to the first ``threads`` CPUs it may use.

  Returns the CPUs and a function that restores each thread's former affinity. XLA:CPU sizes its thread pool by
  the CPUs the process may use when jax's CPU client starts, so pinning before it starts gives jax the same thread
  count as ``torch.set_num_threads(threads)`` gives torch; a client already started keeps its pool (then only the
  cores are shared). Linux only (``/proc/self/task``); elsewhere only the calling thread is pinned.
  """
  allowed = sorted(os.sched_getaffinity(0))
  if not 1 <= threads <= len(allowed):
    raise errors.JaxcseError(f"--threads {threads}: this process may use {len(allowed)} CPUs ({allowed})")
  cpus = set(allowed[:threads])
  tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
  before = {}
  for tid in tids:
    try:
      before[tid] = os.sched_getaffinity(tid)
      os.sched_setaffinity(tid, cpus)
    except OSError:  # The thread ended meanwhile.
      before.pop(tid, None)

  def restore():
    for tid, mask in before.items():
      try:
        os.sched_setaffinity(tid, mask)
      except OSError:
        pass

  return sorted(cpus), restore


def process_cpu_seconds() -> float:
  """User + system CPU seconds of this process, every thread (jax's and torch's pools included)."""
  return time.process_time()


def default_dtype(platform: str) -> str:
  """jaxcse's compute dtype for a backend: bfloat16 where the hardware has bfloat16 matmul units (GPU, TPU).

  A CPU without them (this project's CI machines) would only emulate bfloat16, slower than float32.
  """
  return "bfloat16" if platform in ("gpu", "tpu") else "float32"


def time_interleaved(
  fns: dict[str, Callable[[], None]], *, rounds: int, repeats: int, cpu: dict[str, list[float]] | None = None
) -> dict[str, list[float]]:
  """Seconds per call of each function, alternating between them every ``repeats`` calls.

  Interleaving spreads load from other processes over every side instead of
  letting it land on whichever ran during a busy spell. ``cpu``, if given, gets each call's CPU seconds (the
  process's, all threads), which load from other processes inflates far less than wall time.
  """
  times = {name: [] for name in fns}
  for r in range(rounds):
    names = list(fns) if r % 2 == 0 else list(reversed(fns))
    for name in names:
      for _ in range(repeats):
        c0, t0 = process_cpu_seconds(), time.perf_counter()
        fns[name]()
        times[name].append(time.perf_counter() - t0)
        if cpu is not None:
          cpu.setdefault(name, []).append(process_cpu_seconds() - c0)
  return times


# --------------------------------------------------------------------------
# Device peaks, MFU and memory.

# Dense (no sparsity) bfloat16 tensor-core peaks in FLOP/s from the vendors' datasheets, by jax's device_kind.
# The V100 has no bfloat16: its float16 peak. H100/H200 NVL boards run at other clocks and are left to the
# measured peak rather than guessed.
KNOWN_PEAKS = {
  "H100 SXM": 989e12,
  "H100 PCIe": 756e12,
  "H200": 989e12,
  "A100": 312e12,
  "L4": 121e12,
  "A10G": 70e12,
  "V100 (float16)": 125e12,
  "TPU v4": 275e12,
  "TPU v5e": 197e12,
  "TPU v5p": 459e12,
  "TPU v6e": 918e12,
}


def known_peak(device_kind: str) -> tuple[str, float] | None:
  """``(name, dense bfloat16 FLOP/s)`` of a ``jax.devices()[0].device_kind`` in ``KNOWN_PEAKS``, else None.

  Matches on the kind's lower-cased alphanumeric words, not substrings, so that "NVIDIA L40S" is not an L4 nor
  "NVIDIA A100" an A10G: "NVIDIA H100 80GB HBM3" is the H100 SXM, "NVIDIA H100 PCIe" the PCIe card; TPUs
  report "TPU v4", "TPU v5 lite" (v5e), "TPU v5" (v5p), "TPU v6 lite" (v6e).
  """
  words = set(re.findall(r"[a-z0-9]+", device_kind.lower()))
  if "tpu" in words:
    if "v4" in words:
      name = "TPU v4"
    elif "v5e" in words or "v5litepod" in words or {"v5", "lite"} <= words:
      name = "TPU v5e"
    elif "v5p" in words or "v5" in words:
      name = "TPU v5p"
    elif "v6e" in words or {"v6", "lite"} <= words:
      name = "TPU v6e"
    else:
      return None
    return name, KNOWN_PEAKS[name]
  if "nvl" in words:
    return None
  name = None
  if "h200" in words:
    name = "H200"
  elif "h100" in words:
    name = "H100 PCIe" if "pcie" in words else "H100 SXM"
  elif "a100" in words:
    name = "A100"
  elif "l4" in words:
    name = "L4"
  elif "a10g" in words:
    name = "A10G"
  elif "v100" in words:
    name = "V100 (float16)"
  return (name, KNOWN_PEAKS[name]) if name else None


def mfu(flops_per_step: float, seconds_per_step: float, peak_flops: float) -> float:
  """Model FLOPs utilisation: the model FLOPs a second achieved, as a fraction of the device's peak."""
  return flops_per_step / seconds_per_step / peak_flops


def matmul_peak_flops(n: int = 2048, repeats: int = 10, dtype: Any = jnp.float32) -> float:
  """Best FLOP/s of an ``[n, n] @ [n, n]`` jitted jnp matmul in ``dtype`` (the machine's practical peak)."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  matmul = jax.jit(jnp.matmul)
  matmul(a, b).block_until_ready()
  clock = _peak_clock()
  best = float("inf")
  for _ in range(repeats):
    t0 = clock()
    matmul(a, b).block_until_ready()
    best = min(best, clock() - t0)
  return 2 * n**3 / best


def _peak_clock() -> Callable[[], float]:
  """The clock a matmul peak is timed by: the process's CPU seconds on a CPU (wall time there counts the other
  processes that share the cores), else wall time."""
  return time.process_time if jax.devices()[0].platform == "cpu" else time.perf_counter


def torch_matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
  """``matmul_peak_flops`` of PyTorch's float32 matmul on the CPU (by CPU seconds), with its current thread count."""
  import torch

  a, b = torch.randn(n, n), torch.randn(n, n)
  torch.matmul(a, b)
  best = float("inf")
  for _ in range(repeats):
    t0 = time.process_time()
    torch.matmul(a, b)
    best = min(best, time.process_time() - t0)
  return 2 * n**3 / best


def device_peak(args, dtype_name: str) -> tuple[float, str]:
  """The peak MFU is measured against, and how to name it: the device's known dense bfloat16 peak, else measured.

  Measures the matmul peak in every case (and prints it), so a run on a known device also shows how close a
  plain matmul comes to the datasheet.
  """
  device = jax.devices()[0]
  size = args.peak_size or (2048 if device.platform == "cpu" else 8192)
  measured = matmul_peak_flops(size, dtype=DTYPES[dtype_name])
  print(
    f"peak: {dtype_name} {size}x{size} jnp matmul {format_flops(measured)} (measured{', per CPU second' * (device.platform == 'cpu')})"
  )
  if device.platform == "cpu" and dtype_name == "float32":
    # The two sides' matmul kernels differ on a CPU (XLA's Eigen against PyTorch's oneDNN/MKL): their ratio bounds
    # what the model's steps, mostly matmuls, can reach against each other.
    theirs = torch_matmul_peak_flops(size)
    print(
      f"peak: float32 {size}x{size} torch matmul {format_flops(theirs)} (measured, per CPU second); jnp's is "
      f"{measured / theirs:.2f}x torch's"
    )
  known = known_peak(device.device_kind) if device.platform != "cpu" else None
  if known:
    return known[1], f"the {known[0]} dense bfloat16 peak {known[1] / 1e12:.0f} TFLOP/s"
  return measured, f"the measured {dtype_name} matmul peak {format_flops(measured)}"


def jax_peak_bytes() -> int | None:
  """jax's peak device memory in this process (``peak_bytes_in_use``); None where the backend keeps no stats (CPU)."""
  stats = jax.devices()[0].memory_stats()
  return stats.get("peak_bytes_in_use") if stats else None


def format_bytes(n: int | None) -> str:
  return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def format_flops(flops_per_second: float) -> str:
  """TFLOP/s on accelerators, GFLOP/s below one TFLOP/s (CPUs), three significant digits either way."""
  if flops_per_second >= 1e12:
    return f"{flops_per_second / 1e12:.1f} TFLOP/s"
  return f"{flops_per_second / 1e9:.3g} GFLOP/s"


class Side(NamedTuple):
  """One side of a timed benchmark: run one step, its last loss, release its memory, its peak device bytes."""

  run: Callable[[], None]
  loss: Callable[[], float]
  release: Callable[[], None]
  peak_bytes: Callable[[], int | None]


DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def train_step_flops(shape: Shape, rows: int, length: int) -> float:
  """Model FLOPs of one SimCSE train step: 3x the forward matmuls over ``rows`` padded sequences.

  Counts the dense layers (QKV, attention output, the two FFN matmuls), the
  attention scores and their weighted sum, and the MLP head; the backward pass
  is twice the forward. Embedding lookups, softmax, LayerNorm and the
  optimizer are not model FLOPs (the usual MFU convention).
  """
  h, i, t = shape.hidden, shape.intermediate, rows * length
  dense = 2 * t * (4 * h * h + 2 * h * i)
  attention = 2 * 2 * rows * length * length * h
  head = 2 * rows * h * h
  return 3 * (shape.layers * (dense + attention) + head)


# --------------------------------------------------------------------------
# Train step.


def random_batch(shape: Shape, batch_size: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """int32 ``(input_ids, attention_mask)``, each ``[batch, length]``: [CLS] words [SEP], lengths 8..length."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(min(8, length), length + 1, size=batch_size)
  ids = rng.integers(1000 if shape.vocab > 2000 else 3, shape.vocab, size=(batch_size, length)).astype(np.int32)
  mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
  ids[:, 0] = 101 if shape.vocab > 102 else 1
  ids[np.arange(batch_size), lengths - 1] = 102 if shape.vocab > 102 else 2
  ids = np.where(mask == 1, ids, 0).astype(np.int32)
  return ids, mask


def repo_config(name: str, steps: int):
  """The config ``jaxcse.configs.<name>`` set to ``steps`` steps."""
  import importlib

  config = importlib.import_module(f"jaxcse.configs.{name}").get_config()
  config.train.max_steps = steps
  return config


def simcse_config(steps: int):
  """``configs/base.py`` (unsupervised SimCSE, batch 64, lr 3e-5, temperature 0.05) set to ``steps`` steps."""
  return repo_config("base", steps)


def jaxcse_train_step(
  shape: Shape,
  ids: np.ndarray,
  mask: np.ndarray,
  *,
  steps: int,
  dtype=jnp.float32,
  grad_cache_chunk: int = 0,
  gradient_checkpointing: bool = False,
  attention_dropout_per_element: bool = True,
  packed: bool = False,
) -> Side:
  """jaxcse's real step on a fresh random model (``config.train.grad_cache_chunk``, ``model.gradient_checkpointing``,
  ``model.attention_dropout_per_element``, ``train.packed`` as given); params and optimizer state float32 whatever
  ``dtype`` computes in. Packed, the batch's real tokens are laid out in rows as the training loop lays them
  (``views.PackedViews``), on the host before the timed steps: the loop does it while the device runs."""
  spec = models.build_spec(
    shape.bert_config(),
    None,
    models.PoolerSpec("cls", mlp_only_train=True),
    dtype=dtype,
    gradient_checkpointing=gradient_checkpointing,
    attention_dropout_per_element=attention_dropout_per_element,
  )
  params = models.init_params(spec, seed=0)
  config = simcse_config(steps)
  config.train.grad_cache_chunk = grad_cache_chunk
  config.model.gradient_checkpointing = gradient_checkpointing
  config.train.packed = packed
  tx = train_step.make_optimizer(config.train, steps)
  step_fn = jax.jit(train_step.make_train_step(config, spec, tx), donate_argnums=0)
  state = {
    "state": train_step.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)),
    "loss": None,
  }
  host_batch = {"input_ids": ids[:, None], "attention_mask": mask[:, None]}
  if packed:
    host_batch["packed"] = views.PackedViews.for_batches(*host_batch["input_ids"].shape, pad_id=0).lay_out(host_batch)
  batch = jax.device_put(host_batch)

  def run():
    state["state"], metrics = step_fn(state["state"], batch)
    state["loss"] = metrics["loss"]
    state["loss"].block_until_ready()

  return Side(run, lambda: float(state["loss"]), state.clear, jax_peak_bytes)


def profile_train_step(shape: Shape, ids: np.ndarray, mask: np.ndarray, repeats: int, dtype=jnp.float32) -> None:
  """Times the parts of jaxcse's step (forward, forward+backward, whole step) and prints XLA's cost analysis."""
  spec = models.build_spec(shape.bert_config(), None, models.PoolerSpec("cls", mlp_only_train=True), dtype=dtype)
  params = models.init_params(spec, seed=0)
  config = simcse_config(10)
  batch = {"input_ids": jnp.asarray(ids[:, None]), "attention_mask": jnp.asarray(mask[:, None])}
  module = spec.module_for(spec.pooling.pooler)
  rng = jax.random.key(0)
  objective = objectives.get(config.method)

  def loss_fn(p):
    return objective.loss(objective.settings(config), train_step.embed_views(module, p, batch, rng), rng, None)[0]

  parts = {
    "forward (train mode)": jax.jit(loss_fn),
    "forward+backward": jax.jit(jax.value_and_grad(loss_fn)),
  }
  for name, fn in parts.items():
    compiled = fn.lower(params).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    jax.block_until_ready(fn(params))
    times = []
    for _ in range(repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(params))
      times.append(time.perf_counter() - t0)
    print(
      f"profile: {name}: {statistics.median(times):.3f} s, XLA flops {cost.get('flops', float('nan')) / 1e9:.1f} G,"
      f" bytes accessed {cost.get('bytes accessed', float('nan')) / 1e9:.2f} GB"
    )


# --------------------------------------------------------------------------
# Running the sides.


def torch_plan(args, platform: str):
  """``(TorchSetup, the line the benchmark prints of torch)`` for jax's ``platform``; torch is not imported on a TPU."""
  baselines = _baselines()
  setup = baselines.torch_setup(platform)
  if setup.device is None:
    return setup, setup.describe()
  return setup, f"{baselines.set_threads(args.threads)}, {setup.describe()}"


def torch_builders(args, setup, make: Callable[..., tuple]) -> dict[str, Callable[[], Side]]:
  """The PyTorch sides ``make(compile=...)`` builds: eager, and through ``torch.compile`` if ``--torch_compile``
  asks (``auto``: on CUDA, where users compile; on a CPU it needs a C++ toolchain and minutes per shape)."""
  if setup.device is None:
    return {}
  builders = {"pytorch": lambda: Side(*make(compile=False))}
  if args.torch_compile == "on" or (args.torch_compile == "auto" and setup.device == "cuda"):
    builders["pytorch+compile"] = lambda: Side(*make(compile=True))
  return builders


def one_line(error: BaseException) -> str:
  """``Type: first line of the message``, for a failure reported rather than raised."""
  text = str(error).strip()
  return f"{type(error).__name__}: {text.splitlines()[0][:300] if text else ''}"


OPTIONAL_SIDES = ("pytorch+compile",)


def run_sides(builders: dict[str, Callable[[], Side]], warmup: int) -> tuple[dict[str, Side], dict[str, int | None]]:
  """Builds and warms up each side in turn: ``(sides, peak device bytes of each)``.

  One side at a time, so each peak is read before the next side allocates. A side in ``OPTIONAL_SIDES``
  (``torch.compile``, which fails on some shapes and versions) that fails is reported in one line and left out;
  any other failure is an error.
  """
  sides, peaks = {}, {}
  for name, build in builders.items():
    try:
      side = build()
      for _ in range(warmup):
        side.run()
    except Exception as e:  # noqa: BLE001 - only optional sides are caught, see below.
      if name not in OPTIONAL_SIDES:
        raise
      print(f"{name}: failed, left out: {one_line(e)}")
      side = None
      gc.collect()
      continue
    peaks[name] = side.peak_bytes()
    print(f"warm-up: {name} loss after {warmup} steps {side.loss():.4f}")
    sides[name] = side
  return sides, peaks


def report(
  times: dict[str, list[float]],
  flops: dict[str, float],
  units: tuple[int, str],
  peak: float,
  peak_label: str,
  peaks: dict[str, int | None],
  cpu: dict[str, list[float]] | None = None,
) -> dict[str, float]:
  """Prints each side's s/step, CPU s/step, throughput, MFU and peak memory; returns the median seconds per step."""
  count, unit = units
  medians = {}
  for name, ts in times.items():
    medians[name] = t = statistics.median(ts)
    cpu_s = f", CPU {statistics.median(cpu[name]):.4f} s/step" if cpu and cpu.get(name) else ""
    # On a CPU the peak is per CPU second (``_peak_clock``): so is the MFU, which then holds under load too.
    t_mfu = statistics.median(cpu[name]) if cpu and cpu.get(name) and _peak_clock() is time.process_time else t
    print(
      f"{name}: {t:.4f} s/step (median of {len(ts)}; min {min(ts):.4f}){cpu_s}, {count / t:.1f} {unit}/s, "
      f"{flops[name] / 1e9:.1f} GFLOP/step, {format_flops(flops[name] / t_mfu)}, "
      f"MFU {mfu(flops[name], t_mfu, peak) * 100:.1f}% of {peak_label}, peak memory {format_bytes(peaks[name])}"
    )
  return medians


def final_line(name: str, medians: dict[str, float], setup, cpu: dict[str, list[float]] | None = None) -> str:
  """The ratio against eager PyTorch (its usual form), after the one against ``torch.compile`` when it ran, and
  after the ratio of median CPU seconds (``cpu``), which load from other processes distorts less than wall time."""
  if "pytorch" not in medians:
    return f"{name}: n/a ({setup.describe() if setup.device is None else 'the PyTorch side did not run'})"
  if "pytorch+compile" in medians:
    print(f"vs pytorch+compile: {medians['pytorch+compile'] / medians['jaxcse']:.2f}x")
  if cpu and cpu.get("pytorch") and cpu.get("jaxcse"):
    print(f"by CPU seconds: {statistics.median(cpu['pytorch']) / statistics.median(cpu['jaxcse']):.2f}x")
  return ratio_line(name, medians["pytorch"], medians["jaxcse"])


def bench_train(args) -> str:
  platform = jax.default_backend()
  dtype_name = args.dtype or default_dtype(platform)
  setup, torch_line = torch_plan(args, platform)
  shape = SHAPES[args.shape]
  print(machine_line())
  if args.find_max_batch:
    return bench_max_batch(args, shape, dtype_name, setup, torch_line)
  ids, mask = random_batch(shape, args.batch_size, args.max_seq_len)
  print(
    f"train: shape {args.shape} {shape}, batch {args.batch_size} (x2 views), length {args.max_seq_len}, "
    f"jaxcse computes in {dtype_name} (params float32); {torch_line}"
  )
  if args.profile:
    profile_train_step(shape, ids, mask, args.repeats, DTYPES[dtype_name])
  steps = args.warmup + args.rounds * args.repeats
  builders = {"jaxcse": lambda: jaxcse_train_step(shape, ids, mask, steps=steps, dtype=DTYPES[dtype_name])}
  if args.packed_side:  # The same batch's real tokens packed into rows (train.packed), timed in the same rounds.
    layout = views.PackedViews.for_batches(args.batch_size, 1, args.max_seq_len, pad_id=0)
    rows = layout.lay_out({"input_ids": ids[:, None], "attention_mask": mask[:, None]})["input_ids"].shape
    print(
      f"packed side: {2 * int(mask.sum())} real tokens of {2 * mask.size} padded ({mask.mean():.0%}) in "
      f"{rows[0]} rows of {rows[1]}"
    )
    builders["jaxcse packed"] = lambda: jaxcse_train_step(
      shape, ids, mask, steps=steps, dtype=DTYPES[dtype_name], packed=True
    )
  if args.shared_mask_side:  # The old default's attention dropout, timed in the same rounds: the mask's cost.
    builders["jaxcse shared mask"] = lambda: jaxcse_train_step(
      shape, ids, mask, steps=steps, dtype=DTYPES[dtype_name], attention_dropout_per_element=False
    )
  builders.update(
    torch_builders(
      args,
      setup,
      lambda compile: _baselines().torch_train_step(shape, ids, mask, steps=steps, setup=setup, compile=compile),
    )
  )
  sides, peaks = run_sides(builders, args.warmup)
  cpu = {}
  times = time_interleaved(
    {name: side.run for name, side in sides.items()}, rounds=args.rounds, repeats=args.repeats, cpu=cpu
  )
  peak, peak_label = device_peak(args, dtype_name)  # Its matmul arrays must not count in jaxcse's peak memory.
  flops = train_step_flops(shape, 2 * args.batch_size, args.max_seq_len)
  computed = dict.fromkeys(sides, flops)
  if "jaxcse packed" in sides:  # What the packed step computes: its rows, not the padded batch.
    computed["jaxcse packed"] = train_step_flops(shape, *rows)
  medians = report(times, computed, (args.batch_size, "sentences"), peak, peak_label, peaks, cpu)
  for side in sides.values():
    side.release()
  print(f"model FLOPs per step: {flops / 1e9:.1f} G; {machine_line()}")
  if "jaxcse packed" in medians:
    by_cpu = (
      f", by CPU seconds {statistics.median(cpu['jaxcse']) / statistics.median(cpu['jaxcse packed']):.3f}x"
      if cpu.get("jaxcse") and cpu.get("jaxcse packed")
      else ""
    )
    print(f"packed over padded: {medians['jaxcse'] / medians['jaxcse packed']:.3f}x the speed per step{by_cpu}")
  if "jaxcse shared mask" in medians:
    by_cpu = (
      f", by CPU seconds {statistics.median(cpu['jaxcse']) / statistics.median(cpu['jaxcse shared mask']):.3f}x"
      if cpu.get("jaxcse") and cpu.get("jaxcse shared mask")
      else ""
    )
    print(
      "per-element attention dropout (the default) against the shared mask: "
      f"{medians['jaxcse'] / medians['jaxcse shared mask']:.3f}x the time per step{by_cpu}"
    )
  return final_line(f"train_{args.shape}", medians, setup, cpu)


# --------------------------------------------------------------------------
# Largest batch that fits.


def is_out_of_memory(error: BaseException) -> bool:
  """Whether an exception is a device running out of memory: XLA's RESOURCE_EXHAUSTED, torch's OutOfMemoryError."""
  if isinstance(error, MemoryError):
    return True
  text = f"{type(error).__name__}: {error}".lower()
  return any(s in text for s in ("resource_exhausted", "out of memory", "outofmemoryerror"))


def fits_in_memory(
  build: Callable[[int], Side], batch: int, *, steps: int = 2, free: Callable[[], None] = gc.collect
) -> bool:
  """Whether ``steps`` steps of ``build(batch)`` run: False on an out-of-memory error, other errors propagate.

  Two steps, because the first one allocates what the optimizer keeps (PyTorch's Adam moments appear there) and
  the second runs with all of it resident. The side is released and ``free`` called either way, so the next
  probe starts from an empty device.
  """
  side = None
  try:
    side = build(batch)
    for _ in range(steps):
      side.run()
    return True
  except Exception as e:  # noqa: BLE001 - re-raised unless it is an out-of-memory error.
    if not is_out_of_memory(e):
      raise
    return False
  finally:
    if side is not None:
      side.release()
    side = None
    free()


@dataclasses.dataclass(frozen=True)
class MaxBatch:
  """The result of ``find_max_batch``: the largest batch that fit (0: none) and the smallest that did not."""

  largest: int
  failed: int | None  # None: nothing failed up to the cap.
  probes: tuple[tuple[int, bool], ...]

  def describe(self) -> str:
    if self.failed is None:
      return f">= {self.largest} (the cap: every batch tried fit; {len(self.probes)} probes)"
    return f"{self.largest} ({self.failed} ran out of memory; {len(self.probes)} probes)"


def find_max_batch(fits: Callable[[int], bool], *, start: int, cap: int, granularity: int) -> MaxBatch:
  """The largest multiple of ``granularity`` up to ``cap`` that ``fits``: doubling from ``start``, then bisecting.

  Assumes that a batch fits if a larger one does (memory grows with the batch). Doubling finds a fitting batch
  and one twice its size that does not in log2(answer / start) probes; bisecting the gap to ``granularity``
  takes log2(gap / granularity) more. If ``start`` itself does not fit, the bisection runs between 0 and it.
  """
  g = granularity
  cap = cap // g * g
  if cap < g:
    raise ValueError(f"the cap {cap} is below the batch granularity {g}")
  probes = []

  def probe(batch):
    probes.append((batch, fits(batch)))
    return probes[-1][1]

  lo, hi, batch = 0, None, min(max(start // g * g, g), cap)
  while True:
    if not probe(batch):
      hi = batch
      break
    lo = batch
    if batch >= cap:
      return MaxBatch(lo, None, tuple(probes))
    batch = min(2 * batch, cap)
  while hi - lo > g:
    mid = (lo + hi) // 2 // g * g
    if probe(mid):
      lo = mid
    else:
      hi = mid
  return MaxBatch(lo, hi, tuple(probes))


# jaxcse's memory savers, (GradCache, gradient checkpointing); PyTorch's, gradient checkpointing.
JAX_MEMORY_VARIANTS = {
  "plain": (False, False),
  "GradCache": (True, False),
  "checkpointing": (False, True),
  "GradCache+checkpointing": (True, True),
}
TORCH_MEMORY_VARIANTS = {"plain": False, "checkpointing": True}


def bench_max_batch(args, shape: Shape, dtype_name: str, setup, torch_line: str) -> str:
  """Largest batch of each side and memory-saving variant; last line: jaxcse plain over PyTorch plain."""
  platform = jax.default_backend()
  chunk = args.grad_cache_chunk or args.batch_size
  cap = args.max_batch_cap or (65536 if platform != "cpu" else 4 * args.batch_size)
  g = args.batch_granularity
  length = args.max_seq_len
  print(f"find max batch: shape {args.shape} {shape}, length {length}, jaxcse computes in {dtype_name}; {torch_line}")
  print(
    f"find max batch: doubling from {args.batch_size}, then bisecting to multiples of {g} (GradCache: of its "
    f"chunk {chunk}), up to {cap}"
    + (
      " (on a CPU, memory exhaustion kills the process instead of raising: keep the cap below the host's memory)"
      if platform == "cpu"
      else ""
    )
  )
  results = {}

  def search(label, build, granularity, free):
    def fits(batch):
      t0 = time.perf_counter()
      ok = fits_in_memory(build, batch, free=free)
      print(
        f"probe: {label} batch {batch}: {'fits' if ok else 'out of memory'} ({time.perf_counter() - t0:.1f} s)",
        flush=True,
      )
      return ok

    results[label] = find_max_batch(fits, start=args.batch_size, cap=cap, granularity=granularity)
    print(f"max batch: {label}: {results[label].describe()}", flush=True)

  # PyTorch first: it hands its cached blocks back to the device afterwards (free_memory), which jax's allocator,
  # growing up to XLA_PYTHON_CLIENT_MEM_FRACTION of the device and never shrinking, would not.
  if setup.device is not None:
    baselines = _baselines()
    for name, checkpointing in TORCH_MEMORY_VARIANTS.items():
      search(
        f"pytorch {name}",
        lambda b, c=checkpointing: Side(
          *baselines.torch_train_step(
            shape, *random_batch(shape, b, length), steps=3, setup=setup, gradient_checkpointing=c
          )
        ),
        g,
        baselines.free_memory,
      )
  for name, (cached, checkpointing) in JAX_MEMORY_VARIANTS.items():
    label = f"jaxcse {name}" + (f" (chunk {chunk})" if cached else "")
    search(
      label,
      lambda b, c=cached, k=checkpointing: jaxcse_train_step(
        shape,
        *random_batch(shape, b, length),
        steps=3,
        dtype=DTYPES[dtype_name],
        grad_cache_chunk=chunk if c else 0,
        gradient_checkpointing=k,
      ),
      chunk if cached else g,
      gc.collect,
    )
  print(machine_line())
  if "pytorch plain" not in results:
    return f"max_batch_{args.shape}: n/a ({setup.describe()})"
  ours, theirs = results["jaxcse plain"].largest, results["pytorch plain"].largest
  if any(r.failed is None for r in (results["jaxcse plain"], results["pytorch plain"])):
    print("max batch: a side reached the cap, so the ratio below is a bound, not a measurement")
  # Above 1: jaxcse fits a larger batch (the same sense as the timing ratios: above 1 = jaxcse better).
  return f"max_batch_{args.shape}: {ours / theirs if theirs else float('inf'):.2f}x"


# --------------------------------------------------------------------------
# MLM pretraining step.


class _BenchTokenizer:
  """What the MLM step reads of a tokenizer, for random ids: [PAD] 0, [CLS] 1, [SEP] 2, [MASK] 3."""

  mask_token_id = 3
  all_special_ids = [0, 1, 2, 3]


def packed_batch(shape: Shape, batch_size: int, length: int, seed: int = 0) -> np.ndarray:
  """int32 ``[batch, length]`` full sequences (as packed pretraining batches are): [CLS] tokens [SEP]."""
  ids = np.random.default_rng(seed).integers(4, shape.vocab, size=(batch_size, length)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 1, 2
  return ids


def pretrain_flops(shape: Shape, rows: int, length: int, predictions: int) -> float:
  """Model FLOPs of one MLM step: 3x the forward matmuls, the output layer at ``predictions`` positions a row."""
  h, i, t = shape.hidden, shape.intermediate, rows * length
  encoder = shape.layers * (2 * t * (4 * h * h + 2 * h * i) + 2 * 2 * rows * length * length * h)
  head = 2 * rows * predictions * (h * h + h * shape.vocab)
  return 3 * (encoder + head)


def jaxcse_pretrain_step(shape: Shape, ids: np.ndarray, *, steps: int, dtype=jnp.float32, dropout: float = 0.1) -> Side:
  """jaxcse's MLM step (``configs/pretrain_mlm.py``) on a fresh model; params and optimizer state float32."""
  config = repo_config("pretrain_mlm", steps)
  config.data.max_seq_len = ids.shape[1]
  hf_config = shape.bert_config(dropout)
  spec, params = models.build_random(
    hf_config, _BenchTokenizer(), models.PoolerSpec("avg"), dtype=dtype, with_mlm_head=True
  )
  tx = train_step.make_optimizer(config.train, steps)
  step_fn = jax.jit(train_step.make_train_step(config, spec, tx), donate_argnums=0)
  state = {
    "state": train_step.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)),
    "loss": None,
  }
  batch = jax.device_put({"input_ids": ids[:, None], "attention_mask": np.ones_like(ids)[:, None]})

  def run():
    state["state"], metrics = step_fn(state["state"], batch)
    state["loss"] = metrics["loss"]
    state["loss"].block_until_ready()

  return Side(run, lambda: float(state["loss"]), state.clear, jax_peak_bytes)


def bench_pretrain(args) -> str:
  platform = jax.default_backend()
  dtype_name = args.dtype or default_dtype(platform)
  setup, torch_line = torch_plan(args, platform)
  shape = dataclasses.replace(SHAPES[args.shape], vocab=args.vocab or SHAPES[args.shape].vocab)
  ids = packed_batch(shape, args.batch_size, args.max_seq_len)
  predictions = math.ceil(0.15 * args.max_seq_len)
  tokens = args.batch_size * args.max_seq_len
  print(machine_line())
  print(
    f"pretrain: shape {args.shape} {shape}, dropout {args.dropout}, batch {args.batch_size} x length "
    f"{args.max_seq_len} ({tokens} tokens/step), jaxcse computes in {dtype_name} (params float32); {torch_line}"
  )
  steps = args.warmup + args.rounds * args.repeats
  builders = {
    "jaxcse": lambda: jaxcse_pretrain_step(shape, ids, steps=steps, dtype=DTYPES[dtype_name], dropout=args.dropout)
  }
  builders.update(
    torch_builders(
      args,
      setup,
      lambda compile: _baselines().torch_mlm_step(
        shape, ids, steps=steps, dropout=args.dropout, setup=setup, compile=compile
      ),
    )
  )
  sides, peaks = run_sides(builders, args.warmup)
  cpu = {}
  times = time_interleaved(
    {name: side.run for name, side in sides.items()}, rounds=args.rounds, repeats=args.repeats, cpu=cpu
  )
  peak, peak_label = device_peak(args, dtype_name)  # Its matmul arrays must not count in jaxcse's peak memory.
  # jaxcse computes the output layer at the masked positions, PyTorch's BertForMaskedLM at every position.
  theirs = pretrain_flops(shape, args.batch_size, args.max_seq_len, args.max_seq_len)
  flops = {name: theirs for name in sides}
  flops["jaxcse"] = pretrain_flops(shape, args.batch_size, args.max_seq_len, predictions)
  medians = report(times, flops, (tokens, "tokens"), peak, peak_label, peaks, cpu)
  for side in sides.values():
    side.release()
  print(machine_line())
  return final_line(f"pretrain_{args.shape}", medians, setup, cpu)


# --------------------------------------------------------------------------
# Encoding.


def read_sentences(path: str, limit: int) -> list[str]:
  """The first ``limit`` non-empty lines of a UTF-8 text file."""
  out = []
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        if line.strip():
          out.append(line.strip())
          if len(out) == limit:
            break
  except FileNotFoundError:
    raise data_lib.DataError(f"{path}: no such sentence file (pass --input or --data_dir)") from None
  except UnicodeDecodeError as e:
    raise data_lib.DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
  if not out:
    raise data_lib.DataError(f"{path}: no sentences")
  return out


def bench_encode(args) -> str:
  platform = jax.default_backend()
  dtype_name = args.dtype or default_dtype(platform)
  setup, torch_line = torch_plan(args, platform)
  path = hub.resolve_model_path(args.model)
  input_path = args.input or os.path.join(data_lib.data_dir(args.data_dir), "corpora", "wiki_offline.txt")
  sentences = read_sentences(input_path, args.limit)
  print(machine_line())
  spec, params = models.load_pretrained(path, models.PoolerSpec("avg"), dtype=DTYPES[dtype_name])
  max_seq_len = args.max_seq_len or None
  sides = {}
  peaks = {}
  if setup.device is not None:
    run_st, max_seq_len, st_peak = _baselines().sentence_transformers_encode(
      path, sentences, batch_size=args.batch_size, max_seq_len=max_seq_len, setup=setup
    )
    sides["sentence-transformers"] = run_st
  embedder = embedder_lib.BucketedEmbedder(spec, "avg", batch_size=args.batch_size, max_seq_len=max_seq_len)
  print(
    f"encode: {len(sentences)} sentences of {input_path}, model {args.model}, batch {args.batch_size}, "
    f"max_seq_len {embedder.max_seq_len}, jaxcse computes in {dtype_name}; {torch_line}"
  )

  def run_jaxcse():
    out = embedder(sentences, params)
    return out / np.linalg.norm(out, axis=1, keepdims=True)  # all-MiniLM-L6-v2's pipeline ends with Normalize.

  packed = embedder_lib.BucketedEmbedder(spec, "avg", batch_size=args.batch_size, max_seq_len=max_seq_len, packed=True)

  def run_jaxcse_packed():  # The same sentences packed into rows (models.packing): what packing saves, or costs.
    out = packed(sentences, params)
    return out / np.linalg.norm(out, axis=1, keepdims=True)

  ours = run_jaxcse()  # Warm-up: compiles every shape, loads every lazy module.
  peaks["jaxcse"] = jax_peak_bytes()
  in_rows = run_jaxcse_packed()
  peaks["jaxcse packed"] = jax_peak_bytes()
  print(f"agreement: max |packed - padded| over unit embeddings {np.abs(in_rows - ours).max():.2e}")
  sides = {"jaxcse": run_jaxcse, "jaxcse packed": run_jaxcse_packed, **sides}
  if "sentence-transformers" in sides:
    theirs = run_st()
    peaks["sentence-transformers"] = st_peak()
    print(f"agreement: max |jaxcse - sentence-transformers| over unit embeddings {np.abs(ours - theirs).max():.2e}")
  cpu = {}
  times = time_interleaved(sides, rounds=args.rounds, repeats=args.repeats, cpu=cpu)
  medians = {name: statistics.median(ts) for name, ts in times.items()}
  for name, t in medians.items():
    print(
      f"{name}: {len(sentences) / t:.1f} sentences/s ({t:.3f} s median of {len(times[name])}; CPU "
      f"{statistics.median(cpu[name]):.3f} s), peak memory {format_bytes(peaks[name])}"
    )
  print(machine_line())
  packed_ratio = statistics.median(cpu["jaxcse"]) / statistics.median(cpu["jaxcse packed"])
  print(f"packed over padded, by CPU seconds: {packed_ratio:.2f}x")
  if "sentence-transformers" not in medians:
    return f"encode: n/a ({setup.describe()})"
  print(f"by CPU seconds: {statistics.median(cpu['sentence-transformers']) / statistics.median(cpu['jaxcse']):.2f}x")
  return ratio_line("encode", medians["sentence-transformers"], medians["jaxcse"])


# --------------------------------------------------------------------------
# STS evaluation.


def bench_evaluate(args) -> str:
  import logging

  torch_line = _baselines().set_threads(args.threads)
  logging.getLogger().setLevel(logging.WARNING)  # SentEval logs every batch at INFO.
  root = data_lib.data_dir(args.data_dir)
  tasks = evaluate.expand_tasks(args.tasks)
  tasks = [t for t in tasks if t in sts_data.STS_TASKS]
  path = hub.resolve_model_path(args.model)
  baselines = _baselines()
  senteval_dir = baselines.senteval_checkout(args.senteval_dir)
  spec, params = models.load_pretrained(path, models.PoolerSpec(args.pooler))
  embed_with = embedder_lib.BucketedEmbedder(spec, args.pooler, batch_size=args.batch_size)

  def embedder(sentences):
    return embed_with(sentences, params)

  run_senteval = baselines.senteval_sts(senteval_dir, root, path, args.pooler, tasks, args.batch_size)
  print(machine_line())
  print(f"evaluate: tasks {tasks}, model {args.model}, pooler {args.pooler}, batch {args.batch_size}, {torch_line}")

  results = {}

  def run_jaxcse():
    results["jaxcse"] = evaluate.summarize(evaluate.evaluate_sts(embedder, root, tasks))

  def run_se():
    raw = run_senteval()
    results["senteval"] = {
      t: (raw[t]["all"]["spearman"]["all"] if t.startswith("STS1") else raw[t]["test"]["spearman"].correlation) * 100
      for t in tasks
    }

  t0 = time.perf_counter()
  run_jaxcse()  # Warm-up: compiles the length buckets.
  print(f"jaxcse cold (compilation included): {time.perf_counter() - t0:.2f} s")
  times = time_interleaved({"jaxcse": run_jaxcse, "senteval": run_se}, rounds=args.rounds, repeats=1)
  for t in tasks:
    print(f"{t}: jaxcse {results['jaxcse'][t]:.2f}  SentEval {results['senteval'][t]:.2f}")
  medians = {name: statistics.median(ts) for name, ts in times.items()}
  for name, t in medians.items():
    print(f"{name}: {t:.2f} s (median of {len(times[name])})")
  print(machine_line())
  return ratio_line("evaluate", medians["senteval"], medians["jaxcse"])


# --------------------------------------------------------------------------
# Command line.


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.bench",
    description=__doc__.split("\n\n")[0],
    epilog="Each benchmark's flags: BENCHMARK --help (e.g. train --help).",
  )
  sub = parser.add_subparsers(dest="benchmark", required=True)

  p = sub.add_parser("train", help="train step vs SimCSE's PyTorch step")
  p.add_argument("--shape", choices=sorted(SHAPES), default="minilm")
  p.add_argument("--batch_size", type=int, default=64)
  p.add_argument("--max_seq_len", type=int, default=32)
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per side (compilation, allocator)")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--repeats", type=int, default=3, help="timed steps per side per round")
  p.add_argument("--profile", action="store_true", help="also time forward and forward+backward with XLA's costs")
  p.add_argument(
    "--packed_side",
    action="store_true",
    help="also time jaxcse's step on the same batch packed into rows of real tokens (train.packed), interleaved "
    "with the others: what packing saves at these lengths",
  )
  p.add_argument(
    "--shared_mask_side",
    action="store_true",
    help="also time jaxcse's step with one attention-dropout mask shared across the batch "
    "(model.attention_dropout_per_element=False), interleaved with the others: the per-element mask's cost",
  )
  p.add_argument(
    "--find_max_batch",
    action="store_true",
    help="instead of timing, find the largest batch of each side, with and without GradCache and "
    "gradient checkpointing (doubling from --batch_size, then bisecting)",
  )
  p.add_argument(
    "--max_batch_cap",
    type=int,
    default=0,
    help="largest batch --find_max_batch tries (0: 65536 on a GPU/TPU, 4x --batch_size on a CPU)",
  )
  p.add_argument("--batch_granularity", type=int, default=8, help="--find_max_batch bisects to multiples of this")
  p.add_argument(
    "--grad_cache_chunk", type=int, default=0, help="GradCache's chunk in --find_max_batch (0: --batch_size)"
  )

  p = sub.add_parser("pretrain", help="MLM pretraining step vs PyTorch BertForMaskedLM")
  p.add_argument("--shape", choices=sorted(SHAPES), default="mini")
  p.add_argument("--vocab", type=int, default=0, help="vocabulary size (0: the shape's)")
  p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout on both sides")
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--max_seq_len", type=int, default=128)
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per side (compilation, allocator)")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--repeats", type=int, default=3, help="timed steps per side per round")

  p = sub.add_parser("encode", help="BucketedEmbedder vs sentence-transformers encode")
  p.add_argument("--model", default="all-MiniLM-L6-v2")
  p.add_argument("--input", default="", help="one sentence a line (default: corpora/wiki_offline.txt of the data root)")
  p.add_argument("--limit", type=int, default=2048)
  p.add_argument("--batch_size", type=int, default=64)
  p.add_argument("--max_seq_len", type=int, default=0, help="0: the sentence-transformers model's own")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--repeats", type=int, default=1)

  p = sub.add_parser("evaluate", help="jaxcse STS evaluation vs SentEval as SimCSE drives it")
  p.add_argument("--model", default="all-MiniLM-L6-v2")
  p.add_argument("--pooler", choices=("avg", "cls_before_pooler"), default="avg")
  p.add_argument(
    "--tasks", default="sts", help="sts, or a comma-separated list of STS12..16, STSBenchmark, SICKRelatedness"
  )
  p.add_argument(
    "--senteval_dir", default=None, help="a SimCSE checkout (its SentEval/ copy); default $JAXCSE_SENTEVAL_DIR"
  )
  p.add_argument("--batch_size", type=int, default=128, help="sentences per batch on both sides (SentEval's default)")
  p.add_argument("--rounds", type=int, default=1)

  for name in ("train", "pretrain", "encode"):
    p = sub.choices[name]
    p.add_argument(
      "--dtype",
      choices=tuple(DTYPES),
      default=None,
      help="jaxcse's compute dtype; params and optimizer state stay float32 (default: bfloat16 on a "
      "GPU/TPU, float32 on a CPU)",
    )
  for name in ("train", "pretrain"):
    p = sub.choices[name]
    p.add_argument(
      "--peak_size",
      type=int,
      default=0,
      help="side of the square matmul that measures the peak (0: 2048 on a CPU, 8192 on a GPU/TPU)",
    )
    p.add_argument(
      "--torch_compile",
      choices=("auto", "on", "off"),
      default="auto",
      help="also time the PyTorch step through torch.compile (auto: on CUDA)",
    )
  for p in sub.choices.values():
    p.add_argument(
      "--threads",
      type=int,
      default=-1,
      help="pin the process to this many cores and give torch and XLA as many threads (like for like); "
      "0: neither pinned nor limited (torch's and XLA's defaults); default: 1 on a machine without "
      "accelerators, else 0; --threads 2 on an idle machine measures scaling",
    )
    p.add_argument("--data_dir", default=None, help=f"data root (default ${data_lib.DATA_DIR_ENV})")
  args = parser.parse_args(argv)
  if args.threads < 0:
    args.threads = 0 if platforms.has_accelerator() else 1
  # Before jax's CPU client starts (jax.devices, below): XLA sizes its thread pool by the CPUs it may use.
  restore = pin_threads(args.threads)[1] if args.threads else (lambda: None)
  try:
    return _run_benchmark(args)
  finally:
    restore()


def _run_benchmark(args) -> int:
  # Both sides share the device. By default jax reserves 75% of a GPU's memory when its backend starts, which
  # would starve the PyTorch side: allocate on demand instead (set before the first jax call starts the backend).
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  if getattr(args, "find_max_batch", False):
    # jax's allocator still stops at this fraction of the device (default 0.75): give it what PyTorch may use.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
  line = {"train": bench_train, "pretrain": bench_pretrain, "encode": bench_encode, "evaluate": bench_evaluate}[
    args.benchmark
  ](args)
  print(line, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
