"""The papers' ablations as config switches: SimCSE's "fixed 0.1" and discrete augmentations, DCLR's variants.

Comparisons of two computations of the same thing run in float64 (``helpers.in_float64``), where they differ
only by the order of their sums (~1e-15 relative); the tolerances below sit three orders of magnitude above that.
"""

from __future__ import annotations

import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcse.training import augment, configuration, dclr_losses, objectives, train_step
from jaxcse.core import compat
from jaxcse import data as data_lib, models, train
from jaxcse.storage import loading
from tests import helpers

BATCH = 8


def _method_loss(method: str, config, z, rng, complementary):
  """The method's loss as the step calls it: on the settings it reads from ``config``."""
  objective = objectives.get(method)
  return objective.loss(objective.settings(config), z, rng, complementary)


def _batch(spec, config, data_dir, columns=1):
  corpus = data_lib.load_corpus(config.data.train, root=data_dir)
  batch = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=0).batch(0)
  if columns == 2:  # Two different sentences per example (rows i and i+BATCH of the corpus order).
    other = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=1).batch(0)
    batch = {k: np.concatenate([batch[k], other[k]], axis=1) for k in batch}
  return batch


def _keys(config, step=0):
  """The step's keys, as train_step derives them: (dropout, method, mlm, complementary)."""
  return jax.random.split(jax.random.fold_in(jax.random.key(config.seed), step), 4)


def _sgd_step(config, spec, params, batch, **step_kwargs):
  """One SGD step at lr 1: (metrics, gradient as a flat dict) (the update is minus the gradient)."""
  tx = optax.sgd(1.0)
  state = train_step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
  new_state, metrics = train_step.make_train_step(config, spec, tx, **step_kwargs)(state, batch)
  before = flax.traverse_util.flatten_dict(params, sep="/")
  after = flax.traverse_util.flatten_dict(jax.device_get(new_state.params), sep="/")
  return metrics, {k: np.asarray(before[k]) - np.asarray(after[k]) for k in before}


# --------------------------------------------------------------------------
# SimCSE "fixed 0.1": both views get the same dropout mask.


@pytest.mark.parametrize("chunk", [0, 4])
def test_same_dropout_mask_gives_identical_views_and_the_two_pass_gradient(tiny_model_dir, small_data_dir, chunk):
  with compat.enable_x64(True):
    config = helpers.tiny_config(
      tiny_model_dir,
      small_data_dir,
      "base",
      **{"augment.same_dropout_mask": True, "train.batch_size": BATCH, "train.grad_cache_chunk": chunk},
    )
    spec, params = helpers.in_float64(
      *models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), dropout=0.1, seed=0)
    )
    batch = _batch(spec, config, small_data_dir)
    metrics, grads = _sgd_step(config, spec, params, batch)
    # Identical views: cosine 1 (to rounding), so zero alignment loss.
    np.testing.assert_allclose(float(metrics["pos_score"]), 1.0, rtol=0, atol=1e-12)
    if chunk:
      return  # GradCache draws one mask per chunk: its gradient is not the plain step's (README, GradCache).
    module = spec.module_for("cls")
    k_dropout, k_method = _keys(config)[:2]
    ids, mask = jnp.asarray(batch["input_ids"][:, 0]), jnp.asarray(batch["attention_mask"][:, 0])
    z = train_step.embed_views(module, params, batch, k_dropout, same_dropout_mask=True)
    np.testing.assert_array_equal(z[:, 0], z[:, 1])
    assert float(jnp.sum((z[:, 0] - z[:, 1]) ** 2)) == 0.0

    def two_passes(p):  # The paper's definition: the sentence encoded twice with one mask (the same key).
      z1 = module.apply({"params": p}, ids, mask, train=True, rngs={"dropout": k_dropout})
      z2 = module.apply({"params": p}, ids, mask, train=True, rngs={"dropout": k_dropout})
      return _method_loss("simcse", config, jnp.stack([z1, z2], axis=1), k_method, None)[0]

    reference = flax.traverse_util.flatten_dict(jax.grad(two_passes)(params), sep="/")
    for key, value in reference.items():
      np.testing.assert_allclose(grads[key], value, rtol=1e-9, atol=1e-12, err_msg=key)
    # Without the switch the two views differ (independent masks): the check above can fail.
    config.augment.same_dropout_mask = False
    plain = _sgd_step(config, spec, params, batch)[0]
    assert float(plain["pos_score"]) < 1.0 - 1e-12


