"""Test helpers: a tiny BERT model folder, a tiny training config, what tests read back from a workdir, the faults
they inject, and a one-step runner for device tests.

``python tests/helpers.py one_step MODEL_DIR DATA_DIR OUT.npz`` runs one train
step on however many devices JAX sees (set XLA_FLAGS to simulate several) and
saves the loss and updated params.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bert-base-uncased's tokenizer (its README): the tiny test models' vocabulary, with no model package installed.
BERT_UNCASED_TOKENIZER = os.path.join(REPO, "tests", "fixtures", "bert_uncased_tokenizer")
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def shared_data_dir() -> str:
  """The real data root: $JAXCSE_DATA_DIR, else ../shared/data next to the repo; skips the test without it."""
  import pytest  # Here, not above: the notebooks and the device runner import this module without pytest.

  root = os.environ.get("JAXCSE_DATA_DIR") or SHARED_DATA
  if not os.path.isdir(os.path.join(root, "senteval", "downstream")):
    pytest.skip(f"SentEval data not found under {root}")
  return root


def write_text(path: str, text: str) -> None:
  """Writes ``text`` as UTF-8, creating the folders on the way."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def write_jsonl(path: str, records: list[dict]) -> None:
  """Writes one JSON object a line, as the trainer writes metrics.jsonl."""
  import json

  write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def write_synthetic_run(workdir: str, offset: float, *, mixcse: bool = True, steps: int = 40) -> None:
  """A metrics.jsonl with every key the trainer logs, training dynamics included, and the trainer's layout."""
  import math

  records = []
  for step in range(0, steps + 1, 5):
    if step:
      record = {
        "step": step,
        "loss": 2.0 * math.exp(-step / 15) + 0.1,
        "grad_norm": 1.0,
        "pos_score": 0.8 + 0.004 * step,
        "neg_score": 0.4 - 0.008 * step,
        "steps_per_sec": 3.0,
        "epoch": step / 100,
      }
      record["contrastive_loss"] = record["loss"]
      if mixcse:
        record["mix_score"] = 0.6 - 0.01 * step
      records.append(record)
    if step % 10 == 0:
      t = step / steps
      records.append(
        {
          "step": step,
          "eval/metric": 0.6 + 0.2 * t + offset,
          "eval/stsb_dev": 0.6 + 0.2 * t + offset,
          "eval/sickr_dev": 0.55 + 0.1 * t,
          "eval/omega_deg": 70 + 40 * t,
          "eval/alignment": 0.1 + 0.1 * t + offset,
          "eval/uniformity": -1.5 - t - offset,
          "eval/seconds": 1.0,
        }
      )
  write_jsonl(os.path.join(workdir, "metrics.jsonl"), records)


def unused_port() -> int:
  """A local TCP port nothing listens on: bound, then closed again on return (free to listen on; refuses a
  connection, like a machine offline)."""
  import socket

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def random_normal(seed: int, *shape: int):
  """Standard normal float32 values of ``shape``, the same for the same seed."""
  import numpy as np

  return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def numeric_embed(sentences):
  """A fake encoder: sentence "x y" -> the vector (float(x), float(y)), so cosines can be computed by hand."""
  import numpy as np

  return np.array([[float(t) for t in s.split()] for s in sentences], np.float32)


