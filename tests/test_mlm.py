"""Masked-LM pretraining: BERT's masking as positions, the gathered output layer, packed batches, the held-out split,
a run from random initialisation, and the exported BERT folder in Flax and PyTorch."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse import data as data_lib, export_hf, models, train
from jaxcse.storage import hub, loading
from jaxcse.models import mlm
from jaxcse.data import tokenization
from tests import helpers

SPECIAL = (0, 101, 102, 103)  # [PAD], [CLS], [SEP], [MASK] of BERT's vocabulary.


def _ids(rows: int, length: int, seed: int = 0):
  """``[rows, length]`` ids [CLS] w ... w [SEP] [PAD]... with 8..length real tokens, and their mask."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(8, length + 1, size=rows)
  ids = rng.integers(1000, 5000, size=(rows, length))
  mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  ids[:, 0] = 101
  ids[np.arange(rows), lengths - 1] = 102
  return jnp.asarray(np.where(mask == 1, ids, 0), jnp.int32), jnp.asarray(mask)


def test_mask_positions_is_berts_exact_count_masking():
  ids, mask = _ids(2000, 64)
  masked, positions, labels, weights = mlm.mask_positions(
    jax.random.key(0),
    ids,
    mask,
    mask_token_id=103,
    vocab_size=5000,
    special_ids=SPECIAL,
    probability=0.15,
    num_predictions=10,
  )
  ids, masked, positions, labels, weights = map(np.asarray, (ids, masked, positions, labels, weights))
  candidates = mask.sum(axis=1) - 2  # Everything but [CLS] and [SEP].
  expected = np.minimum(10, np.maximum(1, np.round(0.15 * candidates)))
  np.testing.assert_array_equal(weights.sum(axis=1), expected)  # Exactly round(15%) a sequence, at most 10.
  rows = np.arange(len(ids))[:, None]
  chosen = weights > 0
  assert all(len(set(p)) == len(p) for p in positions)  # Distinct positions.
  assert not np.isin(ids[rows, positions][chosen], SPECIAL).any()  # Never a special token or padding.
  np.testing.assert_array_equal(labels, ids[rows, positions])  # Labels are the original tokens.
  untouched = np.ones_like(ids, bool)
  untouched[np.repeat(rows, 10, axis=1)[chosen], positions[chosen]] = False
  np.testing.assert_array_equal(masked[untouched], ids[untouched])  # Only chosen tokens change.
  new = masked[rows, positions][chosen]
  as_mask, kept = (new == 103).mean(), (new == labels[chosen]).mean()
  assert 0.78 < as_mask < 0.82 and 0.09 < kept < 0.11 + 0.01  # 80% [MASK]; 10% kept (+ random hits of itself).
  # Uniform over the candidates: each real position is chosen about equally often.
  counts = np.bincount(positions[chosen], minlength=64)[1:8]  # Positions every row has as candidates.
  assert counts.min() > 0.8 * counts.mean()


def test_logits_at_positions_equal_the_full_logits_gathered(tiny_model_dir):
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"), with_mlm_head=True, seed=1)
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["a short one", "a somewhat longer sentence here"], 12)
  positions = jnp.array([[1, 2, 0], [5, 1, 3]])
  full = models.mlm_logits(spec, params, ids, mask, train=False)
  at = models.mlm_logits_at(spec, params, ids, mask, positions, train=False)
  assert at.shape == (2, 3, spec.hf_config.vocab_size)
  # The same ops on the same rows (float32: the head's matmul on 3 rows vs 12 rounds alike to ~1e-6).
  np.testing.assert_allclose(
    at, np.take_along_axis(np.asarray(full), np.asarray(positions)[..., None], axis=1), rtol=1e-5, atol=1e-5
  )


def test_cross_entropy_sums_by_hand():
  logits = jnp.array([[[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]]])
  labels = jnp.array([[0, 2]])
  weights = jnp.array([[1.0, 1.0]])
  ce, correct = mlm.cross_entropy_sums(logits, labels, weights)
  want = -np.log(np.exp(2) / (np.exp(2) + 2)) - np.log(1 / (np.exp(3) + 2))
  assert float(ce) == pytest.approx(want, rel=1e-6) and float(correct) == 1.0
  ce0, correct0 = mlm.cross_entropy_sums(logits, labels, jnp.array([[1.0, 0.0]]))
  assert float(ce0) == pytest.approx(-np.log(np.exp(2) / (np.exp(2) + 2)), rel=1e-6) and float(correct0) == 1.0


def _packed(tokenizer, sentences, **kwargs):
  corpus = data_lib.Corpus("mem", {"sent0": sentences})
  return data_lib.PackedBatches(corpus, tokenizer, **{"batch_size": 4, "max_seq_len": 24, "seed": 0, **kwargs})


