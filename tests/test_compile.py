"""jaxcse.compile and jaxcse.aot on this machine's CPU: the step compiled is the trainer's, shapes without weights.

The TPU and GPU compilations themselves need libtpu and the CUDA plugin, which must not be in the main test venv
(they change what every jax program prints): tests/test_compile_accelerators.py runs them in a second venv
(.ci/run). Everything here runs in the main venv.

``python tests/test_compile.py drift MODEL_DIR DATA_DIR OUT.json`` is the drift check's worker (2 CPU devices).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# Configs whose trainer-built step and command-built step must lower to the same program: every method and the
# features that change the step (GradCache, gradient checkpointing, bfloat16, the auxiliary MLM head, packing).
DRIFT_VARIANTS = {
  "simcse_sup+grad_cache+checkpointing+bf16": (
    "simcse_sup",
    {"train.grad_cache_chunk": 4, "model.gradient_checkpointing": True, "model.dtype": "bfloat16"},
  ),
  "mixcse+mlm": ("mixcse", {"mlm.enabled": True}),
  "dclr": ("dclr", {"train.grad_cache_chunk": 4}),
  "dclr_as_released": ("dclr_as_released", {}),
  "pretrain_mlm": ("pretrain_mlm", {}),
  # The second view's discrete augmentations, with the frozen MLM of "MLM k%" (saved by the worker) as an input.
  "simcse+crop+augment_mlm": ("base", {"augment.crop": 0.1, "augment.mlm": 0.15, "augment.mlm_model": "TINY_MLM"}),
  # The crop on the whole sentence: batches of 48 tokens, cut to 16 in the step.
  "simcse+crop_before_truncation": ("base", {"augment.crop": 0.1, "augment.crop_before_truncation": 48}),
}


def _drift_worker(model_dir: str, data_dir: str, out: str) -> None:
  """For each DRIFT_VARIANTS config: the trainer's jitted step lowered with its real first arguments, against the
  command's step lowered with abstract ones; writes {name: [equal, trainer text or "", command text or ""]}."""
  import tempfile

  import jax

  from jaxcse import train
  from jaxcse.training import train_step
  from jaxcse.compile import lowering
  from tests import helpers

  class FirstStep(Exception):
    """Raised in place of the trainer's first step, once its arguments are lowered."""

  # The tiny BERT with a (random) MLM head saved with it.
  tiny_mlm = helpers.make_tiny_mlm_dir(model_dir, os.path.join(tempfile.mkdtemp(prefix="drift_tiny_mlm_"), "model"))
  real = train_step.jit_train_step
  results = {}
  for name, (config_name, overrides) in DRIFT_VARIANTS.items():
    overrides = {k: tiny_mlm if v == "TINY_MLM" else v for k, v in overrides.items()}
    config = helpers.tiny_config(model_dir, data_dir, config_name, **{"eval.at_start": False, **overrides})
    if config_name == "pretrain_mlm":  # A smaller random BERT than BERT-Mini: the lowering is what is compared.
      config.model.architecture.num_hidden_layers, config.model.architecture.hidden_size = 2, 32
      config.model.architecture.num_attention_heads, config.model.architecture.intermediate_size = 2, 64
    recorded = {}

    def recording(*args, **kwargs):
      jitted = real(*args, **kwargs)

      def first_call(state, batch, complementary_params, augment_params):
        recorded["text"] = lowering.lower(jitted, (state, batch, complementary_params, augment_params))[1]
        raise FirstStep

      return first_call

    train_step.jit_train_step = recording
    try:
      train.train_and_evaluate(config, tempfile.mkdtemp(prefix=f"drift_{config_name}_"))
    except FirstStep:
      pass
    finally:
      train_step.jit_train_step = real
    program = lowering.train_step_program(config, jax.devices())
    command = lowering.lower(program.jitted, program.args)[1]
    trainer = recorded.get("text", "")
    results[name] = [trainer == command, trainer if trainer != command else "", command if trainer != command else ""]
  with open(out, "w") as f:
    json.dump(results, f)


