r"""Benchmarks of jaxcse against the PyTorch originals, each measured in one run.

  python -m jaxcse.bench train    [--shape tiny|minilm|base] [--batch_size 64] [--max_seq_len 32] [--profile]
  python -m jaxcse.bench encode   [--model all-MiniLM-L6-v2] [--input FILE] [--limit 2048] [--batch_size 64]
  python -m jaxcse.bench evaluate [--model all-MiniLM-L6-v2] [--tasks sts] --senteval_dir /path/to/SimCSE

Every benchmark runs jaxcse and its baseline in the same process, on the same
inputs and threads, excludes warm-up (compilation, first calls) from the
timings, and prints as its last line ``<name>: <x.xx>x``: baseline time over
jaxcse time, so above 1 means jaxcse is faster.

- ``train``: jaxcse's jitted train step (``train_step.make_train_step`` with the
  AdamW of ``train_step.make_optimizer``, SimCSE unsup config) against a PyTorch
  step in SimCSE's formulation: one ``BertModel`` forward over the stacked
  ``[2 * batch, len]`` views, [CLS] + MLP pooler, InfoNCE at temperature 0.05,
  gradient clipping at 1, ``torch.optim.AdamW`` with a linear schedule; both
  on randomly initialised weights of the shape. Also prints the model FLOPs
  utilisation of each against a float32 matmul peak measured in the same run.
- ``encode``: ``embedder.Embedder`` against sentence-transformers' ``encode``,
  same model, sentences and batch size; sentences per second.
- ``evaluate``: ``evaluate.evaluate_sts`` against SentEval driven as SimCSE's
  ``evaluation.py`` drives it (its batcher: a PyTorch ``AutoModel``, padding
  to the longest sentence of a batch, the same pooler), same model.

The baselines (PyTorch, sentence-transformers, SentEval) live in the
repository's ``benchmarks/baselines.py``, outside the package; this module
imports them lazily, so run it from a checkout with the ``torch`` extra
installed (``pip install -e ".[torch]"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import data as data_lib, embedder as embedder_lib, evaluate, hub, models, objectives, train_step


def _baselines():
  """``benchmarks.baselines`` of the repository checkout (torch, sentence-transformers, SentEval)."""
  try:
    from benchmarks import baselines
  except ImportError as e:
    raise SystemExit("error: the baselines are in the repository's benchmarks/ folder: run `python -m jaxcse.bench` "
                     f"from the root of a jaxcse checkout, with torch installed (pip install -e \".[torch]\"): {e}"
                     ) from None
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

    return BertConfig(vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
                      num_attention_heads=self.heads, intermediate_size=self.intermediate,
                      max_position_embeddings=512, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


SHAPES = {
    "tiny": Shape(layers=2, hidden=64, heads=2, intermediate=256, vocab=2000),
    "mini": Shape(layers=4, hidden=256, heads=4, intermediate=1024, vocab=8192),  # configs/pretrain_mlm.py
    "minilm": Shape(layers=6, hidden=384, heads=12, intermediate=1536),  # all-MiniLM-L6-v2
    "base": Shape(layers=12, hidden=768, heads=12, intermediate=3072),  # bert-base-uncased
}


def ratio_line(name: str, baseline_seconds: float, jaxcse_seconds: float) -> str:
  """The benchmark's last line: baseline time over jaxcse time (above 1 = jaxcse faster)."""
  return f"{name}: {baseline_seconds / jaxcse_seconds:.2f}x"


def machine_line() -> str:
  """Load and cores next to every measurement: a loaded machine slows both sides, not always equally."""
  load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
  return (f"machine: {os.cpu_count()} cpus, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")


def time_interleaved(fns: dict[str, Callable[[], None]], *, rounds: int, repeats: int) -> dict[str, list[float]]:
  """Seconds per call of each function, alternating between them every ``repeats`` calls.

  Interleaving spreads load from other processes over every side instead of
  letting it land on whichever ran during a busy spell.
  """
  times = {name: [] for name in fns}
  for r in range(rounds):
    names = list(fns) if r % 2 == 0 else list(reversed(fns))
    for name in names:
      for _ in range(repeats):
        t0 = time.perf_counter()
        fns[name]()
        times[name].append(time.perf_counter() - t0)
  return times


# --------------------------------------------------------------------------
# Machine peak.


def matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
  """Best float32 FLOP/s of an ``[n, n] @ [n, n]`` jitted jnp matmul (the machine's practical peak)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
  matmul = jax.jit(jnp.matmul)
  matmul(a, b).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    matmul(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2 * n**3 / best


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


def jaxcse_train_step(shape: Shape, ids: np.ndarray, mask: np.ndarray, *, steps: int, dtype=jnp.float32
                      ) -> tuple[Callable[[], None], Callable[[], float], Callable[[], None]]:
  """jaxcse's real step on a fresh random model: returns (run one step, last loss, release the state)."""
  from transformers import FlaxBertModel

  hf_config = shape.bert_config()
  backbone = FlaxBertModel(hf_config, seed=0, dtype=dtype, _do_init=False).module
  spec = models.ModelSpec(hf_config, None, backbone, models.PoolerSpec("cls", mlp_only_train=True))
  params = models.init_params(spec, seed=0)
  config = simcse_config(steps)
  tx = train_step.make_optimizer(config.train, steps)
  step_fn = jax.jit(train_step.make_train_step(config, spec, tx), donate_argnums=0)
  state = {"state": train_step.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)),
           "loss": None}
  batch = jax.device_put({"input_ids": ids[:, None], "attention_mask": mask[:, None]})

  def run():
    state["state"], metrics = step_fn(state["state"], batch)
    state["loss"] = metrics["loss"]
    state["loss"].block_until_ready()

  def release():
    state.clear()

  return run, lambda: float(state["loss"]), release


def profile_train_step(shape: Shape, ids: np.ndarray, mask: np.ndarray, repeats: int) -> None:
  """Times the parts of jaxcse's step (forward, forward+backward, whole step) and prints XLA's cost analysis."""
  from transformers import FlaxBertModel

  hf_config = shape.bert_config()
  backbone = FlaxBertModel(hf_config, seed=0, _do_init=False).module
  spec = models.ModelSpec(hf_config, None, backbone, models.PoolerSpec("cls", mlp_only_train=True))
  params = models.init_params(spec, seed=0)
  config = simcse_config(10)
  batch = {"input_ids": jnp.asarray(ids[:, None]), "attention_mask": jnp.asarray(mask[:, None])}
  module = spec.train_module
  rng = jax.random.key(0)
  objective = objectives.get(config.method)

  def loss_fn(p):
    return objective.loss(config, train_step.embed_views(module, p, batch, rng), rng, None)[0]

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
    print(f"profile: {name}: {statistics.median(times):.3f} s, XLA flops {cost.get('flops', float('nan')) / 1e9:.1f} G,"
          f" bytes accessed {cost.get('bytes accessed', float('nan')) / 1e9:.2f} GB")


def bench_train(args) -> str:
  torch_line = _baselines().set_threads(args.threads)
  shape = SHAPES[args.shape]
  ids, mask = random_batch(shape, args.batch_size, args.max_seq_len)
  print(machine_line())
  print(f"train: shape {args.shape} {shape}, batch {args.batch_size} (x2 views), length {args.max_seq_len}, "
        f"{torch_line}")
  peak = matmul_peak_flops(args.peak_size)
  print(f"peak: float32 {args.peak_size}x{args.peak_size} jnp matmul {peak / 1e9:.1f} GFLOP/s")
  if args.profile:
    profile_train_step(shape, ids, mask, args.repeats)
  steps = args.warmup + args.rounds * args.repeats
  dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[args.dtype]
  sides = {"jaxcse": jaxcse_train_step(shape, ids, mask, steps=steps, dtype=dtype),
           "pytorch": _baselines().torch_train_step(shape, ids, mask, steps=steps)}
  for name, (run, loss, _) in sides.items():
    for _ in range(args.warmup):
      run()
    print(f"warm-up: {name} loss after {args.warmup} steps {loss():.4f}")
  times = time_interleaved({name: side[0] for name, side in sides.items()}, rounds=args.rounds, repeats=args.repeats)
  flops = train_step_flops(shape, 2 * args.batch_size, args.max_seq_len)
  medians = {}
  for name, ts in times.items():
    medians[name] = statistics.median(ts)
    achieved = flops / medians[name]
    print(f"{name}: {medians[name]:.3f} s/step (median of {len(ts)}; min {min(ts):.3f}), "
          f"{achieved / 1e9:.1f} GFLOP/s, MFU {achieved / peak * 100:.1f}% of the measured peak")
  for _, _, release in sides.values():
    release()
  print(f"model FLOPs per step: {flops / 1e9:.1f} G; {machine_line()}")
  return ratio_line(f"train_{args.shape}", medians["pytorch"], medians["jaxcse"])


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


