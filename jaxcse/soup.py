r"""Model soups: one model whose weights are the average of several fine-tuned from one base (Wortsman et al., 2022).

  jaxcse-soup MODEL MODEL [MODEL ...] --output OUT [--greedy] [--checkpoint best] [--metric stsb_dev|none]

  from jaxcse import soup
  made = soup.make_soup(["workdirs/seed0", "workdirs/seed1", "workdirs/seed2"], greedy=True)
  soup.write(made, "soups/simcse")

The ingredients are jaxcse workdirs (their best checkpoints, or ``--checkpoint``), checkpoint folders or model
folders (Hugging Face, sentence-transformers, jaxcse-export's), all of one architecture, parameter shapes,
tokenizer, poolers and prompts; anything else is refused in one line that names the ingredient and what differs.
Averaging weights only makes sense for models fine-tuned from the same starting point (seeds or hyperparameters of
one recipe): jaxcse cannot check that, so a soup of unrelated models scores what it scores.

* **uniform** (the default): every parameter is the mean of the ingredients' (summed in float64, rounded to the
  parameter's dtype once).
* **greedy** (the paper's Recipe 1): the ingredients are scored on the dev set, sorted best first (ties keep the
  order given); the soup starts as the best one, and each next one stays in if the soup with it scores at least as
  well as the soup without it (``>=``, as the paper).

The dev score is the one jaxcse's training selects its best checkpoint by (``--metric``: STS-B dev Spearman, or its
mean with SICK-R dev's, DCLR's), embedded with the model's dev pooler; ``none`` (uniform only) scores nothing.
The soup is written as jaxcse-export writes a model (a Hugging Face + sentence-transformers folder, whole or
absent; every jaxcse command reads it), its ``jaxcse_export.json`` naming the ingredients, their scores, which were
kept and the soup's score; before the command says it is written, the folder is loaded back and must embed the dev
sentences exactly as the soup in memory does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxcse import models
from jaxcse.core import errors, platforms
from jaxcse.core.errors import JaxcseError
from jaxcse.evaluation import sts_data, sts_metrics
from jaxcse.inference import embedder as embedder_lib
from jaxcse.models import poolers
from jaxcse.storage import loading

# The dev metrics a soup can be chosen by (sts_metrics.SELECTION_METRICS's that need only the shipped dev sets).
METRICS = ("stsb_dev", "stsb_sickr_dev")
# Config keys that do not change what a model computes in evaluation mode (names, versions, dropout, outputs).
_CONFIG_KEYS_IGNORED = {
  "_name_or_path",
  "architectures",
  "transformers_version",
  "output_hidden_states",
  "torch_dtype",
  "dtype",
  "use_cache",
  "gradient_checkpointing",
  "id2label",
  "label2id",
}


class SoupError(JaxcseError, ValueError):
  """The ingredients cannot be averaged into one model (another shape, tokenizer, pooler), or the options conflict."""


@dataclasses.dataclass(frozen=True)
class Ingredient:
  """One model of the soup: where it came from, and its dev score (None where nothing was scored)."""

  path: str
  step: int | None  # A workdir's checkpoint step; None for a model folder.
  score: float | None


@dataclasses.dataclass(frozen=True)
class Soup:
  """The averaged model and how it was made."""

  spec: models.ModelSpec  # The first ingredient's (all are the same but for their names).
  params: Any
  recipe: str  # "uniform" or "greedy".
  metric: str | None  # The dev metric the ingredients and the soup were scored by; None: not scored.
  ingredients: tuple[Ingredient, ...]  # As given.
  kept: tuple[str, ...]  # The paths averaged, in the order they were added.
  score: float | None  # The soup's dev score.
  prompts: dict[str, str] = dataclasses.field(default_factory=dict)
  truncate_dim: int | None = None

  def record(self) -> dict:
    """What ``jaxcse_export.json`` says of the soup."""
    return {
      "recipe": self.recipe,
      "metric": self.metric,
      "score": self.score,
      "ingredients": [dataclasses.asdict(i) for i in self.ingredients],
      "kept": list(self.kept),
    }


def average(trees: Sequence[Any]) -> Any:
  """The leaf-wise mean of parameter trees of one structure: each leaf summed in float64, divided by their number,
  rounded once to the first tree's dtype. ``trees`` must have the same structure, shapes and dtypes
  (``check_same_shapes``)."""
  if not trees:
    raise SoupError("a soup needs at least one model")

  def mean(*leaves):
    total = sum(np.asarray(leaf, np.float64) for leaf in leaves)
    return (total / len(leaves)).astype(np.asarray(leaves[0]).dtype)

  return jax.tree.map(mean, *jax.device_get(list(trees)))


def check_same_shapes(first: Any, other: Any, name: str) -> None:
  """Raises ``SoupError`` naming ``name`` and the first parameter that ``other`` lacks, adds, or shapes or types
  otherwise."""

  def described(tree):
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p): (np.shape(x), np.asarray(x).dtype) for p, x in leaves}

  a, b = described(first), described(other)
  for key in sorted(a.keys() | b.keys()):
    if key not in b:
      raise SoupError(f"{name}: has no parameter {key} (the first model has); a soup averages models of one shape")
    if key not in a:
      raise SoupError(f"{name}: has a parameter {key} the first model lacks; a soup averages models of one shape")
    (shape_a, dtype_a), (shape_b, dtype_b) = a[key], b[key]
    if shape_a != shape_b:
      raise SoupError(f"{name}: parameter {key} is {shape_b}, the first model's {shape_a}; a soup needs one shape")
    if dtype_a != dtype_b:
      raise SoupError(f"{name}: parameter {key} is {dtype_b}, the first model's {dtype_a}")


def _config(spec: models.ModelSpec) -> dict:
  return {
    k: v for k, v in spec.hf_config.to_dict().items() if k not in _CONFIG_KEYS_IGNORED and "dropout" not in k.lower()
  }


def _tokenizer(spec: models.ModelSpec) -> Any:
  """What decides the token ids: the fast tokenizer's model, normalizer and pre-tokenizer (not its truncation or
  padding settings), else the vocabulary."""
  backend = getattr(spec.tokenizer, "backend_tokenizer", None)
  if backend is None:
    return spec.tokenizer.get_vocab()
  described = json.loads(backend.to_str())
  return {k: v for k, v in described.items() if k not in ("truncation", "padding")}


def _poolers(pooling: models.PoolerSpec) -> str:
  return f"with {pooling.pooler} in training, {pooling.dev_pooler} on dev sets, {pooling.test_pooler} at test time"


def check_compatible(first: loading.Loaded, other: loading.Loaded, name: str, first_name: str) -> None:
  """Raises ``SoupError`` where ``other`` (the ingredient ``name``) cannot be averaged with ``first``."""
  if other.spec.family.model_type != first.spec.family.model_type:
    raise SoupError(
      f"{name}: is a {other.spec.family.model_type} model, {first_name} a {first.spec.family.model_type} one"
    )
  a, b = _config(first.spec), _config(other.spec)
  for key in sorted(a.keys() | b.keys()):
    if a.get(key) != b.get(key):
      raise SoupError(f"{name}: config {key} is {b.get(key)!r}, {first_name}'s {a.get(key)!r}")
  if _tokenizer(other.spec) != _tokenizer(first.spec):
    raise SoupError(f"{name}: has another tokenizer than {first_name} (its vocabulary or normalisation differs)")
  if other.spec.pooling != first.spec.pooling:
    raise SoupError(f"{name}: pools {_poolers(other.spec.pooling)}, {first_name} {_poolers(first.spec.pooling)}")
  if other.prompts != first.prompts:
    raise SoupError(f"{name}: has the prompts {other.prompts}, {first_name} {first.prompts}")
  if other.truncate_dim != first.truncate_dim:
    raise SoupError(f"{name}: serves {other.truncate_dim} dims, {first_name} {first.truncate_dim}")
  check_same_shapes(first.params, other.params, name)


class _DevScore:
  """Scores params of one spec on the dev sets by ``metric``, as the training's evaluation does."""

  def __init__(self, spec: models.ModelSpec, metric: str, root: str | None, batch_size: int):
    self.dev_sets = sts_data.load_dev_sets(root, sickr=metric == "stsb_sickr_dev")
    self.select = sts_metrics.SELECTION_METRICS[metric]
    self.embedder = embedder_lib.BucketedEmbedder(spec, spec.pooling.dev_pooler, batch_size=batch_size)

  def __call__(self, params: Any) -> float:
    scores, _ = sts_metrics.dev_scores_and_embeddings(lambda s: self.embedder(s, params), self.dev_sets)
    return float(self.select(scores))