def test_the_command_compiles_the_step_the_trainer_runs(tiny_model_dir, small_data_dir, tmp_path):
  # The trainer (which builds its step through train_step.jit_train_step) stops at its first step; the step it
  # was about to run, lowered with its real state, batch and frozen models' params on 2 devices, must be the
  # program the command lowers from shapes alone: same function, shardings, donation, dtypes, structure.
  from tests import helpers

  out = str(tmp_path / "drift.json")
  env = {
    **os.environ,
    "XLA_FLAGS": helpers.simulated_devices(2),
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": REPO,
  }
  subprocess.run(
    [sys.executable, __file__, "drift", tiny_model_dir, small_data_dir, out], check=True, env=env, timeout=600
  )
  results = json.load(open(out))
  assert set(results) == set(DRIFT_VARIANTS)
  for name, (equal, trainer, command) in results.items():
    if not equal:
      assert trainer, f"{name}: the trainer did not build its step through train_step.jit_train_step"
      first = next(i for i, (a, b) in enumerate(zip(trainer, command)) if a != b) if trainer else 0
      raise AssertionError(
        f"{name}: the trainer's program and the command's differ at character {first}:\n"
        f"trainer: {trainer[max(0, first - 200) : first + 200]}\n"
        f"command: {command[max(0, first - 200) : first + 200]}"
      )


# --------------------------------------------------------------------------
# The model's shape without weights.

SHAPE_VARIANTS = {
  "simcse": ("base", {}),
  "mlm_untied_fresh": ("base", {"mlm.enabled": True, "mlm.head": "untied_fresh"}),
  "mlm_untied_pretrained": ("base", {"mlm.enabled": True, "mlm.head": "untied_pretrained"}),
  "mlm_tied": ("base", {"mlm.enabled": True, "mlm.head": "tied"}),
  "dclr_as_released": ("dclr_as_released", {}),
  "shipped_encoder": ("quickstart", {"model.name": "jaxcse/bert-mini-wiki-uncased"}),
  "minilm": ("quickstart_minilm", {"model.name": "sentence-transformers/all-MiniLM-L6-v2"}),
  "pretrain_mlm": ("pretrain_mlm", {}),
}


def _shapes(tree):
  import jax

  return jax.tree.structure(tree), [(x.shape, x.dtype) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("name", SHAPE_VARIANTS)
def test_abstract_params_have_the_loaded_params_shapes(tiny_model_dir, small_data_dir, tmp_path, name):
  import jax

  from jaxcse.training import configured
  from tests import helpers

  config_name, overrides = SHAPE_VARIANTS[name]
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, config_name, **overrides)
  from jaxcse.storage import hub

  if name == "minilm" and not os.path.isdir(hub.resolve_model_path(config.model.name)):
    pytest.skip("all-MiniLM-L6-v2 is not installed")
  real = configured.model(config)
  abstract = configured.model(config, abstract=True)
  assert _shapes(abstract.params) == _shapes(jax.eval_shape(lambda: real.params))
  if config.method == "dclr":
    comp_real, comp = configured.complementary(config), configured.complementary(config, abstract=True)
    assert comp.spec.pooling == comp_real.spec.pooling
    assert _shapes(comp.params) == _shapes(jax.eval_shape(lambda: comp_real.params))