def jaxcse_pretrain_step(shape: Shape, ids: np.ndarray, *, steps: int, dtype=jnp.float32, dropout: float = 0.1):
  """jaxcse's MLM step (``configs/pretrain_mlm.py``) on a fresh model: (run one step, last loss, release)."""
  config = repo_config("pretrain_mlm", steps)
  config.data.max_seq_len = ids.shape[1]
  hf_config = shape.bert_config(dropout)
  spec, params = models.build_random(hf_config, _BenchTokenizer(), models.PoolerSpec("avg"), dtype=dtype,
                                     with_mlm_head=True)
  tx = train_step.make_optimizer(config.train, steps)
  step_fn = jax.jit(train_step.make_train_step(config, spec, tx), donate_argnums=0)
  state = {"state": train_step.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)),
           "loss": None}
  batch = jax.device_put({"input_ids": ids[:, None], "attention_mask": np.ones_like(ids)[:, None]})

  def run():
    state["state"], metrics = step_fn(state["state"], batch)
    state["loss"] = metrics["loss"]
    state["loss"].block_until_ready()

  return run, lambda: float(state["loss"]), state.clear


def bench_pretrain(args) -> str:
  torch_line = _baselines().set_threads(args.threads)
  shape = dataclasses.replace(SHAPES[args.shape], vocab=args.vocab or SHAPES[args.shape].vocab)
  ids = packed_batch(shape, args.batch_size, args.max_seq_len)
  predictions = math.ceil(0.15 * args.max_seq_len)
  tokens = args.batch_size * args.max_seq_len
  print(machine_line())
  print(f"pretrain: shape {args.shape} {shape}, dropout {args.dropout}, batch {args.batch_size} x length {args.max_seq_len} "
        f"({tokens} tokens/step), {torch_line}")
  peak = matmul_peak_flops(args.peak_size)
  print(f"peak: float32 {args.peak_size}x{args.peak_size} jnp matmul {peak / 1e9:.1f} GFLOP/s")
  steps = args.warmup + args.rounds * args.repeats
  dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[args.dtype]
  sides = {"jaxcse": jaxcse_pretrain_step(shape, ids, steps=steps, dtype=dtype, dropout=args.dropout),
           "pytorch": _baselines().torch_mlm_step(shape, ids, steps=steps, dropout=args.dropout)}
  for name, (run, loss, _) in sides.items():
    for _ in range(args.warmup):
      run()
    print(f"warm-up: {name} loss after {args.warmup} steps {loss():.4f}")
  times = time_interleaved({name: side[0] for name, side in sides.items()}, rounds=args.rounds, repeats=args.repeats)
  # jaxcse computes the output layer at the masked positions, PyTorch's BertForMaskedLM at every position.
  flops = {"jaxcse": pretrain_flops(shape, args.batch_size, args.max_seq_len, predictions),
           "pytorch": pretrain_flops(shape, args.batch_size, args.max_seq_len, args.max_seq_len)}
  medians = {}
  for name, ts in times.items():
    medians[name] = statistics.median(ts)
    achieved = flops[name] / medians[name]
    print(f"{name}: {medians[name]:.3f} s/step (median of {len(ts)}; min {min(ts):.3f}), {tokens / medians[name]:.0f} "
          f"tokens/s, {flops[name] / 1e9:.1f} GFLOP/step, MFU {achieved / peak * 100:.1f}% of the measured peak")
  for _, _, release in sides.values():
    release()
  print(machine_line())
  return ratio_line(f"pretrain_{args.shape}", medians["pytorch"], medians["jaxcse"])


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
  torch_line = _baselines().set_threads(args.threads)
  path = hub.resolve_model_path(args.model)
  input_path = args.input or os.path.join(data_lib.data_dir(args.data_dir), "corpora", "wiki_offline.txt")
  sentences = read_sentences(input_path, args.limit)
  run_st, max_seq_len = _baselines().sentence_transformers_encode(path, sentences, batch_size=args.batch_size,
                                                                  max_seq_len=args.max_seq_len or None)
  spec, params = models.load_pretrained(path, models.PoolerSpec("avg"))
  embedder = embedder_lib.Embedder(spec, "avg", batch_size=args.batch_size, max_seq_len=max_seq_len)
  print(machine_line())
  print(f"encode: {len(sentences)} sentences of {input_path}, model {args.model}, batch {args.batch_size}, "
        f"max_seq_len {max_seq_len}, {torch_line}")

  def run_jaxcse():
    out = embedder(sentences, params)
    return out / np.linalg.norm(out, axis=1, keepdims=True)  # all-MiniLM-L6-v2's pipeline ends with Normalize.

  ours, theirs = run_jaxcse(), run_st()  # Warm-up: compiles every bucket, loads every lazy module.
  print(f"agreement: max |jaxcse - sentence-transformers| over unit embeddings {np.abs(ours - theirs).max():.2e}")
  times = time_interleaved({"jaxcse": run_jaxcse, "sentence-transformers": run_st}, rounds=args.rounds,
                           repeats=args.repeats)
  medians = {name: statistics.median(ts) for name, ts in times.items()}
  for name, t in medians.items():
    print(f"{name}: {len(sentences) / t:.1f} sentences/s ({t:.3f} s median of {len(times[name])})")
  print(machine_line())
  return ratio_line("encode", medians["sentence-transformers"], medians["jaxcse"])


