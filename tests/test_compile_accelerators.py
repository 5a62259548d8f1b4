"""Every method compiled for a TPU slice and a GPU that are not here: libtpu and XLA's GPU compiler, on this CPU.

Needs ``pip install -e ".[aot]"`` (libtpu, ptxas) and ``jaxcse-compile --install_gpu_compiler`` (jax's CUDA plugin,
outside site-packages): .ci/run installs them in a second venv, which sees the main one's packages, and runs this
file there with ``JAX_PLATFORMS=cpu``. Elsewhere it is skipped.
Compilations are found again by fingerprint in ``$JAXCSE_COMPILE_CACHE`` when set (CI keeps one between runs).

The programs are the trainer's own (tests/test_compile.py checks the command lowers exactly what the trainer
runs), on the tiny random BERT of tests/helpers.py: what is tested is that each method's step, with GradCache,
gradient checkpointing and bfloat16, compiles for the targets and reads back right, not BERT-base's numbers
(those are experiments/aot/).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from jaxcse.compile import targets as _targets  # noqa: E402  (jax-free: only finds the CUDA plugin installed for compiling)


def _gpu_compiler_missing() -> str | None:
  """Why this jaxlib cannot compile for a GPU (the ranges' floor, Colab's jax 0.7.2), or None."""
  too_old = _targets.jaxlib_too_old_for_gpus()
  return f"jaxlib {too_old} < {_targets.GPU_COMPILE_MIN_JAXLIB}: no device-less GPU compile" if too_old else None


_targets.use_gpu_compiler()  # As jaxcse-compile does, before jax starts.
if importlib.util.find_spec("libtpu") is None or (
  importlib.util.find_spec("jax_cuda12_plugin") is None and not _gpu_compiler_missing()
):
  pytest.skip(
    'needs libtpu (pip install -e ".[aot]") and jax\'s CUDA plugin (jaxcse-compile --install_gpu_compiler);'
    " .ci/run installs both, in a second venv",
    allow_module_level=True,
  )
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # Before jax starts: never look for a TPU or GPU to run on.

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU, GPU = "v5e-8", "h100"  # Kaggle's TPU (8 devices) and the GPU most rented.
CACHE = os.environ.get("JAXCSE_COMPILE_CACHE") or None

# Every method, with the features that change the step spread over them: (config file, overrides).
METHODS = {
  "simcse+bf16+checkpointing": ("base", {"model.dtype": "bfloat16", "model.gradient_checkpointing": True}),
  "simcse_sup_hard_negatives+grad_cache": (
    "simcse_sup",
    {"train.grad_cache_chunk": 8, "loss.hard_negative_weight": 1.0},
  ),
  "mixcse+grad_cache": ("mixcse", {"train.grad_cache_chunk": 8}),
  "dclr+grad_cache": ("dclr", {"train.grad_cache_chunk": 8}),
  "dclr_as_released": ("dclr_as_released", {}),
  "pretrain_mlm": ("pretrain_mlm", {}),
}


@pytest.fixture(scope="module")
def devices():
  """The compile-only devices of a target, built once per module when first asked for."""
  from jaxcse.compile import targets

  built = {}

  def of(name: str):
    if targets.get(name).platform == "gpu" and _gpu_compiler_missing():
      pytest.skip(_gpu_compiler_missing())
    if name not in built:
      built[name] = targets.devices(targets.get(name))
    return built[name]

  return of


def _config(model_dir: str, name: str):
  from tests import helpers

  config_name, overrides = METHODS[name]
  config = helpers.tiny_config(
    model_dir, "", config_name, **{"train.batch_size": 16, "data.max_seq_len": 8, **overrides}
  )
  if config_name == "pretrain_mlm":  # The tiny BERT's shape, from random init with the shipped 8k tokenizer.
    arch = config.model.architecture
    arch.num_hidden_layers, arch.hidden_size, arch.num_attention_heads, arch.intermediate_size = 2, 32, 2, 64
  return config


@pytest.mark.parametrize("target", [TPU, GPU])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_compiles_for_a_tpu_slice_and_a_gpu(tiny_model_dir, devices, method, target):
  from jaxcse.compile import lowering, targets

  config = _config(tiny_model_dir, method)
  report = lowering.compile_train_step(config, targets.get(target), devices=devices(target), cache_dir=CACHE)
  assert report["fits"] and report["num_devices"] == (8 if target == TPU else 1)
  assert report["batch_shape"] == [16, 3 if method.startswith("simcse_sup") else 1, 8]
  # The donated train state comes back in place, and the memory adds up.
  m = report["memory_bytes"]
  assert (
    0 < m["alias"] <= m["output"] and m["total"] == m["argument"] + m["output"] - m["alias"] + m["temp"] + m["code"]
  )
  # Pinned: the device-less GPU executable has no cost analysis of its own; the HLO analysis stands in.
  assert report["flops_per_device"] > 0 and report["bytes_accessed_per_device"] > 0
  assert report["cost_source"] == (
    "the compiler's cost analysis" if target == TPU else "XLA's HLO cost analysis of the optimized module"
  )
  assert report["roofline_step_seconds"] > 0 and report["sentences_per_second_bound"] > 0
  collectives = report["collectives"]
  if target == GPU:
    assert collectives == {}  # One device: nothing to exchange.
  else:
    assert collectives.get("all-reduce", 0) >= 1  # The gradients, summed over the 8 devices.
    if method != "pretrain_mlm":  # The in-batch negatives of every device, gathered for the global batch's loss.
      assert collectives.get("all-gather", 0) >= 1


def test_the_gpu_backward_scatters_only_the_word_table_and_in_float32(tiny_model_dir, devices):
  """The GPU program of a bfloat16 step: the word embeddings' gradient is its one scatter over a table, in float32
  (bfloat16 scatter-adds are 16-bit atomics, slow where many tokens hit one entry); the positions' and token
  types' gradients are reductions over the batch."""
  from jaxcse.compile import analysis, lowering

  config = _config(tiny_model_dir, "simcse+bf16+checkpointing")
  program = lowering.train_step_program(config, devices(GPU))
  found = analysis.scatters(program.jitted.lower(*program.args).compile().as_text())
  assert found and all(s.dtype != "bf16" for s in found), found
  tables = [s for s in found if "/embeddings/" in s.op_name]
  assert [(s.operand, s.op_name.split("/embeddings/")[1].split("/")[0]) for s in tables] == [
    ("f32[30522,32]", "word_embeddings")
  ], found


