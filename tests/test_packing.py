"""Packed rows (``models.packing``) and the one attention function (``models.attention``) every family uses.

The claim is exactness: a text packed with others into a row, attending only to itself and numbered from its own
first token, has the token states it has in a padded batch. In float64 with dropout off, packed and padded give
the same embeddings and gradients for every family and pooler up to float64 rounding: the only differences are
the order of sums that a packed row extends with exact zeros (masked keys' weights are exp(-huge) = 0), so a bound
of 1e-10 relative (about 10^6 roundings of 2.2e-16) is loose, and a wrong position, mask or pooling place is O(1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from jaxcse.core import compat
from jaxcse.models import attention, bert, modernbert, packing, poolers
from jaxcse.models.spec import PooledBackbone

EXACT = 1e-10
LENGTHS = (7, 3, 12, 5, 9, 2, 12, 4, 1)
WIDTH = 12
ROW_LEN = 20  # Longer than any text and not a multiple of any: texts share rows, rows end in padding.


def _families():
  common = dict(
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,  # Shorter than a packed row: the row's padding must not read past the table.
  )
  quiet = dict(bos_token_id=None, eos_token_id=None, cls_token_id=None, sep_token_id=None)
  return {
    "bert": transformers.BertConfig(**common),
    "roberta": transformers.RobertaConfig(**common, pad_token_id=1),
    "xlm-roberta": transformers.XLMRobertaConfig(**common, pad_token_id=1),
    # local_attention 4: a token sees 2 columns each side in local layers, shorter than most texts here.
    "modernbert": transformers.ModernBertConfig(
      **{**common, "num_hidden_layers": 3}, local_attention=4, pad_token_id=0, **quiet
    ),
  }


FAMILIES = _families()


def _backbone(family: str, dtype):
  config = FAMILIES[family]
  return (modernbert.ModernBertModel if family == "modernbert" else bert.BertModel)(config, dtype)


def _texts(seed: int = 0) -> list[list[int]]:
  rng = np.random.default_rng(seed)
  return [rng.integers(2, 50, n).tolist() for n in LENGTHS]


def _padded(texts, pad: int):
  ids = np.full((len(texts), WIDTH), pad, np.int32)
  mask = np.zeros_like(ids)
  for i, t in enumerate(texts):
    ids[i, : len(t)], mask[i, : len(t)] = t, 1
  return ids, mask


def _cases():
  for family in FAMILIES:
    for pooler in poolers.names():
      if family == "modernbert" and poolers.get(pooler).needs_pooler_output:
        continue  # ModernBERT has no pooler layer.
      yield family, pooler


@pytest.fixture(scope="module", autouse=True)
def _float64():
  with compat.enable_x64(True):
    yield


@pytest.mark.parametrize("family,pooler", list(_cases()))
def test_packed_equals_padded_in_float64_embeddings_and_gradients(family, pooler):
  module = PooledBackbone(_backbone(family, jnp.float64), pooler)
  texts = _texts()
  pad = FAMILIES[family].pad_token_id or 0
  ids, mask = _padded(texts, pad)
  params = module.init(jax.random.key(0), ids, mask)["params"]
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
  packed = packing.pack(texts, rows=packing.rows_needed(LENGTHS, ROW_LEN), row_len=ROW_LEN, pad_id=pad)
  assert packed.input_ids.size < ids.size  # The packed batch is smaller: this compares two different layouts.

  def padded(p):
    return module.apply({"params": p}, ids, mask)

  def packed_fn(p):
    return module.apply({"params": p}, packed.input_ids, packed.segment_ids, places=packed.places)

  a, b = padded(params), packed_fn(params)
  assert a.shape == b.shape == (len(texts), 16)
  np.testing.assert_array_less(np.abs(np.asarray(a - b)), EXACT * float(jnp.max(jnp.abs(a))))
  # A loss that reads every embedding, non-linearly: the gradient reaches every parameter the forward used.
  loss = lambda f: lambda p: jnp.sum(jnp.sin(3.0 * f(p)))  # noqa: E731
  ga, gb = jax.grad(loss(padded))(params), jax.grad(loss(packed_fn))(params)
  scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(ga))
  assert scale > 0
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(ga), jax.tree.leaves(gb)):
    err = float(jnp.max(jnp.abs(x - y)))
    assert err <= EXACT * scale, f"{jax.tree_util.keystr(path)}: {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("family,pooler", [c for c in _cases() if c[0] in ("bert", "modernbert")])
def test_texts_packed_per_shard_pool_from_their_own_rows_as_padded(family, pooler):
  """``pack_shards``' layout (a data-parallel batch: each device's texts in rows of its own, indices local to the
  shard; the vmapped gather and segment sum) gives every text its padded embedding, in the batch's order."""
  module = PooledBackbone(_backbone(family, jnp.float64), pooler)
  texts = _texts(1)
  pad = FAMILIES[family].pad_token_id or 0
  ids, mask = _padded(texts, pad)
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), module.init(jax.random.key(0), ids, mask)["params"])
  shards = [texts[0:3], texts[3:6], texts[6:9]]
  rows = max(packing.rows_needed([len(t) for t in part], ROW_LEN) for part in shards)
  packed = packing.pack_shards(shards, rows=rows, row_len=ROW_LEN, pad_id=pad)
  assert packed.input_ids.shape == (3 * rows, ROW_LEN) and packed.places.row.shape == (3, 3)
  assert int(packed.places.row.max()) < rows  # Local to each shard's block of rows.
  a = module.apply({"params": params}, ids, mask)
  b = module.apply({"params": params}, packed.input_ids, packed.segment_ids, places=packed.places)
  assert b.shape == a.shape
  np.testing.assert_array_less(np.abs(np.asarray(a - b)), EXACT * float(jnp.max(jnp.abs(a))))
  with pytest.raises(ValueError, match="the same number of texts"):
    packing.pack_shards([texts[:4], texts[4:]], rows=rows + 2, row_len=ROW_LEN, pad_id=pad)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_packed_text_does_not_see_its_neighbours(family):
  """Changing one text changes no other text's embedding in its row (and does change its own)."""
  module = PooledBackbone(_backbone(family, jnp.float64), "avg")
  texts = _texts()
  pad = FAMILIES[family].pad_token_id or 0
  params = module.init(jax.random.key(1), *_padded(texts, pad))["params"]

  def embed(ts):
    packed = packing.pack(ts, rows=4, row_len=ROW_LEN, pad_id=pad)
    return np.asarray(module.apply({"params": params}, packed.input_ids, packed.segment_ids, places=packed.places))

  before = embed(texts)
  changed = [list(t) for t in texts]
  changed[0] = [(x + 7) % 48 + 2 for x in changed[0]]  # Same length: the layout is the same.
  after = embed(changed)
  assert not np.allclose(before[0], after[0])
  np.testing.assert_array_equal(before[1:], after[1:])


