"""jaxcse.models.modernbert against transformers' PyTorch ModernBERT: parity, weight names, gradients, dropout, remat.

Error bounds are derived, not tuned. A float computation rounds each result with relative error at most u (unit
roundoff: 2^-53 float64, 2^-24 float32, 2^-8 bfloat16); a sum of n terms accumulates at most n * u relative to the
sum of the terms' magnitudes. Following one output value back through the network, the roundings it inherits are
at most ``_rounding_steps(config, length)`` (the n of every reduction on its path plus the elementwise ops), and
LayerNorm keeps the errors at the scale of the (O(1)) normalised values instead of letting them grow with depth.
Two independent implementations each make such errors, so the worst-case bound for their difference, relative to
the largest magnitude of the compared tensor, is ``2 * steps * u`` (``_bound``). It is a worst case: typical
errors are far smaller (they add up like a random walk), which the measured numbers show.
"""

from __future__ import annotations

import math
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402
from transformers.models.modernbert import modeling_modernbert as torch_modernbert  # noqa: E402

from jaxcse.core import compat  # noqa: E402
from jaxcse.models import modernbert as mb, weights  # noqa: E402

LENGTH = 20  # Longer than the local window (local_attention 8: distance <= 4), so windows matter.
SHORT = 11  # The second sentence's length: right-padded to LENGTH.
U64, U32, U_BF16 = 2.0**-53, 2.0**-24, 2.0**-8


def tiny_config(**overrides):
  kwargs = dict(
    vocab_size=100,
    hidden_size=32,
    num_attention_heads=4,
    num_hidden_layers=4,
    intermediate_size=48,
    global_attn_every_n_layers=3,
    local_attention=8,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
    embedding_dropout=0.0,
    attention_dropout=0.0,
    mlp_dropout=0.0,
  )
  kwargs.update(overrides)
  config = transformers.ModernBertConfig(**kwargs)
  assert set(config.layer_types) == {"full_attention", "sliding_attention"}
  return config


def _rounding_steps(config, length: int) -> int:
  """The roundings one output value inherits (see the module docstring): the sizes of the reductions on its path.

  Per layer: two LayerNorms (mean and variance: 2 * hidden each), Wqkv (hidden), q.k (head_dim), the softmax's sum
  and probabilities.v (length each), Wo (hidden), Wi (hidden), Wo (intermediate), and ~16 elementwise ops (rotary,
  exp, division, activation, gate, residuals, normalisation). Plus the embeddings' and the final LayerNorm, and the
  head: dense (hidden), LayerNorm, decoder (hidden).
  """
  h, i, d = config.hidden_size, config.intermediate_size, config.hidden_size // config.num_attention_heads
  per_layer = 2 * 2 * h + h + d + 2 * length + h + h + i + 16
  return config.num_hidden_layers * per_layer + 2 * (2 * h) + h + 2 * h + h + 16


def _bound(config, u: float) -> float:
  return 2 * _rounding_steps(config, LENGTH) * u


def _max_diff(ours, ref) -> tuple[float, float]:
  """Max absolute difference, and the same relative to the reference's largest magnitude."""
  ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
  diff = float(np.max(np.abs(ours - ref)))
  return diff, diff / float(np.max(np.abs(ref)))


def batch():
  rng = np.random.default_rng(0)
  ids = rng.integers(3, 100, size=(2, LENGTH)).astype(np.int32)
  mask = np.ones((2, LENGTH), np.int32)
  ids[1, SHORT:], mask[1, SHORT:] = 0, 0
  return ids, mask


def real_tokens(x):
  """The non-padding positions of a [2, LENGTH, ...] array, concatenated."""
  x = np.asarray(x)
  return np.concatenate([x[0], x[1, :SHORT]])


# --------------------------------------------------------------------------
# The weights: jaxcse's own reader (a PyTorch name is the Flax path joined by "." with the leaf renamed).


def params_from_torch(tensors: dict, shapes, prefix: str = "", dtype=np.float32) -> tuple[dict, set]:
  """Our params (the tree of ``shapes``) from PyTorch tensors, and the names of the tensors used."""
  params, _, used = weights.fill(shapes, tensors, prefixes=(prefix,), where="tiny ModernBERT")
  return jax.tree_util.tree_map(lambda x: np.asarray(x, dtype), params), used


def param_shapes(module):
  ids, mask = batch()
  return jax.eval_shape(lambda: module.init(jax.random.key(0), ids, mask))["params"]