def make_soup(
  models_: Sequence[str],
  *,
  greedy: bool = False,
  checkpoint: str = "best",
  pooler: str | None = None,
  metric: str | None = "stsb_dev",
  root: str | None = None,
  batch_size: int = 128,
  log=print,
) -> Soup:
  """Averages the models at ``models_`` (paths or names ``loading.load_model`` reads) into one (module docstring).

  Args:
    models_: two or more models of one shape, tokenizer, poolers and prompts.
    greedy: the greedy recipe (needs ``metric``); else uniform.
    checkpoint: for a workdir, which checkpoint: ``best``, ``latest`` or a step.
    pooler: for a model folder without a sentence-transformers pooling config, the pooler to build it with
      (``loading.load_model``); a workdir's are its own.
    metric: ``METRICS`` or None (uniform only: nothing is scored).
    root: the data root the dev sets are read from (None: ``$JAXCSE_DATA_DIR``, else the shipped copies).
    batch_size: sentences per dev-set batch.
    log: called with a line per score as it is known.

  Raises:
    SoupError: fewer than two models, a model that differs from the first, greedy without a metric.
  """
  if len(models_) < 2:
    raise SoupError(f"a soup needs at least two models, not {len(models_)}")
  if metric is not None and metric not in METRICS:
    raise SoupError(f"metric must be one of {', '.join(METRICS)} or none, not {metric!r}")
  if greedy and metric is None:
    raise SoupError("the greedy recipe chooses by a dev score: give a metric, not none")
  loaded = []
  for path in models_:
    model = loading.load_model(path, checkpoint=checkpoint, pooler=pooler)
    if loaded:
      check_compatible(loaded[0], model, path, models_[0])
    loaded.append(model)
  spec = loaded[0].spec
  score = _DevScore(spec, metric, root, batch_size) if metric else None
  scores = []
  for path, model in zip(models_, loaded):
    scores.append(score(model.params) if score else None)
    if score:
      log(f"{path}: {metric} {scores[-1]:.4f}")
  ingredients = tuple(Ingredient(p, m.step, s) for p, m, s in zip(models_, loaded, scores))
  if not greedy:
    params = average([m.params for m in loaded])
    soup_score = score(params) if score else None
    kept = tuple(models_)
  else:
    # Best first; ties keep the order given (a stable sort); a model whose dev score is not a number (a collapsed
    # one) goes last, and the soup leaves it out (a comparison with NaN is false).
    order = sorted(range(len(loaded)), key=lambda i: (not math.isfinite(scores[i]), -scores[i]))
    chosen = [order[0]]
    params, soup_score = loaded[order[0]].params, scores[order[0]]
    for i in order[1:]:
      candidate = average([loaded[j].params for j in chosen + [i]])
      candidate_score = score(candidate)
      taken = candidate_score >= soup_score
      log(f"with {models_[i]}: {metric} {candidate_score:.4f} ({'kept' if taken else 'left out'})")
      if taken:
        chosen.append(i)
        params, soup_score = candidate, candidate_score
    kept = tuple(models_[i] for i in chosen)
  return Soup(
    spec, params, "greedy" if greedy else "uniform", metric, ingredients, kept, soup_score,
    prompts=loaded[0].prompts, truncate_dim=loaded[0].truncate_dim,
  )  # fmt: skip