def test_the_augmentations_frozen_mlm_has_the_loaded_shapes_and_a_published_shape_has_no_vocabulary(
  tiny_model_dir, small_data_dir, tmp_path
):
  import jax

  from jaxcse.training import configured
  from tests import helpers

  tiny_mlm = helpers.make_tiny_mlm_dir(tiny_model_dir, str(tmp_path / "tiny_mlm"))
  config = helpers.tiny_config(
    tiny_model_dir, small_data_dir, "base", **{"augment.mlm": 0.15, "augment.mlm_model": tiny_mlm}
  )
  spec = configured.model(config).spec
  real = configured.augment_mlm(config, spec)
  abstract = configured.augment_mlm(config, configured.model(config, abstract=True).spec, abstract=True)
  assert _shapes(abstract.params) == _shapes(jax.eval_shape(lambda: real.params))
  assert (abstract.spec.backbone.dtype, abstract.spec.pooling) == (real.spec.backbone.dtype, real.spec.pooling)
  # bert-base-uncased's published shape has its special ids but not its vocabulary, which the augmentations read.
  config = helpers.tiny_config("bert-base-uncased", small_data_dir, "base", **{"augment.crop": 0.1})
  with pytest.raises(
    configured.ShapeError,
    match="bert-base-uncased: config.augment's discrete augmentations read the tokenizer's vocabulary",
  ):
    configured.model(config, abstract=True)


def test_random_init_builds_the_configured_architecture(small_data_dir):
  from jaxcse.training import configured
  from tests import helpers

  config = helpers.tiny_config("", small_data_dir, "pretrain_mlm")
  built = configured.model(config, abstract=True)
  arch = config.model.architecture
  assert (built.spec.hf_config.hidden_size, built.spec.hf_config.num_hidden_layers) == (
    arch.hidden_size,
    arch.num_hidden_layers,
  )
  assert built.spec.hf_config.vocab_size == len(built.spec.tokenizer) == 8192  # The shipped 8k WordPiece.
  assert built.spec.hf_config.hidden_dropout_prob == config.model.dropout


def _hub_cache(monkeypatch, folder) -> None:
  """huggingface_hub's cache at ``folder``, offline (it reads both from its constants at call time)."""
  from huggingface_hub import constants

  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def _backbone_parameters(name: str) -> int:
  import jax

  from jaxcse.training import configured
  from tests import helpers

  config = helpers.tiny_config(
    name, "", "base", **{"model.pooler": "cls_before_pooler", "model.mlp_only_train": False, "data.max_seq_len": 32}
  )
  abstract = configured.model(config, abstract=True)
  assert set(abstract.params) == {"backbone"}
  return sum(math.prod(x.shape) for x in jax.tree.leaves(abstract.params))


@pytest.mark.parametrize(
  "name, parameters",
  [
    # Golden values: transformers' num_parameters() of BertModel/RobertaModel (with the pooler layer) for the
    # published checkpoints: BERT-base 109.48M, BERT-large 335.14M, RoBERTa-base 124.65M, RoBERTa-large 355.36M.
    ("bert-base-uncased", 109_482_240),
    ("bert-large-uncased", 335_141_888),
    ("roberta-base", 124_645_632),
    ("roberta-large", 355_359_744),
    ("princeton-nlp/unsup-simcse-bert-base-uncased", 109_482_240),
  ],
)
def test_published_shapes_have_the_published_parameter_counts(name, parameters, monkeypatch, tmp_path):
  _hub_cache(monkeypatch, tmp_path / "empty_cache")  # Not cached: the published shape answers.
  from jaxcse.training import configured

  assert configured.model_shape(name).source == f"the published shape of {name}"
  assert _backbone_parameters(name) == parameters


def test_published_bert_ids_are_the_bert_uncased_tokenizers(tokenizer):
  # all-MiniLM-L6-v2 ships bert-base-uncased's vocabulary and special tokens.
  from jaxcse.training import configured

  assert configured.SpecialTokens.of(tokenizer) == configured.SpecialTokens.published("bert-base-uncased")


def test_a_config_json_path_is_a_shape_and_mlm_needs_a_tokenizer(tiny_model_dir, small_data_dir, tmp_path):
  import shutil

  from jaxcse.training import configured
  from tests import helpers

  shutil.copy(os.path.join(tiny_model_dir, "config.json"), tmp_path / "config.json")
  config = helpers.tiny_config(str(tmp_path / "config.json"), small_data_dir, "base")
  abstract = configured.model(config, abstract=True)
  assert abstract.spec.hf_config.hidden_size == 32 and abstract.source.startswith("config file")
  config.mlm.enabled = True
  with pytest.raises(configured.ShapeError, match="needs the tokenizer's"):
    configured.model(config, abstract=True)