def test_packed_dropout_trains_with_finite_embeddings():
  module = PooledBackbone(_backbone("bert", jnp.float32), "cls")
  texts = _texts()
  packed = packing.pack(texts, rows=4, row_len=ROW_LEN, pad_id=0)
  params = module.init(jax.random.key(0), *_padded(texts, 0))["params"]
  args = (packed.input_ids, packed.segment_ids)
  one = module.apply({"params": params}, *args, places=packed.places, train=True, rngs={"dropout": jax.random.key(1)})
  two = module.apply({"params": params}, *args, places=packed.places, train=True, rngs={"dropout": jax.random.key(2)})
  assert np.isfinite(np.asarray(one)).all() and not np.allclose(one, two)


def test_attend_padding_refuses_a_packed_batch():
  module = PooledBackbone(_backbone("bert", jnp.float32), "avg", attend_padding=True)
  texts = _texts()
  packed = packing.pack(texts, rows=4, row_len=ROW_LEN, pad_id=0)
  params = PooledBackbone(_backbone("bert", jnp.float32), "avg").init(jax.random.key(0), *_padded(texts, 0))
  with pytest.raises(ValueError, match="packed batch has none"):
    module.apply(params, packed.input_ids, packed.segment_ids, places=packed.places)


# --------------------------------------------------------------------------
# The layout.


def test_first_fit_places_every_text_whole_and_deterministically():
  lengths = [5, 9, 3, 9, 1, 7, 0]
  rows, starts = packing.first_fit(lengths, 10)
  # Longest first, ties in input order: 9 (#1) row 0, 9 (#3) row 1, 7 row 2, 5 row 3, 3 row 2, 1 row 0, 0 row 0.
  assert rows.tolist() == [3, 0, 2, 1, 0, 2, 0]
  assert starts.tolist() == [0, 0, 7, 0, 9, 0, 10]
  assert packing.rows_needed(lengths, 10) == 4
  assert packing.rows_needed([0, 0], 10) == 0
  with pytest.raises(ValueError, match="11 tokens cannot be packed into rows of 10"):
    packing.first_fit([11], 10)


