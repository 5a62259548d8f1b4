"""jaxcse's BERT, RoBERTa and XLM-R against transformers' PyTorch models, and the weight loader's guarantees.

For each family a tiny random PyTorch masked-LM model (transformers 5, from a small config) is saved as
safetensors and loaded by ``models.load_pretrained``: every hidden state and the MLM logits equal PyTorch's in
float64 (the exactness claim: both compute the same sums, in another order) and in float32 to a bound derived
from the arithmetic. all-MiniLM-L6-v2's real weights are compared the same way. The loader fills every parameter
from the checkpoint, uses every tensor, reads sharded checkpoints, and says what it cannot do in one error.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.core import compat
from jaxcse.storage import hub
from jaxcse import models
from jaxcse.data import tokenization
from jaxcse.models import weights
from tests import helpers

torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM  # noqa: E402

FAMILIES = ("bert", "roberta", "xlm-roberta")
U64, U32 = 2.0**-53, 2.0**-24
IDS = np.array([[5, 11, 12, 13, 14, 15, 16, 17, 18, 6], [5, 21, 22, 23, 6, 1, 1, 1, 1, 1]], np.int32)
MASK = (np.arange(10)[None] < np.array([[10], [5]])).astype(np.int32)


def _bound(u: float, config) -> float:
  """How far two correct float computations of one output may drift apart, relative to the output's scale.

  Each output inherits the rounding of every sum on its path: per layer the projections (hidden terms), the
  attention scores (head_dim terms) and weighted values (len terms), the feed-forward (intermediate terms), two
  LayerNorms (hidden terms each) and ~10 elementwise ops; a reordered sum of n terms moves by at most n * u of the
  sum of magnitudes. Two implementations drift at most twice that; LayerNorm keeps activations O(1), so it is
  the relative scale. The MLM head adds one more projection and the vocabulary sum.
  """
  h, i = config.hidden_size, config.intermediate_size
  per_layer = 4 * h + h // config.num_attention_heads + IDS.shape[1] + i + 2 * h + 10
  return 2 * u * (per_layer * (config.num_hidden_layers + 1) + 2 * h + config.vocab_size)


def _torch_folder(family: str, folder: str, **overrides) -> tuple:
  """A random PyTorch masked-LM model of ``family`` saved in ``folder`` (weights perturbed so every part counts)."""
  config = AutoConfig.for_model(
    family,
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=24,
    max_position_embeddings=24,
    pad_token_id=1,
    type_vocab_size=1 if family != "bert" else 2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    **overrides,
  )
  torch.manual_seed(0)
  model = AutoModelForMaskedLM.from_config(config).eval()
  with torch.no_grad():  # LayerNorms and biases away from 1 and 0, weights of unit-ish gain: a mistake shows.
    for name, p in model.named_parameters():
      if name.endswith("LayerNorm.weight") or name.endswith("layer_norm.weight"):
        p.uniform_(0.5, 1.5)
      elif p.ndim == 1:
        p.normal_(0.0, 0.1)
      else:
        p.normal_(0.0, 0.3)
  model.save_pretrained(folder)
  shutil.copy(
    os.path.join(helpers.REPO, "jaxcse", "pretrained", "wordpiece-wiki-uncased-8k", "tokenizer.json"), folder
  )  # Any tokenizer: load_pretrained reads one; the ids above are fed directly.
  for name in ("tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    source = os.path.join(helpers.REPO, "jaxcse", "pretrained", "wordpiece-wiki-uncased-8k", name)
    if os.path.exists(source):
      shutil.copy(source, folder)
  return config, model


def _torch_outputs(model, dtype):
  model = model.to(dtype)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(IDS).long(), attention_mask=torch.tensor(MASK).long(), output_hidden_states=True)
  return [h.numpy() for h in out.hidden_states], out.logits.numpy()


def _ours(folder: str, dtype):
  spec, params = models.load_pretrained(folder, models.PoolerSpec("avg"), with_mlm_head=True, mlm_head="tied")
  assert spec.mlm.pretrained
  if dtype == jnp.float64:
    spec, params = helpers.in_float64(spec, params)
  out = spec.backbone.apply({"params": params["backbone"]}, IDS, MASK, output_hidden_states=True)
  logits = models.mlm_logits(spec, params, IDS, MASK, train=False)
  return [np.asarray(h) for h in out.hidden_states], np.asarray(logits)


def _compare(ours, theirs, bound: float):
  real = MASK.astype(bool)  # Padded positions are not outputs anyone reads.
  (hidden, logits), (their_hidden, their_logits) = ours, theirs
  assert len(hidden) == len(their_hidden)
  for k, (a, b) in enumerate(zip(hidden, their_hidden)):
    scale = max(1.0, np.abs(b[real]).max())
    assert np.abs(a[real] - b[real]).max() <= bound * scale, f"hidden_states[{k}]"
  scale = max(1.0, np.abs(their_logits[real]).max())
  assert np.abs(logits[real] - their_logits[real]).max() <= bound * scale, "logits"


@pytest.mark.parametrize("family", FAMILIES)
def test_equal_to_pytorch_in_float64(family, tmp_path):
  config, model = _torch_folder(family, str(tmp_path))
  with compat.enable_x64(True):
    ours = _ours(str(tmp_path), jnp.float64)
  _compare(ours, _torch_outputs(model, torch.float64), _bound(U64, config))


@pytest.mark.parametrize("family", FAMILIES)
def test_equal_to_pytorch_in_float32(family, tmp_path):
  config, model = _torch_folder(family, str(tmp_path))
  _compare(_ours(str(tmp_path), jnp.float32), _torch_outputs(model, torch.float32), _bound(U32, config))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_base_model_and_its_pooler_equal_pytorchs(family, tmp_path):
  """A base-model checkpoint (no prefix, with BERT's NSP pooler): the pooler output too."""
  config, _ = _torch_folder(family, str(tmp_path / "mlm"))
  torch.manual_seed(1)
  base = AutoModel.from_config(config).eval()
  base.save_pretrained(str(tmp_path / "base"))
  for name in os.listdir(tmp_path / "mlm"):
    if name.startswith(("tokenizer", "vocab", "special")):
      shutil.copy(tmp_path / "mlm" / name, tmp_path / "base")
  with compat.enable_x64(True):
    spec, params = models.load_pretrained(str(tmp_path / "base"), models.PoolerSpec("bert_pooler"))
    spec, params = helpers.in_float64(spec, params)
    ours = spec.module_for("bert_pooler").apply({"params": params}, IDS, MASK)
  with torch.no_grad():
    theirs = base.double()(input_ids=torch.tensor(IDS).long(), attention_mask=torch.tensor(MASK).long()).pooler_output
  np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=0, atol=_bound(U64, config))


