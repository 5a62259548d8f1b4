"""Ahead-of-time compilation: the trainer's own jitted step, and the encoder's forward, for hardware that is not here.

``compile_train_step(config, target)`` builds the step through
``train_step.jit_train_step`` (the function the trainer calls) on a mesh of
the target's devices, lowers it with abstract arguments (shapes, dtypes and
shardings; no weights, no data) and compiles it with the target's own compiler
(libtpu for TPUs, XLA's GPU compiler for a described GPU); ``compile_encoder``
does the same for the ``BucketedEmbedder``'s forward at each length bucket.
``compile_facts`` finds a compilation again in a cache, by a fingerprint of the
lowered program, the target and the compilers; ``analysis.analyse`` reads the
executable.

The models come without their weights from the trainer's own builder (``configured.model(config,
abstract=True)`` and the frozen models beside it): a local folder's ``config.json``, the encoder shipped with
jaxcse, a hub snapshot already in the Hugging Face cache, or a published shape (``hub.resolve(name, download=False)``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxcse.compile import targets as targets_lib
from jaxcse.compile.analysis import Facts, Memory, analyse, collectives, compiler_versions, cost_of
from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.data import tokenization
from jaxcse.inference import embedder as embedder_lib
from jaxcse.models import packing
from jaxcse.storage.checkpoints import placed
from jaxcse.training import configuration, configured, distributed, objectives, train_step as step_lib, views


class CompileError(JaxcseError, RuntimeError):
  """The step cannot be compiled as asked: an unknown model shape, or a program the target cannot hold."""


def stand_in_total_steps(config: ml_collections.ConfigDict) -> int:
  """The schedule's length without counting the corpus: ``train.max_steps``, else 15,625 (an epoch of wiki1m at 64).

  It only sets constants of the learning-rate schedule inside the step: never a shape, nor memory.
  """
  return config.train.max_steps if config.train.max_steps > 0 else 15_625


def default_columns(config: ml_collections.ConfigDict) -> int:
  """Sentence columns of a batch, from the corpus's kind (never read): 3 for a csv (SimCSE's NLI triplets), else 1;
  at least the method's ``min_columns`` (2 for gist: an anchor and its positive), at most its ``max_columns``."""
  train = config.data.train
  columns = 3 if train.endswith(".csv") and not config.data.pack else 1
  objective = objectives.get(config.method)
  columns = max(columns, objective.min_columns)
  return columns if objective.max_columns is None else min(columns, objective.max_columns)


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


