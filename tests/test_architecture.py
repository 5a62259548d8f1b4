"""The shape of the package: methods by registry, config errors at load, no import cycles, no torch inside."""

from __future__ import annotations

import ast
import os
import sys

import jax.numpy as jnp
import pytest

from jaxcse.training import configuration, objectives
from jaxcse import train
from tests import helpers

PACKAGE = os.path.join(helpers.REPO, "jaxcse")


def test_a_fourth_method_needs_only_a_registry_entry(tiny_model_dir, small_data_dir, fresh_workdir):
  # A toy objective: pull the two dropout views of each sentence together (L2), no negatives.
  # Its loss gets the settings it declares, never the config.
  def l2(settings, z, rng, complementary):
    assert dict(settings) == {"weight": 0.5}, settings
    squared = jnp.sum((z[:, 0] - z[:, 1]) ** 2, axis=-1)
    return settings["weight"] * jnp.mean(squared), {"l2/mean_norm": jnp.mean(jnp.linalg.norm(z, axis=-1))}

  objectives.register(
    objectives.Objective(
      "toy_l2", loss=l2, settings=lambda config: {"weight": config.loss.temperature * 10}, doc="test only"
    )
  )
  try:
    config = helpers.tiny_config(
      tiny_model_dir, small_data_dir, **{"method": "toy_l2", "train.max_steps": 2, "train.log_every": 1}
    )
    summary = train.train_and_evaluate(config, fresh_workdir)
  finally:
    objectives.unregister("toy_l2")
  assert summary["steps"] == 2
  records = [r for r in helpers.metrics_records(fresh_workdir) if "loss" in r]
  assert all(r["loss"] == r["contrastive_loss"] and r["loss"] >= 0 for r in records)
  assert all("l2/mean_norm" in r and "pos_score" in r for r in records)  # Its metrics and the default scores.
  with pytest.raises(ValueError, match="unknown method 'toy_l2'"):
    objectives.get("toy_l2")


@pytest.mark.parametrize(
  "overrides, message",
  [
    (
      {"method": "foo"},
      r"unknown method 'foo'; choose one of simcse, mixcse, dclr, mnrl, cosent, gist, embed_distill, margin_mse, distill_kl_div, gor, rankcse, mlm",
    ),
    ({"eval.metric": "foo"}, r"unknown eval.metric 'foo'; choose one of stsb_dev, stsb_sickr_dev"),
    ({"model.pooler": "foo"}, r"unknown pooler 'foo'; choose one of cls, cls_before_pooler, avg"),
    ({"model.test_pooler": "max"}, r"unknown pooler 'max'"),
    ({"train.batch_size": 0}, r"train.batch_size must be a positive integer, not 0"),
    ({"data.max_seq_len": 1}, r"data.max_seq_len must be at least 3"),
    ({"train.grad_cache_chunk": 3}, r"must be 0 \(off\) or divide train.batch_size=8"),
    ({"model.dtype": "float8"}, r"model.dtype must be one of float32, bfloat16, float16"),
    ({"data.pack": True}, r"data.pack joins sentences"),
    # Values outside their range: each one line naming the field, before the workdir exists.
    (
      {"train.max_steps": -5},
      r"train.max_steps must be a positive integer, or -1 to train train.num_epochs "
      r"epochs, not -5",
    ),
    ({"train.max_steps": 0}, r"train.max_steps must be a positive integer, or -1 .*, not 0"),
    (
      {"train.max_steps": -1, "train.num_epochs": 0},
      r"train.num_epochs must be a positive integer with "
      r"train.max_steps=-1, not 0",
    ),
    ({"train.learning_rate": float("nan")}, r"train.learning_rate must be a finite number >= 0, not nan"),
    ({"train.learning_rate": float("inf")}, r"train.learning_rate must be a finite number >= 0, not inf"),
    ({"loss.temperature": 0.0}, r"loss.temperature must be a finite number >= 0.0001, not 0.0"),
    ({"loss.temperature": -1.0}, r"loss.temperature must be a finite number >= 0.0001, not -1.0"),
    ({"model.dropout": 2.0}, r"model.dropout must be a finite number in \[0, 1\), not 2.0"),
    ({"train.warmup_steps": -5}, r"train.warmup_steps must be an integer >= 0, not -5"),
    ({"train.adam_eps": 0.0}, r"train.adam_eps must be a finite number > 0, not 0.0"),
    ({"mlm.probability": 0.0}, r"mlm.probability must be a finite number in \(0, 1\], not 0.0"),
    ({"seed": -1}, r"seed must be an integer >= 0, not -1"),
    # A multiplier of the cosines that overflows float32 (inf, 1e39, a temperature near 0): NaN at step 1 before.
    ({"loss.temperature": 1e-300}, r"loss.temperature must be a finite number >= 0.0001, not 1e-300"),
    ({"method": "mnrl", "mnrl.scale": float("inf")}, r"mnrl.scale must be a number in \(0, 10000\] .*, not inf"),
    ({"method": "mnrl", "mnrl.scale": 1e39}, r"mnrl.scale must be a number in \(0, 10000\] .*, not 1e\+39"),
    (
      {"method": "mnrl", "mnrl.hardness_mode": "all_negatives", "mnrl.hardness_strength": 1e39},
      r"mnrl.hardness_strength must be a number in \[0, 10000\] .*, not 1e\+39",
    ),
    ({"method": "cosent", "cosent.scale": float("inf")}, r"cosent.scale must be a number in \(0, 10000\] .*, not inf"),
    (
      {"method": "gist", "gist.temperature": 1e-300},
      r"gist.temperature must be a finite number >= 0.0001 .*, not 1e-300",
    ),
    # Weights that are all 0 train nothing (before: exit 0, a "best" served).
    ({"matryoshka.dims": "16,8", "matryoshka.weights": "0,0"}, r"matryoshka.weights are all 0: .*trains nothing"),
    # A misspelt field set from Python, as --config.data.no_duplicate is refused (before: accepted, ignored).
    (
      {"data.no_duplicate": False},
      r"unknown config field data.no_duplicate; did you mean data.no_duplicates\? \(configs/base.py",
    ),
    # Needs the model's config (128 positions): checked once it is read, still before the workdir is written.
    (
      {"data.max_seq_len": 200},
      r"data.max_seq_len=200 is longer than the 128 positions .* embeds; set "
      r"data.max_seq_len <= 128",
    ),
  ],
)
def test_config_errors_are_caught_before_the_workdir_is_touched(
  tiny_model_dir, small_data_dir, tmp_path, overrides, message
):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **overrides)
  workdir = str(tmp_path / "workdir")
  with pytest.raises(configuration.ConfigError, match=message):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(workdir)