def test_same_dropout_mask_refuses_two_sentence_examples(tiny_model_dir, small_data_dir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "base")
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), seed=0)
  batch = _batch(spec, config, small_data_dir, columns=2)
  with pytest.raises(ValueError, match="same_dropout_mask needs one sentence per example"):
    train_step.embed_views(spec.module_for("cls"), params, batch, jax.random.key(0), same_dropout_mask=True)


# --------------------------------------------------------------------------
# Discrete augmentations of the second view, inside the step.


@pytest.fixture(scope="module")
def tiny_mlm_dir(tiny_model_dir, tmp_path_factory):
  """The tiny BERT with a (random) masked-LM head saved with it."""
  return helpers.make_tiny_mlm_dir(tiny_model_dir, str(tmp_path_factory.mktemp("tiny_mlm") / "model"))


@pytest.mark.parametrize("overrides", [{"augment.delete_one_word": True}, {"augment.crop": 0.1, "augment.mlm": 0.15}])
def test_the_step_trains_on_the_augmented_second_view(tiny_model_dir, tiny_mlm_dir, small_data_dir, overrides):
  """The step's loss is SimCSE's on (sentence, its augmentation with the step's augmentation key), the first view
  untouched; the frozen MLM gets no gradient."""
  with compat.enable_x64(True):
    config = helpers.tiny_config(tiny_model_dir, small_data_dir, "base", **{"train.batch_size": BATCH, **overrides})
    spec, params = helpers.in_float64(
      *models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), dropout=0.0, seed=0)
    )
    mlm_spec, mlm_params = None, None
    if config.augment.mlm:
      mlm_spec, mlm_params = helpers.in_float64(
        *models.load_pretrained(tiny_mlm_dir, models.PoolerSpec("avg"), with_mlm_head=True, mlm_head="tied")
      )
    batch = _batch(spec, config, small_data_dir)
    tx = optax.sgd(1.0)
    state = train_step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
    step = train_step.make_train_step(config, spec, tx, augment_mlm=mlm_spec)
    metrics = step(state, batch, None, mlm_params)[1]

    # The same by hand: the augmentation's key is fold_in(step key, the tag), apart from the four step keys.
    step_key = jax.random.fold_in(jax.random.key(config.seed), 0)
    view = augment.SecondView(
      crop=config.augment.crop, delete_one_word=config.augment.delete_one_word, mlm=config.augment.mlm
    )
    logits_fn = (lambda i, m: models.mlm_logits(mlm_spec, mlm_params, i, m, train=False)) if mlm_spec else None
    ids, mask = view(
      jax.random.fold_in(step_key, train_step._AUGMENT_KEY_TAG),
      jnp.asarray(batch["input_ids"][:, 0]),
      jnp.asarray(batch["attention_mask"][:, 0]),
      augment.WordPieces.from_tokenizer(spec.tokenizer),
      logits_fn,
    )
    assert not np.array_equal(ids, batch["input_ids"][:, 0])  # The augmentation changed something ...
    pairs = {
      "input_ids": jnp.stack([batch["input_ids"][:, 0], ids], 1),
      "attention_mask": jnp.stack([batch["attention_mask"][:, 0], mask], 1),
    }
    z = train_step.embed_views(spec.module_for("cls"), params, pairs, _keys(config)[0])
    expected = _method_loss("simcse", config, z, _keys(config)[1], None)[0]
    np.testing.assert_allclose(float(metrics["loss"]), float(expected), rtol=1e-12)
    # ... so that, with dropout 0, the views differ (identical views give cosine 1 to ~1e-15 in float64; this
    # random tiny BERT maps different sentences to nearly parallel vectors, so the margin is small).
    assert float(metrics["pos_score"]) < 1.0 - 1e-12
    if mlm_spec is not None:
      grads = jax.grad(lambda p: step(state, batch, None, p)[1]["loss"])(mlm_params)
      assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))