# --------------------------------------------------------------------------
# STS evaluation.


def bench_evaluate(args) -> str:
  import logging

  torch_line = _baselines().set_threads(args.threads)
  logging.getLogger().setLevel(logging.WARNING)  # SentEval logs every batch at INFO.
  root = data_lib.data_dir(args.data_dir)
  tasks = evaluate.expand_tasks(args.tasks)
  tasks = [t for t in tasks if t in evaluate.STS_TASKS]
  path = hub.resolve_model_path(args.model)
  baselines = _baselines()
  senteval_dir = baselines.senteval_checkout(args.senteval_dir)
  spec, params = models.load_pretrained(path, models.PoolerSpec(args.pooler))
  embed_with = embedder_lib.Embedder(spec, args.pooler, batch_size=args.batch_size)

  def embedder(sentences):
    return embed_with(sentences, params)

  run_senteval = baselines.senteval_sts(senteval_dir, root, path, args.pooler, tasks, args.batch_size)
  print(machine_line())
  print(f"evaluate: tasks {tasks}, model {args.model}, pooler {args.pooler}, batch {args.batch_size}, "
        f"{torch_line}")

  results = {}

  def run_jaxcse():
    results["jaxcse"] = evaluate.summarize(evaluate.evaluate_sts(embedder, root, tasks))

  def run_se():
    raw = run_senteval()
    results["senteval"] = {t: (raw[t]["all"]["spearman"]["all"] if t.startswith("STS1")
                               else raw[t]["test"]["spearman"].correlation) * 100 for t in tasks}

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


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jaxcse.bench", description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="benchmark", required=True)

  p = sub.add_parser("train", help="train step vs SimCSE's PyTorch step")
  p.add_argument("--shape", choices=sorted(SHAPES), default="minilm")
  p.add_argument("--batch_size", type=int, default=64)
  p.add_argument("--max_seq_len", type=int, default=32)
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per side (compilation, allocator)")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--repeats", type=int, default=3, help="timed steps per side per round")
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="jaxcse's compute dtype (params stay float32); the PyTorch side is float32")
  p.add_argument("--peak_size", type=int, default=2048, help="side of the square matmul that measures the peak")
  p.add_argument("--profile", action="store_true", help="also time forward and forward+backward with XLA's costs")

  p = sub.add_parser("pretrain", help="MLM pretraining step vs PyTorch BertForMaskedLM")
  p.add_argument("--shape", choices=sorted(SHAPES), default="mini")
  p.add_argument("--vocab", type=int, default=0, help="vocabulary size (0: the shape's)")
  p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout on both sides")
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--max_seq_len", type=int, default=128)
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per side (compilation, allocator)")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--repeats", type=int, default=3, help="timed steps per side per round")
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="jaxcse's compute dtype (params stay float32); the PyTorch side is float32")
  p.add_argument("--peak_size", type=int, default=2048, help="side of the square matmul that measures the peak")

  p = sub.add_parser("encode", help="Embedder vs sentence-transformers encode")
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
  p.add_argument("--tasks", default="sts", help="sts, or a comma-separated list of STS12..16, STSBenchmark, SICKRelatedness")
  p.add_argument("--senteval_dir", default=None,
                 help="a SimCSE checkout (its SentEval/ copy); default $JAXCSE_SENTEVAL_DIR")
  p.add_argument("--batch_size", type=int, default=128, help="sentences per batch on both sides (SentEval's default)")
  p.add_argument("--rounds", type=int, default=1)

  for p in sub.choices.values():
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    p.add_argument("--data_dir", default=None, help=f"data root (default ${data_lib.DATA_DIR_ENV})")
  args = parser.parse_args(argv)
  line = {"train": bench_train, "pretrain": bench_pretrain, "encode": bench_encode,
          "evaluate": bench_evaluate}[args.benchmark](args)
  print(line, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
