"""The models a config asks for, built once: with their weights (training, evaluation) or as shapes (compiling).

``model(config)`` is the model a fresh run starts from; ``complementary(config)`` the method's frozen
complementary model (DCLR's, GISTEmbed's guide); ``augment_mlm(config, spec)`` the frozen masked LM of SimCSE's
"MLM k%" augmentation. Each takes ``abstract``: False reads the weights (the trainer); True reads only the model's
description and gives params as ``jax.ShapeDtypeStruct`` leaves (``jaxcse-compile``, which runs where the weights
may not be). Both ways build the spec with ``models.build_spec`` and the params' tree from ``models.init_params``,
so what is compiled ahead of time is what trains.

Without weights, a model's shape comes from ``model_shape``: a local folder's ``config.json`` (or a path to
one), else what ``hub.resolve`` finds without the network: a local folder, the encoder shipped with jaxcse, a hub
snapshot already in the Hugging Face cache, or the published shape of a model the shipped configs name
(``storage/published_shapes.json``). The tokenizer matters to the step only for the
masked-LM objectives and the discrete augmentations; it is read from the same folder, else its special ids are
taken from the published ones (``SpecialTokens.published``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import ml_collections

from jaxcse import models
from jaxcse.core.errors import JaxcseError
from jaxcse.storage import hub, loading, st_format
from jaxcse.storage.workdir import Workdir
from jaxcse.training import configuration, objectives

log = logging.getLogger("jaxcse")


class ShapeError(JaxcseError, ValueError):
  """A model's shape cannot be known without its weights (no description found), or it lacks what the run needs."""


@dataclasses.dataclass(frozen=True)
class Built:
  """A model as a run uses it: its spec, its params (arrays, or ``jax.ShapeDtypeStruct`` leaves), their source."""

  spec: models.ModelSpec
  params: Any
  source: str


# --------------------------------------------------------------------------
# A model's description without its weights.


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """The part of a tokenizer that a train step reads: the ids BERT's masking needs.

  Stands in for the tokenizer in an abstract ``ModelSpec`` (``mlm.masking_settings`` reads exactly these).
  """

  mask_token_id: int | None
  pad_token_id: int | None
  all_special_ids: tuple[int, ...]
  sep_token_id: int | None = None  # The last token of a cut sentence (augment.crop_before_truncation's cut).
  # The vocabulary (token -> id) when the tokenizer's files were found: the discrete augmentations of
  # ``config.augment`` build a constant of the step from it (``augment.WordPieces``). None for a published shape.
  vocab: dict[str, int] | None = dataclasses.field(default=None, compare=False, hash=False, repr=False)

  @classmethod
  def of(cls, tokenizer) -> "SpecialTokens":
    return cls(
      tokenizer.mask_token_id,
      tokenizer.pad_token_id,
      tuple(tokenizer.all_special_ids),
      tokenizer.sep_token_id,
      dict(tokenizer.get_vocab()),
    )

  @classmethod
  def published(cls, name: str) -> "SpecialTokens | None":
    """The special ids of ``name``'s published tokenizer (``hub.published_shape``), or None if jaxcse knows none."""
    published = hub.published_shape(name)
    if published is None:
      return None
    ids = published[1]
    return cls(ids["mask_token_id"], ids["pad_token_id"], tuple(ids["all_special_ids"]), ids["sep_token_id"])

  def get_vocab(self) -> dict[str, int]:
    """The tokenizer's ``get_vocab()``, as ``augment.WordPieces.from_tokenizer`` reads it."""
    if self.vocab is None:
      raise ShapeError("the tokenizer's vocabulary is not known (a published shape has only its special ids)")
    return self.vocab


@dataclasses.dataclass(frozen=True)
class ModelShape:
  """A backbone's Hugging Face config, the special ids its tokenizer has (None: unknown), and where both came from."""

  hf_config: Any
  tokens: SpecialTokens | None
  source: str
  folder: str | None = None  # A local folder holding the model's files (its sentence-transformers modules).


def _tokens_in(folder: str) -> SpecialTokens | None:
  from transformers import AutoTokenizer

  try:
    with models.quiet_transformers():
      return SpecialTokens.of(AutoTokenizer.from_pretrained(folder))
  except (OSError, ValueError, TypeError):  # No tokenizer files there.
    return None


