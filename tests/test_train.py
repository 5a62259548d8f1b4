"""End-to-end training on a tiny BERT: smoke run, resume after a kill, devices, non-finite loss, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.storage import checkpoints, description, loading, workdir as workdir_lib
from jaxcse import data as data_lib, evaluate, models, train
from jaxcse.inference import embedder as embedder_lib
from jaxcse.models import mlm
from jaxcse.evaluation import sts_data, sts_metrics
from jaxcse.training import objectives, train_step
from jaxcse.data import tokenization
from tests import helpers

REPO = helpers.REPO


def test_smoke_train_save_evaluate(tiny_model_dir, small_data_dir, fresh_workdir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"eval.at_start": True})
  summary = train.train_and_evaluate(config, fresh_workdir)

  assert summary["steps"] == 6
  assert summary["first_eval"]["step"] == 0
  records = helpers.metrics_records(fresh_workdir)
  loss_steps = [r["step"] for r in records if "loss" in r]
  eval_steps = [r["step"] for r in records if "eval/metric" in r]
  assert loss_steps == [2, 3, 4, 6]  # log_every=2, plus the eval step 3 (logged before evaluating).
  assert eval_steps == [0, 3, 6]
  assert all(np.isfinite(r["loss"]) and r["steps_per_sec"] > 0 for r in records if "loss" in r)
  # The best checkpoint is the best evaluation, and a workdir loads with the saved test pooler.
  best_record = max((r for r in records if "eval/metric" in r), key=lambda r: r["eval/metric"])
  assert summary["best_step"] == best_record["step"]
  loaded = loading.load_model(fresh_workdir)
  assert loaded.described and loaded.spec.pooling.test_pooler == "cls_before_pooler"
  # The same program as the run's own evaluation (same pooler, batch size and shapes): the same score, exactly.
  # (Another batch size rounds the embeddings differently, and a Spearman over 60 pairs moves by ~1e-4 when two
  # nearly tied cosines swap ranks.)
  embedder = embedder_lib.BucketedEmbedder(loaded.spec, batch_size=config.eval.batch_size)
  dev = sts_metrics.dev_scores_and_embeddings(
    lambda s: embedder(s, loaded.params), sts_data.load_dev_sets(small_data_dir)
  )[0]
  assert dev["stsb_dev"] == best_record["eval/stsb_dev"]
  # The evaluation CLI takes the workdir too.
  out = os.path.join(fresh_workdir, "eval.json")
  assert (
    evaluate.main(["--model", fresh_workdir, "--tasks", "STSBenchmark", "--data_dir", small_data_dir, "--output", out])
    == 0
  )
  result = json.load(open(out))
  assert result["pooler"] == "cls_before_pooler"
  # A checkpoint folder works too, and --checkpoint picks one by step.
  latest_dir = os.path.join(fresh_workdir, workdir_lib.LATEST_DIR, "6")
  by_folder = loading.load_model(latest_dir)
  by_step = loading.load_model(fresh_workdir, checkpoint="6")
  for a, b in zip(jax.tree.leaves(by_folder.params), jax.tree.leaves(by_step.params)):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(FileNotFoundError, match="no checkpoint at step 5"):
    loading.load_model(fresh_workdir, checkpoint="5")
  assert result["summary"]["STSBenchmark"] == pytest.approx(
    round(result["tasks"]["STSBenchmark"]["test"]["spearman"] * 100, 2)
  )


def test_resume_after_kill_matches_uninterrupted_run(tiny_model_dir, small_data_dir, tmp_path):
  steps = 300
  overrides = {
    "train.max_steps": steps,
    "eval.every": 10_000,
    "eval.at_end": False,
    "checkpoint.every": 20,
    "train.log_every": 1,
  }
  reference = str(tmp_path / "reference")
  train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **overrides), reference)

  killed = str(tmp_path / "killed")
  cmd = [
    sys.executable,
    "-m",
    "jaxcse.train",
    *helpers.train_cli_args(killed, tiny_model_dir, small_data_dir, **overrides),
  ]
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  metrics_path = os.path.join(killed, "metrics.jsonl")
  deadline = time.time() + 240
  try:
    while time.time() < deadline and proc.poll() is None:
      if os.path.exists(metrics_path) and any(json.loads(l)["step"] >= 50 for l in open(metrics_path) if l.strip()):
        break
      time.sleep(0.02)
    assert proc.poll() is None, "the training run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
  finally:
    proc.wait()
  interrupted_at = max(json.loads(l)["step"] for l in open(metrics_path) if l.strip())
  assert 50 <= interrupted_at < steps

  summary = train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **overrides), killed)
  assert summary["steps"] == steps
  logged = [r["step"] for r in helpers.metrics_records(killed) if "loss" in r]
  assert logged == list(range(1, steps + 1))  # Nothing lost, nothing logged twice.
  helpers.assert_same_params(helpers.saved_params(reference), helpers.saved_params(killed))
  ref_losses = [r["loss"] for r in helpers.metrics_records(reference) if "loss" in r]
  assert ref_losses == [r["loss"] for r in helpers.metrics_records(killed) if "loss" in r]


def test_two_devices_equal_one_device_for_every_method(tiny_model_dir, small_data_dir, tmp_path):
  # Float64 (helpers.in_float64): the two runs differ only in the order of their reductions (per-device partial
  # sums). Reordering a sum of n terms moves it by at most ~n * u * sum|terms|, u = 2**-53 = 1.1e-16; the tiny step
  # reduces over at most ~1e3 terms (16 examples x 16 tokens x 2 views, hidden 32..64) of O(1) values, through a
  # few layers that amplify by O(10): a bound of ~1e-12 relative. A structural error (negatives not crossing devices,
  # a mask or key that depends on the device) moves losses and gradients by 1e-3 or more.
  results = {}
  for n in (1, 2):
    out = str(tmp_path / f"step_{n}.npz")
    env = {
      **os.environ,
      "XLA_FLAGS": helpers.simulated_devices(n),
      "JAX_PLATFORMS": "cpu",
      "JAX_ENABLE_X64": "1",
    }
    subprocess.run(
      [sys.executable, os.path.join(REPO, "tests", "helpers.py"), "one_step", tiny_model_dir, small_data_dir, out],
      check=True,
      env=env,
      cwd=REPO,
    )
    results[n] = dict(np.load(out))
  assert int(results[1]["devices"]) == 1 and int(results[2]["devices"]) == 2
  for key in results[1]:
    if key == "devices":
      continue
    assert results[1][key].dtype == np.float64, key
    if key.endswith(":loss") or key.split(":")[0].endswith("/sgd"):
      # Losses, and params - gradients (SGD at lr 1): the bound above.
      np.testing.assert_allclose(results[1][key], results[2][key], rtol=1e-10, atol=1e-12, err_msg=key)
    else:
      # AdamW's first update is lr * g / (|g| + eps), whose derivative in g is at most lr / eps = 1e-3 / 1e-8:
      # a gradient difference of 1e-13 (the bound above on O(0.1) gradients) moves an update by up to 1e-8.
      np.testing.assert_allclose(results[1][key], results[2][key], rtol=1e-10, atol=1e-8, err_msg=key)
  # The steps did train, and the methods differ from each other.
  initial = flax.traverse_util.flatten_dict(
    models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), seed=42)[1], sep="/"
  )
  query = "backbone/encoder/layer/0/attention/self/query/kernel"
  assert not np.allclose(initial[query], results[1][f"simcse/adamw:{query}"])
  losses = [float(results[1][f"{name}/sgd:loss"]) for name in helpers.STEP_VARIANTS]
  assert len(set(losses)) == len(losses), losses


@pytest.mark.parametrize("config_name", helpers.CONFIG_NAMES)
def test_every_config_file_runs_a_few_steps(config_name, tiny_model_dir, small_data_dir, fresh_workdir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, config_name, **{"train.max_steps": 3})
  summary = train.train_and_evaluate(config, fresh_workdir)
  assert summary["steps"] == 3 and summary["best_step"] in (0, 3)
  records = [r for r in helpers.metrics_records(fresh_workdir) if "loss" in r]
  assert records and all(np.isfinite(r["loss"]) for r in records)
  if config.method == "dclr":
    assert "dclr/weight_zero_frac" in records[-1]
  spec = loading.load_model(fresh_workdir).spec
  assert spec.pooling == objectives.pooling_of(config)  # The poolers the method and config ask for, saved.


class _Crash(RuntimeError):
  """Stands for a crash of the training process."""


def test_mlm_objective_trains_the_head_and_is_saved(tiny_model_dir, small_data_dir, fresh_workdir, monkeypatch):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"mlm.enabled": True, "train.max_steps": 4})
  iterate = data_lib.Batches.iterate

  def crash_after_step_3(self, start_step, end_step, *rest, **kwargs):  # After the checkpoint at 3 (every 3).
    for step, batch in enumerate(iterate(self, start_step, end_step, *rest, **kwargs), start=start_step):
      if step == 3:
        raise _Crash(step)
      yield batch

  monkeypatch.setattr(data_lib.Batches, "iterate", crash_after_step_3)
  with pytest.raises(_Crash):
    train.train_and_evaluate(config, fresh_workdir)
  monkeypatch.undo()
  records = [r for r in helpers.metrics_records(fresh_workdir) if "loss" in r]
  last = records[-1]
  assert last["loss"] == pytest.approx(last["contrastive_loss"] + 0.1 * last["mlm_loss"], rel=1e-4)
  assert last["mlm_loss"] > 5.0  # A fresh head over 30522 tokens starts near log(30522) = 10.3.
  params = helpers.saved_params(fresh_workdir)
  assert any(k.startswith("mlm_head/") for k in params)
  # Resuming (with the same config: another max_steps would be another run) rebuilds the head from the saved
  # description.
  assert train.train_and_evaluate(config, fresh_workdir)["steps"] == 4


def test_mask_tokens_follows_bert_masking():
  ids = jax.random.randint(jax.random.key(0), (64, 128), 5, 1000)
  ids = ids.at[:, 0].set(101).at[:, -1].set(102)  # [CLS] ... [SEP]
  mask = jnp.ones_like(ids).at[:8, 64:].set(0)
  masked, labels = mlm.mask_tokens(
    jax.random.key(1), ids, mask, mask_token_id=103, vocab_size=1000, special_ids=(101, 102, 0), probability=0.15
  )
  chosen = labels >= 0
  assert not chosen[:, 0].any() and not chosen[:, -1].any() and not chosen[:8, 64:].any()
  np.testing.assert_array_equal(labels[chosen], ids[chosen])
  np.testing.assert_array_equal(masked[~chosen], ids[~chosen])
  frac = float(chosen.sum() / (mask.sum() - 2 * 64))
  assert 0.13 < frac < 0.17
  n = int(chosen.sum())
  as_mask = int((masked[chosen] == 103).sum())
  kept = int((masked[chosen] == ids[chosen]).sum())
  assert 0.77 < as_mask / n < 0.83 and 0.07 < kept / n < 0.13


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tiny_model_dir, small_data_dir, fresh_workdir):
  # An absurd learning rate after one warmup step at rate 0 (a good checkpoint 1): Adam moves every weight by ~1e38
  # in step 2; the weights are finite but the forward pass overflows, so state 2 is not good (nor saved).
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{
      "train.learning_rate": 1e38,
      "train.warmup_steps": 2,
      "train.max_grad_norm": 0.0,
      "checkpoint.every": 1,
      "eval.every": 10_000,
      "eval.at_end": False,
    },
  )
  with pytest.raises(train.NonFiniteLossError, match=r"(?:non-finite loss .* at step|after step) (\d+)") as info:
    train.train_and_evaluate(config, fresh_workdir)
  bad_step = int(re.search(r"(?:at step|after step) (\d+)", info.value.args[0]).group(1))
  mngr = checkpoints.manager(os.path.join(fresh_workdir, workdir_lib.LATEST_DIR))
  # Checkpoint n holds the state after n steps; the last one kept is the state the bad step started from.
  assert bad_step >= 2 and mngr.latest_step() == bad_step - 1
  params = helpers.saved_params(fresh_workdir)
  assert all(np.isfinite(v).all() for v in params.values())
  loaded = loading.load_model(fresh_workdir, checkpoint="latest")  # Its outputs are finite too (else refused).
  assert loaded.step == bad_step - 1


def test_bad_corpus_is_a_clear_error(tiny_model_dir, small_data_dir, fresh_workdir, tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"a fine sentence\nanother fine one\n\xff\xfe broken\n")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"data.train": str(bad)})
  with pytest.raises(data_lib.DataError, match=rf"{bad}:3: not valid UTF-8"):
    train.train_and_evaluate(config, fresh_workdir)


def test_pretrained_mlm_head_is_loaded_not_reinitialised(tiny_model_dir, tmp_path):
  torch = pytest.importorskip("torch")
  from safetensors.numpy import load_file
  from transformers import BertForMaskedLM

  mlm_dir = helpers.make_tiny_mlm_dir(tiny_model_dir, str(tmp_path / "tiny_mlm"))  # Random head, saved.
  spec, params = models.load_pretrained(mlm_dir, models.PoolerSpec("cls", True), with_mlm_head=True, seed=123)
  assert spec.mlm.pretrained
  saved = {k: v for k, v in load_file(os.path.join(mlm_dir, "model.safetensors")).items() if k.startswith("cls.")}
  loaded = models.weights.to_state(params["mlm_head"])
  assert saved.keys() == loaded.keys()
  for key in saved:
    np.testing.assert_array_equal(saved[key], loaded[key])
  # Logits equal transformers' own (PyTorch) masked-LM forward; float32 in two libraries, logits O(1).
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["a [MASK] sentence"], 8)
  ours = models.mlm_logits(spec, params, ids, mask, train=False)
  with torch.no_grad():
    theirs = BertForMaskedLM.from_pretrained(mlm_dir).eval()(
      input_ids=torch.tensor(np.asarray(ids)).long(), attention_mask=torch.tensor(np.asarray(mask)).long()
    )
  np.testing.assert_allclose(ours, theirs.logits.numpy(), rtol=1e-4, atol=1e-4)


def test_dclr_complementary_model_gets_no_gradient_and_is_not_saved(tiny_model_dir, small_data_dir, fresh_workdir):
  # Temperature 1 and the InfoNCE form keep the loss O(1) on this random model, so weight changes show.
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "dclr",
    **{"train.max_steps": 2, "loss.temperature": 1.0, "dclr.loss_form": "infonce"},
  )
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), seed=0)
  complementary = loading.load_model(tiny_model_dir)
  batches = data_lib.Batches(
    data_lib.load_corpus(config.data.train, root=small_data_dir), spec.tokenizer, batch_size=8, max_seq_len=16, seed=0
  )
  # phi at the median complementary similarity: about half the negatives get weight 0.
  c = embedder_lib.BucketedEmbedder(complementary.spec)(
    [batches.corpus.columns["sent0"][r] for r in batches.indices(0)], complementary.params
  )
  cos = (c / np.linalg.norm(c, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
  config.dclr.phi = float(np.median(cos[~np.eye(8, dtype=bool)]))
  tx = train_step.make_optimizer(config.train, 2)
  step = train_step.make_train_step(config, spec, tx, complementary.spec)
  state = train_step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
  batch = batches.batch(0)

  def loss_wrt_complementary(comp_params):
    return step(state, batch, comp_params)[1]["loss"]

  grads = jax.grad(loss_wrt_complementary)(complementary.params)
  assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))
  # The weights do depend on the complementary model: a different one changes the loss.
  shuffled = jax.tree.map(lambda x: x[::-1] if x.ndim == 2 else x, complementary.params)
  assert float(loss_wrt_complementary(shuffled)) != float(loss_wrt_complementary(complementary.params))
  train.train_and_evaluate(config, fresh_workdir)
  assert set(helpers.saved_params(fresh_workdir)) == set(flax.traverse_util.flatten_dict(params, sep="/"))


@pytest.mark.parametrize("head", ["untied_fresh", "untied_pretrained", "tied"])
def test_auxiliary_mlm_heads(tiny_model_dir, small_data_dir, tmp_path, head):
  """SimCSE's do_mlm head is untied: the MLM loss then reaches the word embeddings only through the encoder."""
  mlm_dir = helpers.make_tiny_mlm_dir(tiny_model_dir, str(tmp_path / "tiny_mlm"))  # A (random) pretrained head.
  spec, params = models.load_pretrained(
    mlm_dir, models.PoolerSpec("cls", True), with_mlm_head=True, mlm_head=head, seed=5
  )
  embeddings = np.asarray(params["backbone"]["embeddings"]["word_embeddings"]["embedding"])
  flat = flax.traverse_util.flatten_dict(params["mlm_head"], sep="/")
  decoder = flat.get("cls/predictions/decoder/kernel")
  assert spec.mlm.tied == (head == "tied") and (decoder is None) == (head == "tied")
  pretrained_dense = models.weights.read_state(mlm_dir)["cls.predictions.transform.dense.weight"].T
  same_transform = np.array_equal(flat["cls/predictions/transform/dense/kernel"], pretrained_dense)
  assert same_transform == (head != "untied_fresh")
  if head == "untied_pretrained":
    np.testing.assert_array_equal(decoder, embeddings.T)  # A copy of the word embeddings...
  # ... that the MLM loss trains apart from them: the untied gradient reaches the embeddings through the encoder
  # only, the tied one also through the output projection.
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["a [MASK] sentence here"], 8)
  labels = np.asarray(ids)

  def loss(p):
    logits = models.mlm_logits(spec, p, ids, mask, train=False)
    return mlm.cross_entropy_sums(logits, labels, mask)[0]

  grads = jax.grad(loss)(params)
  g_embed = np.abs(np.asarray(grads["backbone"]["embeddings"]["word_embeddings"]["embedding"]))
  unused_rows = np.setdiff1d(np.arange(len(embeddings)), labels)[:100]
  assert (g_embed[unused_rows].max() > 0) == (head == "tied")  # Only a tied output layer touches unused words.
  # The description records the head, so a resumed run rebuilds the same one.
  description.save_description(spec, str(tmp_path / "desc"))
  assert description.from_description(str(tmp_path / "desc")).mlm.tied == (head == "tied")