def test_minilm_real_weights_equal_pytorch():
  folder = hub.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(folder):
    pytest.skip("all-MiniLM-L6-v2 is not installed (the minilm extra)")
  spec, params = models.load_pretrained(folder, models.PoolerSpec("avg"))
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, ["A man is playing a guitar.", "Music."], 12)
  model = AutoModel.from_pretrained(folder).eval().double()
  with torch.no_grad():
    theirs = model(
      input_ids=torch.tensor(np.asarray(ids)).long(),
      attention_mask=torch.tensor(np.asarray(mask)).long(),
      output_hidden_states=True,
    ).hidden_states
  with compat.enable_x64(True):
    spec64, params64 = helpers.in_float64(spec, params)
    ours = spec64.backbone.apply({"params": params64["backbone"]}, ids, mask, output_hidden_states=True).hidden_states
  real = np.asarray(mask).astype(bool)
  config = spec.hf_config
  # Real weights: activations up to ~20 before LayerNorm; the bound is relative to each state's largest value.
  bound = 2 * U64 * (4 * config.hidden_size + config.intermediate_size + 100) * (config.num_hidden_layers + 1)
  for k, (a, b) in enumerate(zip(ours, theirs)):
    b = b.numpy()
    assert np.abs(np.asarray(a)[real] - b[real]).max() <= bound * np.abs(b[real]).max(), f"hidden_states[{k}]"


def test_gradients_match_finite_differences_in_float64(tiny_model_dir):
  with compat.enable_x64(True):
    spec, params = helpers.in_float64(*models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg")))
    module = spec.module_for("avg")
    ids, mask = IDS, MASK

    def loss(p):
      return jnp.sum(jnp.sin(module.apply({"params": p}, ids, mask)))

    grads = jax.grad(loss)(params)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    picked = [p for p in leaves if "query" in jax.tree_util.keystr(p[0]) or "LayerNorm" in jax.tree_util.keystr(p[0])][
      :3
    ]
    eps = 1e-6
    for path, leaf in picked:
      direction = np.random.default_rng(0).normal(size=leaf.shape)
      shift = lambda t: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda q, x: x + t * direction if q == path else x, params
      )
      numeric = (loss(shift(eps)) - loss(shift(-eps))) / (2 * eps)
      analytic = float(np.sum(np.asarray(_leaf(grads, path)) * direction))
      # Central differences: truncation O(eps^2) and rounding O(u / eps) of a loss of size ~10.
      assert abs(float(numeric) - analytic) <= 1e-6 * max(1.0, abs(analytic)), jax.tree_util.keystr(path)


def _leaf(tree, path):
  for key in path:
    tree = tree[key.key]
  return tree