def test_pack_lays_out_ids_segments_and_places():
  texts = [[11, 12, 13], [21, 22], [31, 32, 33, 34], []]
  packed = packing.pack(texts, rows=2, row_len=6, pad_id=0)
  # First fit, longest first: [31..34] at row 0 col 0, [11..13] row 1 col 0, [21, 22] row 0 col 4.
  assert packed.input_ids.tolist() == [[31, 32, 33, 34, 21, 22], [11, 12, 13, 0, 0, 0]]
  assert packed.segment_ids.tolist() == [[1, 1, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0]]
  places = packed.places
  assert places.row.tolist() == [1, 0, 0, 0] and places.start.tolist() == [0, 4, 0, 0]
  assert places.length.tolist() == [3, 2, 4, 0]
  assert places.text.tolist() == [[2, 2, 2, 2, 1, 1], [0, 0, 0, 4, 4, 4]]  # 4 (= texts): padding.
  # A token's "state" is its id: the first token and the mean of each text, as a padded batch's poolers read them.
  states = jnp.asarray(packed.input_ids, jnp.float32)[..., None]
  tokens = packing.PackedTokens(places)
  assert tokens.first(states)[:3, 0].tolist() == [11, 21, 31]
  assert tokens.mean(states)[:, 0].tolist() == [12.0, 21.5, 32.5, 0.0]
  with pytest.raises(ValueError, match="need 3 rows of 6, not 2"):
    packing.pack([[1] * 5, [1] * 5, [1] * 5], rows=2, row_len=6, pad_id=0)
  with pytest.raises(ValueError, match="7 tokens cannot be packed into rows of 6"):
    packing.pack([[1] * 7], rows=1, row_len=6, pad_id=0)


def test_segment_positions_count_from_each_segments_start():
  segments = jnp.asarray([[1, 1, 1, 2, 2, 0, 0], [1, 2, 3, 3, 3, 3, 0]])
  assert attention.segment_positions(segments).tolist() == [[0, 1, 2, 0, 1, 0, 1], [0, 0, 0, 1, 2, 3, 0]]
  assert bert.packed_position_ids(FAMILIES["bert"], segments).tolist() == [[0, 1, 2, 0, 1, 0, 0], [0, 0, 0, 1, 2, 3, 0]]
  config = FAMILIES["roberta"]  # pad 1: positions from 2 within each text, 1 at padding.
  assert bert.packed_position_ids(config, segments).tolist() == [[2, 3, 4, 2, 3, 1, 1], [2, 2, 2, 3, 4, 5, 1]]


# --------------------------------------------------------------------------
# The attention function.


def test_visible_from_a_mask_from_segments_and_within_a_window():
  assert attention.visible(jnp.asarray([[1, 1, 0]])).tolist() == [[[[True, True, False]]]]
  seen = attention.visible(segment_ids=jnp.asarray([[1, 1, 2, 0]]))[0, 0]
  assert seen.tolist() == [
    [True, True, False, False],
    [True, True, False, False],
    [False, False, True, False],
    [False, False, False, False],  # Padding sees nothing (uniform weights, finite, never read).
  ]
  local = attention.visible(segment_ids=jnp.asarray([[1, 1, 1, 1]]), window=1)[0, 0]
  assert local.tolist() == [[abs(q - k) <= 1 for k in range(4)] for q in range(4)]
  with pytest.raises(ValueError, match="exactly one"):
    attention.visible()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fast_and_the_explicit_path_agree(dtype):
  """jax's dot_product_attention (no dropout, not float64) and flax's weights + einsum (dropout or float64) compute
  one function: on the same inputs, without dropout, to the rounding of a softmax over 6 keys and a 4-term dot."""
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 6, 3, 4)), dtype) for _ in range(3))
  mask = attention.visible(segment_ids=jnp.asarray([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]]))
  explicit = attention.attend(q, k, v, mask, dtype=dtype, dropout_rate=0.5, dropout_rng=jax.random.key(0))
  assert explicit.shape == (2, 6, 3, 4)
  fast = jax.nn.dot_product_attention(q / 2.0, k, v, mask=mask, scale=1.0)
  weights = jax.nn.softmax(jnp.where(mask, jnp.einsum("bqhd,bkhd->bhqk", q / 2.0, k), -jnp.inf), axis=-1)
  reference = jnp.einsum("bhqk,bkhd->bqhd", jnp.nan_to_num(weights), v)
  no_dropout = attention.attend(q, k, v, mask, dtype=dtype)
  bound = 16 * np.finfo(dtype).eps
  real = np.asarray(mask[:, 0].any(-1))  # Rows of queries that see some key (padding queries are not compared).
  np.testing.assert_allclose(np.asarray(no_dropout)[real], np.asarray(reference)[real], rtol=bound, atol=bound)
  if dtype == "float32":
    np.testing.assert_allclose(np.asarray(no_dropout), np.asarray(fast), rtol=bound, atol=bound)
  dropped = np.asarray(explicit)[real]
  assert np.isfinite(dropped).all() and not np.allclose(dropped, np.asarray(reference)[real])


