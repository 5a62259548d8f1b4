"""The embedding tables' lookups (models.common.Embed, BertEmbeddings): nn.Embed's values, float32 gradients.

The reference is the computation jaxcse's encoders ran before (``nn.Embed`` with the compute dtype, which gathers
from the cast table): the forward values must be the same bits, the gradients the same sums (only their order and
the precision they accumulate in may differ), and the gradient program must scatter only the word table, in
float32 (tests/test_compile_accelerators.py checks the GPU program itself).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from transformers import AutoConfig

from jaxcse.core import compat
from jaxcse.models import bert, common, modernbert

B, L = 8, 12  # 96 tokens.


class OldBertEmbeddings(nn.Module):
  """BertEmbeddings as it was computed: three ``nn.Embed`` gathers from the tables cast to ``dtype``."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, input_ids, token_type_ids, positions, deterministic: bool):
    c = self.config
    init = nn.initializers.normal(c.initializer_range)

    def table(size, name):
      return nn.Embed(size, c.hidden_size, embedding_init=init, dtype=self.dtype, name=name)

    words = table(c.vocab_size, "word_embeddings")(input_ids.astype("i4"))
    places = table(c.max_position_embeddings, "position_embeddings")(positions.astype("i4"))
    types = table(c.type_vocab_size, "token_type_embeddings")(token_type_ids.astype("i4"))
    hidden = nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="LayerNorm")(words + types + places)
    return nn.Dropout(rate=c.hidden_dropout_prob, name="dropout")(hidden, deterministic=deterministic)


def _config(model_type: str):
  types = 2 if model_type == "bert" else 1
  return AutoConfig.for_model(
    model_type,
    vocab_size=B * L + 4,  # Room for a distinct id per token (_token_cotangents).
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=40,
    type_vocab_size=types,
    pad_token_id=0 if model_type == "bert" else 1,
  )


def _batch(config, seed: int = 0):
  """``(input_ids, attention_mask)``: [CLS]-like first ids, padding after random lengths, repeated ids, and one
  padding id inside the first sentence (RoBERTa numbers the tokens after it differently)."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, L + 1, size=B)
  lengths[0] = L
  mask = (np.arange(L)[None] < lengths[:, None]).astype(np.int32)
  ids = rng.integers(3, 20, size=(B, L))  # Few distinct ids: rows of the word table are hit many times.
  ids[:, 0] = 2
  ids = np.where(mask == 1, ids, config.pad_token_id)
  ids[0, 4] = config.pad_token_id
  return ids.astype(np.int32), mask


def _old_inputs(config, ids, token_type_ids=None, positions=None):
  """What BertModel gave the embeddings before: explicit zeros for the types, the family's positions."""
  types = np.zeros_like(ids) if token_type_ids is None else token_type_ids
  places = bert.default_position_ids(config, jnp.asarray(ids)) if positions is None else positions
  return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(places)


def _params(config):
  ids, _ = _batch(config)
  return OldBertEmbeddings(config).init(jax.random.key(1), *_old_inputs(config, ids), True)["params"]


@pytest.mark.parametrize("model_type", ["bert", "roberta", "xlm-roberta"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("explicit", [False, True])
def test_the_forward_is_the_old_one_bit_for_bit(model_type, dtype, explicit):
  config = _config(model_type)
  ids, _ = _batch(config)
  rng = np.random.default_rng(1)
  types = rng.integers(0, config.type_vocab_size, size=ids.shape).astype(np.int32) if explicit else None
  places = rng.integers(0, config.max_position_embeddings, size=ids.shape).astype(np.int32) if explicit else None
  params = _params(config)
  new_params = bert.BertEmbeddings(config).init(jax.random.key(1), jnp.asarray(ids), None, None, True)["params"]
  jax.tree.map(np.testing.assert_array_equal, new_params, params)  # The same tree, initialised the same.
  ours = bert.BertEmbeddings(config, dtype).apply({"params": params}, jnp.asarray(ids), types, places, True)
  old = OldBertEmbeddings(config, dtype).apply({"params": params}, *_old_inputs(config, ids, types, places), True)
  assert ours.dtype == old.dtype == dtype
  np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(old, np.float32))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_every_lookup_gives_the_gathers_values_out_of_range_ids_included(dtype):
  """nn.Embed's gather: ids -n..-1 wrap, others outside the table are NaN; a one-row table is broadcast."""
  init = nn.initializers.normal(1.0)
  for rows in (1, 2, 3):
    table = {"params": {"embedding": init(jax.random.key(rows), (rows, 4))}}
    ids = jnp.array([[0, rows - 1, -1, -rows, -rows - 1, rows, 7]])
    old = nn.Embed(rows, 4, dtype=dtype).apply(table, ids)
    embed = common.Embed(rows, 4, dtype=dtype)
    for ours in (embed.apply(table, ids), embed.apply(table, ids, method="select")):
      assert ours.dtype == dtype
      np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(old, np.float32))
  table = {"params": {"embedding": init(jax.random.key(0), (5, 4))}}
  embed = common.Embed(5, 4, dtype=dtype)
  for length in (3, 5, 7):  # Past the table: NaN rows, as the gather's.
    positions = jnp.broadcast_to(jnp.arange(length), (2, length))
    old = nn.Embed(5, 4, dtype=dtype).apply(table, positions)
    ours = embed.apply(table, (2, length), method="leading")
    np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(old, np.float32))
  old = nn.Embed(5, 4, dtype=dtype).apply(table, jnp.full((2, 3), 4))
  ours = embed.apply(table, 4, (2, 3), method="row")
  np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(old, np.float32))