def test_a_multi_host_slice_compiles_the_global_batch_over_its_hosts(tiny_model_dir):
  from jaxcse.compile import lowering, targets

  target = targets.get("v5e-16")
  found = targets.devices(target)
  assert sorted({d.process_index for d in found}) == [0, 1, 2, 3]  # 4 hosts of 4 chips: 4 processes.
  config = _config(tiny_model_dir, "simcse+bf16+checkpointing")
  config.train.batch_size = 32
  report = lowering.compile_train_step(config, target, devices=found, cache_dir=CACHE)
  assert report["fits"] and report["num_devices"] == 16 and report["num_hosts"] == 4
  assert report["collectives"].get("all-gather", 0) >= 1 and report["collectives"].get("all-reduce", 0) >= 1


def test_modernbert_compiles_for_a_tpu_chip(tmp_path):
  """configs/modernbert.py on a tiny random ModernBERT (rotary, local/global attention, GeGLU) for Colab's v5e-1."""
  from jaxcse.compile import lowering, targets
  from tests import helpers

  folder = helpers.make_tiny_modernbert_dir(str(tmp_path / "tiny_modernbert"))
  config = helpers.tiny_config(folder, "", "modernbert", **{"train.batch_size": 16, "model.dtype": "bfloat16"})
  target = targets.get("v5e-1")
  report = lowering.compile_train_step(config, target, devices=targets.devices(target), cache_dir=CACHE)
  assert report["fits"] and report["num_devices"] == 1 and report["batch_shape"] == [16, 1, 16]
  assert report["flops_per_device"] > 0