def write(soup: Soup, out_dir: str, *, root: str | None = None) -> dict:
  """Writes ``soup`` as a model folder (``export_hf.export``) and checks that it loads back and embeds the dev
  sentences exactly as ``soup.params`` do; returns export's summary. Raises ``SoupError`` if it does not."""
  from jaxcse import export_hf

  summary = export_hf.export(
    soup.spec, soup.params, out_dir, soup=soup.record(), prompts=soup.prompts, truncate_dim=soup.truncate_dim
  )
  back = loading.load_model(out_dir)
  sentences = list(sts_data.load_dev_sets(root, sickr=False)["stsb_dev"].sent1[:64])
  # One embedder (one program) for both: the folder's params must be the soup's, bit for bit, where the pooler reads.
  embed = embedder_lib.BucketedEmbedder(back.spec, soup.spec.pooling.test_pooler)
  written, expected = embed(sentences, back.params), embed(sentences, soup.params)
  if not np.array_equal(written, expected):
    raise SoupError(
      f"{out_dir}: the written model embeds differently from the soup (max difference "
      f"{float(np.max(np.abs(written - expected))):.3g}); do not use it"
    )
  return summary


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.soup"), description=__doc__.split("\n\n")[0])
  parser.add_argument("models", nargs="+", help="two or more workdirs, checkpoint folders or model folders")
  parser.add_argument("--output", required=True, help="the model folder to write (must not exist, or be empty)")
  parser.add_argument("--greedy", action="store_true", help="the greedy recipe (default: uniform)")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument(
    "--pooler",
    choices=poolers.names(),
    default=None,
    help="for a model folder without a sentence-transformers pooling config: the pooler to build it with",
  )
  parser.add_argument(
    "--metric",
    default="stsb_dev",
    choices=(*METRICS, "none"),
    help="the dev score the ingredients and the soup are scored by (none: uniform, nothing scored)",
  )
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per dev-set batch")
  parser.add_argument(
    "--data_dir", default=None, help="data root of the dev sets (default $JAXCSE_DATA_DIR, else the shipped copies)"
  )
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()
  errors.check_output(args.output, folder=True)  # Before the slow part; export checks again.
  if os.path.isdir(args.output) and os.listdir(args.output):
    raise SoupError(f"{args.output}: exists and is not empty; choose a new folder or remove it")
  embedder_lib.check_settings(args.batch_size)
  made = make_soup(
    args.models,
    greedy=args.greedy,
    checkpoint=args.checkpoint,
    pooler=args.pooler,
    metric=None if args.metric == "none" else args.metric,
    root=args.data_dir,
    batch_size=args.batch_size,
  )
  summary = write(made, args.output, root=args.data_dir)
  score = f", {made.metric} {made.score:.4f}" if made.score is not None else ""
  print(
    f"wrote {summary['out_dir']}: a {made.recipe} soup of {len(made.kept)} of {len(made.ingredients)} models{score}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