def test_every_numeric_config_field_has_its_range_checked():
  """A new numeric field gets a range in ``configuration.RANGES`` (or a check of its own, listed here)."""
  import importlib

  import flax

  own_checks = {
    "train.batch_size",
    "train.log_every",
    "eval.every",
    "eval.batch_size",
    "checkpoint.every",
    "data.max_seq_len",
    "train.max_steps",
    "train.num_epochs",
    "train.grad_cache_chunk",
    "data.heldout_fraction",
    "augment.crop",
    "augment.word_deletion",
    "augment.mlm",
    # Checked by their method's own check (st_methods: check_mnrl, check_cosent, check_gist), the only one
    # that reads them.
    "mnrl.scale",
    "mnrl.hardness_strength",
    "cosent.scale",
    "matryoshka.n_dims_per_step",  # matryoshka.Matryoshka.from_config, with the dims it draws from.
    "gist.temperature",
    "gist.margin",
    "distill.student_temperature",  # st_methods.check_distill.
    "distill.teacher_temperature",
    "gor.mean_weight",  # st_methods.check_gor.
    "gor.second_moment_weight",
    "rankcse.tau2",  # rankcse.check.
    "rankcse.gamma",
    "rankcse.alpha",
    "rankcse.consistency_weight",
  }
  unchecked = set()
  for name in (*helpers.CONFIG_NAMES, "pretrain_mlm"):
    fields = flax.traverse_util.flatten_dict(
      importlib.import_module(f"jaxcse.configs.{name}").get_config().to_dict(), sep="."
    )
    unchecked |= {
      k
      for k, v in fields.items()
      if isinstance(v, (int, float))
      and not isinstance(v, bool)
      and k not in configuration.RANGES
      and k not in own_checks
      and not k.startswith("model.architecture.")
    }  # Checked as a whole.
  assert not unchecked, f"numeric fields with no range check: {sorted(unchecked)}"


def test_a_random_architectures_sizes_are_checked():
  from jaxcse.configs import pretrain_mlm

  config = pretrain_mlm.get_config()
  config.model.architecture.num_hidden_layers = 0
  with pytest.raises(
    configuration.ConfigError,
    match=r"model.architecture.num_hidden_layers must be an integer >= 1, "
    r"not 0",
  ):
    configuration.validate(config)


def test_every_shipped_config_is_valid():
  for name in (*helpers.CONFIG_NAMES, "pretrain_mlm"):
    import importlib

    config = importlib.import_module(f"jaxcse.configs.{name}").get_config()
    if name.startswith("dclr"):
      assert config.dclr.complementary_model
    configuration.validate(config)


def test_each_config_file_is_one_module():
  """configs/ is jaxcse.configs (a link ships it); a second name would load every config file twice."""
  import importlib

  sys.path.insert(0, helpers.REPO)
  try:
    with pytest.raises(ImportError, match="import the configs as jaxcse.configs"):
      importlib.import_module("configs.base")
  finally:
    sys.path.remove(helpers.REPO)
    for name in [m for m in sys.modules if m == "configs" or m.startswith("configs.")]:
      del sys.modules[name]
  assert importlib.import_module("jaxcse.configs.mixcse").base is importlib.import_module("jaxcse.configs.base")


