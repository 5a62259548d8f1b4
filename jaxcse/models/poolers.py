"""Poolers: how a backbone's token states become one sentence vector, by name.

Every pooler jaxcse knows is one entry of this registry; the model, the
evaluation, the export to sentence-transformers and the config check all look
names up here, so adding a pooler is one entry (plus its sentence-transformers
module chain in ``st_format`` if it should export).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse.core.registry import Registry


class Tokens(Protocol):
  """Which token states are each text's: a pooler reads a text's states only through these two."""

  def first(self, h: jax.Array) -> jax.Array:
    """Each text's first token's state (``[CLS]``, ``<s>``): ``[texts, hidden]``."""

  def mean(self, h: jax.Array) -> jax.Array:
    """The mean of each text's token states: ``[texts, hidden]`` (0 for a text with no tokens)."""


@dataclasses.dataclass(frozen=True)
class PaddedTokens:
  """A padded batch's texts: row ``i`` of ``h`` ``[batch, len, hidden]`` is text ``i``, its tokens where ``mask``
  ``[batch, len]`` is nonzero. (A packed batch's: ``packing.PackedTokens``.)"""

  mask: jax.Array

  def first(self, h: jax.Array) -> jax.Array:
    return h[:, 0]

  def mean(self, h: jax.Array) -> jax.Array:
    mask = self.mask[..., None].astype(h.dtype)
    return (h * mask).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)


@dataclasses.dataclass(frozen=True)
class Pooler:
  """One way to pool ``[batch, len, hidden]`` token states into ``[batch, hidden]``.

  Attributes:
    name: the name configs and the command line use.
    fn: ``(tokens, last_hidden, hidden_states, pooler_output) -> [texts, hidden]``; ``tokens`` (``Tokens``)
      reads each text's states out of the backbone's (a padded or a packed batch alike); ``hidden_states`` is
      the backbone's tuple (embedding output first, then
      one entry per layer), None unless ``needs_hidden_states``;
      ``pooler_output`` is the backbone's own pooler layer (BERT: Linear + tanh
      on [CLS], trained by next-sentence prediction).
    needs_hidden_states: the backbone must return every layer's output.
    needs_pooler_output: the backbone must have its pooler layer.
    has_mlp: SimCSE's MLP (Linear(H, H) + tanh) follows the pooled vector.
    exportable: a sentence-transformers module chain computes it (``st_format``).
    doc: one line for the README and ``--help``.
  """

  name: str
  fn: Callable[[Tokens, jax.Array, Sequence[jax.Array] | None, jax.Array | None], jax.Array]
  needs_hidden_states: bool = False
  needs_pooler_output: bool = False
  has_mlp: bool = False
  exportable: bool = True
  doc: str = ""


_REGISTRY: Registry[Pooler] = Registry(
  "pooler", lambda pooler: pooler.name, "unknown pooler {name!r}; choose one of {known}"
)
register, names, get = _REGISTRY.register, _REGISTRY.names, _REGISTRY.get


register(
  Pooler(
    "cls",
    lambda tokens, last, hs, po: tokens.first(last),
    has_mlp=True,
    doc="[CLS] state through a Linear(H, H) + tanh head (SimCSE's MLP)",
  )
)
register(Pooler("cls_before_pooler", lambda tokens, last, hs, po: tokens.first(last), doc="[CLS] state, no head"))
register(Pooler("avg", lambda tokens, last, hs, po: tokens.mean(last), doc="mask-weighted mean of the last layer"))
register(
  Pooler(
    "avg_top2",
    lambda tokens, last, hs, po: tokens.mean((hs[-1] + hs[-2]) / 2.0),
    needs_hidden_states=True,
    doc="mean of the last two layers, then masked mean",
  )
)
# "First-last" has two readings. SimCSE's current code averages hidden_states[1] (the first layer's output) with the
# last layer; the SimCSE paper's table and the MixCSE and DCLR code average hidden_states[0] (the embedding output).
register(
  Pooler(
    "avg_first_last",
    lambda tokens, last, hs, po: tokens.mean((hs[1] + hs[-1]) / 2.0),
    needs_hidden_states=True,
    doc="mean of the first layer's output (hidden_states[1], SimCSE's current code) and the last",
  )
)
register(
  Pooler(
    "avg_embeddings_last",
    lambda tokens, last, hs, po: tokens.mean((hs[0] + hs[-1]) / 2.0),
    needs_hidden_states=True,
    doc="mean of the embedding output (hidden_states[0]: SimCSE's paper, MixCSE's and DCLR's code) and the last layer",
  )
)
register(
  Pooler(
    "bert_pooler",
    lambda tokens, last, hs, po: po,
    needs_pooler_output=True,
    doc="the backbone's own pooler layer on [CLS] (BERT's NSP Linear + tanh; DCLR's dev evaluation)",
  )
)
register(
  Pooler(
    "bert_pooler_mlp",
    lambda tokens, last, hs, po: po,
    has_mlp=True,
    needs_pooler_output=True,
    exportable=False,
    doc="the backbone's pooler layer, then SimCSE's MLP (DCLR's released training forward)",
  )
)


def exportable(name: str) -> bool:
  return get(name).exportable


def pool(
  name: str,
  tokens: Tokens | jax.Array,
  last_hidden: jax.Array,
  hidden_states: Sequence[jax.Array] | None = None,
  pooler_output: jax.Array | None = None,
) -> jax.Array:
  """Pools token states into one vector per text (before any MLP): ``[batch, hidden]`` of a padded batch's
  ``[batch, len, hidden]`` (``tokens`` its attention mask, or a ``PaddedTokens``), or ``[texts, hidden]`` of a
  packed batch's rows (``tokens`` a ``packing.PackedTokens``)."""
  if isinstance(tokens, (jax.Array, np.ndarray)):
    tokens = PaddedTokens(tokens)
  pooler = get(name)
  if pooler.needs_hidden_states and hidden_states is None:
    raise ValueError(f"pooler {name!r} needs the backbone's hidden_states")
  if pooler.needs_pooler_output and pooler_output is None:
    raise ValueError(f"pooler {name!r} needs the backbone's pooler layer (a model without one cannot use it)")
  return pooler.fn(tokens, last_hidden, hidden_states, pooler_output)