def test_crop_before_truncation_crops_the_whole_sentence_then_cuts_both_views(tiny_model_dir, small_data_dir):
  """With the switch the batches hold the sentences at N tokens; the step crops those with the step's augmentation
  key, then cuts both views to data.max_seq_len: the first view is the batch tokenized at max_seq_len exactly."""
  from jaxcse.training import inputs

  with compat.enable_x64(True):
    config = helpers.tiny_config(
      tiny_model_dir,
      small_data_dir,
      "base",
      **{"train.batch_size": BATCH, "augment.crop": 0.1, "augment.crop_before_truncation": 48},
    )
    configuration.validate(config)
    spec, params = helpers.in_float64(
      *models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), dropout=0.0, seed=0)
    )
    batch = inputs.make_batches(config, spec)[0].batch(0)
    assert batch["input_ids"].shape == (BATCH, 1, 48)
    corpus = data_lib.load_corpus(config.data.train, root=small_data_dir)
    short = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=config.seed).batch(0)
    assert (batch["attention_mask"].sum(axis=-1) > 16).sum() >= 3  # Rows that the switch crops differently.
    tx = optax.sgd(1.0)
    state = train_step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
    metrics = train_step.make_train_step(config, spec, tx)(state, batch)[1]

    pieces = augment.WordPieces.from_tokenizer(spec.tokenizer)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), 0), train_step._AUGMENT_KEY_TAG)
    crop = augment.SecondView(crop=0.1)
    cropped = crop(key, jnp.asarray(batch["input_ids"][:, 0]), jnp.asarray(batch["attention_mask"][:, 0]), pieces)
    cut = lambda i, m: augment.truncate(  # noqa: E731
      jnp.asarray(i), jnp.asarray(m), 16, sep_id=spec.tokenizer.sep_token_id, pad_id=pieces.pad_id
    )
    first, second = cut(batch["input_ids"][:, 0], batch["attention_mask"][:, 0]), cut(*cropped)
    np.testing.assert_array_equal(first[0], short["input_ids"][:, 0])  # The tokenizer's own rows at 16.
    np.testing.assert_array_equal(first[1], short["attention_mask"][:, 0])
    # Not the crop of the cut rows (what augment.crop alone trains on): the span is drawn over the whole sentence.
    after = crop(key, jnp.asarray(short["input_ids"][:, 0]), jnp.asarray(short["attention_mask"][:, 0]), pieces)
    assert not np.array_equal(second[0], after[0])
    pairs = {"input_ids": jnp.stack([first[0], second[0]], 1), "attention_mask": jnp.stack([first[1], second[1]], 1)}
    z = train_step.embed_views(spec.module_for("cls"), params, pairs, _keys(config)[0])
    expected = _method_loss("simcse", config, z, _keys(config)[1], None)[0]
    np.testing.assert_allclose(float(metrics["loss"]), float(expected), rtol=1e-12)
    with pytest.raises(
      ValueError, match=r"needs one-column batches of 48 tokens \(\[batch, 1, 48\]\), not \[8, 1, 16\]"
    ):
      train_step.make_train_step(config, spec, tx)(state, short)


