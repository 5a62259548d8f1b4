"""Model soups (``jaxcse.soup``, ``jaxcse-soup``): the mean of the ingredients' weights, the greedy recipe, the
written folder every command reads, and the refusals."""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest

from jaxcse import soup
from jaxcse.storage import loading, st_format
from tests import helpers


def _folder(path: str, seed: int = 0, pooler: str = "avg", **config_changes) -> str:
  """A tiny random BERT as a sentence-transformers folder that pools ``pooler``."""
  helpers.make_tiny_model_dir(path, seed=seed, **config_changes)
  st_format.write_modules(path, pooler, hidden=32, num_layers=config_changes.get("num_hidden_layers", 2),
                          max_seq_len=128, mlp=None)  # fmt: skip
  return path


def test_average_is_each_leafs_float64_mean_rounded_once():
  rng = np.random.default_rng(0)
  trees = [{"a": rng.normal(size=(3, 4)).astype(np.float32), "b": {"c": rng.normal(size=5)}} for _ in range(3)]
  mean = soup.average(trees)
  for path in (("a",), ("b", "c")):
    leaves = [t[path[0]] if len(path) == 1 else t[path[0]][path[1]] for t in trees]
    got = mean[path[0]] if len(path) == 1 else mean[path[0]][path[1]]
    expected = (sum(np.asarray(x, np.float64) for x in leaves) / 3).astype(leaves[0].dtype)
    assert got.dtype == leaves[0].dtype
    np.testing.assert_array_equal(got, expected)
  # A soup of one model twice is that model, bit for bit (the greedy recipe's tie below relies on it).
  twice = soup.average([trees[0], trees[0]])
  np.testing.assert_array_equal(twice["a"], trees[0]["a"])


def test_a_uniform_soup_is_the_mean_of_its_ingredients_and_loads_as_a_model(small_data_dir, tmp_path):
  from jaxcse import Encoder

  a, b = _folder(str(tmp_path / "a"), seed=0), _folder(str(tmp_path / "b"), seed=1)
  made = soup.make_soup([a, b], metric=None, log=lambda line: None)
  assert made.recipe == "uniform" and made.kept == (a, b) and made.score is None
  expected = soup.average([loading.load_model(a).params, loading.load_model(b).params])
  for x, y in zip(jax.tree.leaves(made.params), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(x, y)
  out = str(tmp_path / "soup")
  soup.write(made, out, root=small_data_dir)
  record = json.load(open(os.path.join(out, "jaxcse_export.json")))
  assert record["soup"] == {
    "recipe": "uniform",
    "metric": None,
    "score": None,
    "ingredients": [{"path": a, "step": None, "score": None}, {"path": b, "step": None, "score": None}],
    "kept": [a, b],
  }
  assert "uniform model soup" in open(os.path.join(out, "README.md")).read()
  sentences = ["A man plays a guitar.", "A cat sleeps on the sofa.", "Soup is served."]
  served = Encoder.load(out).embed(sentences)
  np.testing.assert_array_equal(served, Encoder(made.spec, expected).embed(sentences))
  # Neither ingredient: the soup is a model of its own.
  assert not np.allclose(served, Encoder.load(a).embed(sentences))


def test_the_greedy_soup_adds_each_ingredient_that_does_not_lower_the_dev_score(small_data_dir, tmp_path):
  # Ingredients: a weaker random model (c), a model (a) and its exact copy (b), given in that order. a and b score
  # the same and their soup is a itself, so b is kept (the recipe's >=); c is kept only if the soup with it scores
  # at least the soup's score so far. The decisions are checked against the scores recomputed here.
  a = _folder(str(tmp_path / "a"), seed=1)
  b = str(tmp_path / "b")
  shutil.copytree(a, b)
  c = _folder(str(tmp_path / "c"), seed=0)
  lines = []
  made = soup.make_soup([c, a, b], greedy=True, metric="stsb_dev", root=small_data_dir, log=lines.append)
  score = soup._DevScore(made.spec, "stsb_dev", small_data_dir, 128)
  params = {path: loading.load_model(path).params for path in (a, b, c)}
  singles = {path: score(p) for path, p in params.items()}
  assert singles[a] == singles[b] > singles[c]  # The order the recipe sorts them into: a, b, c.
  assert [i.score for i in made.ingredients] == [singles[c], singles[a], singles[b]]
  order = sorted([c, a, b], key=lambda p: -singles[p])
  kept, best = [order[0]], singles[order[0]]
  for path in order[1:]:
    candidate = score(soup.average([params[p] for p in kept + [path]]))
    if candidate >= best:
      kept, best = kept + [path], candidate
  assert made.kept == tuple(kept) and made.score == best
  assert a in made.kept and b in made.kept
  assert lines[:3] == [f"{p}: stsb_dev {singles[p]:.4f}" for p in (c, a, b)]
  assert len(lines) == 5 and all(line.startswith("with ") for line in lines[3:])


def test_the_command_soups_two_trained_workdirs(tiny_model_dir, small_data_dir, tmp_path, capsys):
  from jaxcse import Encoder, train

  workdirs = []
  for seed in (0, 1):
    workdir = str(tmp_path / f"run{seed}")
    config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"train.max_steps": 2, "seed": seed})
    train.train_and_evaluate(config, workdir)
    workdirs.append(workdir)
  out = str(tmp_path / "soup")
  assert soup.main([*workdirs, "--output", out, "--greedy", "--data_dir", small_data_dir]) == 0
  said = capsys.readouterr().out.strip().splitlines()
  assert said[-1].startswith(f"wrote {out}: a greedy soup of ") and " of 2 models, stsb_dev " in said[-1]
  record = json.load(open(os.path.join(out, "jaxcse_export.json")))["soup"]
  assert [i["step"] for i in record["ingredients"]] == [2, 2] and record["kept"][0] in workdirs
  # Served with the runs' test pooler (SimCSE's: cls before the MLP), as each run's own model is.
  assert Encoder.load(out).pooler == Encoder.load(workdirs[0]).pooler
  assert Encoder.load(out).embed(["a soup of two runs"]).shape == (1, 32)