def test_the_usable_hbm_in_the_table_is_libtpus():
  # A program far too large for any chip: libtpu's refusal names the HBM it makes available, as the table has it.
  import jax
  import jax.numpy as jnp

  from jaxcse.compile import lowering, targets

  for name in ("v5e-1", "v6e-1", "v4-8", "v5p-8", "v3-8", "v2-8"):
    target = targets.get(name)
    mesh = jax.sharding.Mesh(targets.devices(target)[:1], ("data",))
    big = jax.ShapeDtypeStruct(
      (64 * 2**30 // 4,), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )
    with pytest.raises(lowering.OutOfMemory) as refused:
      lowering.compile_facts(jax.jit(lambda x: x * 2), (big,), target)
    available = float(re.search(r"exceeds available HBM \(([\d.]+)G\)", str(refused.value)).group(1))
    assert available == target.peaks.tpu_usable_gib, name


def _command(*args, env=None):
  env = {**os.environ, "PYTHONPATH": REPO, **(env or {})}
  return subprocess.run(
    [sys.executable, "-m", "jaxcse.compile", *args], capture_output=True, text=True, env=env, timeout=1200, cwd=REPO
  )


def test_a_step_too_large_for_the_target_is_one_line_and_a_nonzero_exit(tiny_model_dir, tmp_path):
  # On a TPU the compiler itself refuses: the tiny BERT with a vocabulary of 40M words (a config.json alone, no
  # weights) has 1.28e9 embedding parameters, 5.1 GB in float32, and the train state holds them 3 times (params
  # and Adam's two moments) plus their gradient: over the 15.75 GiB of a v5e chip. On a GPU a program compiles
  # whatever its size, and its total is compared with the usable memory: 0.01% of the H100's here (8.5 MB, less
  # than the tiny BERT's train state).
  config = json.load(open(os.path.join(tiny_model_dir, "config.json")))
  (tmp_path / "huge").mkdir()
  json.dump({**config, "vocab_size": 40_000_000}, open(tmp_path / "huge" / "config.json", "w"))
  for target, model, env in (
    ("v5e-1", str(tmp_path / "huge" / "config.json"), {}),
    ("h100", tiny_model_dir, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.0001"}),
  ):
    out = tmp_path / f"{target}.json"
    result = _command(
      "--config",
      "base",
      f"--config.model.name={model}",
      "--config.train.batch_size=8",
      "--config.data.max_seq_len=8",
      "--target",
      target,
      "--json",
      str(out),
      env=env,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"does not fit {target}: "), result.stderr
    report = json.load(open(out))
    assert report["fits"] is False and report["target"] == target
    if target == "v5e-1":
      assert "the compiler ran out of memory" in result.stderr and "RESOURCE_EXHAUSTED" in report["error"]
    else:
      assert report["memory_bytes"]["total"] > report["memory_bytes"]["device_limit"] == int(0.0001 * 84942979072)


def test_the_encoders_forward_compiles_at_each_length_bucket(tiny_model_dir, tmp_path):
  for target in (TPU, GPU):
    out = tmp_path / f"{target}.json"
    result = _command(
      "--config",
      "base",
      f"--config.model.name={tiny_model_dir}",
      "--config.eval.batch_size=16",
      "--target",
      target,
      "--inference",
      "--inference_max_len=8",
      "--json",
      str(out),
    )
    assert result.returncode == 0, result.stderr
    report = json.load(open(out))
    assert [r["length"] for r in report["lengths"]] == [4, 8]  # tokenization.LENGTH_BUCKETS up to 8.
    assert all(r["fits"] and r["program"] == "encode" and r["batch_size"] == 16 for r in report["lengths"])
    assert all(r["collectives"] == {} for r in report["lengths"])  # Replicated: every device embeds the batch.


# libtpu takes 5-15 minutes of a CPU core for each of these programs (BERT-base's and BERT-Mini's step for a v5e),
# more than CI can spend on them. What it answered for these exact programs is committed here, as the command's
# compile cache holds it (one JSON per compilation, named by its fingerprint: the lowered program, the target, the
# compilers' versions and flags): the test lowers the program again (seconds), must find its fingerprint there,
# and runs the command, which reads the answer back. A change to a program (the model, the step, jax or libtpu)
# misses, and the test fails with the command that compiles it again and writes the new entry.
NOTEBOOK_RUNS = os.path.join(REPO, "experiments", "aot", "notebook_runs")


@pytest.mark.parametrize("target", ["v5e-1", "v5e-8"])
@pytest.mark.parametrize("config", ["colab_tpu", "quickstart"])
def test_the_notebooks_runs_fit_todays_colab_and_kaggle_tpus(config, target, tmp_path):
  # notebooks/tpu.ipynb trains configs/colab_tpu.py (BERT-base, global batch 64, bfloat16) and
  # notebooks/quickstart.ipynb configs/quickstart.py (the shipped BERT-Mini, batch 64), as they are.
  import importlib
  import shutil

  from jaxcse.compile import lowering, targets

  program = lowering.train_step_program(
    importlib.import_module(f"jaxcse.configs.{config}").get_config(), targets.devices(targets.get(target))
  )
  key = lowering.fingerprint(lowering.lower(program.jitted, program.args)[1], targets.get(target))
  if not os.path.exists(os.path.join(NOTEBOOK_RUNS, key + ".json")):
    pytest.fail(
      f"{config}'s step for {target} is not the program whose compilation experiments/aot/notebook_runs holds "
      f"(it changed, or jax or libtpu did): compile it again, in .ci/run's .venv-aot (minutes), with "
      f"`jaxcse-compile --config {config} --target {target} --cache_dir experiments/aot/notebook_runs`, "
      f"and remove the entries no test finds any more"
    )
  cache = tmp_path / "cache"
  shutil.copytree(NOTEBOOK_RUNS, cache)  # The command may write to its cache: never to the checkout.
  out = tmp_path / "report.json"
  result = _command("--config", config, "--target", target, "--json", str(out), "--cache_dir", str(cache))
  assert result.returncode == 0 and result.stderr == "", result.stderr
  report = json.load(open(out))
  assert report["cached"] and report["fingerprint"] == key
  assert report["fits"] and report["batch_size"] == 64 and report["num_devices"] == int(target.split("-")[1])


def test_every_recorded_notebook_compilation_is_one_a_test_finds():
  """No stale entries: the four programs above, each once (the test above fails before this one could miss one)."""
  entries = sorted(f for f in os.listdir(NOTEBOOK_RUNS) if f.endswith(".json"))
  assert len(entries) == 4, entries


@pytest.mark.skipif(_gpu_compiler_missing() is None, reason="this jaxlib compiles for GPUs")
def test_a_jaxlib_too_old_for_gpu_compiles_says_so_in_one_line(tiny_model_dir, tmp_path):
  # At the ranges' floor (Colab's TPU image, jaxlib 0.7.2) TPU targets compile and GPU targets cannot: the command
  # says which jaxlib is needed instead of XLA's proto parse error or the CUDA plugin's start-up traceback.
  result = _command("--config", "base", f"--config.model.name={tiny_model_dir}", "--target", "h100")
  assert result.returncode == 1, result.stderr
  assert result.stderr.count("\n") == 1 and "needs jax and jaxlib >= " in result.stderr, result.stderr


def _main_venv_python() -> str | None:
  """The interpreter of the venv whose packages this one sees through .ci/run's .pth file (it has no compiler)."""
  import site

  for folder in site.getsitepackages():
    pth = os.path.join(folder, "jaxcse-main-venv.pth")
    if os.path.exists(pth):
      main_site = open(pth).read().strip()  # .../venv/lib/pythonX.Y/site-packages
      python = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(main_site))), "bin", "python")
      return python if os.path.exists(python) else None
  return None


