"""The encoder families jaxcse implements, by Hugging Face ``model_type``: modules, checkpoint names, export names.

Adding a family is one ``register(Family(...))`` with its modules (the backbone and masked-LM interfaces of
``bert.BertModel`` / ``bert.BertForMaskedLM``), parameter names that follow PyTorch's (``weights.py``), and the
config fields its dropout lives in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn

from jaxcse.core.registry import Registry
from jaxcse.models import bert, modernbert


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
  """One encoder architecture.

  Attributes:
    model_type: the Hugging Face ``config.model_type``.
    backbone: the encoder module: ``(config, dtype, gradient_checkpointing, add_pooling_layer)``, called as
      ``(input_ids, attention_mask, *, deterministic, output_hidden_states) -> BackboneOutput``.
    masked_lm: the encoder with its MLM head: ``(config, dtype, gradient_checkpointing, tied)``, called as
      ``(input_ids, attention_mask, positions=None, *, deterministic) -> logits``; its ``backbone_prefix`` names
      the encoder's child and its checkpoint prefix.
    architecture, masked_lm_architecture: transformers' PyTorch class names, written into exported configs.
    has_pooler: the encoder has BERT's NSP pooler layer (``pooler_output``).
    dropout_fields: the config fields a dropout override (SimCSE's 0.1) sets.
    heads: checkpoint name prefixes of heads other than the encoder's (masked-LM, NSP, classifiers): ignored
      unless the masked-LM head is asked for.
    position_offset: position ids start after this many reserved rows of the position table (RoBERTa's
      ``pad_token_id + 1``): the longest input is ``max_position_embeddings`` minus it.
    shares_attention_dropout: its modules can share one attention-dropout mask across the batch when built with
      ``shared_attention_dropout=True`` (BERT's, as transformers' Flax BERT did; off by default); False: they
      always draw one per element, as PyTorch (ModernBERT's).
  """

  model_type: str
  backbone: type[nn.Module]
  masked_lm: type[nn.Module]
  architecture: str
  masked_lm_architecture: str
  has_pooler: bool
  dropout_fields: tuple[str, ...]
  heads: tuple[str, ...]
  position_offset: Any = 0  # An int, or a function of the config.
  shares_attention_dropout: bool = False

  def attention_dropout_options(self, per_element: bool) -> dict[str, bool]:
    """The module keyword that draws attention dropout per element (PyTorch's way), where the family has one."""
    return {"shared_attention_dropout": not per_element} if self.shares_attention_dropout else {}

  def set_dropout(self, config: Any, rate: float) -> None:
    for field in self.dropout_fields:
      setattr(config, field, rate)

  def max_positions(self, config: Any) -> int:
    offset = self.position_offset(config) if callable(self.position_offset) else self.position_offset
    return config.max_position_embeddings - offset


_REGISTRY: Registry[Family] = Registry(
  "model type",
  lambda family: family.model_type,
  "model type {name!r} is not supported by jaxcse; supported: {known}",
  sort=True,
)
register, get, names = _REGISTRY.register, _REGISTRY.get, _REGISTRY.names


_BERT_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob")
_BERT_HEADS = ("cls.", "lm_head.", "classifier.", "qa_outputs.")
register(
  Family(
    model_type="bert",
    backbone=bert.BertModel,
    masked_lm=bert.BertForMaskedLM,
    architecture="BertModel",
    masked_lm_architecture="BertForMaskedLM",
    has_pooler=True,
    dropout_fields=_BERT_DROPOUT,
    heads=_BERT_HEADS,
    shares_attention_dropout=True,
  )
)
for _type, _name in (("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta")):
  register(
    Family(
      model_type=_type,
      backbone=bert.BertModel,
      masked_lm=bert.RobertaForMaskedLM,
      architecture=f"{_name}Model",
      masked_lm_architecture=f"{_name}ForMaskedLM",
      has_pooler=True,
      dropout_fields=_BERT_DROPOUT,
      heads=_BERT_HEADS,
      position_offset=lambda config: config.pad_token_id + 1,
      shares_attention_dropout=True,
    )
  )
register(
  Family(
    model_type="modernbert",
    backbone=modernbert.ModernBertModel,
    masked_lm=modernbert.ModernBertForMaskedLM,
    architecture="ModernBertModel",
    masked_lm_architecture="ModernBertForMaskedLM",
    has_pooler=False,
    dropout_fields=("embedding_dropout", "attention_dropout", "mlp_dropout"),
    heads=("head.", "decoder.", "classifier."),
  )
)
