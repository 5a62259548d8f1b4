"""``train.packed``: the train step on packed rows is the padded step, for every method it runs.

In float64 with dropout off, a packed and a padded step give the same losses, metrics and updated params (SGD at
lr 1: the update is the gradient): they differ only in sums that packing extends with exact zeros (masked keys)
or reorders (a segment sum for a mean), ~1e-15 relative on the tiny model; a text seeing its neighbours, a wrong
position or a pooled padding token moves them by 1e-3 or more. With dropout on they differ (other masks), and a
packed run trains, resumes bit for bit, and records the switch.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

if __name__ == "__main__":  # The 2-device step (test_a_packed_step_on_two_devices_...): this file as a script.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcse import data as data_lib, models
from jaxcse.core import compat
from jaxcse.storage import loading
from jaxcse.training import configuration, distributed, objectives, train_step, views
from tests import helpers

BATCH = 8
RTOL, ATOL = 1e-10, 1e-12  # As tests/test_gradcache.py's: float64 sums reordered through the tiny network.

VARIANTS = {
  "simcse": ("base", {}),
  "simcse_sup": ("simcse_sup", {"loss.hard_negative_weight": 1.0}),
  "mixcse": ("mixcse", {}),
  "dclr": ("dclr", {}),
  "dclr_infonce": ("dclr", {"dclr.loss_form": "infonce", "dclr.complementary_dropout": True}),
  "simcse_mlm": ("base", {"mlm.enabled": True}),
  "simcse_avg": ("base", {"model.pooler": "avg", "model.mlp_only_train": False}),
  "mnrl_triplets": ("pairs", {}),
  "mnrl_symmetric_matryoshka": (
    "pairs",
    {"mnrl.directions": "query_to_doc,doc_to_query", "matryoshka.dims": "32,16,8"},
  ),
  "cosent": ("pairs", {"method": "cosent"}),
  "gist": ("pairs", {"method": "gist"}),
  # GradCache: 2 chunks of 4 examples, each packed in rows of its own (strided, as gradcache.to_chunks cuts them).
  "simcse_gradcache": ("base", {"train.grad_cache_chunk": 4}),
  "mnrl_gradcache_mlm": ("pairs", {"train.grad_cache_chunk": 4, "mlm.enabled": True}),
  # One view of a one-column batch (the regulariser alone), and the regulariser added to a method.
  "gor_one_view": ("base", {"method": "gor"}),
  "mnrl_gor": ("pairs", {"gor.enabled": True}),
}


def _scored_pairs(data_dir: str) -> str:
  path = os.path.join(data_dir, "corpora", "scored_for_packing.csv")
  if not os.path.exists(path):
    with open(os.path.join(data_dir, "corpora", "small.txt"), encoding="utf-8") as f:
      lines = [line.strip() for line in f][:80]
    rng = np.random.default_rng(0)
    with open(path, "w", newline="", encoding="utf-8") as f:
      writer = csv.writer(f)
      writer.writerow(["sentence1", "sentence2", "score"])
      writer.writerows([lines[i], lines[40 + i], f"{rng.uniform(0, 5):.2f}"] for i in range(40))
  return path


def _step(model_dir: str, data_dir: str, variant: str, *, packed: bool, mesh=None) -> tuple[dict, dict]:
  """One SGD step (lr 1) of ``variant`` in float64, dropout off: (metrics, flat params). ``mesh``: the trainer's
  jitted step on that data mesh, the packed rows laid out per device as the trainer lays them."""
  config_name, overrides = VARIANTS[variant]
  if overrides.get("method") == "cosent":
    overrides = {**overrides, "data.train": _scored_pairs(data_dir)}
  if overrides.get("method") == "gist":
    overrides = {**overrides, "gist.guide_model": model_dir}
  config = helpers.tiny_config(
    model_dir, data_dir, config_name, **{"train.batch_size": BATCH, "train.packed": packed, **overrides}
  )
  configuration.validate(config)
  with compat.enable_x64(True):
    pooling = models.PoolerSpec(config.model.pooler, config.model.mlp_only_train)
    spec, params = helpers.in_float64(
      *models.load_pretrained(model_dir, pooling, dropout=0.0, seed=config.seed, with_mlm_head=config.mlm.enabled)
    )
    corpus = data_lib.load_corpus(config.data.train, root=data_dir, csv_format=config.data.csv_format)
    batch = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=config.seed).batch(0)
    if packed:
      layout = views.PackedViews.for_batches(
        *batch["input_ids"].shape, pad_id=spec.tokenizer.pad_token_id, two_views=objectives.needs(config).two_views
      )
      chunk = config.train.grad_cache_chunk
      chunks = BATCH // chunk if chunk else 1
      if mesh is None:
        batch = {**batch, "packed": layout.lay_out(batch, shards=1 if chunks > 1 else None, chunks=chunks)}
      else:
        from jaxcse import train

        _, sharding = distributed.data_shardings(mesh)
        batch = {**batch, "packed": train._packed_rows(layout, batch, mesh, sharding, chunks)}
    complementary, comp_params = None, None
    if config.method == "gist":
      complementary, comp_params = helpers.in_float64(spec, params)
    if config.method == "dclr":  # Its complementary model embeds the padded batch, packed or not.
      loaded = loading.load_model(config.dclr.complementary_model)
      complementary, comp_params = helpers.in_float64(loaded.spec, loaded.params)
    tx = optax.sgd(1.0)
    state = train_step.TrainState(step=np.int32(0), params=params, opt_state=tx.init(params))
    if mesh is None:
      step = jax.jit(train_step.make_train_step(config, spec, tx, complementary))
    else:
      jitted = train_step.jit_train_step(config, spec, tx, complementary, mesh)
      step = lambda state, batch, comp: jitted(state, batch, comp, None)  # noqa: E731
    state, metrics = step(state, batch, comp_params)
    return jax.device_get(metrics), flax.traverse_util.flatten_dict(jax.device_get(state.params), sep="/")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_packed_step_is_the_padded_step_in_float64(tiny_model_dir, small_data_dir, variant):
  (m1, p1), (m2, p2) = (_step(tiny_model_dir, small_data_dir, variant, packed=p) for p in (True, False))
  assert set(m1) == set(m2)
  for key in m1:
    np.testing.assert_allclose(m1[key], m2[key], rtol=RTOL, atol=ATOL, err_msg=key)
  for key in p1:
    assert p1[key].dtype == np.float64, key
    np.testing.assert_allclose(p1[key], p2[key], rtol=RTOL, atol=ATOL, err_msg=key)


def test_a_one_view_batch_embeds_its_packed_rows(tiny_model_dir, small_data_dir):
  # embed_views takes the packed rows when they hold the views asked for: one per text for a one-view method (so
  # the equality above is of the packed computation, not of a padded fallback), two for SimCSE's views.
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls"), dropout=0.0, seed=0)
  corpus = data_lib.load_corpus("corpora/small.txt", root=small_data_dir)
  batch = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=0).batch(0)
  module, key = spec.module_for("cls"), jax.random.PRNGKey(0)
  for two_views in (False, True):
    layout = views.PackedViews.for_batches(*batch["input_ids"].shape, pad_id=0, two_views=two_views)
    packed = {**batch, "packed": layout.lay_out(batch)}
    padded = views.embed_views(module, params, batch, key, train=False, two_views=two_views)
    np.testing.assert_allclose(
      views.embed_views(module, params, packed, key, train=False, two_views=two_views), padded, rtol=1e-5, atol=1e-6
    )
    # The same rows with their tokens changed: a result that moves is one computed from the packed rows.
    rows = packed["packed"]
    changed = {**packed, "packed": {**rows, "input_ids": jnp.where(rows["segment_ids"] > 0, 1000, rows["input_ids"])}}
    moved = views.embed_views(module, params, changed, key, train=False, two_views=two_views)
    assert padded.shape == (BATCH, 1 + two_views, 32) and np.abs(moved - padded).max() > 1e-3


def test_the_layout_is_sized_by_the_batch_shape_and_rounds_rows_to_few_buckets():
  assert [views.rows_bucket(n) for n in (0, 1, 7, 8, 9, 10, 11, 16, 17, 21, 33, 100)] == [
    1, 1, 7, 8, 10, 10, 12, 16, 20, 24, 40, 112
  ]  # fmt: skip
  layout = views.PackedViews.for_batches(64, 1, 32, pad_id=0)  # SimCSE's: 128 views of up to 32 tokens.
  assert layout.row_len == 128
  ids = np.zeros((64, 1, 32), np.int32)
  mask = np.zeros_like(ids)
  mask[:, 0, :10] = 1  # 128 views of 10 tokens: 12 per row, 11 rows, rounded up to 12.
  out = layout.lay_out({"input_ids": ids, "attention_mask": mask})
  assert out["input_ids"].shape == (12, 128)
  assert out["places"].row.shape == (128,)
  # The two views of example i are texts 2i and 2i + 1 (flat_views' order), each a copy of the sentence.
  assert (out["places"].length == 10).all()


@pytest.mark.parametrize(
  "config_name, overrides, named",
  [
    ("base", {"augment.same_dropout_mask": True}, "augment.same_dropout_mask"),
    ("base", {"augment.crop": 0.1}, "augment.*"),
    ("dclr_as_released", {}, "method dclr (it attends the padding)"),
    ("pretrain_mlm", {}, "method mlm (it has no sentence embeddings)"),
  ],
)
def test_packed_is_refused_in_one_line_where_it_cannot_run(config_name, overrides, named):
  config = helpers.tiny_config("model", "data", config_name, **{"train.packed": True, **overrides})
  with pytest.raises(configuration.ConfigError) as e:
    configuration.validate(config)
  assert named in str(e.value) and "--config.train.packed=False" in str(e.value)
  assert "\n" not in str(e.value)


# [CLS] + MLP, a mean, three columns, GradCache's chunks on every device.
TWO_DEVICE_VARIANTS = ("simcse", "simcse_avg", "mnrl_triplets", "simcse_gradcache")


def _two_devices(model_dir: str, data_dir: str, out: str) -> None:
  """This file as a script under 2 simulated devices: each variant's packed and padded step on the data mesh."""
  mesh = distributed.make_mesh()
  arrays = {"devices": np.int32(mesh.size)}
  for variant in TWO_DEVICE_VARIANTS:
    for layout in ("packed", "padded"):
      metrics, params = _step(model_dir, data_dir, variant, packed=layout == "packed", mesh=mesh)
      arrays.update({f"{variant}/{layout}/metric/{k}": v for k, v in metrics.items()})
      arrays.update({f"{variant}/{layout}/param/{k}": v for k, v in params.items()})
  np.savez(out, **arrays)