def saved_torch_model(config, folder):
  """A random PyTorch ModernBertForMaskedLM (eval mode) and the tensors of its saved ``model.safetensors``."""
  torch.manual_seed(0)
  model = torch_modernbert.ModernBertForMaskedLM(config).eval()
  # transformers' init gives the output projections std 0.02 / sqrt(2 * layers): each layer would add ~1% to the
  # residual stream, and a wrong attention pattern would hide under the embeddings' rounding. Weights of unit
  # gain (std 1 / sqrt(fan_in)), LayerNorms and biases away from 1 and 0, make every part count.
  with torch.no_grad():
    for name, p in model.named_parameters():
      if p.ndim == 2 and "embeddings" not in name:
        p.normal_(0.0, p.shape[1] ** -0.5)
      elif p.ndim == 2:
        p.normal_(0.0, 1.0)
      elif name.endswith("norm.weight"):
        p.uniform_(0.5, 1.5)
      else:
        p.normal_(0.0, 0.1)
  model.save_pretrained(folder)
  return model, load_file(os.path.join(folder, "model.safetensors"))


@pytest.fixture(scope="module")
def torch_reference(tmp_path_factory):
  config = tiny_config()
  model, tensors = saved_torch_model(config, str(tmp_path_factory.mktemp("modernbert")))
  return config, model, tensors


def torch_outputs(model, dtype=torch.float32):
  ids, mask = batch()
  with torch.no_grad():
    out = model.to(dtype)(
      input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask), output_hidden_states=True
    )
  model.float()
  return out.logits.numpy(), [h.numpy() for h in out.hidden_states]


def our_outputs(config, tensors, dtype):
  ids, mask = batch()
  mlm = mb.ModernBertForMaskedLM(config, dtype=dtype)
  params, _ = params_from_torch(tensors, param_shapes(mlm), dtype=np.dtype(dtype))
  backbone = mb.ModernBertModel(config, dtype=dtype)
  out = backbone.apply({"params": params["model"]}, ids, mask, output_hidden_states=True)
  logits = mlm.apply({"params": params}, ids, mask)
  positions = np.array([[0, 5, 19], [1, 4, 10]], np.int32)
  gathered = mlm.apply({"params": params}, ids, mask, positions=positions)
  np.testing.assert_array_equal(np.asarray(gathered), np.take_along_axis(np.asarray(logits), positions[..., None], 1))
  return out, logits


def _float64_rotary(monkeypatch, model):
  """Makes transformers' rotary embedding float64 in a ``.double()`` model (it casts to float32 there).

  transformers computes the rotary angles and cos/sin from ``.float()`` inputs and rotates ``q.float()`` and
  ``k.float()``, so a float64 model still rounds these to float32; and PyTorch's and XLA's float32 cos/sin differ
  by an ulp. Everything else is transformers' code, unchanged; our float64 rotary computes in float64.
  """
  rotary = model.model.rotary_emb

  def tables(x, position_ids, layer_type):
    theta = model.config.rope_parameters[layer_type]["rope_theta"]
    dim = model.config.hidden_size // model.config.num_attention_heads
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = position_ids[..., None].to(torch.float64) * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

  def rotate(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    half = lambda x: torch.cat([-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]], dim=-1)  # noqa: E731
    return q * cos + half(q) * sin, k * cos + half(k) * sin

  monkeypatch.setattr(rotary, "forward", tables)
  monkeypatch.setattr(torch_modernbert, "apply_rotary_pos_emb", rotate)


def _compare(config, ours, logits, ref_logits, ref_hidden, bound, what):
  assert len(ours.hidden_states) == len(ref_hidden) == config.num_hidden_layers + 1
  np.testing.assert_array_equal(ours.hidden_states[-1], ours.last_hidden_state)
  report = {
    "last_hidden_state": _max_diff(real_tokens(ours.last_hidden_state), real_tokens(ref_hidden[-1])),
    "logits": _max_diff(real_tokens(logits), real_tokens(ref_logits)),
  }
  for i, (h, r) in enumerate(zip(ours.hidden_states, ref_hidden)):
    report[f"hidden_states[{i}]"] = _max_diff(real_tokens(h), real_tokens(r))
  worst = max(rel for _, rel in report.values())
  print(
    f"\n{what}: bound {bound:.2e} (relative to max |ref|), worst {worst:.2e}; "
    + ", ".join(f"{k} abs {a:.1e} rel {r:.1e}" for k, (a, r) in report.items())
  )
  assert worst <= bound, report