def test_crop_before_truncation_changes_nothing_when_every_sentence_fits(tiny_model_dir, small_data_dir, tmp_path):
  """On a corpus of sentences of at most data.max_seq_len tokens, a run with the switch is the run without it, bit
  for bit: the same batches once cut, the same crop keys, so the same words kept."""
  from transformers import AutoTokenizer

  tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
  with open(os.path.join(small_data_dir, "corpora", "small.txt"), encoding="utf-8") as f:
    fitting = [line for line in f if len(tokenizer(line.strip())["input_ids"]) <= 16]
  assert len(fitting) >= 3 * BATCH
  corpus = str(tmp_path / "short.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.writelines(fitting)
  runs = {}
  for before in (0, 48):
    config = helpers.tiny_config(
      tiny_model_dir,
      small_data_dir,
      "base",
      **{
        "data.train": corpus,
        "augment.crop": 0.3,
        "augment.crop_before_truncation": before,
        "train.max_steps": 3,
        "eval.every": 3,
        "checkpoint.every": 3,
      },
    )
    workdir = str(tmp_path / f"before_{before}")
    train.train_and_evaluate(config, workdir)
    timings = ("steps_per_sec", "eval/seconds")
    records = [{k: v for k, v in r.items() if k not in timings} for r in helpers.metrics_records(workdir)]
    runs[before] = helpers.saved_params(workdir), records
  helpers.assert_same_params(runs[0][0], runs[48][0])
  assert runs[0][1] == runs[48][1]


@pytest.mark.parametrize(
  "config_name,overrides",
  [("mixcse", {}), ("dclr", {}), ("base", {"train.grad_cache_chunk": 4}), ("base", {"mlm.enabled": True})],
)
def test_crop_before_truncation_works_with_the_methods_gradcache_and_the_mlm_term(
  tiny_model_dir, small_data_dir, tmp_path, config_name, overrides
):
  """MixCSE, DCLR (its complementary model embeds the cut views), GradCache and the auxiliary MLM loss: two steps
  with the switch, on sentences that fit, are the steps without it, bit for bit."""
  from jaxcse.training import configured, inputs
  from transformers import AutoTokenizer

  tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
  with open(os.path.join(small_data_dir, "corpora", "small.txt"), encoding="utf-8") as f:
    fitting = [line for line in f if len(tokenizer(line.strip())["input_ids"]) <= 16]
  corpus = str(tmp_path / "short.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.writelines(fitting)
  results = []
  for before in (0, 48):
    config = helpers.tiny_config(
      tiny_model_dir,
      small_data_dir,
      config_name,
      **{"data.train": corpus, "augment.crop": 0.3, "augment.crop_before_truncation": before, **overrides},
    )
    configuration.validate(config)
    built = configured.model(config)
    complementary = configured.complementary(config, built.spec)
    batches = inputs.make_batches(config, built.spec)[0]
    tx = train_step.make_optimizer(config.train, 2)
    step = jax.jit(train_step.make_train_step(config, built.spec, tx, complementary and complementary.spec))
    state = train_step.TrainState(step=jnp.int32(0), params=built.params, opt_state=tx.init(built.params))
    metrics = []
    for s in range(2):
      batch = batches.batch(s)
      assert batch["input_ids"].shape[-1] == (before or 16)
      state, m = step(state, batch, complementary and complementary.params)
      metrics.append(jax.device_get(m))
    results.append((flax.traverse_util.flatten_dict(jax.device_get(state.params), sep="/"), metrics))
  helpers.assert_same_params(results[0][0], results[1][0])
  for off, on in zip(results[0][1], results[1][1]):
    assert off.keys() == on.keys()
    for key in off:
      np.testing.assert_array_equal(off[key], on[key], err_msg=key)


def test_mlm_augmentation_trains_end_to_end_and_needs_a_pretrained_head(
  tiny_model_dir, tiny_mlm_dir, small_data_dir, tmp_path
):
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "base",
    **{"augment.mlm": 0.15, "augment.mlm_model": tiny_mlm_dir, "train.max_steps": 2, "eval.every": 2},
  )
  summary = train.train_and_evaluate(config, str(tmp_path / "ok"))
  assert summary["steps"] == 2
  # The frozen MLM is not part of the trained model: no MLM head in the checkpoint.
  saved = flax.traverse_util.flatten_dict(
    jax.device_get(loading.load_model(str(tmp_path / "ok"), checkpoint="latest").params), sep="/"
  )
  assert not any(k.startswith("mlm_head") for k in saved)
  config.augment.mlm_model = ""  # model.name: the tiny BERT, which has no MLM head.
  with pytest.raises(configuration.ConfigError, match="has no pretrained masked-LM head"):
    train.train_and_evaluate(config, str(tmp_path / "no_head"))


@pytest.mark.parametrize(
  "overrides,message",
  [
    ({"augment.crop": 1.0}, r"augment.crop must be a share of the words in \[0, 1\)"),
    ({"augment.word_deletion": -0.1}, r"augment.word_deletion must be a share"),
    (
      {"augment.same_dropout_mask": True, "augment.delete_one_word": True},
      r"same_dropout_mask makes the two views identical; it cannot be combined with augment.delete_one_word",
    ),
    ({"dclr.instance_weighting": "teacher"}, r"dclr.instance_weighting must be one of complementary, self, none"),
    ({"dclr.noise_negatives": "gaussian"}, r"dclr.noise_negatives must be one of ascent, random, none"),
    ({"dclr.ascent_steps": 0}, r"takes no ascent step; .* set dclr.noise_negatives=random"),
    ({"dclr.noise_times": 0.0}, r"0 noise negatives; for none, set dclr.noise_negatives=none"),
    ({"dclr.complementary_model": ""}, r"method dclr needs config.dclr.complementary_model"),
    ({"augment.crop_before_truncation": 32}, r"augment.crop_before_truncation=32 needs augment.crop > 0"),
    (
      {"augment.crop": 0.1, "augment.crop_before_truncation": 8},
      r"augment.crop_before_truncation=8 must be at least data.max_seq_len=16",
    ),
    (
      {"augment.crop": 0.1, "augment.crop_before_truncation": -1},
      r"augment.crop_before_truncation must be an integer >= 0, not -1",
    ),
    (
      {"augment.crop": 0.1, "augment.mlm": 0.15, "augment.crop_before_truncation": 32},
      r"crop_before_truncation crops the whole sentence before it is cut; it cannot be combined with augment.mlm",
    ),
    (
      {"augment.crop": 0.1, "augment.crop_before_truncation": 129},
      r"augment.crop_before_truncation=129 is longer than the 128 positions",
    ),
    (
      {"augment.crop": 0.1, "augment.crop_before_truncation": 32, "data.train": "corpora/small_nli.csv"},
      r"augment.crop_before_truncation=32 .* needs a one-column text corpus .* has 3 text columns",
    ),
  ],
)
def test_switch_errors_are_caught_before_the_workdir_is_touched(
  tiny_model_dir, small_data_dir, tmp_path, overrides, message
):
  name = "dclr" if any(k.startswith("dclr") for k in overrides) else "base"
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, name, **overrides)
  with pytest.raises(configuration.ConfigError, match=message):
    train.train_and_evaluate(config, str(tmp_path / "workdir"))
  assert not os.path.exists(tmp_path / "workdir")