def packed_rows(config, spec, shape: tuple[int, int, int], mean_length: int | None, shards: int = 1) -> dict:
  """Abstract ``views.PackedViews.lay_out`` rows of a ``[batch, columns, len]`` batch whose texts average
  ``mean_length`` tokens (None: ``len``), laid out for ``shards`` devices and GradCache's chunks as the trainer
  does (one block of rows a device and chunk, ``packing.pack_shards``)."""
  two_views = objectives.needs(config).two_views
  layout = views.PackedViews.for_batches(*shape, pad_id=spec.tokenizer.pad_token_id or 0, two_views=two_views)
  examples, columns, length = shape
  chunk = config.train.grad_cache_chunk
  chunks = examples // chunk if chunk else 1
  texts = examples * (2 if columns == 1 and two_views else columns) // (shards * chunks)  # A (device, chunk)'s.
  rows = views.rows_bucket(-(-texts * (mean_length or length) // layout.row_len))
  ints = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)  # noqa: E731
  parts = () if shards == 1 and chunks == 1 else (shards * chunks,)
  per_token = (shards * chunks * rows, layout.row_len)
  places = packing.Places(ints(*parts, texts), ints(*parts, texts), ints(*parts, texts), ints(*per_token))
  return {"input_ids": ints(*per_token), "segment_ids": ints(*per_token), "places": places}


def train_step_program(
  config: ml_collections.ConfigDict,
  devices,
  *,
  batch_size: int | None = None,
  columns: int | None = None,
  packed_length: int | None = None,
) -> StepProgram:
  """The trainer's jitted step for ``config`` on a mesh of ``devices``, with abstract ``(state, batch, comp_params,
  augment_params)`` (the frozen models' params None when the config uses none).

  ``batch_size`` (default ``train.batch_size``) is the global batch; ``columns`` the batch's sentence columns. With
  ``train.packed`` the batch carries the packed rows the trainer lays out (``views.PackedViews``) for texts of
  ``packed_length`` tokens on average (None: the tokenized length, every text full: the most rows a step can need).
  """
  configuration.validate(config)
  batch_size = batch_size or config.train.batch_size
  columns = columns or default_columns(config)
  mesh = distributed.make_mesh(devices)
  if batch_size % mesh.size:
    raise configuration.ConfigError(f"train.batch_size {batch_size} must be divisible by the {mesh.size} devices")
  needs = objectives.needs(config)
  model = configured.model(config, abstract=True, needs=needs)
  complementary = configured.complementary(config, model.spec, abstract=True, needs=needs)
  tx = step_lib.make_optimizer(config.train, stand_in_total_steps(config))
  augment_mlm = configured.augment_mlm(config, model.spec, abstract=True)
  jitted = step_lib.jit_train_step(
    config,
    model.spec,
    tx,
    complementary and complementary.spec,
    mesh,
    augment_mlm=augment_mlm and augment_mlm.spec,
    needs=needs,
  )
  # The arguments as the trainer places them: the state as training.start.build makes it (step 0, the params, the
  # optimizer's fresh state) and the frozen models' params replicated, the batch split over the devices.
  replicated, batch_sharding = distributed.data_shardings(mesh)

  state = jax.eval_shape(
    lambda p: step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p)), model.params
  )
  shape = (batch_size, columns, configuration.tokenized_length(config))
  batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32) for k in ("input_ids", "attention_mask")}
  objective = objectives.get(config.method)
  if objective.labels:  # A label per row (cosent's gold score, a teacher's), as the trainer's batches carry it.
    # A teacher of any width (None): compiled at the student's.
    label_shape = tuple(
      model.spec.hidden_size if n is None else n for n in objective.label_shapes(columns, model.spec.hidden_size)[0]
    )
    batch["labels"] = jax.ShapeDtypeStruct((batch_size, *label_shape), jnp.float32)
  if configuration.packed(config):
    batch["packed"] = packed_rows(config, model.spec, shape, packed_length, shards=mesh.size)
  comp_params = complementary and placed(complementary.params, replicated)
  augment_params = augment_mlm and placed(augment_mlm.params, replicated)
  return StepProgram(
    jitted,
    (placed(state, replicated), placed(batch, batch_sharding), comp_params, augment_params),
    model,
    complementary,
    augment_mlm,
    mesh,
    batch_size,
    columns,
  )


# Out-of-memory errors of the compilers: libtpu's "Ran out of memory on HBM", XLA's RESOURCE_EXHAUSTED.
_OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory|exceeds available", re.S)


class OutOfMemory(CompileError):
  """The target's compiler refused the program: it does not fit the device's memory."""


CACHE_FORMAT = 1  # Bump when Facts change: older cache entries then miss.


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
  parts = [
    f"format {CACHE_FORMAT}",
    canonical,
    repr(dataclasses.astuple(target)),
    targets_lib.gpu_config_text(target.gpu_config) if target.gpu_config else "",
    json.dumps(compiler_versions(target), sort_keys=True),
    os.environ.get("XLA_FLAGS", ""),
    os.environ.get("LIBTPU_INIT_ARGS", ""),
  ]
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
    return Facts(
      memory,
      entry["cost"],
      entry["cost_source"],
      entry["collectives"],
      entry["compile_seconds"],
      key,
      entry["out_of_memory"],
      cached=True,
    )
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
    log(
      f"{target.name}: found in the compile cache ({cache_dir}), read in {time.perf_counter() - started:.1f} s "
      f"(the compilation itself took {facts.compile_seconds:.1f} s when it ran)"
    )
  if facts is None:
    if log:
      log(
        f"{target.name}: lowered in {time.perf_counter() - started:.1f} s; compiling with {_compiler_name(target)} ..."
      )
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