def test_parity_float64(torch_reference, monkeypatch):
  """The exactness claim: in float64 (both sides), equal up to float64 rounding (bound ~4e-13).

  PyTorch's SDPA, which computes in float64; transformers' eager attention takes its softmax in float32 even in a
  float64 model, so it is compared in float32 only.
  """
  config, model, tensors = torch_reference
  model.set_attn_implementation("sdpa")
  _float64_rotary(monkeypatch, model)
  ref_logits, ref_hidden = torch_outputs(model, torch.float64)
  with compat.enable_x64(True):
    ours, logits = our_outputs(config, tensors, jnp.float64)
    assert ours.last_hidden_state.dtype == jnp.float64
    _compare(config, ours, logits, ref_logits, ref_hidden, _bound(config, U64), "float64 vs torch sdpa float64")


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_parity_float32(torch_reference, attn_implementation):
  """float32 against transformers as it is (its float32 rotary included), within the derived worst-case bound."""
  config, model, tensors = torch_reference
  model.set_attn_implementation(attn_implementation)
  ref_logits, ref_hidden = torch_outputs(model)
  ours, logits = our_outputs(config, tensors, jnp.float32)
  _compare(config, ours, logits, ref_logits, ref_hidden, _bound(config, U32), f"float32 vs torch {attn_implementation}")


def test_rotary_tables_match_transformers(torch_reference):
  """Our float32 cos/sin are transformers' to within an ulp (PyTorch's and XLA's float32 cos/sin differ by that)."""
  config, model, _ = torch_reference
  positions = torch.arange(config.max_position_embeddings)[None]
  for layer_type in set(config.layer_types):
    ref = model.model.rotary_emb(torch.zeros(1, dtype=torch.float32), positions, layer_type)
    ours = mb.rotary_tables(
      jnp.asarray(positions.numpy()),
      config.rope_parameters[layer_type]["rope_theta"],
      config.hidden_size // config.num_attention_heads,
      jnp.float32,
    )
    for r, o in zip(ref, ours):
      np.testing.assert_allclose(np.asarray(o), r.numpy(), rtol=0, atol=2 * U32)  # |cos|, |sin| <= 1: an ulp <= 2u.


@pytest.mark.parametrize("variant", ["tied", "untied", "all_biases"])
def test_weight_names(tmp_path, variant):
  """Every saved tensor fills a leaf of our tree and every leaf has a tensor: nothing missing, nothing unexpected."""
  overrides = {
    "untied": dict(tie_word_embeddings=False),
    "all_biases": dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True),
  }
  config = tiny_config(**overrides.get(variant, {}))
  _, tensors = saved_torch_model(config, str(tmp_path))
  shapes = param_shapes(mb.ModernBertForMaskedLM(config, tied=variant != "untied"))
  _, used = params_from_torch(tensors, shapes)  # Raises WeightsError for a leaf without a tensor.
  assert used == set(tensors), sorted(set(tensors) - used)
  assert ("attn_norm" in shapes["model"]["layers"]["1"]) and ("attn_norm" not in shapes["model"]["layers"]["0"])
  # The backbone alone: the same tree as the MLM model's "model" child, torch names prefixed "model.".
  backbone_shapes = param_shapes(mb.ModernBertModel(config))
  _, used = params_from_torch(tensors, backbone_shapes, prefix="model.")
  assert used == {k for k in tensors if k.startswith("model.")}


def _scalar(module, ids, mask, absolute: bool = False, **kwargs):
  """A scalar of the logits with fixed random weights (a plain sum would have structurally zero gradients).

  ``absolute``: the sum of the terms' magnitudes instead (the scale of the scalar's rounding errors).
  """
  weights = jax.random.normal(jax.random.key(1), (*ids.shape, module.config.vocab_size))

  def f(params):
    logits = module.apply({"params": params}, ids, mask, **kwargs)
    terms = jnp.promote_types(logits.dtype, jnp.float32)
    terms = logits.astype(terms) * weights.astype(terms)
    return jnp.sum(jnp.abs(terms) if absolute else terms)

  return f


@pytest.mark.parametrize("tied", [True, False])
def test_gradients_reach_every_leaf(tied):
  """Every leaf gets a finite nonzero gradient (tied: the word embeddings also through the decoder)."""
  config = tiny_config(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True)
  module = mb.ModernBertForMaskedLM(config, tied=tied)
  ids, mask = batch()
  params = module.init(jax.random.key(0), ids, mask)["params"]
  grads = jax.grad(_scalar(module, ids, mask))(params)
  for path, g in flax.traverse_util.flatten_dict(grads).items():
    g = np.asarray(g)
    assert np.all(np.isfinite(g)) and np.any(g != 0), "/".join(path)