def make_tiny_model_dir(path: str, seed: int = 0, **config_changes) -> str:
  """A randomly initialised 2-layer BERT (hidden 32) with bert-base-uncased's tokenizer, saved as safetensors.

  Built with jaxcse's own BERT from the key transformers' Flax BERT ``(config, seed=0)`` initialised with (the
  first half of ``PRNGKey(0)`` split): the same weights, bit for bit, as the tiny model earlier versions saved.
  Another ``seed``: another model of the same shape and vocabulary (``PRNGKey(seed)``'s first half);
  ``config_changes``: ``BertConfig`` fields changed (another shape).
  """
  import jax
  import numpy as np
  from safetensors.numpy import save_file
  from transformers import AutoTokenizer, BertConfig

  from jaxcse.models import bert, weights

  shape = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
  )
  config = BertConfig(**{**shape, **config_changes})
  ids = np.ones((1, 4), np.int32)
  params = bert.BertModel(config).init(jax.random.split(jax.random.PRNGKey(seed))[0], ids, ids)["params"]
  os.makedirs(path, exist_ok=True)
  config.architectures = ["BertModel"]
  config.save_pretrained(path)
  save_file(weights.to_state(params), os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
  AutoTokenizer.from_pretrained(BERT_UNCASED_TOKENIZER).save_pretrained(path)
  return path


def make_tiny_modernbert_dir(path: str) -> str:
  """A randomly initialised 3-layer ModernBERT (hidden 32, local window 8) with bert-base-uncased's tokenizer.

  jaxcse's own ModernBERT init, saved as a ModernBertForMaskedLM folder (safetensors, PyTorch names), as the hub's
  ModernBERT checkpoints are. Layers 0 and 3 would be global, 1 and 2 local.
  """
  import jax
  import numpy as np
  from safetensors.numpy import save_file
  from transformers import AutoTokenizer, ModernBertConfig

  from jaxcse.models import modernbert, weights

  tokenizer = AutoTokenizer.from_pretrained(BERT_UNCASED_TOKENIZER)
  config = ModernBertConfig(
    vocab_size=len(tokenizer),
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=2,
    max_position_embeddings=128,
    local_attention=8,
    pad_token_id=tokenizer.pad_token_id,
    cls_token_id=tokenizer.cls_token_id,
    sep_token_id=tokenizer.sep_token_id,
    bos_token_id=tokenizer.cls_token_id,
    eos_token_id=tokenizer.sep_token_id,
  )
  ids = np.ones((1, 4), np.int32)
  params = modernbert.ModernBertForMaskedLM(config).init(jax.random.key(0), ids, ids)["params"]
  os.makedirs(path, exist_ok=True)
  config.architectures = ["ModernBertForMaskedLM"]
  config.save_pretrained(path)
  save_file(weights.to_state(params), os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
  tokenizer.save_pretrained(path)
  return path


def make_tiny_mlm_dir(model_dir: str, path: str) -> str:
  """The tiny BERT with a (random) masked-LM head, saved as a BertForMaskedLM folder (jaxcse's own export)."""
  from jaxcse import export_hf, models

  spec, params = models.load_pretrained(
    model_dir, models.PoolerSpec("avg"), with_mlm_head=True, mlm_head="tied", seed=0
  )
  export_hf.export_masked_lm(spec, params, path)
  return path


CONFIG_NAMES = (
  "base",
  "quickstart",
  "quickstart_minilm",
  "simcse_sup",
  "mixcse",
  "dclr",
  "dclr_roberta",
  "dclr_as_released",
  "colab_tpu",
  "modernbert",
  "pairs",
)


def tiny_config(model_dir: str, data_dir: str, config_name: str = "base", **overrides):
  """A config file of configs/ on the tiny model and corpus: batch 8, length 16, a few steps."""
  import importlib

  config = importlib.import_module(f"jaxcse.configs.{config_name}").get_config()
  config.model.name = model_dir
  config.data.data_dir = data_dir
  pair_config = config.data.get("csv_format") == "sentence_transformers"  # configs/pairs.py: its data is pairs.
  config.data.train = (
    "corpora/small_nli.csv" if config.data.train.endswith(".csv") or pair_config else "corpora/small.txt"
  )
  config.data.max_seq_len = 16
  config.train.batch_size = 8
  config.train.max_steps = 6
  config.train.learning_rate = 1e-3
  config.train.log_every = 2
  config.eval.every = 3
  config.eval.batch_size = 32
  config.checkpoint.every = 3
  if config.method == "dclr":
    config.dclr.complementary_model = model_dir  # Any HF folder or jaxcse workdir will do.
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return config


# The train command's flags for tiny_config: every value it sets on configs/base.py (the base config's dclr
# complementary model aside).
TINY_CONFIG_KEYS = (
  "model.name",
  "data.data_dir",
  "data.train",
  "data.max_seq_len",
  "train.batch_size",
  "train.max_steps",
  "train.learning_rate",
  "train.log_every",
  "eval.every",
  "eval.batch_size",
  "checkpoint.every",
)


def simulated_devices(n: int) -> str:
  """``XLA_FLAGS`` for a subprocess that simulates ``n`` CPU devices, keeping the flags this process was given
  (.ci/run compiles the tests' programs with LLVM's optimization level 1: docs/development.md)."""
  kept = [
    f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")
  ]
  return " ".join([*kept, f"--xla_force_host_platform_device_count={n}"])


def train_cli_args(workdir: str, model_dir: str, data_dir: str, **overrides) -> list[str]:
  """The arguments of ``python -m jaxcse.train`` for ``tiny_config(model_dir, data_dir, **overrides)``."""
  import functools
  import operator

  config = tiny_config(model_dir, data_dir, **overrides)
  args = ["--config", os.path.join(REPO, "configs", "base.py"), "--workdir", workdir]
  for key in dict.fromkeys((*TINY_CONFIG_KEYS, *overrides)):
    args.append(f"--config.{key}={functools.reduce(operator.getitem, key.split('.'), config)}")
  return args


# 9 steps, an evaluation every 3, latest every 4. At lr 3e-3 the tiny model's STS-B dev improves at every
# evaluation (-0.170, -0.167, -0.166), so each saves a best checkpoint. The ``reference`` fixture's run.
SCHEDULE = {
  "train.max_steps": 9,
  "eval.every": 3,
  "checkpoint.every": 4,
  "train.learning_rate": 3e-3,
  "train.log_every": 1,
}


# --------------------------------------------------------------------------
# Loss parity with sentence-transformers (tests/test_ranking_losses.py, tests/test_distill_losses.py): its
# ``compute_loss_from_embeddings`` in torch float64 against ours under float64, loss and gradient w.r.t. every
# embedding.

# Float64 on both sides: the two compute the same sums in another order (and s-t normalises with a 1e-12 norm
# clamp, we with 1e-8, which random vectors never reach), so they differ by ~1e-15 relative; any difference in the
# formula (a column left out, a mean over the wrong axis, a mask or penalty on the wrong cell, a sign) moves the
# loss by 1e-3 or more.
PARITY_RTOL = 1e-10


def parity_embeddings(batch: int, columns: int, dim: int = 8, seed: int = 0):
  """Standard normal float64 embeddings ``[batch, columns, dim]``, the same for the same seed."""
  import numpy as np

  return np.random.default_rng(seed).normal(size=(batch, columns, dim))


def st_value_and_grad(compute, z, labels=None) -> tuple:
  """``compute(columns, labels)`` -> s-t's loss (or its dict of loss terms, summed as its trainer sums them), in
  torch float64: (loss, its gradient w.r.t. ``z`` ``[batch, columns, dim]``). ``labels`` None: passed as None."""
  import pytest

  torch = pytest.importorskip("torch")
  embeddings = torch.tensor(z, dtype=torch.float64, requires_grad=True)
  columns = [embeddings[:, c] for c in range(z.shape[1])]
  label_tensor = None if labels is None else torch.tensor(labels, dtype=torch.float64)
  loss = compute(columns, label_tensor)
  if isinstance(loss, dict):
    loss = sum(loss.values())
  loss.backward()
  return float(loss.detach()), embeddings.grad.numpy()


def ours_value_and_grad(fn, z) -> tuple:
  """``fn(z)`` and its gradient under float64 (asserted: a float32 value would not test the claim)."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from jaxcse.core import compat

  with compat.enable_x64(True):
    value, grad = jax.value_and_grad(fn)(jnp.asarray(z, jnp.float64))
    assert value.dtype == jnp.float64
    return float(value), np.asarray(grad)


def assert_parity(ours: tuple, theirs: tuple) -> None:
  """Loss and gradient within ``PARITY_RTOL``; the gradient's largest entries set its scale (an entry near 0
  differs by the same absolute rounding), and that scale is not trivial: a loss that does not depend on the
  embeddings tests nothing."""
  import numpy as np

  np.testing.assert_allclose(ours[0], theirs[0], rtol=PARITY_RTOL, atol=0)
  np.testing.assert_allclose(ours[1], theirs[1], rtol=PARITY_RTOL, atol=PARITY_RTOL * np.abs(theirs[1]).max())
  assert np.abs(theirs[1]).max() > 1e-3


# --------------------------------------------------------------------------
# What a run left in its workdir.


def metrics_records(workdir: str) -> list[dict]:
  """Every record of the workdir's metrics.jsonl, in order."""
  import json

  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def saved_params(workdir: str, checkpoint: str = "latest") -> dict:
  """The params of a workdir's checkpoint as ``{"a/b/kernel": array}``."""
  import flax
  import jax

  from jaxcse.storage import loading

  return flax.traverse_util.flatten_dict(
    jax.device_get(loading.load_model(workdir, checkpoint=checkpoint).params), sep="/"
  )


def assert_same_params(a: dict, b: dict) -> None:
  """Flat params (as ``saved_params`` returns them) equal bit for bit."""
  import numpy as np

  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def checkpoint_steps(workdir: str, sub: str) -> list[int]:
  """The steps saved under ``workdir/sub`` (latest, best, ...), ascending; none when the folder is missing."""
  folder = os.path.join(workdir, sub)
  return sorted(int(d) for d in os.listdir(folder) if d.isdigit()) if os.path.isdir(folder) else []


def largest_file(folder: str, under: str) -> str:
  """The largest file below ``folder/under`` (a checkpoint's params data, say)."""
  files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(folder, under)) for f in fs]
  return max(files, key=os.path.getsize)