@pytest.mark.parametrize(
  "mistake,message",
  [
    ("one model", r"a soup needs at least two models, not 1"),
    ("another shape", r"b: config num_hidden_layers is 1, .*a's 2"),
    ("another tokenizer", r"b: has another tokenizer than .*a \(its vocabulary or normalisation differs\)"),
    ("another pooler", r"b: pools with cls_before_pooler in training, .*, .*a with avg in training, avg on dev sets"),
    ("greedy unscored", r"the greedy recipe chooses by a dev score: give a metric, not none"),
    ("output not empty", r"soup: exists and is not empty; choose a new folder or remove it"),
  ],
)
def test_a_soup_that_cannot_be_made_is_one_line_and_writes_nothing(mistake, message, tmp_path, capsys):
  import re

  a = _folder(str(tmp_path / "a"))
  b = str(tmp_path / "b")
  args = [a, b]
  if mistake == "another shape":
    _folder(b, num_hidden_layers=1)
  elif mistake == "another tokenizer":
    shutil.copytree(a, b)
    tokenizer = json.load(open(os.path.join(b, "tokenizer.json")))
    vocab = tokenizer["model"]["vocab"]
    vocab["cat"], vocab["dog"] = vocab["dog"], vocab["cat"]  # The same words, other ids.
    json.dump(tokenizer, open(os.path.join(b, "tokenizer.json"), "w"))
  elif mistake == "another pooler":
    _folder(b, pooler="cls_before_pooler")
  else:
    shutil.copytree(a, b)
  if mistake == "one model":
    args = [a]
  out = tmp_path / "soup"
  extra = {"greedy unscored": ["--greedy"]}.get(mistake, [])
  if mistake == "output not empty":
    out.mkdir()
    (out / "keep.txt").write_text("mine")
  before = sorted(os.listdir(tmp_path))
  assert soup.main([*args, "--output", str(out), "--metric", "none", *extra]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and re.search(message, err[0]), err
  assert sorted(os.listdir(tmp_path)) == before
  if mistake == "output not empty":
    assert os.listdir(out) == ["keep.txt"]


def test_parameters_of_another_path_shape_or_dtype_are_named():
  first = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.float32)}
  soup.check_same_shapes(first, {"a": np.ones((2, 3), np.float32), "b": np.ones(4, np.float32)}, "x")
  for other, message in [
    ({"a": np.zeros((2, 3), np.float32)}, r"x: has no parameter \['b'\]"),
    ({**first, "c": np.zeros(1, np.float32)}, r"x: has a parameter \['c'\] the first model lacks"),
    ({**first, "b": np.zeros(5, np.float32)}, r"x: parameter \['b'\] is \(5,\), the first model's \(4,\)"),
    ({**first, "b": np.zeros(4, np.float16)}, r"x: parameter \['b'\] is float16, the first model's float32"),
  ]:
    with pytest.raises(soup.SoupError, match=message):
      soup.check_same_shapes(first, other, "x")