@pytest.mark.parametrize("window", [None, 8])
def test_the_tpus_splash_kernel_computes_what_attend_does_at_real_tokens(window):
  """attention.splash_attend (TPU's Pallas splash kernel, run by Pallas' interpreter here) against attend over
  visible(segment_ids, window): float32 on both sides, a softmax over at most 128 keys and a 16-term dot (a bound of
  16 eps on O(1) values), at real tokens; and the gradient through the kernel's own backward."""
  rng = np.random.default_rng(0)
  length = 128
  segments = np.zeros((2, length), np.int32)
  segments[0, :40], segments[0, 40:100], segments[1, :] = 1, 2, 1  # Two texts and padding; one full row.
  segments = jnp.asarray(segments)
  q, k, v = (jnp.asarray(rng.normal(size=(2, length, 2, 16)), jnp.float32) for _ in range(3))
  real = np.asarray(segments) > 0
  mask = attention.visible(segment_ids=segments, window=window)

  def splash(q):
    return attention.splash_attend(q, k, v, segments, window=window, interpret=True)

  def plain(q):
    return attention.attend(q, k, v, mask, dtype=jnp.float32)

  bound = 16 * np.finfo(np.float32).eps
  np.testing.assert_allclose(np.asarray(splash(q))[real], np.asarray(plain(q))[real], rtol=bound, atol=bound)
  if window is None:
    grads = [jax.grad(lambda q, f=f: jnp.sum(jnp.where(real[:, :, None, None], f(q), 0.0)))(q) for f in (splash, plain)]
    np.testing.assert_allclose(np.asarray(grads[0]), np.asarray(grads[1]), rtol=bound, atol=bound)
  with pytest.raises(ValueError, match="multiple of its block 128"):
    attention.splash_attend(q[:, :96], k[:, :96], v[:, :96], segments[:, :96], interpret=True)