def test_finite_differences_float64():
  """jax.grad against central differences in float64, along a random direction of two leaves.

  A central difference D(h) errs by truncation c * h^2 + rounding. Truncation is estimated from the run itself:
  D(2h) - D(h) = 3 c h^2 (Richardson), so |D(2h) - D(h)| bounds it with a factor-3 margin. Rounding: each
  evaluation of f errs by at most steps * u64 * S (S: the sum of |terms| of the scalar), so D(h) by that / h.
  """
  with compat.enable_x64(True):
    config = tiny_config()
    module = mb.ModernBertForMaskedLM(config, dtype=jnp.float64)
    ids, mask = batch()
    params = jax.tree.map(lambda p: p.astype(jnp.float64), module.init(jax.random.key(0), ids, mask)["params"])
    f = jax.jit(_scalar(module, ids, mask))
    magnitude = float(jax.jit(_scalar(module, ids, mask, absolute=True))(params))
    grads = flax.traverse_util.flatten_dict(jax.grad(f)(params))
    h = 1e-5
    rounding = _rounding_steps(config, LENGTH) * U64 * magnitude / h
    for path in [("model", "layers", "1", "attn", "Wqkv", "kernel"), ("model", "layers", "2", "mlp", "Wi", "kernel")]:
      direction = jax.random.normal(jax.random.key(2), grads[path].shape, jnp.float64)

      def derivative(step, path=path, direction=direction):
        flat = flax.traverse_util.flatten_dict(params)
        plus, minus = dict(flat), dict(flat)
        plus[path], minus[path] = flat[path] + step * direction, flat[path] - step * direction
        return float(f(flax.traverse_util.unflatten_dict(plus)) - f(flax.traverse_util.unflatten_dict(minus))) / (
          2 * step
        )

      numeric, coarse = derivative(h), derivative(2 * h)
      analytic = float(jnp.sum(grads[path] * direction))
      bound = abs(coarse - numeric) + rounding
      print(
        f"\n{'/'.join(path)}: analytic {analytic:.12g} numeric {numeric:.12g}, diff "
        f"{abs(numeric - analytic):.1e}, bound {bound:.1e}"
      )
      assert abs(numeric - analytic) <= bound


def test_dropout_only_in_training():
  config = tiny_config(embedding_dropout=0.1, attention_dropout=0.1, mlp_dropout=0.1)
  module = mb.ModernBertForMaskedLM(config)
  ids, mask = batch()
  params = module.init(jax.random.key(0), ids, mask)["params"]
  run = lambda deterministic, seed: np.asarray(
    module.apply(  # noqa: E731
      {"params": params}, ids, mask, deterministic=deterministic, rngs={"dropout": jax.random.key(seed)}
    )
  )
  np.testing.assert_array_equal(run(True, 1), run(True, 2))
  np.testing.assert_array_equal(run(True, 1), np.asarray(module.apply({"params": params}, ids, mask)))
  np.testing.assert_array_equal(run(False, 1), run(False, 1))
  assert not np.allclose(run(False, 1), run(False, 2))
  assert not np.allclose(run(False, 1), run(True, 1))


def test_attention_paths_agree():
  """The explicit-softmax path (taken with attention dropout in training) computes what dot_product_attention does.

  An attention_dropout of 1e-30 takes the explicit path in training but drops nothing (keep probability rounds to
  1), so the two differ only by rounding: the softmax and probabilities.v (2 * length + head_dim roundings per
  value), within the model's bound.
  """
  config = tiny_config()
  ids, mask = batch()
  params = mb.ModernBertForMaskedLM(config).init(jax.random.key(0), ids, mask)["params"]
  explicit = mb.ModernBertForMaskedLM(tiny_config(attention_dropout=1e-30)).apply(
    {"params": params}, ids, mask, deterministic=False, rngs={"dropout": jax.random.key(0)}
  )
  fused = mb.ModernBertForMaskedLM(config).apply({"params": params}, ids, mask)
  _, rel = _max_diff(real_tokens(explicit), real_tokens(fused))
  assert rel <= _bound(config, U32), rel