def test_a_packed_step_on_two_devices_is_the_one_device_padded_step(tiny_model_dir, small_data_dir, tmp_path):
  """The batch over a 2-device data mesh, each device packing its own examples into rows of its own and pooling
  them there: in float64 the step equals the padded step on the same mesh and on one device (the negatives still
  span both devices; a text pooled from the other device's rows, or a device's rows misnumbered, moves it by far
  more than the reordered sums' 1e-10)."""
  out = str(tmp_path / "two.npz")
  env = {**os.environ, "XLA_FLAGS": helpers.simulated_devices(2), "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"}
  subprocess.run(
    [sys.executable, os.path.abspath(__file__), tiny_model_dir, small_data_dir, out],
    env=env,
    check=True,
    cwd=helpers.REPO,
  )
  two = np.load(out)
  assert int(two["devices"]) == 2
  for variant in TWO_DEVICE_VARIANTS:
    metrics, params = _step(tiny_model_dir, small_data_dir, variant, packed=False)
    for layout in ("packed", "padded"):
      for key, value in metrics.items():
        np.testing.assert_allclose(two[f"{variant}/{layout}/metric/{key}"], value, rtol=RTOL, atol=ATOL)
      for key, value in params.items():
        np.testing.assert_allclose(
          two[f"{variant}/{layout}/param/{key}"], value, rtol=RTOL, atol=ATOL, err_msg=f"{variant} {layout} {key}"
        )