def test_cudnn_gets_a_mask_of_full_queries_by_keys(monkeypatch):
  """cuDNN's fused kernel takes the mask as a bias of full [queries, keys] and refuses a padding mask's broadcast
  query axis ("Bias must have same seq length as QKV, got 1 and 128" on an H200: experiments/packing/README.md,
  1c). ``attend`` broadcasts it for cuDNN only; the call is captured here, where no GPU is."""
  seen = []
  monkeypatch.setattr(
    jax.nn, "dot_product_attention", lambda q, k, v, mask, scale, implementation: seen.append((mask, implementation))
  )
  q = jnp.zeros((2, 5, 3, 4), jnp.float32)
  padding = attention.visible(jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
  assert padding.shape == (2, 1, 1, 5)
  for implementation in ("cudnn", None):
    attention.attend(q, q, q, padding, dtype=jnp.float32, implementation=implementation)
  (cudnn_mask, cudnn), (plain_mask, plain) = seen
  assert (cudnn, plain) == ("cudnn", None)
  assert cudnn_mask.shape == (2, 1, 5, 5) and plain_mask.shape == (2, 1, 1, 5)
  np.testing.assert_array_equal(cudnn_mask, np.broadcast_to(padding, (2, 1, 5, 5)))


# --------------------------------------------------------------------------
# Inference: the embedder packs when asked (packed=True).


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg", "avg_first_last"])
def test_the_embedder_packed_equals_padded_to_float32_rounding(tiny_model_dir, pooler):
  from jaxcse import models
  from jaxcse.inference import embedder as embedder_lib

  with compat.enable_x64(False):
    spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
    rng = np.random.default_rng(0)
    words = ["word", "other", "thing", "a", "sentence", "of", "some", "length"]
    # 300 sentences of 1-60 words: several full calls and a partial last one; rows shared by many sentences.
    sentences = [" ".join(rng.choice(words, int(n))) for n in rng.integers(1, 61, 300)]
    packed = embedder_lib.BucketedEmbedder(spec, pooler, batch_size=32, packed=True)
    padded = embedder_lib.BucketedEmbedder(spec, pooler, batch_size=32)
    assert packed.packed and not padded.packed
    a, b = packed(sentences, params), padded(sentences, params)
    # Float32 sums of up to 128 terms (the softmax over a row's keys), two layers deep: 4 * 128 * eps relative.
    np.testing.assert_allclose(a, b, rtol=0, atol=512 * np.finfo(np.float32).eps * float(np.abs(b).max()))
    np.testing.assert_array_equal(packed(sentences[:1], params)[0], packed(sentences[:1], params)[0])
    np.testing.assert_allclose(packed(sentences[:1], params)[0], a[0], rtol=0, atol=1e-5 * float(np.abs(b).max()))


def test_the_packed_embedder_calls_few_shapes_and_pads_the_last_only_to_a_power_of_two(tiny_model_dir):
  from jaxcse import models
  from jaxcse.inference import embedder as embedder_lib

  with compat.enable_x64(False):
    spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
    embedder = embedder_lib.BucketedEmbedder(spec, batch_size=64, packed=True)
    shapes = []
    real = embedder._apply_packed
    embedder._apply_packed = lambda p, ids, seg, places: (shapes.append(ids.shape), real(p, ids, seg, places))[1]
    out = embedder(["one sentence"] * 70, params)  # 4 tokens each.
  # A call holds a padded batch's tokens (64 x 4 = 2 rows of 128): 64 sentences, then the last 6 in one row.
  assert shapes == [(2, 128), (1, 128)]
  np.testing.assert_allclose(out, np.broadcast_to(out[0], out.shape), rtol=0, atol=1e-6 * float(np.abs(out).max()))


def test_the_commands_pack_on_request_and_give_the_padded_results(tiny_model_dir, real_data_dir, tmp_path, capsys):
  """`jaxcse-encode`, `jaxcse-evaluate` and `jaxcse-mine` with --packed: the same embeddings, scores and mined rows as
  without it, to float32 rounding (the embedder's own bound above); the records say which layout ran."""
  import json

  from jaxcse import encode, evaluate, mining

  with compat.enable_x64(False):
    rng = np.random.default_rng(1)
    words = ["a", "man", "is", "playing", "the", "guitar", "woman", "slicing", "onion", "dog", "runs"]
    lines = [" ".join(rng.choice(words, int(n))) for n in rng.integers(1, 30, 40)]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = {}
    for layout in ("padded", "packed"):
      flag = ["--packed"] if layout == "packed" else []
      npy = str(tmp_path / f"{layout}.npy")
      assert (
        encode.main(["--model", tiny_model_dir, "--pooler", "avg", "--input", str(text), "--output", npy, *flag]) == 0
      )
      assert json.load(open(tmp_path / f"{layout}.json"))["packed"] is (layout == "packed")
      scores = str(tmp_path / f"{layout}_sts.json")
      argv = ["--model", tiny_model_dir, "--pooler", "avg", "--tasks", "STSBenchmark", "--output", scores]
      assert evaluate.main([*argv, "--data_dir", real_data_dir, *flag]) == 0
      pairs = tmp_path / "pairs.jsonl"
      pairs.write_text(
        "".join(json.dumps({"anchor": a, "positive": b}) + "\n" for a, b in zip(lines[::2], lines[1::2]))
      )
      mined = str(tmp_path / f"{layout}_mined.jsonl")
      argv = ["--model", tiny_model_dir, "--input", str(pairs), "--output", mined, "--num_negatives", "2"]
      assert mining.main([*argv, "--output_scores", *flag]) == 0
      out[layout] = (np.load(npy), json.load(open(scores)), [json.loads(r) for r in open(mined)])
  (emb_a, sts_a, mined_a), (emb_b, sts_b, mined_b) = out["padded"], out["packed"]
  np.testing.assert_allclose(emb_b, emb_a, rtol=0, atol=512 * np.finfo(np.float32).eps * float(np.abs(emb_a).max()))
  assert "packed" not in sts_a and sts_b["packed"] is True
  # A Spearman correlation moves only where float32 rounding swaps two nearly tied similarities: 1e-3 bounds it.
  assert abs(sts_b["summary"]["STSBenchmark"] - sts_a["summary"]["STSBenchmark"]) <= 1e-3 * 100
  assert [r["anchor"] for r in mined_b] == [r["anchor"] for r in mined_a]
  np.testing.assert_allclose([r["scores"] for r in mined_b], [r["scores"] for r in mined_a], rtol=0, atol=1e-5)