def test_packed_batches_hold_every_sentence_once_per_epoch(tokenizer):
  sentences = [("word " * (1 + i % 9)).strip() + f" {i}" for i in range(120)] + ["long " * 40]
  packed = _packed(tokenizer, sentences)
  pieces = tokenizer(sentences, add_special_tokens=False)["input_ids"]
  seen = []
  for step in range(packed.steps_per_epoch):
    batch = packed.batch(step)
    assert batch["input_ids"].shape == (4, 1, 24) and batch["attention_mask"].shape == (4, 1, 24)
    for ids, m in zip(batch["input_ids"][:, 0], batch["attention_mask"][:, 0]):
      real = ids[m == 1].tolist()
      assert real[0] == tokenizer.cls_token_id and real[-1] == tokenizer.sep_token_id
      assert not ids[m == 0].any()
      # Split at [SEP]: each piece is one whole sentence (the 40-word one cut to fit alone).
      body, start = real[1:], 0
      for j, t in enumerate(body):
        if t == tokenizer.sep_token_id:
          seen.append(tuple(body[start:j]))
          start = j + 1
  layout = packed._layout(0)
  left_out = sum(len(s) for s in layout[packed.steps_per_epoch * 4 :])
  assert len(seen) + left_out == len(sentences) and len(set(seen)) == len(seen)
  assert tuple(pieces[-1][:22]) in seen  # The long sentence, cut to max_seq_len - 2.
  # Dense: most positions are real tokens.
  fill = np.mean([packed.batch(s)["attention_mask"].mean() for s in range(packed.steps_per_epoch)])
  assert fill > 0.8
  # Deterministic by (seed, step); another epoch, another order; a process's rows equal the same rows of the batch.
  again = _packed(tokenizer, sentences)
  np.testing.assert_array_equal(again.batch(3)["input_ids"], packed.batch(3)["input_ids"])
  assert not np.array_equal(packed.batch(0)["input_ids"], packed.batch(packed.steps_per_epoch)["input_ids"])
  np.testing.assert_array_equal(
    packed.batch(2, positions=np.array([1, 3]))["input_ids"], packed.batch(2)["input_ids"][[1, 3]]
  )
  # keep_last: the last partial batch is kept, filled with empty (all-padding) rows.
  last = _packed(tokenizer, sentences, keep_last=True)
  assert last.steps_per_epoch * 4 >= len(last._layout(0)) > (last.steps_per_epoch - 1) * 4


def test_heldout_split_is_by_content():
  sentences = [f"sentence number {i}" for i in range(5000)]
  corpus = data_lib.Corpus("mem", {"sent0": sentences})
  train_part, heldout = data_lib.split_heldout(corpus, 0.05)
  assert 0.04 < len(heldout) / len(sentences) < 0.06
  assert not set(train_part.columns["sent0"]) & set(heldout.columns["sent0"])
  assert len(train_part) + len(heldout) == len(sentences)
  # The same sentences are held out whatever the order of the file.
  _, shuffled = data_lib.split_heldout(data_lib.Corpus("mem", {"sent0": sentences[::-1]}), 0.05)
  assert sorted(shuffled.columns["sent0"]) == sorted(heldout.columns["sent0"])
  with pytest.raises(data_lib.DataError, match="both must be non-empty"):
    data_lib.split_heldout(data_lib.Corpus("mem", {"sent0": sentences[:3]}), 0.001)


def test_packaged_wordpiece_tokenizer_loads():
  from transformers import AutoTokenizer

  folder = hub.resolve_model_path("jaxcse/wordpiece-wiki-uncased-8k")
  assert os.path.isdir(folder)
  tok = AutoTokenizer.from_pretrained(folder)
  assert len(tok) == 8192 and tok.tokenize("A man is playing a guitar.")[:3] == ["a", "man", "is"]
  record = json.load(open(os.path.join(folder, "wordpiece.json")))
  import hashlib

  assert hashlib.sha256(open(os.path.join(folder, "vocab.txt"), "rb").read()).hexdigest() == record["vocab_sha256"]


def test_wordpiece_command_trains_a_loadable_vocabulary(small_data_dir, tmp_path):
  from jaxcse import wordpiece
  from transformers import AutoTokenizer

  out = str(tmp_path / "wp")
  assert (
    wordpiece.main(
      [
        "--corpus",
        "corpora/small.txt",
        "--data_dir",
        small_data_dir,
        "--vocab_size",
        "300",
        "--out",
        out,
        "--heldout_fraction",
        "0.05",
      ]
    )
    == 0
  )
  tok = AutoTokenizer.from_pretrained(out)
  assert len(tok) <= 300 and tok.convert_tokens_to_ids("[MASK]") == 4
  record = json.load(open(os.path.join(out, "wordpiece.json")))
  assert record["sentences"] < 400 and record["heldout_fraction"] == 0.05