def _token_cotangents(module, config, params, ids, types, places, cotangent):
  """Each token's cotangent at the embeddings' sum (what the tables' gradients add up), ``[B * L, hidden]``.

  The same forward with every token given a word-table row of its own holding its word's row: the gradient of
  that row is the token's cotangent alone (one update into zeros: no rounding).
  """
  own = dict(params)
  table = params["word_embeddings"]["embedding"]
  rows = jnp.concatenate([ids.reshape(-1), jnp.zeros(len(table) - ids.size, ids.dtype)])  # Unused past B * L.
  own["word_embeddings"] = {"embedding": table[rows]}
  own_ids = jnp.arange(B * L, dtype=jnp.int32).reshape(B, L)

  def loss(p):
    return jnp.sum(module.apply({"params": p}, own_ids, types, places, True).astype(cotangent.dtype) * cotangent)

  return np.asarray(jax.grad(loss)(own)["word_embeddings"]["embedding"][: B * L], np.float64)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_the_gradients_are_the_old_sums_within_their_summation_error(model_type, precision):
  """Old and new add the same tokens' cotangents into each table entry, in another order (and, for positions and
  types, by a reduction instead of a scatter): each sum of n terms is within gamma_n * sum|terms| of the exact sum
  (gamma_n = n u / (1 - n u), Higham 2002, eq. 4.4), so two orders differ by at most 2 gamma_n sum|terms|; the
  terms themselves, the same program's backward above the embeddings, may differ in their last bits: 4 n u
  sum|terms| bounds both."""
  config = _config(model_type)
  dtype = jnp.dtype(precision)
  u = np.finfo(dtype).eps / 2
  with compat.enable_x64(precision == "float64"):
    params = jax.tree.map(lambda x: jnp.asarray(x, dtype), _params(config))
    ids, types, places = _old_inputs(config, _batch(config)[0])
    cotangent = jnp.asarray(np.random.default_rng(2).normal(size=(B, L, config.hidden_size)), dtype)
    new, old = bert.BertEmbeddings(config, dtype), OldBertEmbeddings(config, dtype)

    def grad(module, *inputs):
      return jax.grad(lambda p: jnp.sum(module.apply({"params": p}, *inputs, True).astype(dtype) * cotangent))(params)

    ours = grad(new, ids, None, None)
    theirs = grad(old, ids, types, places)
    terms = np.abs(_token_cotangents(old, config, params, ids, types, places, cotangent))
  flat = {"word_embeddings": ids, "position_embeddings": places, "token_type_embeddings": types}
  for name, index in flat.items():
    index = np.asarray(index).reshape(-1)
    total = np.zeros(np.shape(params[name]["embedding"]))
    np.add.at(total, index, terms)  # sum|terms| of each entry.
    n = np.bincount(index).max()
    a, b = (np.asarray(g[name]["embedding"], np.float64) for g in (ours, theirs))
    assert np.all(np.abs(a - b) <= 4 * n * u * total), (name, np.abs(a - b).max())
    assert ours[name]["embedding"].dtype == dtype
  for name in ("LayerNorm",):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=64 * u, atol=0), ours[name], theirs[name])