def test_an_unknown_model_offline_is_one_clear_error(monkeypatch, tmp_path):
  _hub_cache(monkeypatch, tmp_path / "empty_cache")
  from jaxcse.training import configured

  with pytest.raises(
    configured.ShapeError,
    match=r"someone/unknown-model: no local folder, no snapshot in the "
    r"Hugging Face cache and no published shape .* point "
    r"--config.model.name",
  ):
    configured.model_shape("someone/unknown-model")


def test_a_cached_hub_snapshot_is_read_without_the_network(tiny_model_dir, monkeypatch, tmp_path):
  # A hub cache laid out as huggingface_hub writes it: models--ORG--NAME/{refs/main, snapshots/COMMIT/...}.
  import shutil

  commit = "0123456789abcdef0123456789abcdef01234567"
  repo = tmp_path / "hub" / "models--someone--tiny-bert"
  shutil.copytree(tiny_model_dir, repo / "snapshots" / commit)
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(commit)
  _hub_cache(monkeypatch, tmp_path / "hub")
  from jaxcse.training import configured

  shape = configured.model_shape("someone/tiny-bert", dropout=0.0)
  assert shape.source == "the Hugging Face cache" and shape.hf_config.hidden_size == 32
  assert shape.hf_config.hidden_dropout_prob == 0.0 and shape.tokens.mask_token_id == 103


# --------------------------------------------------------------------------
# Pure parts: the search, the analysis.


@pytest.mark.parametrize("memory", ["linear", "quadratic", "compiler_refuses"])
def test_find_max_batch_finds_the_exact_limit_in_few_compilations(memory):
  # A fake compiler: per-device bytes of a batch b; "compiler_refuses" reports no bytes past the limit (as
  # libtpu's out-of-memory error), "quadratic" adds the similarity matrix's b^2 term.
  from jaxcse.compile import max_batch

  usable = 16 * 2**30
  for per_row in (1e6, 3.3e6, 2.9e7):

    def used(b):
      return 2e9 + per_row * b + (5e3 * b * b if memory == "quadratic" else 0)

    exact = max(b for b in range(8, 1 << 16, 8) if used(b) <= usable)
    seen = []

    def measure(batch):
      seen.append(batch)
      fits = used(batch) <= usable
      return fits, (used(batch), usable) if fits or memory != "compiler_refuses" else None

    largest, tried = max_batch.find_max_batch(measure, granularity=8, start=64)
    assert largest == exact, (memory, per_row)
    assert [b for b, _ in tried] == seen and all(b % 8 == 0 for b in seen) and len(set(seen)) == len(seen)
    # Bisection alone would take log2(exact / 8) + log2(8) compilations; the line through measured points fewer.
    assert len(seen) <= math.ceil(math.log2(exact / 8)) + 4, (memory, per_row, seen)
  assert max_batch.find_max_batch(lambda b: (False, None), granularity=8, start=64)[0] is None


@pytest.mark.parametrize("offset", [0, 1, -1, 5, -5, 300, -300])
def test_find_max_batch_near_a_guess_costs_two_compilations_when_the_guess_is_right(offset):
  # libtpu rematerializes as memory fills, so memory is not linear near the limit and the line through small
  # batches undershoots; a guess from a similar target is searched around instead: widened by 1, 2, 4, ...
  # granularities, then narrowed. Memory here is a staircase the line cannot predict.
  from jaxcse.compile import max_batch

  usable, exact = 100, 1240

  def measure(batch):
    seen.append(batch)
    used = (90 if batch <= exact else 101) + (batch - exact) // 64  # A step up past the answer.
    return used <= usable, (used, usable)

  seen = []
  largest, tried = max_batch.find_max_batch(measure, granularity=8, start=exact + 8 * offset, near=True)
  assert largest == exact and [b for b, _ in tried] == seen and len(set(seen)) == len(seen)
  assert all(b % 8 == 0 for b in seen)
  # Widening takes about log2(|offset|) probes, narrowing the bracket (about |offset| wide) as many again.
  assert len(seen) <= 2 * math.ceil(math.log2(abs(offset) + 1)) + 2, seen
  if offset in (0, 1):  # Right, or one granularity above: one probe each side of the answer.
    assert len(seen) == 2
  # Everything fits up to the limit; nothing fits at all.
  assert max_batch.find_max_batch(lambda b: (True, None), granularity=8, start=64, limit=100, near=True)[0] == 96
  assert max_batch.find_max_batch(lambda b: (False, None), granularity=8, start=64, near=True)[0] is None