def test_a_packed_run_trains_resumes_exactly_and_records_the_switch(tiny_model_dir, small_data_dir, tmp_path):
  from jaxcse import train

  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "quickstart", **{"train.packed": True})
  whole = str(tmp_path / "whole")
  train.train_and_evaluate(config, whole)
  interrupted = str(tmp_path / "interrupted")
  helpers.train_interrupted(config, interrupted, step_index=4)
  train.train_and_evaluate(config, interrupted)
  helpers.assert_same_params(helpers.saved_params(whole), helpers.saved_params(interrupted))
  records = [r for r in helpers.metrics_records(whole) if "loss" in r]
  assert records and all(np.isfinite(r["loss"]) for r in records)
  import json

  with open(os.path.join(whole, "config.json"), encoding="utf-8") as f:
    assert json.load(f)["train"]["packed"] is True
  padded = helpers.tiny_config(tiny_model_dir, small_data_dir, "quickstart")
  with pytest.raises(Exception, match=r"train.packed \(True there, False here\)"):
    train.train_and_evaluate(padded, interrupted)


def test_compile_lowers_the_packed_step_the_trainer_runs(tiny_model_dir, small_data_dir):
  """jaxcse-compile's program for train.packed carries the packed rows, sized for the mean length it is given."""
  from jaxcse.compile import lowering, targets

  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "base", **{"train.packed": True})
  program = lowering.train_step_program(config, targets.devices(targets.get("cpu")), packed_length=4)
  rows = program.args[1]["packed"]
  # 8 examples x 2 views x 4 tokens = 64 tokens: 1 row of 128 (row length: max(128, 16)).
  assert rows["input_ids"].shape == (1, 128) and rows["places"].row.shape == (16,)
  program.jitted.lower(*program.args).compile()  # The packed step lowers and compiles as the trainer runs it.
  full = lowering.train_step_program(config, targets.devices(targets.get("cpu")))
  assert full.args[1]["packed"]["input_ids"].shape == (2, 128)  # 16 x 16 = 256 tokens at full length: 2 rows.
  chunked = helpers.tiny_config(
    tiny_model_dir, small_data_dir, "base", **{"train.packed": True, "train.grad_cache_chunk": 4}
  )
  rows = lowering.train_step_program(chunked, targets.devices(targets.get("cpu"))).args[1]["packed"]
  # GradCache's 2 chunks, each 8 views x 16 tokens = 1 row of its own; places a chunk's 8 texts.
  assert rows["input_ids"].shape == (2, 128) and rows["places"].row.shape == (2, 8)