def compile_train_step(
  config: ml_collections.ConfigDict,
  target: targets_lib.Target,
  *,
  devices=None,
  batch_size: int | None = None,
  columns: int | None = None,
  packed_length: int | None = None,
  cache_dir: str | None = None,
  log=None,
) -> dict:
  """Compiles the train step of ``config`` for ``target``; returns ``analyse``'s report.

  ``log``: progress lines (``compile_facts``). Raises ``OutOfMemory`` when the target's compiler refuses the
  program for its size.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  program = train_step_program(config, devices, batch_size=batch_size, columns=columns, packed_length=packed_length)
  facts = compile_facts(program.jitted, program.args, target, cache_dir=cache_dir, log=log)
  report = analyse(facts, target, batch_size=program.batch_size, num_devices=len(devices))
  report["program"] = "train_step"
  report["model"] = program.model.source
  report["batch_shape"] = [program.batch_size, program.columns, configuration.tokenized_length(config)]
  if "packed" in program.args[1]:
    report["packed_rows"] = list(program.args[1]["packed"]["input_ids"].shape)
  if program.complementary is not None:
    report["complementary_model"] = program.complementary.source
  if program.augment_mlm is not None:
    report["augment_mlm_model"] = program.augment_mlm.source
  return report


# --------------------------------------------------------------------------
# Inference: the encoder's forward at the BucketedEmbedder's length buckets.


def compile_encoder(
  config: ml_collections.ConfigDict,
  target: targets_lib.Target,
  *,
  devices=None,
  max_len: int | None = None,
  lengths: list[int] | None = None,
  rows: int | None = None,
  cache_dir: str | None = None,
  log=None,
) -> list[dict]:
  """Compiles the evaluation forward (``embedder.jit_embed``, as the trainer's Evaluator runs it) at each length.

  The Evaluator embeds STS-B/SICK-R dev with ``spec.pooling.dev_pooler`` on ``eval.batch_size`` rows, the params
  replicated on the mesh; batches are padded to ``tokenization.LENGTH_BUCKETS`` up to ``max_len`` (default: the
  model's positions). ``lengths`` picks some of those buckets (default: all). One report per length, with
  ``sentences_per_second_bound`` for encoding at that length.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  configuration.validate(config)
  needs = objectives.needs(config)
  model = configured.model(config, abstract=True, needs=needs)
  spec = model.spec
  pooler = spec.pooling.dev_pooler
  attend_padding = needs.attend_padding
  rows = rows or config.eval.batch_size
  max_len = min(max_len or spec.max_positions, spec.max_positions)
  embed = embedder_lib.BucketedEmbedder(
    spec, pooler, batch_size=rows, max_seq_len=max_len, attend_padding=attend_padding
  )
  params = embed.params_for_pooler(model.params)
  replicated, _ = distributed.data_shardings(distributed.make_mesh(devices))
  params = placed(params, replicated)
  forward = embedder_lib.jit_embed(spec, pooler, attend_padding=attend_padding)
  buckets = sorted({tokenization.bucket(n, embed.max_seq_len) for n in range(1, embed.max_seq_len + 1)})
  if lengths:
    unknown = sorted(set(lengths) - set(buckets))
    if unknown:
      raise CompileError(
        f"inference lengths {unknown} are not length buckets up to {embed.max_seq_len} (the "
        f"BucketedEmbedder pads every batch to one of {buckets})"
      )
    buckets = sorted(set(lengths))
  reports = []
  for length in buckets:
    ids = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=replicated)
    facts = compile_facts(forward, (params, ids, ids), target, cache_dir=cache_dir, log=log)
    report = analyse(facts, target, batch_size=rows, num_devices=len(devices))
    report.update(program="encode", pooler=pooler, length=length, model=model.source)
    reports.append(report)
  return reports
