"""Switches that restore the official code's behaviour where it differs: DCLR as released, supervised clipping."""

from __future__ import annotations


import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcse.training import configuration, configured, objectives, train_step
from jaxcse.inference import embedder as embedder_lib
from jaxcse.storage import loading
from jaxcse.evaluation import sts_data, sts_metrics
from jaxcse import models, train
from tests import helpers


def test_dclr_as_released_sets_poolers_padding_and_complementary_dropout():
  config = helpers.tiny_config("m", "d", "dclr")
  assert objectives.pooling_of(config) == models.PoolerSpec("cls", True)
  needs = objectives.needs(config)
  assert not needs.attend_padding and not needs.complementary_dropout
  config.dclr.as_released = True
  with pytest.raises(
    configuration.ConfigError,
    match=r"dclr.as_released pools as the released code .* not "
    r"model.pooler='cls', model.mlp_only_train=True, model.test_pooler='', model.dev_pooler=''",
  ):
    configuration.validate(config)  # Its poolers would be silently replaced: refused.
  config = helpers.tiny_config("m", "d", "dclr_as_released")
  configuration.validate(config)
  spec = objectives.pooling_of(config)
  # (b) train on BERT's pooler layer + MLP, (c) select on the pooler layer, test on [CLS] without the MLP.
  assert (spec.pooler, spec.dev_pooler, spec.test_pooler) == ("bert_pooler_mlp", "bert_pooler", "cls_before_pooler")
  needs = objectives.needs(config)
  assert needs.attend_padding and needs.complementary_dropout  # (a), (d).


def test_dclr_as_released_trains_and_selects_as_the_released_code(tiny_model_dir, small_data_dir, tmp_path):
  complementary = str(tmp_path / "simcse")  # A jaxcse workdir as the complementary model.
  train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **{"train.max_steps": 2}), complementary)
  workdir = str(tmp_path / "dclr")
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "dclr_as_released",
    **{"train.max_steps": 3, "dclr.complementary_model": complementary},
  )
  summary = train.train_and_evaluate(config, workdir)
  loaded = loading.load_model(workdir)
  assert loaded.spec.pooling.test_pooler == "cls_before_pooler" and loaded.spec.pooling.dev_pooler == "bert_pooler"
  # The best checkpoint was selected on the pooler layer's output, padding attended: recompute that score.
  embed = embedder_lib.BucketedEmbedder(
    loaded.spec, "bert_pooler", batch_size=config.eval.batch_size, attend_padding=True
  )
  scores = sts_metrics.dev_scores_and_embeddings(
    lambda s: embed(s, loaded.params), sts_data.load_dev_sets(small_data_dir)
  )[0]
  assert (scores["stsb_dev"] + scores["sickr_dev"]) / 2 == pytest.approx(summary["best_metric"], abs=1e-12)
  masked = embedder_lib.BucketedEmbedder(loaded.spec, "bert_pooler", batch_size=config.eval.batch_size)
  other = sts_metrics.dev_scores_and_embeddings(
    lambda s: masked(s, loaded.params), sts_data.load_dev_sets(small_data_dir)
  )[0]
  assert other != scores  # The mask matters, so the check above can fail.
  records = [r for r in helpers.metrics_records(workdir) if "loss" in r]
  assert all("dclr/weight_zero_frac" in r for r in records)


def test_a_workdir_complementary_model_embeds_with_its_mlp(tiny_model_dir, small_data_dir, tmp_path):
  """phi was tuned on SimCSE's MLP output (the official complementary checkpoint's pooler layer)."""
  workdir = str(tmp_path / "simcse")
  train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **{"train.max_steps": 2}), workdir)
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "dclr", **{"dclr.complementary_model": workdir})
  spec = configured.complementary(config).spec
  assert spec.pooling.test_pooler == "cls"  # Its training pooler (with the MLP), not its test pooler.
  assert loading.load_model(workdir).spec.pooling.test_pooler == "cls_before_pooler"


def test_official_world_size_clips_the_per_gpu_mean():
  params = {"w": jnp.array([3.0, 4.0])}
  grads = {"w": jnp.array([6.0, 8.0])}  # Norm 10.
  config = helpers.tiny_config("m", "d", "simcse_sup")
  assert config.train.official_world_size == 4
  tx = train_step.make_optimizer(config.train, 100)
  reference = optax.chain(
    optax.scale(0.25),
    optax.clip_by_global_norm(1.0),
    optax.adamw(train_step.make_schedule(config.train, 100), b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0),
  )
  state, ref_state = tx.init(params), reference.init(params)
  for _ in range(3):  # Equal over several steps (Adam's moments see the scaled, clipped gradient).
    got, state = tx.update(grads, state, params)
    want, ref_state = reference.update(grads, ref_state, params)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)
  # Clipping changes Adam's updates through the history of clipped gradients: a norm-2 gradient then a norm-20 one
  # is clipped to (g1 / 2, g2 / 20) on one GPU, but to (g1 / 4, g2 / 20) as the per-GPU mean of four.
  config.train.official_world_size = 1
  one = train_step.make_optimizer(config.train, 100)
  updates = {}
  for name, opt in (("one", one), ("four", tx)):
    state = opt.init(params)
    for g in ({"w": jnp.array([1.2, 1.6])}, {"w": jnp.array([-12.0, 16.0])}):
      update, state = opt.update(g, state, params)
    updates[name] = update["w"]
  assert not np.allclose(updates["one"], updates["four"], rtol=1e-3)