def lines_said(stderr: str) -> list[str]:
  """What a command told the user on stderr: every line but absl's INFO log lines (``I1123 12:00:00 ...``)."""
  return [line for line in stderr.splitlines() if line.strip() and not (line[:1] == "I" and line[1:5].isdigit())]


def warnings_naming(caplog, text: str) -> list[str]:
  """The messages of the warnings pytest's ``caplog`` caught that contain ``text``."""
  import logging

  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


# --------------------------------------------------------------------------
# Faults to inject.


class Interrupted(RuntimeError):
  """Stands for a crash: raised in place of a step's batch."""


def interrupting(iterate, step_index: int):
  """``Batches.iterate`` that raises Interrupted before the batch of ``step_index`` (after everything of the steps
  before it)."""

  def interrupted(self, start_step, end_step, *rest, **kwargs):
    for step, batch in enumerate(iterate(self, start_step, end_step, *rest, **kwargs), start=start_step):
      if step == step_index:
        raise Interrupted(f"interrupted before step index {step}")
      yield batch

  return interrupted


def train_interrupted(config, workdir: str, step_index: int) -> None:
  """Trains ``config`` in ``workdir`` up to the batch of ``step_index``, where the run crashes: everything of the
  steps before it is done, as in a run killed there."""
  import pytest

  from jaxcse import data as data_lib, train

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(data_lib.Batches, "iterate", interrupting(data_lib.Batches.iterate, step_index))
    with pytest.raises(Interrupted):
      train.train_and_evaluate(config, workdir)