def _offline(name: str, revision: str | None) -> hub.Resolved:
  """``hub.resolve`` without the network: a local folder, the Hugging Face cache, or a published shape."""
  try:
    return hub.resolve(name, revision, download=False)
  except hub.ModelNotFound:
    known = ", ".join(n for n in hub.published_names() if "/" not in n)
    raise ShapeError(
      f"{name}{'@' + revision if revision else ''}: no local folder, no snapshot in the Hugging Face "
      f"cache and no published shape (jaxcse knows {known}): point --config.model.name at its "
      "config.json, or fetch its description first (huggingface-cli download NAME config.json "
      "tokenizer.json tokenizer_config.json)"
    ) from None


def model_shape(name: str, *, revision: str | None = None, dropout: float | None = None) -> ModelShape:
  """The shape of the model ``name`` without reading its weights.

  A path to a ``config.json``, else what ``hub.resolve`` finds without the network: a local folder, a model
  shipped with jaxcse or an offline package, the hub snapshot in the Hugging Face cache, a published shape.
  ``dropout`` overrides the config's as ``models.load_pretrained`` does. Raises ``ShapeError`` when none has it.
  """
  from transformers import AutoConfig

  if name.endswith(".json") and os.path.isfile(name):
    folder = os.path.dirname(os.path.abspath(name))
    hf_config = AutoConfig.from_pretrained(name)
    if dropout is not None:
      models.families.get(hf_config.model_type).set_dropout(hf_config, dropout)
    tokens = _tokens_in(folder) if os.path.isfile(os.path.join(folder, "tokenizer_config.json")) else None
    return ModelShape(hf_config, tokens, f"config file {name}", folder)
  return _shape(_offline(name, revision), dropout)


def _shape(resolved: hub.Resolved, dropout: float | None) -> ModelShape:
  """``model_shape`` of what ``hub.resolve`` found."""
  from transformers import AutoConfig

  name, folder = resolved.name, resolved.folder
  if folder is None:  # A published shape.
    fields = hub.published_shape(name)[0]
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    if dropout is not None:
      models.families.get(hf_config.model_type).set_dropout(hf_config, dropout)
    return ModelShape(hf_config, SpecialTokens.published(name), f"the published shape of {name}")
  if not os.path.isfile(os.path.join(folder, "config.json")):
    raise ShapeError(f"{name}: {folder} holds no config.json (the model's shape)")
  source = "the Hugging Face cache" if resolved.kind is hub.Kind.HUB else f"folder {folder}"
  return ModelShape(models.hf_config_from_pretrained(folder, dropout), _tokens_in(folder), source, folder)


# --------------------------------------------------------------------------
# The run's models.


def _tokenizer(name: str):
  """``model.tokenizer``'s tokenizer (a folder, a shipped ``jaxcse/NAME``, or the Hugging Face cache)."""
  from transformers import AutoTokenizer

  try:
    folder = hub.resolve(name, download=False).folder
  except hub.ModelNotFound:
    folder = None
  if folder is None:  # Not found, or a published shape (no files).
    raise ShapeError(
      f"model.tokenizer {name}: not a local folder nor in the Hugging Face cache (its vocabulary size "
      "sets the embedding's shape)"
    )
  with models.quiet_transformers():
    return AutoTokenizer.from_pretrained(folder)


def random_architecture(config: ml_collections.ConfigDict, tokenizer) -> Any:
  """The Hugging Face config of a randomly initialised backbone: ``model.architecture``, vocab from the tokenizer."""
  from transformers import AutoConfig

  arch = dict(config.model.architecture)
  hf_config = AutoConfig.for_model(
    arch.pop("model_type", "bert"), vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **arch
  )
  models.families.get(hf_config.model_type).set_dropout(hf_config, config.model.dropout)
  return hf_config


def _abstract_params(spec: models.ModelSpec, seed: int) -> Any:
  return jax.eval_shape(lambda: models.init_params(spec, seed))


def _augments_tokens(config: ml_collections.ConfigDict) -> bool:
  """Whether the step rewrites the second view's tokens (``config.augment``'s discrete augmentations)."""
  a = config.augment
  return bool(a.crop or a.word_deletion or a.mlm or a.delete_one_word)


def _needs_vocabulary(name: str, tokens) -> None:
  if tokens is None or getattr(tokens, "vocab", True) is None:
    raise ShapeError(
      f"{name}: config.augment's discrete augmentations read the tokenizer's vocabulary (which "
      "pieces continue a word), and no tokenizer files were found: fetch them first "
      f"(huggingface-cli download {name} config.json vocab.txt tokenizer.json tokenizer_config.json)"
    )