def test_collectives_are_counted_by_kind_once_per_async_pair():
  from jaxcse.compile import analysis

  hlo = """
  %all-gather-start = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(f32[4,8]{1,0} %p), dimensions={0}
  %all-gather-done = f32[16,8]{1,0} all-gather-done((f32[4,8]{1,0}, f32[16,8]{1,0}) %all-gather-start)
  %ar.1 = f32[8]{0} all-reduce(f32[8]{0} %x), to_apply=%add
  %ar.2 = f32[] all-reduce(f32[] %y), to_apply=%add
  %rs = f32[2]{0} reduce-scatter(f32[8]{0} %z), dimensions={0}
  %not = f32[8]{0} add(f32[8]{0} %all-reduce.3, f32[8]{0} %x)
  """
  assert analysis.collectives(hlo) == {"all-gather": 1, "all-reduce": 2, "reduce-scatter": 1}


def test_roofline_is_the_slower_of_compute_and_memory():
  # Golden arithmetic: 1e10 bytes at 819 GB/s (12.2 ms) is slower than 2e12 FLOP at 197 TFLOP/s (10.2 ms).
  from jaxcse.compile import analysis, targets

  v5e = targets.get("v5e-1")  # 197 TFLOP/s, 819 GB/s.
  seconds, bound = analysis.roofline_seconds(2e12, 1e10, v5e)
  assert (seconds, bound) == (pytest.approx(1e10 / 819e9, rel=1e-12), "memory")
  seconds, bound = analysis.roofline_seconds(4e12, 1e9, v5e)
  assert (seconds, bound) == (pytest.approx(4e12 / 197e12, rel=1e-12), "compute")
  v3 = targets.get("v3-8")  # A v3 chip is 2 devices: half its 123 TFLOP/s and 900 GB/s each.
  assert v3.bf16_flops_per_device == 61.5e12 and v3.memory_bandwidth_per_device == 450e9
  assert analysis.roofline_seconds(None, None, targets.get("cpu")) == (None, None)


def test_every_gpu_target_config_names_its_source_and_memory():
  from jaxcse.compile import targets

  for target in targets.TARGETS.values():
    if target.platform == "gpu":
      text = targets.gpu_config_text(target.gpu_config)
      assert "openxla/xla" in text and "xla/backends/gpu/target_config/specs/" in text
      assert targets.gpu_device_memory(target.gpu_config) == target.peaks.memory_bytes
      assert target.usable_bytes() == int(0.75 * target.peaks.memory_bytes)


# --------------------------------------------------------------------------
# The command on this machine's CPU.