def test_augment_switches_on_method_mlm_are_refused():
  import importlib

  config = importlib.import_module("jaxcse.configs.pretrain_mlm").get_config()
  config.augment.crop = 0.1
  with pytest.raises(configuration.ConfigError, match="method mlm has no views to augment"):
    configuration.validate(config)


# --------------------------------------------------------------------------
# DCLR's ablations (its Table 2).


def _dclr_config(**dclr):
  import importlib

  config = importlib.import_module("jaxcse.configs.dclr").get_config()
  config.loss.temperature = 1.0  # O(1) logits: every term of the loss visible in float64.
  for key, value in dclr.items():
    config.dclr[key] = value
  return config


def _toy_views():
  """Float64 views (call under jax.enable_x64) with a false negative for each kind of weighting to find."""
  z = jax.random.normal(jax.random.key(0), (6, 2, 5), jnp.float64)
  z = z.at[1, 1].set(z[0, 0] + 1e-3)  # Row 1's positive is nearly row 0's anchor: a false negative of row 0.
  complementary = jax.random.normal(jax.random.key(1), (6, 2, 5), jnp.float64)
  complementary = complementary.at[2, 1].set(complementary[3, 0])  # The complementary model's own false negative.
  return z, complementary


def _full_formula(config, z, rng, weights, noise="ascent"):
  d = config.dclr
  noise_vectors = None
  if noise != "none":
    noise_vectors = dclr_losses.dclr_initial_noise(rng, int(6 * d.noise_times), 5, sigma=d.noise_std, dtype=z.dtype)
    if noise == "ascent":
      noise_vectors = dclr_losses.dclr_noise_negatives(
        z[:, 0], z[:, 1], noise_vectors, temperature=1.0, steps=d.ascent_steps, step_size=d.ascent_step_size
      )
  return dclr_losses.dclr_loss(z[:, 0], z[:, 1], noise_vectors, weights, temperature=1.0, form=d.loss_form)