def _tiny_pretraining(tiny_data_dir: str, **overrides):
  return helpers.tiny_config(
    "unused",
    tiny_data_dir,
    "pretrain_mlm",
    **{
      "model.architecture.num_hidden_layers": 2,
      "model.architecture.hidden_size": 32,
      "model.architecture.num_attention_heads": 2,
      "model.architecture.intermediate_size": 64,
      "model.architecture.max_position_embeddings": 32,
      "data.max_seq_len": 32,
      "data.heldout_fraction": 0.05,
      "train.warmup_steps": 2,
      "train.learning_rate": 3e-3,
      **overrides,
    },
  )


def test_pretraining_from_random_init_learns_and_exports_a_bert(small_data_dir, tmp_path):
  workdir = str(tmp_path / "mlm")
  summary = train.train_and_evaluate(
    _tiny_pretraining(
      small_data_dir, **{"train.max_steps": 40, "eval.every": 20, "eval.at_start": True, "checkpoint.every": 20}
    ),
    workdir,
  )
  records = helpers.metrics_records(workdir)
  evals = [r for r in records if "eval/metric" in r]
  assert [r["step"] for r in evals] == [0, 20, 40]
  # Held-out loss starts at ~log(8192) = 9.0 and falls as the model learns the token distribution (8.0 after 40 steps).
  assert (
    evals[0]["eval/heldout_mlm_loss"] > 8.5
    and evals[-1]["eval/heldout_mlm_loss"] < evals[0]["eval/heldout_mlm_loss"] - 0.5
  )
  assert evals[-1]["eval/heldout_mlm_accuracy"] > evals[0]["eval/heldout_mlm_accuracy"]
  assert summary["best_metric"] == max(r["eval/heldout_mlm_accuracy"] for r in evals)
  train_records = [r for r in records if "loss" in r]
  assert all(r["loss"] == r["mlm_loss"] for r in train_records) and "contrastive_loss" not in train_records[0]

  loaded = loading.load_model(workdir)
  out = str(tmp_path / "bert")
  assert export_hf.main([workdir, out, "--masked_lm"]) == 0
  config = json.load(open(os.path.join(out, "config.json")))
  assert config["architectures"] == ["BertForMaskedLM"] and config["vocab_size"] == 8192
  # jaxcse reads it back as a pretrained model with its MLM head.
  spec, params = models.load_pretrained(out, models.PoolerSpec("avg"), with_mlm_head=True)
  assert spec.mlm.pretrained
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["a [MASK] sentence", "another one"], 10)
  ours = np.asarray(models.mlm_logits(loaded.spec, loaded.params, ids, mask, train=False))
  np.testing.assert_array_equal(models.mlm_logits(spec, params, ids, mask, train=False), ours)
  # PyTorch transformers loads the folder with no missing weights and computes the same.
  torch = pytest.importorskip("torch")
  from transformers import BertForMaskedLM, BertModel

  bert, info = BertModel.from_pretrained(out, output_loading_info=True)
  # Every backbone weight is there; only the MLM head is left unused, as with any BertForMaskedLM checkpoint.
  assert not info["missing_keys"] and all(k.startswith("cls.predictions.") for k in info["unexpected_keys"]), info
  mlm_model, info = BertForMaskedLM.from_pretrained(out, output_loading_info=True)
  assert not info["missing_keys"], info
  with torch.no_grad():
    logits = mlm_model.eval()(
      input_ids=torch.tensor(np.asarray(ids)).long(), attention_mask=torch.tensor(np.asarray(mask)).long()
    ).logits.numpy()
  # float32 in two libraries: the same products summed in another order (~1e-6 of logits of size ~5).
  np.testing.assert_allclose(logits, ours, rtol=1e-4, atol=1e-4)


def test_mlm_config_errors_are_caught_at_load(small_data_dir, tmp_path):
  from jaxcse.training import configuration

  workdir = str(tmp_path / "never")
  for overrides, message in [
    ({"mlm.enabled": True}, "leave mlm.enabled False"),
    ({"train.grad_cache_chunk": 4}, "no in-batch negatives"),
    ({"data.heldout_fraction": 0.0}, "heldout_mlm_accuracy needs"),
    ({"model.tokenizer": ""}, "model.init=random needs model.tokenizer"),
  ]:
    with pytest.raises(configuration.ConfigError, match=message):
      train.train_and_evaluate(_tiny_pretraining(small_data_dir, **overrides), workdir)
  assert not os.path.exists(workdir)