def test_local_window_size_is_the_same_mask():
  """jax's local_window_size=(w, w) keeps |query - key| <= w: the same as our boolean sliding-window mask."""
  config = tiny_config()
  w = config.local_attention // 2
  q, k, v = jax.random.normal(jax.random.key(0), (3, 2, LENGTH, 4, 8))
  _, mask = batch()
  keys = jnp.asarray(mask, bool)[:, None, None, :]
  distance = jnp.abs(jnp.arange(LENGTH)[:, None] - jnp.arange(LENGTH)[None, :])
  ours = jax.nn.dot_product_attention(q, k, v, mask=keys & (distance <= w))
  windowed = jax.nn.dot_product_attention(q, k, v, mask=keys, local_window_size=(w, w))
  np.testing.assert_array_equal(real_tokens(ours), real_tokens(windowed))


def test_gradient_checkpointing_changes_nothing():
  """Rematerialisation recomputes the same float32 ops: outputs and gradients equal (bit for bit on CPU; the
  derived bound in case XLA fuses a recomputed layer differently elsewhere)."""
  config = tiny_config()
  ids, mask = batch()
  plain, remat = (mb.ModernBertForMaskedLM(config, gradient_checkpointing=g) for g in (False, True))
  params = plain.init(jax.random.key(0), ids, mask)["params"]
  assert jax.tree.structure(params) == jax.tree.structure(remat.init(jax.random.key(0), ids, mask)["params"])
  _, rel = _max_diff(remat.apply({"params": params}, ids, mask), plain.apply({"params": params}, ids, mask))
  assert rel <= _bound(config, U32), rel
  grads = [jax.grad(_scalar(m, ids, mask))(params) for m in (plain, remat)]
  for (path, g), r in zip(
    flax.traverse_util.flatten_dict(grads[0]).items(), flax.traverse_util.flatten_dict(grads[1]).values()
  ):
    _, rel = _max_diff(r, g)
    assert rel <= _bound(config, U32), ("/".join(path), rel)


def test_bfloat16_close_to_float32():
  """bfloat16 runs and stays near float32: a loose bound, the random-walk estimate of bfloat16 rounding.

  The worst-case bound 2 * steps * u is over 1 for u = 2^-8 (meaningless); rounding errors of random sign add up
  like a random walk, rms u * sqrt(steps), and the largest of the ~1e3 compared values is within ~4 rms of zero.
  """
  config = tiny_config()
  ids, mask = batch()
  f32, bf16 = (mb.ModernBertForMaskedLM(config, dtype=d) for d in (jnp.float32, jnp.bfloat16))
  params = f32.init(jax.random.key(0), ids, mask)["params"]
  low = bf16.apply({"params": params}, ids, mask)
  assert low.dtype == jnp.bfloat16
  _, rel = _max_diff(real_tokens(low), real_tokens(f32.apply({"params": params}, ids, mask)))
  bound = 4 * U_BF16 * math.sqrt(_rounding_steps(config, LENGTH))
  print(f"\nbfloat16 vs float32: worst {rel:.2e}, bound {bound:.2e}")
  assert rel <= bound, rel


# --------------------------------------------------------------------------
# In jaxcse: configs/modernbert.py trains, encodes and exports a (tiny random) ModernBERT.


def test_the_modernbert_config_trains_encodes_and_exports(small_data_dir, tmp_path):
  from jaxcse import encode, export_hf, train
  from tests import helpers

  folder = helpers.make_tiny_modernbert_dir(str(tmp_path / "tiny_modernbert"))
  workdir = str(tmp_path / "workdir")
  config = helpers.tiny_config(folder, small_data_dir, "modernbert", **{"train.max_steps": 3})
  summary = train.train_and_evaluate(config, workdir)
  assert summary["steps"] == 3
  encoder = encode.Encoder.load(workdir)
  assert encoder.spec.hf_config.model_type == "modernbert" and encoder.pooler == "avg"
  sentences = ["A man is playing a guitar.", "Someone plays music on a stage tonight."]
  ours = np.asarray(encoder.encode(sentences))
  # The exported folder is a ModernBertModel in PyTorch; sentence-transformers mean-pools it to our embeddings.
  out = str(tmp_path / "exported")
  assert export_hf.export(encoder.spec, encoder.params, out)["architecture"] == "ModernBertModel"
  from sentence_transformers import SentenceTransformer

  theirs = SentenceTransformer(out, device="cpu").encode(sentences, convert_to_numpy=True)
  # float32 in two libraries over 3 layers of width 32-96: sums reordered, ~1e-6 relative; embeddings O(1).
  np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-4)