def model(config: ml_collections.ConfigDict, *, abstract: bool = False, needs: objectives.Needs | None = None) -> Built:
  """The model a fresh run of ``config`` starts from: its weights, or (``abstract``) their shapes only.

  ``needs``: ``objectives.needs(config)``, resolved once by the caller (computed here when not given).
  Raises ``configuration.ConfigError`` if the config does not fit the model (``configuration.check_model``).
  """
  built = _model(config, abstract, needs or objectives.needs(config))
  configuration.check_model(config, built.spec)
  return built


def _model(config: ml_collections.ConfigDict, abstract: bool, needs: objectives.Needs) -> Built:
  """``model``, before the config is checked against the model's."""
  dtype = models.DTYPES[config.model.dtype]
  pooling = objectives.pooling_of(config)
  with_mlm = needs.token_loss is not None
  mlm_head = config.mlm.head if config.mlm.enabled else "tied"
  build = dict(
    dtype=dtype,
    gradient_checkpointing=config.model.gradient_checkpointing,
    with_mlm_head=with_mlm,
    mlm_head=mlm_head,
    attention_dropout_per_element=configuration.attention_dropout_per_element(config),
  )
  if config.model.init == "random":
    tokenizer = _tokenizer(config.model.tokenizer)
    source = f"random init ({config.model.tokenizer})"
    spec = models.build_spec(random_architecture(config, tokenizer), tokenizer, pooling, source=source, **build)
    return Built(
      spec, _abstract_params(spec, config.seed) if abstract else models.init_params(spec, config.seed), source
    )
  if not abstract:
    spec, params = models.load_pretrained(
      config.model.name,
      pooling,
      dropout=config.model.dropout,
      seed=config.seed,
      revision=config.model.revision or None,
      **build,
    )
    if spec.mlm is not None and not spec.mlm.pretrained:
      log.warning("%s has no masked-LM head; the MLM objective starts from a fresh one", config.model.name)
    return Built(spec, params, config.model.name)
  shape = model_shape(config.model.name, revision=config.model.revision or None, dropout=config.model.dropout)
  if _augments_tokens(config):
    _needs_vocabulary(config.model.name, shape.tokens)
  if with_mlm and (shape.tokens is None or shape.tokens.mask_token_id is None):
    raise ShapeError(
      f"{config.model.name}: the masked-LM objective needs the tokenizer's [MASK] and special ids, "
      "and no tokenizer files were found beside its config.json"
    )
  spec = models.build_spec(shape.hf_config, shape.tokens, pooling, source=config.model.name, **build)
  return Built(spec, _abstract_params(spec, config.seed), shape.source)


def complementary(
  config: ml_collections.ConfigDict,
  spec: models.ModelSpec | None = None,
  *,
  abstract: bool = False,
  needs: objectives.Needs | None = None,
) -> Built | None:
  """The frozen complementary model the config's method asks for (``objectives.EncoderNeeds``), or None.

  DCLR's (``dclr.complementary_model``) is embedded with the representation its threshold phi was tuned for: the
  official code's complementary model is an unsupervised SimCSE checkpoint run through BERT's pooler layer, which
  in SimCSE's released checkpoints holds the trained MLP. So a Hugging Face folder is embedded with its ``cls``
  (pooler layer), and a jaxcse workdir with its training pooler (``cls``: the MLP output), not its test pooler.
  GISTEmbed's guide (``gist.guide_model``) is embedded as it encodes: a workdir's test pooler, a folder's
  sentence-transformers pooling (else ``cls``).

  ``spec``, the trained model's, checks that the frozen model reads the same token ids (``check_complementary``).
  ``needs``: ``objectives.needs(config)``, resolved once by the caller (computed here when not given).
  """
  needs = needs or objectives.needs(config)
  if not needs.complementary:
    return None
  path, revision = needs.complementary_model, needs.complementary_revision or None
  as_trained = needs.complementary_embedding == "training"
  if not abstract:
    loaded = loading.load_model(path, revision=revision)
    frozen = loaded.spec
    if loaded.described and as_trained:
      frozen = dataclasses.replace(frozen, pooling=models.PoolerSpec(frozen.pooling.pooler))
    built = Built(frozen, loaded.params, path)
  else:
    resolved = _offline(path, revision)
    if resolved.workdir is not None:
      frozen = Workdir(resolved.workdir).model_spec()
      if as_trained:
        frozen = dataclasses.replace(frozen, pooling=models.PoolerSpec(frozen.pooling.pooler))
      built = Built(frozen, _abstract_params(frozen, 0), f"workdir {resolved.workdir}")
    else:
      shape = _shape(resolved, None)
      pooler = (st_format.read_pooler(shape.folder) if shape.folder else None) or "cls"
      frozen = models.build_spec(shape.hf_config, shape.tokens, models.PoolerSpec(pooler), source=path)
      built = Built(frozen, _abstract_params(frozen, 0), shape.source)
  # Its dropout, where on (DCLR as released), draws the mask the run's model draws: before the per-element default,
  # both shared it, and a run pinned to the shared mask must stay the run it was.
  built = dataclasses.replace(
    built, spec=built.spec.with_attention_dropout(configuration.attention_dropout_per_element(config))
  )
  if spec is not None:
    check_complementary(config, needs, spec, built.spec)
  return built