def test_dropout_acts_only_in_training(tiny_model_dir):
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"), dropout=0.1)
  module = spec.module_for("avg")
  a = module.apply({"params": params}, IDS, MASK)
  b = module.apply({"params": params}, IDS, MASK, rngs={"dropout": jax.random.key(1)})
  np.testing.assert_array_equal(a, b)
  c = module.apply({"params": params}, IDS, MASK, train=True, rngs={"dropout": jax.random.key(1)})
  d = module.apply({"params": params}, IDS, MASK, train=True, rngs={"dropout": jax.random.key(2)})
  assert not np.allclose(c, d) and not np.allclose(a, c)


# --------------------------------------------------------------------------
# The loader.


def test_a_sharded_checkpoint_loads_as_the_single_file(tiny_model_dir, tmp_path):
  from safetensors.numpy import load_file, save_file

  folder = shutil.copytree(tiny_model_dir, tmp_path / "sharded")
  state = load_file(folder / "model.safetensors")
  os.remove(folder / "model.safetensors")
  names = sorted(state)
  shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
  for shard, members in shards.items():
    save_file({n: state[n] for n in members}, str(folder / shard), metadata={"format": "pt"})
  with open(folder / "model.safetensors.index.json", "w") as f:
    json.dump({"metadata": {}, "weight_map": {n: s for s, members in shards.items() for n in members}}, f)
  _, single = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
  _, sharded = models.load_pretrained(str(folder), models.PoolerSpec("avg"))
  for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
    np.testing.assert_array_equal(a, b)


def _edited(tiny_model_dir, tmp_path, edit) -> str:
  from safetensors.numpy import load_file, save_file

  folder = shutil.copytree(tiny_model_dir, tmp_path / "edited")
  state = load_file(folder / "model.safetensors")
  edit(state)
  save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
  return str(folder)


def test_a_missing_tensor_is_one_error_naming_it(tiny_model_dir, tmp_path):
  folder = _edited(tiny_model_dir, tmp_path, lambda s: s.pop("encoder.layer.1.output.dense.weight"))
  with pytest.raises(weights.WeightsError, match=r"has no tensor encoder\.layer\.1\.output\.dense\.weight"):
    models.load_pretrained(folder, models.PoolerSpec("avg"))


def test_an_unexpected_tensor_is_one_error_naming_it(tiny_model_dir, tmp_path):
  folder = _edited(
    tiny_model_dir,
    tmp_path,
    lambda s: s.update({"encoder.layer.2.output.dense.weight": np.zeros((32, 64), np.float32)}),
  )
  with pytest.raises(weights.WeightsError, match=r"tensors the model does not use: encoder\.layer\.2\.output"):
    models.load_pretrained(folder, models.PoolerSpec("avg"))


def test_a_tensor_of_another_shape_is_one_error_naming_it(tiny_model_dir, tmp_path):
  folder = _edited(tiny_model_dir, tmp_path, lambda s: s.update({"pooler.dense.bias": np.zeros(31, np.float32)}))
  with pytest.raises(weights.WeightsError, match=r"tensor pooler\.dense\.bias has shape \(31,\)"):
    models.load_pretrained(folder, models.PoolerSpec("avg"))


def test_a_missing_nsp_pooler_is_initialised_with_one_line_unless_a_pooler_reads_it(tiny_model_dir, tmp_path, caplog):
  folder = _edited(tiny_model_dir, tmp_path, lambda s: [s.pop(k) for k in list(s) if k.startswith("pooler.")])
  with caplog.at_level(logging.INFO, logger="jaxcse"):
    _, params = models.load_pretrained(folder, models.PoolerSpec("avg"))
  assert "pooler" in params["backbone"]
  assert [r.getMessage() for r in caplog.records if "NSP pooler" in r.getMessage()] == [
    f"{folder} has no NSP pooler layer (pooler.dense): initialised fresh (only the bert_pooler poolers read it)"
  ]
  with pytest.raises(weights.WeightsError, match="pooler 'bert_pooler' needs the checkpoint's pooler layer"):
    models.load_pretrained(folder, models.PoolerSpec("bert_pooler"))
  # Evaluation loads with the checkpoint's pooler layer as the cls MLP: only a pooler with an MLP needs it there.
  for pooler in ("avg", "cls_before_pooler"):
    _, params = models.load_pretrained(folder, models.PoolerSpec(pooler), mlp_from_backbone_pooler=True)
    assert "mlp" not in params
  with pytest.raises(weights.WeightsError, match="pooler 'cls' needs the checkpoint's pooler layer"):
    models.load_pretrained(folder, models.PoolerSpec("cls"), mlp_from_backbone_pooler=True)


def test_no_weights_file_is_one_error(tiny_model_dir, tmp_path):
  folder = shutil.copytree(tiny_model_dir, tmp_path / "empty")
  os.remove(folder / "model.safetensors")
  with pytest.raises(weights.WeightsError, match="no weights .* not PyTorch .bin files"):
    models.load_pretrained(str(folder), models.PoolerSpec("avg"))