# --------------------------------------------------------------------------
# The pre-registered packed-vs-padded comparison's analysis (experiments/packing/quality.py), on fixed numbers.


@pytest.fixture(scope="module")
def quality():
  import importlib.util
  import sys

  spec = importlib.util.spec_from_file_location(
    "packing_quality", os.path.join(helpers.REPO, "experiments", "packing", "quality.py")
  )
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  yield module
  del sys.modules[spec.name]


def test_the_comparisons_paired_tost_is_two_one_sample_t_tests(quality):
  from scipy import stats

  diffs = np.array([0.31, -0.12, 0.05, 0.22, -0.04])
  t = quality.paired_tost(diffs, 0.5)
  assert t["p_low"] == pytest.approx(stats.ttest_1samp(diffs, -0.5, alternative="greater").pvalue, rel=1e-10)
  assert t["p_high"] == pytest.approx(stats.ttest_1samp(diffs, 0.5, alternative="less").pvalue, rel=1e-10)
  assert t["p_two_sided"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, rel=1e-10)
  low, high = stats.t.interval(0.90, 4, loc=diffs.mean(), scale=stats.sem(diffs))
  assert t["ci90"] == pytest.approx([low, high], rel=1e-10) and t["verdict"] == "equivalent"


@pytest.mark.parametrize(
  "diffs, verdict",
  [
    ([1.2, 1.3, 1.1, 1.25, 1.15], "different"),  # Far outside the margin, tightly.
    ([0.9, -0.8, 1.5, -1.2, 0.3], "undecided"),  # A spread the registered 5 pairs cannot resolve.
    ([0.6, 0.5, 0.7, 0.4, 0.65], "undecided"),  # Different from 0, but its 95% interval reaches inside the margin.
  ],
)
def test_the_comparisons_verdicts_follow_the_registered_rule(quality, diffs, verdict):
  assert quality.paired_tost(np.array(diffs), 0.5)["verdict"] == verdict


def test_the_pairs_the_power_needs_grow_with_the_spread_as_registered(quality):
  needed = [quality.pairs_needed(sd, 0.5) for sd in (0.1, 0.3, 0.5, 1.0)]
  assert needed == sorted(needed) and needed[0] == 3
  assert needed[1] == 5  # The README's registration: 5 pairs give 80% power at a paired SD of about 0.3.


def test_the_comparisons_analysis_reads_the_runs_records(quality, tmp_path):
  import json

  for side, dev, avg in (("padded", 0.561, 0.52), ("packed", 0.563, 0.5205)):
    for seed, shift in ((1, 0.0), (2, 0.004), (3, -0.002)):
      record = tmp_path / f"{side}_seed{seed}"
      record.mkdir()
      rows = [
        {"step": 0, "eval/stsb_dev": 0.53},
        {"step": 125, "eval/stsb_dev": 0.9},
        {"step": 250, "loss": 0.1},
        {"step": 250, "eval/stsb_dev": dev + shift},
      ]
      (record / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
      (record / "sts.json").write_text(json.dumps({"summary": {"Avg": 100 * (avg + shift)}}))
  (tmp_path / "packed_seed4").mkdir()  # Incomplete (no sts.json, no padded twin): left out.
  result = quality.analyze(str(tmp_path), str(tmp_path / "analysis.json"))
  assert result["seeds"] == [1, 2, 3] and json.load(open(tmp_path / "analysis.json"))["seeds"] == [1, 2, 3]
  assert result["per_seed"][2]["diff"]["stsb_dev"] == pytest.approx(0.2, abs=1e-9)  # x100, the step-250 row.
  assert result["stsb_dev"]["mean_diff"] == pytest.approx(0.2, abs=1e-9)
  assert result["sts_avg"]["mean_diff"] == pytest.approx(0.05, abs=1e-9)


if __name__ == "__main__":
  _two_devices(*sys.argv[1:4])