def _vocabulary(spec: models.ModelSpec) -> dict[str, int] | None:
  """The spec's tokenizer's vocabulary, or None when unknown (a published shape has only its special ids)."""
  tokenizer = spec.tokenizer
  if tokenizer is None or (isinstance(tokenizer, SpecialTokens) and tokenizer.vocab is None):
    return None
  return dict(tokenizer.get_vocab())


def check_complementary(
  config: ml_collections.ConfigDict, needs: objectives.Needs, spec: models.ModelSpec, frozen: models.ModelSpec
) -> None:
  """Raises ``ConfigError`` unless the frozen model can embed the trained model's token ids as its own text.

  It gets the batch's ids as they are (no retokenizing), so it needs the same vocabulary (where a vocabulary is
  not known, as for a published shape, the same vocabulary size and padding id) and at least
  ``data.max_seq_len`` positions. (sentence-transformers' GISTEmbedLoss retokenizes the decoded text for a guide
  with another vocabulary or a shorter length; jaxcse refuses it.)
  """
  field, name = needs.complementary_field, needs.complementary_model
  mine, theirs = _vocabulary(spec), _vocabulary(frozen)
  if mine is not None and theirs is not None:
    same = mine == theirs
  else:
    same = spec.hf_config.vocab_size == frozen.hf_config.vocab_size and getattr(
      spec.hf_config, "pad_token_id", None
    ) == getattr(frozen.hf_config, "pad_token_id", None)
  if not same:
    raise configuration.ConfigError(
      f"{field}: {name}'s vocabulary is not the trained model's ({spec.source or config.model.name}): it would "
      "read the batch's token ids as other words; choose a model with the same tokenizer"
    )
  if frozen.max_positions < config.data.max_seq_len:
    raise configuration.ConfigError(
      f"{field}: {name} embeds at most {frozen.max_positions} positions, fewer than data.max_seq_len="
      f"{config.data.max_seq_len}; set data.max_seq_len <= {frozen.max_positions} or choose another model"
    )


def augment_mlm(config: ml_collections.ConfigDict, spec: models.ModelSpec, *, abstract: bool = False) -> Built | None:
  """The frozen masked LM of ``config.augment.mlm`` (SimCSE's "MLM k%"), or None when unused.

  ``augment.mlm_model``, else ``model.name``: the starting encoder (not the params being trained) with its own
  pretrained (tied) MLM head, in the run's dtype. An input of the step, like DCLR's complementary model: no
  gradient, not saved.
  """
  if not config.augment.mlm:
    return None
  name = config.augment.mlm_model or config.model.name
  revision = None if config.augment.mlm_model else config.model.revision or None
  build = dict(dtype=models.DTYPES[config.model.dtype], with_mlm_head=True, mlm_head="tied")
  if abstract:
    shape = model_shape(name, revision=revision)
    _needs_vocabulary(name, shape.tokens)
    mlm_spec = models.build_spec(shape.hf_config, shape.tokens, models.PoolerSpec("avg"), source=name, **build)
    params, source = _abstract_params(mlm_spec, 0), shape.source
  else:
    mlm_spec, params = models.load_pretrained(name, models.PoolerSpec("avg"), revision=revision, **build)
    source = name
    if not mlm_spec.mlm.pretrained:
      raise configuration.ConfigError(
        f"augment.mlm: {name} has no pretrained masked-LM head to sample replacements "
        "from (set augment.mlm_model to a model that has one)"
      )
  if mlm_spec.tokenizer.get_vocab() != spec.tokenizer.get_vocab():
    raise configuration.ConfigError(
      f"augment.mlm: {name}'s vocabulary is not the trained model's: its samples would be other tokens"
    )
  return Built(mlm_spec, params, source)
