"""Ahead-of-time compilation: the trainer's own jitted step, and the encoder's forward, for hardware that is not here.

``compile_train_step(config, target)`` builds the step through
``train_step.jit_train_step`` (the function the trainer calls) on a mesh of
the target's devices, lowers it with abstract arguments (shapes, dtypes and
shardings; no weights, no data) and compiles it with the target's own compiler
(libtpu for TPUs, XLA's GPU compiler for a described GPU). ``analyse`` turns
the executable into what a user needs before renting anything: per-device
memory against the device's usable memory, FLOPs and bytes per step, a roofline
lower bound on the step time, and the collectives the program runs.
``find_max_batch`` bisects the largest global batch that fits, compiling only.

The models come without their weights from the trainer's own builder (``configured.model(config,
abstract=True)`` and the frozen models beside it): a local folder's ``config.json``, the encoder shipped with
jaxcse, a hub snapshot already in the Hugging Face cache, or ``configured.PUBLISHED_SHAPES``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxcse import compat, configuration, configured, distributed, embedder as embedder_lib, files, objectives
from jaxcse import targets as targets_lib, tokenization, train_step as step_lib
from jaxcse.errors import JaxcseError


class CompileError(JaxcseError, RuntimeError):
  """The step cannot be compiled as asked: an unknown model shape, or a program the target cannot hold."""


def stand_in_total_steps(config: ml_collections.ConfigDict) -> int:
  """The schedule's length without counting the corpus: ``train.max_steps``, else 15,625 (an epoch of wiki1m at 64).

  It only sets constants of the learning-rate schedule inside the step: never a shape, nor memory.
  """
  return config.train.max_steps if config.train.max_steps > 0 else 15_625


def default_columns(config: ml_collections.ConfigDict) -> int:
  """Sentence columns of a batch, from the corpus's kind (never read): 3 for a csv (SimCSE's NLI triplets), else 1."""
  train = config.data.train
  return 3 if train.endswith(".csv") and not config.data.pack else 1


@dataclasses.dataclass(frozen=True)
class StepProgram:
  """The jitted step and its abstract arguments, ready to lower."""

  jitted: Any
  args: tuple
  model: configured.Built
  complementary: configured.Built | None
  augment_mlm: configured.Built | None
  mesh: jax.sharding.Mesh
  batch_size: int
  columns: int


def train_step_program(config: ml_collections.ConfigDict, devices, *, batch_size: int | None = None,
                       columns: int | None = None) -> StepProgram:
  """The trainer's jitted step for ``config`` on a mesh of ``devices``, with abstract ``(state, batch, comp_params,
  augment_params)`` (the frozen models' params None when the config uses none).

  ``batch_size`` (default ``train.batch_size``) is the global batch; ``columns`` the batch's sentence columns.
  """
  configuration.validate(config)
  batch_size = batch_size or config.train.batch_size
  columns = columns or default_columns(config)
  mesh = distributed.make_mesh(devices)
  if batch_size % mesh.size:
    raise configuration.ConfigError(f"train.batch_size {batch_size} must be divisible by the {mesh.size} devices")
  model = configured.model(config, abstract=True)
  complementary = configured.complementary(config, abstract=True)
  tx = step_lib.make_optimizer(config.train, stand_in_total_steps(config))
  augment_mlm = configured.augment_mlm(config, model.spec, abstract=True)
  jitted = step_lib.jit_train_step(config, model.spec, tx, complementary and complementary.spec, mesh,
                                   augment_mlm=augment_mlm and augment_mlm.spec)
  # The arguments as the trainer places them: the state as train._resume makes it (step 0, the params, the
  # optimizer's fresh state) and the frozen models' params replicated, the batch split over the devices.
  replicated, batch_sharding = distributed.data_shardings(mesh)

  def placed(tree, sharding):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)

  state = jax.eval_shape(lambda p: step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p)),
                         model.params)
  shape = (batch_size, columns, config.data.max_seq_len)
  batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32) for k in ("input_ids", "attention_mask")}
  comp_params = complementary and placed(complementary.params, replicated)
  augment_params = augment_mlm and placed(augment_mlm.params, replicated)
  return StepProgram(jitted, (placed(state, replicated), placed(batch, batch_sharding), comp_params, augment_params),
                     model, complementary, augment_mlm, mesh, batch_size, columns)


# Out-of-memory errors of the compilers: libtpu's "Ran out of memory on HBM", XLA's RESOURCE_EXHAUSTED.
_OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory|exceeds available", re.S)


class OutOfMemory(CompileError):
  """The target's compiler refused the program: it does not fit the device's memory."""


_COLLECTIVE = re.compile(r"\s(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|"
                         r"ragged-all-to-all)(?:-start)?\(")


def collectives(hlo_text: str) -> dict[str, int]:
  """Collective operations of an optimized HLO module, by kind (an async ``-start``/``-done`` pair counts once)."""
  return dict(sorted(collections.Counter(m.group(1) for m in _COLLECTIVE.finditer(hlo_text)).items()))


def cost_of(compiled) -> tuple[dict[str, float], str | None]:
  """``(XLA's cost analysis of the executable, where it came from)``; ``({}, None)`` when there is none.

  TPU and CPU executables carry their compiler's analysis. A device-less GPU executable reports none
  (``cost_analysis()`` is None in jaxlib 0.10.2); then XLA's HLO cost analysis runs on the GPU compiler's
  optimized module (its fusions as the GPU runs them), through jaxlib's ``hlo_module_cost_analysis``.
  """
  cost = compiled.cost_analysis()
  if isinstance(cost, list):  # Older jax: one dict per module.
    cost = cost[0] if cost else None
  if cost:
    return {k: float(v) for k, v in cost.items()}, "the compiler's cost analysis"
  cost = compat.hlo_module_cost_analysis(compiled.runtime_executable().hlo_modules()[0])
  if not cost:
    return {}, None
  return {k: float(v) for k, v in cost.items()}, "XLA's HLO cost analysis of the optimized module"


@dataclasses.dataclass(frozen=True)
class Memory:
  """Per-device bytes of a compiled program (``memory_analysis()``)."""

  argument: int
  output: int
  alias: int
  temp: int
  code: int

  @classmethod
  def of(cls, compiled) -> "Memory":
    m = compiled.memory_analysis()
    return cls(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes, m.temp_size_in_bytes,
               m.generated_code_size_in_bytes)

  @property
  def total(self) -> int:
    """What the program holds at once: donated arguments are reused for outputs (``alias``)."""
    return self.argument + self.output - self.alias + self.temp + self.code


@dataclasses.dataclass(frozen=True)
class Facts:
  """What one compilation established: the executable's memory, cost and collectives (or its out-of-memory error).

  ``fingerprint`` names the compilation: the lowered program, the target and the compilers' versions; a cache
  hit (``cached``) is an earlier compilation of the same fingerprint.
  """

  memory: Memory | None
  cost: dict
  cost_source: str | None
  collectives: dict
  compile_seconds: float
  fingerprint: str
  out_of_memory: str | None = None
  cached: bool = False


CACHE_FORMAT = 1  # Bump when Facts change: older cache entries then miss.


def compiler_versions(target: targets_lib.Target) -> dict[str, str]:
  """The versions that decide what the target's compiler produces."""
  import importlib.metadata

  packages = ["jax", "jaxlib"] + {"tpu": ["libtpu"], "gpu": ["jax-cuda12-plugin", "jax-cuda12-pjrt",
                                                           "nvidia-cuda-nvcc-cu12"]}.get(target.platform, [])
  versions = {}
  for package in packages:
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = "absent"
  return versions


def _compiler_name(target: targets_lib.Target) -> str:
  return {"tpu": "libtpu", "gpu": "XLA's GPU compiler"}.get(target.platform, "XLA's CPU compiler")


def lower(jitted, args) -> tuple[Any, str]:
  """``(lowered, its text)``: ``jitted`` lowered on ``args``, and the text (without source locations) that names
  the program in ``fingerprint``.

  Give the arguments the shardings the jit places them with (``train_step_program`` does): with bare shapes the
  same program lowers to another text, its helper functions shared or named differently (``@_take_15`` against
  ``@_take_19``), because jax's tracing caches see other abstract values.
  """
  lowered = jitted.lower(*args)
  return lowered, lowered.as_text()


def fingerprint(canonical: str, target: targets_lib.Target) -> str:
  """sha256 of everything a compilation depends on: the program (``lower``'s canonical text), the target's
  definition (and GPU config), the compilers' versions and flags."""
  digest = hashlib.sha256()
  parts = [f"format {CACHE_FORMAT}", canonical, repr(dataclasses.astuple(target)),
           targets_lib.gpu_config_text(target.gpu_config) if target.gpu_config else "",
           json.dumps(compiler_versions(target), sort_keys=True),
           os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", "")]
  for part in parts:
    digest.update(part.encode())
    digest.update(b"\0")
  return digest.hexdigest()


def _read_cached(cache_dir: str | None, key: str) -> Facts | None:
  if not cache_dir:
    return None
  path = os.path.join(cache_dir, key + ".json")
  try:
    with open(path) as f:
      entry = json.load(f)
    memory = Memory(**entry["memory"]) if entry["memory"] else None
    return Facts(memory, entry["cost"], entry["cost_source"], entry["collectives"], entry["compile_seconds"], key,
                 entry["out_of_memory"], cached=True)
  except FileNotFoundError:
    return None
  except (OSError, ValueError, KeyError, TypeError):  # Unreadable: compile again and write it anew.
    return None


def _write_cached(cache_dir: str | None, facts: Facts) -> None:
  if not cache_dir:
    return
  os.makedirs(cache_dir, exist_ok=True)
  entry = dataclasses.asdict(facts)
  del entry["cached"], entry["fingerprint"]
  files.write_json(os.path.join(cache_dir, facts.fingerprint + ".json"), entry)


@contextlib.contextmanager
def _still_running(log, what: str, every: float = 30.0):
  """Calls ``log("  still WHAT: 1m30s")`` every ``every`` seconds until the block ends (a compilation for a large
  model takes minutes on a laptop; silence would look like a hang)."""
  if log is None:
    yield
    return
  done = threading.Event()
  started = time.perf_counter()

  def tick():
    while not done.wait(every):
      elapsed = int(time.perf_counter() - started)
      log(f"  still {what}: {elapsed // 60}m{elapsed % 60:02d}s")

  thread = threading.Thread(target=tick, daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()


def compile_facts(jitted, args, target: targets_lib.Target, *, cache_dir: str | None = None, log=None) -> Facts:
  """Compiles ``jitted`` on ``args`` for ``target`` (or finds the same compilation in ``cache_dir``): its ``Facts``.

  ``log``, when given, receives progress lines: lowering, compiling (with the elapsed time every 30 s), or the
  cache hit. Raises ``OutOfMemory`` (its first line) when the compiler says the program does not fit. jax's own
  persistent cache cannot help here: jaxlib 0.10.2 writes compile-only executables but cannot read them back.
  """
  started = time.perf_counter()
  if log:
    log(f"{target.name}: lowering the program ...")
  lowered, canonical = lower(jitted, args)
  key = fingerprint(canonical, target)
  facts = _read_cached(cache_dir, key)
  if facts is not None and log:
    log(f"{target.name}: found in the compile cache ({cache_dir}), read in {time.perf_counter() - started:.1f} s "
        f"(the compilation itself took {facts.compile_seconds:.1f} s when it ran)")
  if facts is None:
    if log:
      log(f"{target.name}: lowered in {time.perf_counter() - started:.1f} s; compiling with "
          f"{_compiler_name(target)} ...")
    started = time.perf_counter()
    try:
      with _still_running(log, "compiling"):
        compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      if not _OUT_OF_MEMORY.search(str(e)):
        raise
      first = str(e).strip().splitlines()[0]
      facts = Facts(None, {}, None, {}, time.perf_counter() - started, key, out_of_memory=first)
    else:
      seconds = time.perf_counter() - started
      cost, source = cost_of(compiled)
      facts = Facts(Memory.of(compiled), cost, source, collectives(compiled.as_text()), round(seconds, 2), key)
    if log:
      log(f"{target.name}: compiled in {facts.compile_seconds:.1f} s")
    _write_cached(cache_dir, facts)
  if facts.out_of_memory is not None:
    raise OutOfMemory(facts.out_of_memory)
  return facts


# --------------------------------------------------------------------------
# What the compilation says.


def roofline_seconds(flops: float | None, bytes_moved: float | None, target: targets_lib.Target
                     ) -> tuple[float | None, str | None]:
  """``(seconds, what bounds them)``: the larger of FLOPs / peak FLOP/s and bytes / HBM bandwidth, per device.

  Terms without a number (a target without peaks, a missing cost) are left out; ``(None, None)`` if both are.
  """
  terms = {}
  if flops and target.bf16_flops_per_device:
    terms["compute"] = flops / target.bf16_flops_per_device
  if bytes_moved and target.memory_bandwidth_per_device:
    terms["memory"] = bytes_moved / target.memory_bandwidth_per_device
  if not terms:
    return None, None
  bound = max(terms, key=terms.get)
  return terms[bound], bound


def analyse(facts: Facts, target: targets_lib.Target, *, batch_size: int, num_devices: int) -> dict:
  """The report of one compiled program (the keys ``jaxcse.compile --json`` writes).

  ``roofline_step_seconds`` is a lower bound on the step time: no device does FLOPs faster than its bfloat16
  matrix peak, and every argument must be read and every result written once (``argument + output`` bytes) at
  no more than the HBM bandwidth. ``roofline_xla_bytes_seconds`` puts XLA's own count of the bytes the program's
  operations access (``bytes_accessed_per_device``: every op's operands and results) in place of that minimum:
  nearer what the program does, but not a bound (data that stays on chip is counted too).
  """
  memory = facts.memory
  limit = target.usable_bytes()
  flops = facts.cost.get("flops")
  bytes_accessed = facts.cost.get("bytes accessed")
  seconds, bound = roofline_seconds(flops, memory.argument + memory.output, target)
  xla_seconds, _ = roofline_seconds(flops, bytes_accessed, target)
  return {
      "target": target.name,
      "device": target.peaks.name if target.peaks else "cpu",
      "num_devices": num_devices,
      "num_hosts": target.num_hosts,
      "batch_size": batch_size,
      "memory_bytes": {"argument": memory.argument, "output": memory.output, "alias": memory.alias,
                       "temp": memory.temp, "code": memory.code, "total": memory.total, "device_limit": limit},
      "fits": memory.total <= limit,
      "flops_per_device": flops,
      "bytes_accessed_per_device": bytes_accessed,
      "cost_source": facts.cost_source,
      "roofline_step_seconds": seconds,
      "roofline_bound": bound,
      "sentences_per_second_bound": batch_size / seconds if seconds else None,
      "roofline_xla_bytes_seconds": xla_seconds,
      "peaks_per_device": None if target.peaks is None else {
          "bf16_flops": target.bf16_flops_per_device, "memory_bandwidth": target.memory_bandwidth_per_device,
          "source": target.peaks.source},
      "collectives": facts.collectives,
      "compile_seconds": facts.compile_seconds,
      "cached": facts.cached,
      "fingerprint": facts.fingerprint,
      "compiler_versions": compiler_versions(target),
  }


def compile_train_step(config: ml_collections.ConfigDict, target: targets_lib.Target, *, devices=None,
                       batch_size: int | None = None, columns: int | None = None, cache_dir: str | None = None,
                       log=None) -> dict:
  """Compiles the train step of ``config`` for ``target``; returns ``analyse``'s report.

  ``log``: progress lines (``compile_facts``). Raises ``OutOfMemory`` when the target's compiler refuses the
  program for its size.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  program = train_step_program(config, devices, batch_size=batch_size, columns=columns)
  facts = compile_facts(program.jitted, program.args, target, cache_dir=cache_dir, log=log)
  report = analyse(facts, target, batch_size=program.batch_size, num_devices=len(devices))
  report["program"] = "train_step"
  report["model"] = program.model.source
  report["batch_shape"] = [program.batch_size, program.columns, config.data.max_seq_len]
  if program.complementary is not None:
    report["complementary_model"] = program.complementary.source
  if program.augment_mlm is not None:
    report["augment_mlm_model"] = program.augment_mlm.source
  return report


# --------------------------------------------------------------------------
# The largest batch that fits.

# find_max_batch's variants: overrides of the config for each way of trading compute for memory.
MEMORY_VARIANTS = ("plain", "grad_cache", "gradient_checkpointing", "grad_cache+gradient_checkpointing")


def variant_config(config: ml_collections.ConfigDict, variant: str, chunk: int) -> ml_collections.ConfigDict:
  """``config`` with GradCache (chunks of ``chunk`` examples) and/or gradient checkpointing on or off."""
  if variant not in MEMORY_VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(MEMORY_VARIANTS)}")
  config = ml_collections.ConfigDict(config.to_dict())
  config.train.grad_cache_chunk = chunk if "grad_cache" in variant else 0
  config.model.gradient_checkpointing = "gradient_checkpointing" in variant
  return config


def find_max_batch(measure, granularity: int, start: int, *, limit: int = 1 << 20,
                   near: bool = False) -> tuple[int | None, list]:
  """The largest multiple of ``granularity`` (up to ``limit``) whose program fits, assuming all smaller ones fit.

  ``measure(batch) -> (fits, (bytes needed, bytes usable) or None)`` compiles once; the bytes are per device,
  None when the compiler refused the program without saying how much it needs. Memory grows about linearly with
  the batch, so the search solves ``needed(batch) = usable`` by the Illinois variant of regula falsi (the line
  through the bracket's two ends, one end's excess halved when the other end moved twice running), falling back
  to the bracket's middle where a number is missing. The bracket comes from ``start``: the line through the two
  largest fitting batches, else doubling. With ``near``, ``start`` is a guess of the answer (e.g. the same config's
  on a similar target, scaled): the bracket widens from it by 1, 2, 4, ... granularities, up if it fits, else
  down, so a right guess costs two compilations and one k granularities off about 2 log2(k). Ends when the largest fitting and the smallest
  failing batch are one granularity apart. Returns ``(largest, [(batch, fits), ...])``; largest None when not one
  granularity fits.
  """
  tried, excess = [], {}  # excess[batch] = needed - usable (< 0 fits).

  def probe(batch):
    ok, used = measure(batch)
    tried.append((batch, ok))
    if used is not None:
      excess[batch] = used[0] - used[1]
    return ok

  def on_grid(x):
    return int(x) // granularity * granularity

  if near:
    low, high = _widen(probe, max(granularity, min(on_grid(start), on_grid(limit))), granularity, on_grid(limit))
    if low is None or high is None:
      return low, tried
    return _narrow(probe, excess, low, high, granularity, on_grid), tried
  low = max(granularity, on_grid(start))
  while not probe(low):  # The config's own batch may not fit: halve until one does.
    if low == granularity:
      return None, tried
    low = max(granularity, on_grid(low // 2))
  high = None
  while high is None:  # Bracket: where the line through the two largest fits reaches the limit, else double.
    fits = sorted(b for b in excess if excess[b] < 0)[-2:]
    candidate = low * 2
    if len(fits) == 2 and excess[fits[1]] > excess[fits[0]]:
      (b1, b2), (e1, e2) = fits, (excess[fits[0]], excess[fits[1]])
      candidate = max(on_grid(b2 - e2 * (b2 - b1) / (e2 - e1)) + granularity, low + granularity)
    candidate = min(candidate, limit)
    if candidate <= low:
      return low, tried
    if probe(candidate):
      low = candidate
    else:
      high = candidate
  return _narrow(probe, excess, low, high, granularity, on_grid), tried


def _widen(probe, guess: int, granularity: int, limit: int) -> tuple[int | None, int | None]:
  """A bracket (largest fitting, smallest failing) around ``guess``, by steps of 1, 2, 4, ... granularities.

  (low, None): everything up to ``limit`` fits; (None, high): not even one granularity fits.
  """
  step = granularity
  if probe(guess):
    low = guess
    while low < limit:
      candidate = min(low + step, limit)
      if not probe(candidate):
        return low, candidate
      low, step = candidate, step * 2
    return low, None
  high = guess
  while high > granularity:
    candidate = max(high - step, granularity)
    if probe(candidate):
      return candidate, high
    high, step = candidate, step * 2
  return None, high


def _narrow(probe, excess: dict, low: int, high: int, granularity: int, on_grid) -> int:
  """The largest fitting batch in (low, high): Illinois regula falsi on the measured excess, else bisection."""
  weight = {"low": 1.0, "high": 1.0}  # Illinois: the factor on an end's excess that has not moved lately.
  moved = []
  while high - low > granularity:
    guess = None
    if low in excess and high in excess:
      e_low, e_high = excess[low] * weight["low"], excess[high] * weight["high"]
      guess = on_grid(low - e_low * (high - low) / (e_high - e_low))
    if guess is None or not low < guess < high:
      guess = on_grid((low + high) // 2)
    guess = min(max(guess, low + granularity), high - granularity)
    side = "low" if probe(guess) else "high"
    if side == "low":
      low = guess
    else:
      high = guess
    weight[side] = 1.0
    if moved[-1:] == [side]:  # The same end twice running: halve the other end's pull.
      weight["high" if side == "low" else "low"] /= 2
    moved.append(side)
  return low


def max_batch(config: ml_collections.ConfigDict, target: targets_lib.Target, variant: str, *, devices=None,
              chunk: int | None = None, columns: int | None = None, near: int | None = None,
              cache_dir: str | None = None, log=None) -> dict:
  """The largest global batch of ``config`` that fits ``target`` in ``variant``, by compiling only.

  GradCache's chunk: ``chunk``, else the config's ``train.grad_cache_chunk``, else its ``train.batch_size``
  (the batch it trains at, one pass at a time). Batches are multiples of the chunk and of 8 rows per device.
  ``near``: a guess of the answer to search around (``find_max_batch``'s ``near``); else the search starts
  from the config's batch.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  chunk = chunk or config.train.grad_cache_chunk or config.train.batch_size
  config = variant_config(config, variant, chunk)
  granularity = 8 * len(devices)
  if "grad_cache" in variant:
    granularity = granularity * chunk // math.gcd(granularity, chunk)

  def measure(batch):
    config.train.batch_size = batch
    try:
      report = compile_train_step(config, target, devices=devices, batch_size=batch, columns=columns,
                                  cache_dir=cache_dir)
    except OutOfMemory:
      ok, used = False, None
    else:
      memory = report["memory_bytes"]
      ok, used = report["fits"], (memory["total"], memory["device_limit"])
    if log is not None:
      log(f"  {variant}: batch {batch} {'fits' if ok else 'does not fit'}"
          + (f" ({used[0] / 2**30:.2f} of {used[1] / 2**30:.2f} GiB)" if used else " (the compiler ran out of memory)"))
    return ok, used

  largest, tried = find_max_batch(measure, granularity, near or config.train.batch_size, near=near is not None)
  return {"variant": variant, "max_batch_size": largest, "granularity": granularity, "near": near,
          "grad_cache_chunk": chunk if "grad_cache" in variant else 0, "tried": tried}


# --------------------------------------------------------------------------
# Inference: the encoder's forward at the BucketedEmbedder's length buckets.


def compile_encoder(config: ml_collections.ConfigDict, target: targets_lib.Target, *, devices=None,
                    max_len: int | None = None, lengths: list[int] | None = None, rows: int | None = None,
                    cache_dir: str | None = None, log=None) -> list[dict]:
  """Compiles the evaluation forward (``embedder.jit_embed``, as the trainer's Evaluator runs it) at each length.

  The Evaluator embeds STS-B/SICK-R dev with ``spec.pooling.dev_pooler`` on ``eval.batch_size`` rows, the params
  replicated on the mesh; batches are padded to ``tokenization.LENGTH_BUCKETS`` up to ``max_len`` (default: the
  model's positions). ``lengths`` picks some of those buckets (default: all). One report per length, with
  ``sentences_per_second_bound`` for encoding at that length.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  configuration.validate(config)
  model = configured.model(config, abstract=True)
  spec = model.spec
  pooler = spec.pooling.dev_pooler
  attend_padding = objectives.needs(config).attend_padding
  rows = rows or config.eval.batch_size
  max_len = min(max_len or spec.max_positions, spec.max_positions)
  embed = embedder_lib.BucketedEmbedder(spec, pooler, batch_size=rows, max_seq_len=max_len, attend_padding=attend_padding)
  params = embed.params_for_pooler(model.params)
  replicated, _ = distributed.data_shardings(distributed.make_mesh(devices))
  params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), params)
  forward = embedder_lib.jit_embed(spec, pooler, attend_padding=attend_padding)
  buckets = sorted({tokenization.bucket(n, embed.max_seq_len) for n in range(1, embed.max_seq_len + 1)})
  if lengths:
    unknown = sorted(set(lengths) - set(buckets))
    if unknown:
      raise CompileError(f"inference lengths {unknown} are not length buckets up to {embed.max_seq_len} (the "
                         f"BucketedEmbedder pads every batch to one of {buckets})")
    buckets = sorted(set(lengths))
  reports = []
  for length in buckets:
    ids = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=replicated)
    facts = compile_facts(forward, (params, ids, ids), target, cache_dir=cache_dir, log=log)
    report = analyse(facts, target, batch_size=rows, num_devices=len(devices))
    report.update(program="encode", pooler=pooler, length=length, model=model.source)
    reports.append(report)
  return reports
