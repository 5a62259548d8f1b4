"""Checks a training config when it is loaded, before anything is computed or written.

Every name a config holds (method, poolers, selection metric, dtype) is looked
up in its registry here, and every number is checked for a usable value, so a
mistake is one clear line at start-up rather than a traceback deep in a run.
"""

from __future__ import annotations

import dataclasses
import difflib
import math

import ml_collections

from jaxcse import models
from jaxcse.core.errors import JaxcseError
from jaxcse.evaluation import sts_metrics
from jaxcse.training import losses, matryoshka, objectives, st_methods


class ConfigError(JaxcseError, ValueError):
  """A config value that cannot run; the message names the field."""


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ``ConfigError`` naming the first field that cannot run."""
  _check_known_fields(config)
  try:
    objective = objectives.get(config.method)
    objective.check_config(config)
    st_methods.check_gor(config)  # Method gor's block, which gor.enabled adds to any method.
    objectives.pooling_of(config)
    if matryoshka.Matryoshka.from_config(config) and objective.loss is None:
      raise ValueError(f"matryoshka.dims: method {config.method} has no sentence embeddings to truncate")
    if objectives.needs(config).regularizer and objective.loss is None:
      raise ValueError(f"gor.enabled: method {config.method} has no sentence embeddings to spread out")
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if config.eval.metric not in sts_metrics.SELECTION_METRICS:
    raise ConfigError(
      f"unknown eval.metric {config.eval.metric!r}; choose one of {', '.join(sts_metrics.SELECTION_METRICS)}"
    )
  needed = sts_metrics.OWN_SELECTION_NEEDS.get(config.eval.metric)
  if needed and not config.eval.get(needed):
    raise ConfigError(
      f"eval.metric={config.eval.metric} needs eval.{needed} (your own dev set: "
      f"{'a scored-pairs file' if needed == 'pairs' else 'a retrieval folder'}; docs/evaluation.md)"
    )
  if config.eval.metric == "stsb_sickr_dev" and not config.eval.sickr_dev:
    raise ConfigError("eval.metric=stsb_sickr_dev needs eval.sickr_dev=True (it averages STS-B and SICK-R dev)")
  if config.mlm.head not in models.MLM_HEADS:
    raise ConfigError(f"mlm.head must be one of {', '.join(models.MLM_HEADS)}, not {config.mlm.head!r}")
  if config.model.dtype not in models.DTYPES:
    raise ConfigError(f"model.dtype must be one of {', '.join(models.DTYPES)}, not {config.model.dtype!r}")
  init = config.model.init
  if init not in ("pretrained", "random"):
    raise ConfigError(f"model.init must be pretrained or random, not {init!r}")
  if init == "random" and not (config.model.tokenizer and config.model.get("architecture")):
    raise ConfigError("model.init=random needs model.tokenizer (a tokenizer folder) and model.architecture")
  if init == "pretrained" and not config.model.name:
    raise ConfigError("model.name is empty: give a Hugging Face folder or hub id (or model.init=random)")
  positive = {
    "train.batch_size": config.train.batch_size,
    "train.log_every": config.train.log_every,
    "eval.every": config.eval.every,
    "eval.batch_size": config.eval.batch_size,
    "checkpoint.every": config.checkpoint.every,
  }
  for name, value in positive.items():
    if not isinstance(value, int) or value < 1:
      raise ConfigError(f"{name} must be a positive integer, not {value!r}")
  if not isinstance(config.data.max_seq_len, int) or config.data.max_seq_len < 3:
    raise ConfigError(f"data.max_seq_len must be at least 3 ([CLS], a token, [SEP]), not {config.data.max_seq_len}")
  max_steps = config.train.max_steps
  if not _is_integer(max_steps) or not (max_steps >= 1 or max_steps == BY_EPOCHS):
    raise ConfigError(
      f"train.max_steps must be a positive integer, or {BY_EPOCHS} to train train.num_epochs epochs, not {max_steps!r}"
    )
  if max_steps == BY_EPOCHS and not (_is_integer(config.train.num_epochs) and config.train.num_epochs >= 1):
    raise ConfigError(
      f"train.num_epochs must be a positive integer with train.max_steps={BY_EPOCHS}, not {config.train.num_epochs!r}"
    )
  _check_ranges(config)
  _check_packed(config)
  chunk = config.train.grad_cache_chunk
  if chunk < 0 or (chunk and config.train.batch_size % chunk):
    raise ConfigError(
      f"train.grad_cache_chunk={chunk} must be 0 (off) or divide train.batch_size={config.train.batch_size}"
    )
  csv_format = config.data.get("csv_format", "simcse")  # An older config.json has none: SimCSE's csv.
  if csv_format not in ("simcse", "sentence_transformers"):
    raise ConfigError(f"data.csv_format must be simcse or sentence_transformers, not {csv_format!r}")
  heldout = config.data.heldout_fraction
  if not 0.0 <= heldout < 1.0:
    raise ConfigError(f"data.heldout_fraction must be in [0, 1), not {heldout}")
  if config.eval.metric == "heldout_mlm_accuracy" and not (heldout > 0 and objective.masked_lm):
    raise ConfigError("eval.metric=heldout_mlm_accuracy needs method mlm and data.heldout_fraction > 0")
  if config.log.tensorboard:
    try:
      import tensorboardX  # noqa: F401
    except ImportError:
      raise ConfigError('log.tensorboard needs tensorboardX: pip install "jaxcse[tensorboard]"') from None
  _check_augment(config, objective)
  if config.data.pack and not objective.masked_lm:
    raise ConfigError(
      "data.pack joins sentences into one sequence: only for method mlm (a contrastive method "
      "needs one sentence per example)"
    )
  for field in ("query_prompt", "document_prompt"):  # .get: an older workdir's config.json has neither.
    if not isinstance(config.data.get(field, ""), str):
      raise ConfigError(f'data.{field} must be a string ("" for none), not {config.data[field]!r}')
    if config.data.get(field, "") and config.data.pack:
      raise ConfigError(
        f"data.{field} is put before each text of a contrastive batch; data.pack (MLM pretraining "
        "on packed sequences) has no texts to put it before"
      )


# A config's own free-form block: model.init=random's Hugging Face config (checked by _check_ranges).
FREE_FORM = ("model.architecture.",)


def _check_known_fields(config: ml_collections.ConfigDict) -> None:
  """``ConfigError`` naming a field that no shipped config has (``configs/base.py``'s, and the method blocks
  ``configs/mixcse.py`` and ``configs/dclr.py`` add): a misspelling set from Python or in a config file, which
  nothing would read, so the run would silently go on without it (``--config.FIELD`` refuses one already)."""
  import flax

  from jaxcse.configs import base, dclr, mixcse

  def fields(c) -> list[str]:
    return list(flax.traverse_util.flatten_dict(c.to_dict(), sep="."))

  known = {name for module in (base, mixcse, dclr) for name in fields(module.get_config())}
  for name in fields(config):
    if name not in known and not name.startswith(FREE_FORM):
      close = difflib.get_close_matches(name, sorted(known), n=1)
      raise ConfigError(
        f"unknown config field {name}{f'; did you mean {close[0]}?' if close else ''} (configs/base.py lists "
        "every field; nothing would read this one)"
      )


BY_EPOCHS = -1  # train.max_steps's value for "train.num_epochs passes over the corpus" (base.py's default).


@dataclasses.dataclass(frozen=True)
class Range:
  """The values a numeric field can take: finite, between ``low`` and ``high`` (None: unbounded), each bound
  included unless its ``*_open``; an integer if ``integer``."""

  low: float | None = None
  high: float | None = None
  low_open: bool = False
  high_open: bool = False
  integer: bool = False

  def holds(self, value) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
      return False
    if not math.isfinite(value):
      return False
    if self.low is not None and (value <= self.low if self.low_open else value < self.low):
      return False
    return self.high is None or (value < self.high if self.high_open else value <= self.high)

  def describe(self) -> str:
    kind = "an integer" if self.integer else "a finite number"
    if self.low is not None and self.high is not None:
      return f"{kind} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
    if self.low is not None:
      return f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
    return kind


UNIT = Range(0.0, 1.0, high_open=True)  # A share or probability that must leave something: [0, 1).
NON_NEGATIVE = Range(0.0)
# Every numeric field (but those checked above with their own message), by dotted name, and its meaningful values.
# A method's section is checked only when the config has it (configs/mixcse.py, configs/dclr.py add them).
RANGES = {
  "seed": Range(0, integer=True),  # numpy's generators (the data order) take no negative seed.
  "model.dropout": UNIT,  # A drop probability of 1 keeps nothing.
  # Divides the similarities: near 0 their quotients overflow float32 (losses.MAX_LOGIT_SCALE).
  "loss.temperature": Range(1 / losses.MAX_LOGIT_SCALE),
  "loss.hard_negative_weight": Range(),  # A log-weight: any real number.
  "mlm.weight": NON_NEGATIVE,
  "mlm.probability": Range(0.0, 1.0, low_open=True),  # 0 chooses no token to predict: the loss is 0 / 0.
  "mlm.max_predictions": Range(0, integer=True),  # 0 = from mlm.probability.
  "train.learning_rate": NON_NEGATIVE,
  "train.warmup_steps": Range(0, integer=True),
  "train.weight_decay": NON_NEGATIVE,
  "train.adam_b1": UNIT,  # A decay of 1 never forgets its initial zero.
  "train.adam_b2": UNIT,
  "train.adam_eps": Range(0.0, low_open=True),  # Adam divides by sqrt(v) + eps, and v is 0 for a zero gradient.
  "train.max_grad_norm": NON_NEGATIVE,  # 0 = no clipping.
  "train.official_world_size": Range(1, integer=True),
  "mixcse.mix_lambda": Range(0.0, 1.0),  # The positive's share of each mixed negative.
  "dclr.phi": Range(-1.0, 1.0),  # A cosine similarity threshold.
  "dclr.noise_times": NON_NEGATIVE,
  "dclr.noise_std": NON_NEGATIVE,
  "dclr.ascent_steps": Range(0, integer=True),
  "dclr.ascent_step_size": NON_NEGATIVE,
  "augment.crop_before_truncation": Range(0, integer=True),  # 0 = off; else a token count (_check_augment).
}


def _is_integer(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _check_ranges(config: ml_collections.ConfigDict) -> None:
  """``ConfigError`` naming the first field of ``RANGES`` whose value is outside its range (NaN and inf included)."""
  for name, allowed in RANGES.items():
    node = config
    for part in name.split("."):
      if part not in node:
        break
      node = node[part]
    else:
      if not allowed.holds(node):
        raise ConfigError(f"{name} must be {allowed.describe()}, not {node!r}")
  # model.init=random's Hugging Face config fields: sizes and counts (at least 1), other integers (ids, intervals:
  # at least 0), rates and epsilons (floats, at least 0).
  for key, value in (config.model.get("architecture") or {}).items():
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      sized = key.endswith("_size") or key.startswith("num_") or key == "max_position_embeddings"
      allowed = Range(1 if sized else 0, integer=True) if isinstance(value, int) else NON_NEGATIVE
      if not allowed.holds(value):
        raise ConfigError(f"model.architecture.{key} must be {allowed.describe()}, not {value!r}")


def check_model(config: ml_collections.ConfigDict, spec: models.ModelSpec) -> None:
  """The checks that need the model's config (``configured.model`` calls it once the spec is built, before a run
  writes anything): ``data.max_seq_len`` and ``augment.crop_before_truncation`` within the model's position
  embeddings (the tokenizer's own limit), ``matryoshka.dims`` within its embedding width."""
  if config.data.max_seq_len > spec.max_positions:
    raise ConfigError(
      f"data.max_seq_len={config.data.max_seq_len} is longer than the {spec.max_positions} positions "
      f"{spec.source or config.model.name} embeds; set data.max_seq_len <= {spec.max_positions}"
    )
  before = config.augment.get("crop_before_truncation", 0)
  if before > spec.max_positions:
    raise ConfigError(
      f"augment.crop_before_truncation={before} is longer than the {spec.max_positions} positions "
      f"{spec.source or config.model.name} embeds; set it <= {spec.max_positions}"
    )
  nested = matryoshka.Matryoshka.from_config(config)
  if nested is not None:
    try:
      nested.check_width(spec.hidden_size)
    except ValueError as e:
      raise ConfigError(f"{e} ({spec.source or config.model.name})") from None


AUGMENT_FRACTIONS = ("crop", "word_deletion", "mlm")


def _check_augment(config: ml_collections.ConfigDict, objective: objectives.Objective) -> None:
  """``config.augment``: SimCSE's ablations of the positive pair."""
  augment = config.augment
  active = []
  for name in AUGMENT_FRACTIONS:
    value = augment[name]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
      raise ConfigError(f"augment.{name} must be a share of the words in [0, 1) (0 = off), not {value!r}")
    if value:
      active.append(f"augment.{name}")
  if augment.delete_one_word:
    active.append("augment.delete_one_word")
  same_mask = augment.same_dropout_mask
  if (active or same_mask) and objective.masked_lm:
    raise ConfigError(
      f"{', '.join(active + ['augment.same_dropout_mask'] * same_mask)}: method {config.method} has "
      "no views to augment (these are ablations of a contrastive method's positive pairs)"
    )
  if same_mask and active:
    raise ConfigError(
      f"augment.same_dropout_mask makes the two views identical; it cannot be combined with "
      f"{', '.join(active)}, which change the second view"
    )
  if augment.mlm and not (augment.mlm_model or config.model.name):
    raise ConfigError(
      "augment.mlm needs a masked LM to sample replacements: set augment.mlm_model (model.name is empty)"
    )
  before = augment.get("crop_before_truncation", 0)  # .get: an older workdir's config.json has none.
  if before:
    if not augment.crop:
      raise ConfigError(f"augment.crop_before_truncation={before} needs augment.crop > 0 (the crop it moves)")
    if before < config.data.max_seq_len:
      raise ConfigError(
        f"augment.crop_before_truncation={before} must be at least data.max_seq_len={config.data.max_seq_len} "
        "(the sentence is tokenized to it, then cut to data.max_seq_len)"
      )
    others = [name for name in active if name != "augment.crop"]
    if others:
      # They could act on the whole rows or on the cut ones, an order the paper does not fix: refused, not guessed.
      raise ConfigError(
        f"augment.crop_before_truncation crops the whole sentence before it is cut; it cannot be combined with "
        f"{', '.join(others)} (set them to 0, or augment.crop_before_truncation=0)"
      )


def tokenized_length(config: ml_collections.ConfigDict) -> int:
  """The length the training sentences are tokenized to (the batches' last axis): ``augment.crop_before_truncation``
  when it is set, else ``data.max_seq_len``. The step cuts the views to ``data.max_seq_len`` either way."""
  return config.augment.get("crop_before_truncation", 0) or config.data.max_seq_len


def packed(config: ml_collections.ConfigDict) -> bool:
  """``train.packed``; a config.json written before the field existed has none, and its run was padded."""
  return bool(config.train.get("packed", False))


def _check_packed(config: ml_collections.ConfigDict) -> None:
  """``train.packed`` packs the sentence encoder's forward pass on the host's token ids: refused, naming the field,
  where something changes those ids inside the step or needs the padding."""
  if not packed(config):
    return
  augment = config.augment
  blockers = [
    (augment.same_dropout_mask, "augment.same_dropout_mask"),
    (
      any(augment.get(f) for f in ("crop", "word_deletion", "delete_one_word", "mlm", "crop_before_truncation")),
      "augment.* (the second view is made inside the step, after the rows are laid out)",
    ),
    (objectives.needs(config).attend_padding, f"method {config.method} (it attends the padding)"),
    (not objectives.needs(config).sentence_loss, f"method {config.method} (it has no sentence embeddings)"),
  ]
  for blocked, what in blockers:
    if blocked:
      raise ConfigError(f"train.packed=True cannot run with {what}; set --config.train.packed=False")


def attention_dropout_per_element(config: ml_collections.ConfigDict) -> bool:
  """``model.attention_dropout_per_element``; a config.json written before the field existed has none, and its run
  shared the mask across the batch (``storage.workdir.FORMER_DEFAULTS``): False, so that it resumes as it trained."""
  return bool(config.model.get("attention_dropout_per_element", False))