def test_the_compile_extra_changes_nothing_another_command_prints(tiny_model_dir, tmp_path):
  # This venv has libtpu, ptxas and (for jaxcse-compile only) the CUDA plugin; the main one none of them. On a
  # machine without accelerators jaxcse-encode must print the same in both (before: 36 lines of plugin errors).
  main_python = _main_venv_python()
  if main_python is None:
    pytest.skip("needs .ci/run's two venvs (the .pth file jaxcse-main-venv.pth)")
  (tmp_path / "in.txt").write_text("A man plays a guitar.\nA cat sleeps.\n")
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # Nobody chose: what a user has.
  env["PYTHONPATH"] = REPO
  printed = {}
  for name, python in (("without", main_python), ("with", sys.executable)):
    result = subprocess.run(
      [
        python,
        "-m",
        "jaxcse.encode",
        "--model",
        tiny_model_dir,
        "--pooler",
        "avg",
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / f"{name}.npy"),
      ],
      capture_output=True,
      text=True,
      env=env,
      cwd=REPO,
      timeout=600,
    )
    assert result.returncode == 0, result.stderr
    text = (result.stdout + result.stderr).replace(f"{name}.npy", "OUT.npy").replace(f"{name}.json", "OUT.json")
    printed[name] = re.sub(r"(?:[\d.e+]+ sent/s, )?elapsed \S+", "RATE", text)  # Timings differ run to run.
  assert printed["with"] == printed["without"]
  assert "cuda" not in printed["with"].lower() and "tpu" not in printed["with"].lower(), printed["with"]