@pytest.mark.parametrize("lookup", ["__call__", "leading", "row", "select"])
def test_a_bfloat16_lookup_adds_its_gradient_in_float32(lookup):
  """The defect: nn.Embed(dtype=bfloat16)'s gradient was a bfloat16 scatter-add, rounded at every add. Each
  entry's gradient is now the float32 sum of the tokens' bfloat16 cotangents: within gamma_n sum|terms| (n u,
  u = 2^-24) of their exact sum, where a bfloat16 sum of the 96 tokens is off by ~2^-9 of it."""
  rows, features = L, 8
  table = {"params": {"embedding": nn.initializers.normal(1.0)(jax.random.key(0), (rows, features))}}
  rng = np.random.default_rng(3)
  ids = jnp.asarray(rng.integers(0, 2, size=(B, L)), jnp.int32)  # 96 tokens into 2 rows.
  cotangent = jnp.asarray(rng.normal(size=(B, L, features)), jnp.bfloat16)
  args = {"__call__": (ids,), "leading": ((B, L),), "row": (1, (B, L)), "select": (ids,)}[lookup]
  index = {"__call__": ids, "leading": jnp.broadcast_to(jnp.arange(L), (B, L)), "row": jnp.ones_like(ids)}
  index = np.asarray(index.get(lookup, ids)).reshape(-1)
  embed = common.Embed(rows, features, dtype=jnp.bfloat16)
  out = jax.grad(lambda t: jnp.sum(embed.apply(t, *args, method=lookup).astype(jnp.float32) * cotangent))(table)
  got = np.asarray(out["params"]["embedding"], np.float64)
  terms = np.asarray(cotangent, np.float64).reshape(-1, features)
  exact, total = np.zeros((rows, features)), np.zeros((rows, features))
  np.add.at(exact, index, terms)
  np.add.at(total, index, np.abs(terms))
  n = np.bincount(index).max()
  np.testing.assert_array_less(np.abs(got - exact), n * 2.0**-24 * total + 1e-30)


def _scatters(jaxpr) -> list[tuple[str, tuple[int, ...]]]:
  """``(dtype, shape)`` of the array each scatter-add of a jaxpr (and its sub-jaxprs) updates."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name.startswith("scatter"):
      aval = eqn.invars[0].aval
      found.append((str(aval.dtype), tuple(aval.shape)))
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      found += _scatters(sub)
  return found


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_the_gradient_scatters_only_the_word_table_and_in_float32(model_type):
  """In bfloat16, the backbone's gradient scatters the word table in float32 (and RoBERTa's padding-aware
  positions); BERT's positions and the token types are sums over the batch, with no scatter."""
  config = _config(model_type)
  ids, mask = (jnp.asarray(x) for x in _batch(config))
  module = bert.BertModel(config, jnp.bfloat16, add_pooling_layer=False)
  params = module.init(jax.random.key(0), ids, mask)["params"]
  loss = lambda p: jnp.sum(module.apply({"params": p}, ids, mask).last_hidden_state.astype(jnp.float32))  # noqa: E731
  found = _scatters(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
  hidden = config.hidden_size
  expected = [("float32", (config.vocab_size, hidden))]
  if model_type == "roberta":
    expected.append(("float32", (config.max_position_embeddings, hidden)))
  assert sorted(found) == sorted(expected)


def test_modernbert_looks_its_tokens_up_in_float32():
  from transformers import ModernBertConfig

  config = ModernBertConfig(
    vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, pad_token_id=0
  )
  ids = jnp.asarray(_batch(_config("bert"))[0] % 50)
  module = modernbert.ModernBertEmbeddings(config, jnp.bfloat16)
  params = module.init(jax.random.key(0), ids, True)
  old = jnp.take(params["params"]["tok_embeddings"]["embedding"].astype(jnp.bfloat16), ids, axis=0)
  embedded = jax.jit(lambda p: module.apply(p, ids, True, capture_intermediates=True))(params)[1]
  np.testing.assert_array_equal(
    np.asarray(embedded["intermediates"]["tok_embeddings"]["__call__"][0], np.float32), np.asarray(old, np.float32)
  )
  loss = lambda p: jnp.sum(module.apply(p, ids, True).astype(jnp.float32))  # noqa: E731
  assert _scatters(jax.make_jaxpr(jax.grad(loss))(params).jaxpr) == [("float32", (50, 16))]


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_roberta_gathers_only_the_positions_out_of_order(model_type):
  """Padding (row ``pad``) and tokens numbered by their column (a slice of the table) are not gathered, so their
  gradient is no scatter's: in a right-padded batch every id given to the gather is past the table (dropped)."""
  config = _config(model_type)
  ids, _ = _batch(config)
  past = config.max_position_embeddings
  right_padded = np.where(np.arange(L) < 4, ids[:1], config.pad_token_id)  # Row 0 cut before its inner padding.
  assert np.all(bert.positions_out_of_order(config, jnp.asarray(right_padded), past) == past)
  got = np.asarray(bert.positions_out_of_order(config, jnp.asarray(ids), past))
  positions = np.asarray(bert.default_position_ids(config, jnp.asarray(ids)))
  inside = np.zeros_like(ids, bool)
  inside[0, 5:] = True  # After the padding inside the first sentence: numbered one less than their column's.
  np.testing.assert_array_equal(got[inside], positions[inside])
  assert np.all(positions[inside] == config.pad_token_id + np.arange(5, L)) and np.all(got[~inside] == past)