def _command(*args, env=None, timeout=600):
  env = {**os.environ, "PYTHONPATH": REPO, **(env or {})}
  return subprocess.run(
    [sys.executable, "-m", "jaxcse.compile", *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO
  )


def test_help_lists_the_flags():
  result = _command("--help")
  assert result.returncode == 0, result.stderr
  for flag in ("--target", "--json", "--find_max_batch", "--inference", "--cache_dir", "--list_targets"):
    assert flag in result.stdout


def test_list_targets_shows_peaks_and_sources():
  result = _command("--list_targets")
  assert result.returncode == 0 and result.stderr == ""
  for name in ("v5e-1", "v5e-8", "v5e-16", "v4-8", "v4-32", "v6e-8", "v3-8", "v2-8", "h100", "a100-80gb", "a100-40gb"):
    assert f"\n{name} " in result.stdout
  assert "cloud.google.com/tpu/docs/v5e" in result.stdout and "15.75 GiB" in result.stdout


# The keys the compile report promises, and those jaxcse adds (how the bound was found, the cache, the compilers).
REPORT_KEYS = {
  "target",
  "num_devices",
  "memory_bytes",
  "fits",
  "flops_per_device",
  "bytes_accessed_per_device",
  "roofline_step_seconds",
  "sentences_per_second_bound",
  "collectives",
  "compile_seconds",
  "roofline_bound",
  "roofline_xla_bytes_seconds",
  "cost_source",
  "cached",
  "fingerprint",
  "compiler_versions",
  "peaks_per_device",
}


def test_cpu_target_report_then_the_same_compilation_from_the_cache(tiny_model_dir, tmp_path):
  args = [
    "--config",
    "base",
    f"--config.model.name={tiny_model_dir}",
    "--config.train.batch_size=8",
    "--config.data.max_seq_len=8",
    "--target",
    "cpu",
    "--cache_dir",
    str(tmp_path / "cache"),
  ]
  first = _command(*args, "--json", str(tmp_path / "first.json"))
  assert first.returncode == 0 and first.stderr == "", first.stderr
  # Progress as it goes (a large model takes minutes), then the report.
  progress = [line for line in first.stdout.splitlines() if not line.startswith("  still compiling: ")]
  assert progress[0] == "cpu: lowering the program ..." and progress[-1].endswith(" s")
  assert re.fullmatch(r"cpu: lowered in [\d.]+ s; compiling with XLA's CPU compiler \.\.\.", progress[1])
  assert re.fullmatch(r"cpu: compiled in [\d.]+ s", progress[2]) and "; compiled in " in progress[-1]
  report = json.load(open(tmp_path / "first.json"))
  assert REPORT_KEYS <= set(report) and report["fits"] and not report["cached"]
  assert set(report["memory_bytes"]) == {"argument", "output", "alias", "temp", "code", "total", "device_limit"}
  m = report["memory_bytes"]
  assert m["total"] == m["argument"] + m["output"] - m["alias"] + m["temp"] + m["code"]
  # The train state is donated: the new state reuses its buffers, at least the float32 params and Adam's two
  # moments (3 x 4 bytes a parameter).
  import jax

  from jaxcse.training import configured
  from jaxcse.compile import lowering
  from tests import helpers

  parameters = sum(
    math.prod(x.shape)
    for x in jax.tree.leaves(configured.model(helpers.tiny_config(tiny_model_dir, "", "base"), abstract=True).params)
  )
  assert m["alias"] >= 12 * parameters
  assert report["overrides"] == [a for a in args if a.startswith("--config.")]
  # The fingerprint names the program whatever the process traced before (this one traced much more).
  import jax

  from jaxcse.configs import base
  from jaxcse.compile import targets

  config = base.get_config()
  config.model.name, config.train.batch_size, config.data.max_seq_len = tiny_model_dir, 8, 8
  program = lowering.train_step_program(config, jax.devices("cpu"))
  assert (
    lowering.fingerprint(lowering.lower(program.jitted, program.args)[1], targets.get("cpu")) == report["fingerprint"]
  )
  second = _command(*args, "--json", str(tmp_path / "second.json"))
  cached = json.load(open(tmp_path / "second.json"))
  assert second.returncode == 0 and cached["cached"] and cached["fingerprint"] == report["fingerprint"]
  # A cache hit says so, and how long the compilation it stands for took when it ran.
  took = f"{report['compile_seconds']:.1f} s"
  assert re.fullmatch(
    rf"cpu: found in the compile cache \(.*\), read in [\d.]+ s \(the compilation itself took "
    rf"{re.escape(took)} when it ran\)",
    second.stdout.splitlines()[1],
  )
  assert second.stdout.splitlines()[-1].endswith(f"; from the compile cache (the compilation took {took} when it ran)")
  assert {k: v for k, v in cached.items() if k != "cached"} == {k: v for k, v in report.items() if k != "cached"}


def test_the_encoder_compiles_at_the_embedders_length_buckets_only(tiny_model_dir):
  from jaxcse.compile import lowering, targets
  from tests import helpers

  config = helpers.tiny_config(tiny_model_dir, "", "base", **{"eval.batch_size": 8})
  reports = lowering.compile_encoder(config, targets.get("cpu"), max_len=12, lengths=[12, 4])
  assert [(r["length"], r["batch_size"], r["program"]) for r in reports] == [(4, 8, "encode"), (12, 8, "encode")]
  assert reports[0]["flops_per_device"] < reports[1]["flops_per_device"]
  with pytest.raises(lowering.CompileError, match=r"inference lengths \[10\] are not length buckets up to 12"):
    lowering.compile_encoder(config, targets.get("cpu"), max_len=12, lengths=[10])


def test_a_long_compilation_says_it_is_still_running():
  import time

  from jaxcse.compile import lowering

  lines = []
  with lowering._still_running(lines.append, "compiling", every=0.05):
    time.sleep(0.18)
  assert 2 <= len(lines) <= 4 and all(re.fullmatch(r"  still compiling: 0m00s", line) for line in lines), lines
  with lowering._still_running(lines.append, "compiling", every=0.05):
    pass
  time.sleep(0.1)
  assert len(lines) <= 4  # Stopped with the block.


def test_bad_target_and_missing_compiler_are_one_line_errors():
  result = _command("--config", "base", "--target", "v9z-1")
  assert result.returncode == 1 and result.stderr.count("\n") == 1
  assert result.stderr.startswith("error: unknown target 'v9z-1'; choose one of cpu, v5e-1")
  import importlib.util

  if importlib.util.find_spec("libtpu") is None:  # The main test venv: no TPU compiler.
    result = _command("--config", "base", "--target", "v5e-1")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert 'needs libtpu: pip install "jaxcse[tpu]"' in result.stderr


def test_the_gpu_compiler_goes_where_only_jaxcse_compile_looks(monkeypatch, tmp_path):
  import types

  from jaxcse.compile import targets

  folder = tmp_path / "gpu-compiler"
  monkeypatch.setenv("JAXCSE_GPU_COMPILER_DIR", str(folder))
  monkeypatch.setattr(sys, "path", list(sys.path))
  assert targets.gpu_compiler_dir() == str(folder) and not targets.use_gpu_compiler()  # Not installed: untouched.
  calls = []

  def pip(command, **kwargs):
    calls.append(command)
    return types.SimpleNamespace(returncode=0, stderr="")

  if targets.jaxlib_too_old_for_gpus():
    with pytest.raises(targets.TargetError, match="needs jax and jaxlib >= "):
      targets.install_gpu_compiler(run=pip)
    return
  assert targets.install_gpu_compiler(run=pip) == str(folder)
  import importlib.metadata

  jaxlib = importlib.metadata.version("jaxlib")
  assert calls[0][-4:] == ["--target", str(folder), f"jax-cuda12-plugin=={jaxlib}", f"jax-cuda12-pjrt=={jaxlib}"]
  (folder / "jax_plugins").mkdir(parents=True)  # What pip leaves there.
  assert targets.use_gpu_compiler() and sys.path[0] == str(folder) and not targets.use_gpu_compiler()
  failed = lambda command, **kwargs: types.SimpleNamespace(
    returncode=1, stderr="Looking in indexes...\nERROR: No matching distribution found for x\n"
  )
  with pytest.raises(targets.TargetError, match=r"failed: ERROR: No matching distribution found for x$"):
    targets.install_gpu_compiler(run=failed)


if __name__ == "__main__":
  if sys.argv[1] == "drift":
    _drift_worker(*sys.argv[2:5])