def _imports(path: str) -> set[str]:
  """Every module a file imports (``from a.b import x`` gives ``a.b`` and ``a.b.x``), module-level or not."""
  found = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.add(node.module)
      found.update(f"{node.module}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Import):
      found.update(a.name for a in node.names)
  return found


def _modules() -> dict[str, str]:
  out = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith(".py"):
        rel = os.path.relpath(os.path.join(folder, name), helpers.REPO)[:-3].replace(os.sep, ".")
        out[rel.removesuffix(".__init__")] = os.path.join(folder, name)
  return out


def test_no_import_cycle_and_no_torch_in_the_package():
  modules = _modules()
  imports = {m: _imports(p) for m, p in modules.items()}
  # An import of a module's own parent package (``from jaxcse import x`` names ``jaxcse``) is Python loading the
  # package first, not an edge of the design.
  graph = {
    m: {i for i in found if i in modules and i != m and not m.startswith(i + ".")} for m, found in imports.items()
  }
  state: dict[str, int] = {}

  def visit(m, path):
    if state.get(m) == 1:
      raise AssertionError("import cycle: " + " -> ".join(path[path.index(m) :] + [m]))
    if state.get(m) == 2:
      return
    state[m] = 1
    for d in sorted(graph[m]):
      visit(d, path + [m])
    state[m] = 2

  for m in sorted(graph):
    visit(m, [])
  for m, found in imports.items():
    roots = {name.split(".")[0] for name in found}
    assert not roots & {"torch", "senteval", "sentence_transformers", "benchmarks"}, (
      f"{m} imports {roots & {'torch', 'senteval', 'sentence_transformers'}}: baselines belong in benchmarks/"
    )
    assert "/work/" not in open(modules[m]).read(), f"{m} holds a machine-specific path"


# ARCHITECTURE.md's floors, top to bottom: a module imports only from its own floor or the ones below it. An entry
# names a module or a folder (every module under it); a module belongs to its longest entry.
LAYERS = (
  (
    "commands",
    {
      "jaxcse",
      "jaxcse.entry",
      "jaxcse.train",
      "jaxcse.evaluate",
      "jaxcse.encode",
      "jaxcse.mining",
      "jaxcse.soup",
      "jaxcse.export_hf",
      "jaxcse.report",
      "jaxcse.plot",
      "jaxcse.wordpiece",
      "jaxcse.compile",
      "jaxcse.compile.__main__",
      "jaxcse.data.__main__",
    },
  ),
  ("ahead-of-time compile", {"jaxcse.compile.lowering", "jaxcse.compile.analysis", "jaxcse.compile.max_batch"}),
  ("training: the run", {"jaxcse.training.inputs", "jaxcse.training.start", "jaxcse.training.run_log"}),
  (
    "training: the config",
    {"jaxcse.training", "jaxcse.training.cli", "jaxcse.training.configuration", "jaxcse.training.configured"},
  ),
  (
    "training: the step",
    {
      "jaxcse.training.train_step",
      "jaxcse.training.views",
      "jaxcse.training.masked_lm",
      "jaxcse.training.objectives",
      "jaxcse.training.st_methods",
      "jaxcse.training.losses",
      "jaxcse.training.dclr_losses",
      "jaxcse.training.ranking_losses",
      "jaxcse.training.distill_losses",
      "jaxcse.training.rankcse",
      "jaxcse.training.rankcse_losses",
      "jaxcse.training.matryoshka",
      "jaxcse.training.gradcache",
      "jaxcse.training.augment",
    },
  ),
  ("training: devices", {"jaxcse.training.distributed"}),
  ("evaluation", {"jaxcse.evaluation"}),
  ("inference", {"jaxcse.inference"}),
  ("models and where they are stored", {"jaxcse.models", "jaxcse.storage"}),
  ("data", {"jaxcse.data"}),
  ("core", {"jaxcse.core", "jaxcse.compile.targets", "jaxcse.version"}),
)


def _floor_of(module: str) -> int | None:
  """The floor of the longest LAYERS entry that is the module or a folder above it."""
  best = None
  for i, (_, entries) in enumerate(LAYERS):
    for entry in entries:
      if (module == entry or module.startswith(entry + ".") and entry != "jaxcse") and (
        best is None or len(entry) > len(best[1])
      ):
        best = (i, entry)
  return None if best is None else best[0]


def test_every_module_imports_only_from_its_floor_or_below():
  modules = _modules()
  floor = {m: _floor_of(m) for m in modules}
  assert {m for m, f in floor.items() if f is None} == set(), (
    "modules on no floor of LAYERS (place them in ARCHITECTURE.md too)"
  )
  for m, path in modules.items():
    for dep in _imports(path):
      if dep in modules and dep != m and dep != "jaxcse" and not m.startswith(dep + "."):
        assert floor[dep] >= floor[m], (
          f"{m} ({LAYERS[floor[m]][0]}) imports {dep}, a floor above it ({LAYERS[floor[dep]][0]})"
        )