def damage(path: str, how: str) -> None:
  """Truncates, flips three bits of, or deletes a file."""
  if how == "delete":
    os.remove(path)
    return
  with open(path, "rb") as f:
    data = bytearray(f.read())
  if how == "truncate":
    data = data[: len(data) // 2]
  else:
    for i in (len(data) // 3, len(data) // 2, 2 * len(data) // 3):
      data[i] ^= 0x10
  with open(path, "wb") as f:
    f.write(bytes(data))


def exploded_params(params):
  """Params as after one Adam step at lr 1e30: every weight moved by 1e30, finite, and the forward pass overflows."""
  import jax
  import numpy as np

  rng = np.random.default_rng(0)
  return jax.tree.map(
    lambda x: np.asarray(x) + np.float32(1e30) * rng.choice([-1, 1], size=x.shape).astype(np.float32),
    jax.device_get(params),
  )


# Every objective the train step can run, as (config file, overrides); checked on 1 vs 2 devices.
STEP_VARIANTS = {
  "simcse": ("base", {}),
  "simcse_sup": ("simcse_sup", {"loss.hard_negative_weight": 1.0}),
  "mixcse": ("mixcse", {}),
  "mixcse_hardest_single": ("mixcse", {"mixcse.neighbour": "hardest", "mixcse.symmetric": False}),
  "dclr": ("dclr", {}),
  "dclr_infonce": ("dclr", {"dclr.loss_form": "infonce", "dclr.complementary_dropout": True}),
  "simcse_mlm": ("base", {"mlm.enabled": True}),
}


def in_float64(spec, params):
  """``(spec, params)`` computing in float64 with float64 params (call under ``compat.enable_x64(True)``).

  Tests that compare two ways of computing the same thing (1 vs 2 devices,
  GradCache chunks vs one batch) run in float64: the two differ only by the
  order of their reductions, so in float64 they agree to ~1e-13, far below any
  error a real defect makes, and on any CPU. In float32 the same comparison sits
  at 1e-6, near what a tolerance can separate from a defect (and where a newer
  CPU's kernels rounded past the tolerance).
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  if not jax.config.jax_enable_x64:
    raise RuntimeError("in_float64 needs compat.enable_x64(True)")
  params = jax.tree.map(
    lambda x: np.asarray(x, np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else x,
    jax.device_get(params),
  )
  return spec.with_dtype(jnp.float64), params


def one_step(model_dir: str, data_dir: str, out: str) -> None:
  """One train step of every STEP_VARIANTS entry on all visible devices, in float64; saves losses and params.

  Each variant steps with SGD at lr 1 (so the update is exactly the gradient,
  whose comparison is well conditioned); ``simcse`` also with the configured
  AdamW (Adam's first update is lr * g / (|g| + eps), which amplifies rounding
  on near-zero gradients by up to lr / eps). Everything runs in float64 (see
  ``in_float64``); set ``JAX_ENABLE_X64=1``.
  """
  import optax
  import flax
  import jax
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec

  from jaxcse import data as data_lib, models
  from jaxcse.training import distributed, train_step
  from jaxcse.storage import loading

  results = {"devices": np.asarray(jax.device_count())}
  mesh = distributed.make_mesh()
  replicated = NamedSharding(mesh, PartitionSpec())
  variants = [(name, spec, "sgd") for name, spec in STEP_VARIANTS.items()] + [
    ("simcse", STEP_VARIANTS["simcse"], "adamw")
  ]
  for name, (config_name, overrides), optimizer in variants:
    config = tiny_config(model_dir, data_dir, config_name, **{"train.batch_size": 16, **overrides})
    pooling = models.PoolerSpec(config.model.pooler, config.model.mlp_only_train)
    spec, params = in_float64(
      *models.load_pretrained(model_dir, pooling, dropout=0.1, seed=config.seed, with_mlm_head=config.mlm.enabled)
    )
    corpus = data_lib.load_corpus(config.data.train, root=data_dir)
    batches = data_lib.Batches(corpus, spec.tokenizer, batch_size=16, max_seq_len=16, seed=config.seed)
    tx = optax.sgd(1.0) if optimizer == "sgd" else train_step.make_optimizer(config.train, 10)
    complementary, comp_params = None, None
    if config.method == "dclr":
      loaded = loading.load_model(config.dclr.complementary_model)
      complementary, comp_params = in_float64(loaded.spec, loaded.params)
      comp_params = jax.device_put(comp_params, replicated)
    state = jax.device_put(
      train_step.TrainState(step=np.int32(0), params=params, opt_state=tx.init(params)), replicated
    )
    batch = jax.device_put(batches.batch(0), NamedSharding(mesh, PartitionSpec("data")))
    step = jax.jit(train_step.make_train_step(config, spec, tx, complementary), donate_argnums=0)
    state, metrics = step(state, batch, comp_params)
    results[f"{name}/{optimizer}:loss"] = np.asarray(metrics["loss"])
    for key, value in flax.traverse_util.flatten_dict(jax.device_get(state.params), sep="/").items():
      results[f"{name}/{optimizer}:{key}"] = value
  np.savez(out, **results)


if __name__ == "__main__":
  if sys.argv[1] == "one_step":
    sys.path.insert(0, REPO)
    one_step(*sys.argv[2:5])


def small_triplets(data_dir: str, n: int) -> list[dict]:
  """``n`` (anchor, positive, negative) rows of distinct sentences from the small corpus (``small_data_dir``)."""
  with open(os.path.join(data_dir, "corpora", "small.txt")) as f:
    sentences = [line.strip() for line in f if line.strip()]
  assert len(sentences) >= 3 * n
  return [
    {"anchor": sentences[3 * i], "positive": sentences[3 * i + 1], "negative": sentences[3 * i + 2]} for i in range(n)
  ]


def tiny_card(run) -> str:
  """The model card ``model_card.model_card`` writes for the tiny model (avg pooler, 32 dims) exported from ``run``."""
  from jaxcse.storage import model_card

  return model_card.model_card(
    pooler="avg",
    pooling_lines="",
    source="s",
    architecture="BertModel",
    modules=["1_Pooling"],
    dim=32,
    max_seq_len=16,
    base_model=None,
    run=run,
  )