@pytest.mark.parametrize(
  "weighting,noise",
  [
    ("complementary", "ascent"),
    ("none", "ascent"),
    ("self", "ascent"),
    ("complementary", "none"),
    ("complementary", "random"),
    ("self", "random"),
    ("none", "none"),
  ],
)
def test_dclr_variants_equal_their_formulas(weighting, noise):
  with compat.enable_x64(True):
    z, complementary = _toy_views()
    config = _dclr_config(instance_weighting=weighting, noise_negatives=noise)
    objectives.get("dclr").check_config(config)
    rng = jax.random.key(7)
    loss, extra = _method_loss("dclr", config, z, rng, complementary if weighting == "complementary" else None)
    weights = {
      "complementary": dclr_losses.dclr_instance_weights(complementary[:, 0], complementary[:, 1], phi=0.9),
      "self": dclr_losses.dclr_instance_weights(z[:, 0], z[:, 1], phi=0.9),
      "none": None,
    }[weighting]
    np.testing.assert_allclose(float(loss), float(_full_formula(config, z, rng, weights, noise)), rtol=1e-13)
    expected_zero = 0.0 if weights is None else 1.0 - float(weights.mean())
    assert float(extra["dclr/weight_zero_frac"]) == pytest.approx(expected_zero, abs=1e-15)
    if weighting != "none":
      assert expected_zero > 0  # The toy views have a false negative for each kind of weighting to find.
    assert objectives.needs(config).complementary == (weighting == "complementary")


def test_dclr_variants_differ_from_the_full_method():
  """Each switch changes the loss on views where it matters (so the formula checks above can fail)."""
  with compat.enable_x64(True):
    z, complementary = _toy_views()
    rng = jax.random.key(7)
    values = {}
    for weighting, noise in [
      ("complementary", "ascent"),
      ("none", "ascent"),
      ("self", "ascent"),
      ("complementary", "none"),
      ("complementary", "random"),
    ]:
      config = _dclr_config(instance_weighting=weighting, noise_negatives=noise)
      values[weighting, noise] = float(_method_loss("dclr", config, z, rng, complementary)[0])
    assert len(set(values.values())) == len(values)


def test_dclr_self_weights_carry_no_gradient():
  """Self weighting: the gradient is the loss's with the weights held constant (computed from the same views)."""
  with compat.enable_x64(True):
    z, _ = _toy_views()
    config = _dclr_config(instance_weighting="self", noise_negatives="none", loss_form="infonce")
    rng = jax.random.key(7)
    fixed = dclr_losses.dclr_instance_weights(z[:, 0], z[:, 1], phi=0.9)
    got = jax.grad(lambda v: _method_loss("dclr", config, v, rng, None)[0])(z)
    expected = jax.grad(
      lambda v: dclr_losses.dclr_loss(v[:, 0], v[:, 1], None, fixed, temperature=1.0, form="infonce")
    )(z)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("weighting", ["none", "self"])
def test_dclr_without_complementary_weighting_loads_no_complementary_model(
  tiny_model_dir, small_data_dir, tmp_path, weighting
):
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "dclr",
    **{
      "dclr.instance_weighting": weighting,
      "dclr.complementary_model": str(tmp_path / "absent"),
      "train.max_steps": 2,
      "eval.every": 2,
    },
  )
  assert train.train_and_evaluate(config, str(tmp_path / "workdir"))["steps"] == 2
  spec, _ = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True))
  config.dclr.instance_weighting = "complementary"
  with pytest.raises(ValueError, match="needs a complementary model"):
    train_step.make_train_step(config, spec, optax.sgd(1.0))
