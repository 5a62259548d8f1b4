r"""Matryoshka representation learning: one loss over nested prefixes of the embedding, so a prefix is an embedding.

Kusupati et al. 2022 (https://arxiv.org/abs/2205.13147), as sentence-transformers 6's ``MatryoshkaLoss`` does it:
the method's loss is applied to the first ``d`` dimensions of every embedding, L2-normalised, for each ``d`` of
``dims``, and the results are summed with ``weights``. Any of jaxcse's sentence losses can be wrapped (SimCSE,
MixCSE, DCLR, mnrl, cosent): the wrapper sits where the step applies the method's loss to the whole batch's
embeddings (``train_step.StepLoss.sentence``), so the backbone runs once, and GradCache (which applies that loss
to the cached embeddings of every chunk) gets the truncated losses without a second pass, as s-t's
``CachedLossDecorator`` does.

``config.matryoshka`` (configs/base.py): ``dims`` (comma-separated, e.g. ``"384,256,128,64"``; empty: off),
``weights`` (comma-separated, one per dim; empty: all 1), ``n_dims_per_step`` (-1: every dim each step; ``n``: a
random ``n`` of them, drawn from the step's method key). At test time ``Encoder(truncate_dim=d)``,
``jaxcse-encode --truncate_dim d`` and ``jaxcse-evaluate --truncate_dim d`` use the prefix (docs/own_data.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections

# sentence-transformers normalises with torch's F.normalize: x / max(||x||, eps), eps 1e-12.
NORM_EPS = 1e-12


def shrink(z: jax.Array, dim: int) -> jax.Array:
  """The first ``dim`` entries of the last axis, L2-normalised (s-t's ``matryoshka.shrink``): ``[..., dim]``."""
  prefix = z[..., :dim]
  norm = jnp.linalg.norm(prefix, axis=-1, keepdims=True)
  return prefix / jnp.maximum(norm, NORM_EPS)


@dataclasses.dataclass(frozen=True)
class Matryoshka:
  """Nested prefix sizes and their weights, largest first (s-t sorts them so)."""

  dims: tuple[int, ...]
  weights: tuple[float, ...]
  n_dims_per_step: int = -1  # -1 or >= len(dims): every dim each step.

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> Matryoshka | None:
    """The config's ``matryoshka`` block parsed and checked (``ValueError`` naming the field); None when off.

    An older workdir's config.json has no such block: off.
    """
    block = config.get("matryoshka")
    if block is None or not str(block.get("dims", "")).strip():
      return None
    dims = _numbers(block.dims, int, "matryoshka.dims")
    if any(d < 1 for d in dims):
      raise ValueError(f"matryoshka.dims must be positive integers, not {block.dims!r}")
    if len(set(dims)) != len(dims):
      raise ValueError(f"matryoshka.dims names a dimension twice: {block.dims!r}")
    weights = (
      _numbers(block.weights, float, "matryoshka.weights")
      if str(block.get("weights", "")).strip()
      else (1.0,) * len(dims)
    )
    if len(weights) != len(dims):
      raise ValueError(f"matryoshka.weights has {len(weights)} values for {len(dims)} matryoshka.dims")
    if any(not (w >= 0 and w < float("inf")) for w in weights):
      raise ValueError(f"matryoshka.weights must be finite and >= 0, not {block.weights!r}")
    if not any(weights):  # The loss would be 0 at every step: a run that trains nothing and serves a "best".
      raise ValueError(
        f"matryoshka.weights are all 0: {block.weights!r} trains nothing (give one dim a positive weight, or leave "
        "matryoshka.weights empty for all 1)"
      )
    n = block.get("n_dims_per_step", -1)
    if isinstance(n, bool) or not isinstance(n, int) or not (n == -1 or n >= 1):
      raise ValueError(f"matryoshka.n_dims_per_step must be -1 (every dim) or a positive integer, not {n!r}")
    ordered = sorted(zip(dims, weights), key=lambda pair: -pair[0])
    return cls(tuple(d for d, _ in ordered), tuple(w for _, w in ordered), n)

  def check_width(self, hidden: int) -> None:
    """``ValueError`` when a dim exceeds the model's embedding width ``hidden``."""
    if max(self.dims) > hidden:
      raise ValueError(f"matryoshka.dims {max(self.dims)} is wider than the model's {hidden}-dimensional embeddings")

  @property
  def samples(self) -> bool:
    return 0 < self.n_dims_per_step < len(self.dims)

  def loss(
    self, loss_fn: Callable[[jax.Array], tuple[jax.Array, dict]], z: jax.Array, key: jax.Array | None = None
  ) -> tuple[jax.Array, dict]:
    """``sum_d w_d * loss_fn(shrink(z, d))`` and metrics.

    Args:
      loss_fn: the method's loss of ``[batch, views, d]`` embeddings: ``(scalar, metrics)``.
      z: ``[batch, views, hidden]``, the whole batch's embeddings.
      key: draws the ``n_dims_per_step`` dims of this step (needed only then); the others get weight 0.

    Returns:
      The weighted sum, and metrics: ``matryoshka_loss_<d>`` for every dim (also those not drawn), and the
      method's own metrics at the largest dim.
    """
    active = jnp.ones(len(self.dims), z.dtype)
    if self.samples:
      chosen = jax.random.choice(key, len(self.dims), (self.n_dims_per_step,), replace=False)
      active = jnp.zeros(len(self.dims), z.dtype).at[chosen].set(1)
    total, metrics = 0.0, {}
    for i, (dim, weight) in enumerate(zip(self.dims, self.weights)):
      value, extra = loss_fn(shrink(z, dim))
      total = total + active[i] * weight * value
      metrics[f"matryoshka_loss_{dim}"] = value
      if i == 0:
        metrics.update(extra)
    return total, metrics


def _numbers(text, kind: type, field: str) -> tuple:
  """Comma-separated numbers (a list or tuple is taken as it is): ``ValueError`` naming ``field`` otherwise."""
  items: Sequence = text if isinstance(text, (list, tuple)) else [p for p in str(text).split(",") if p.strip()]
  try:
    values = tuple(kind(item) for item in items)
  except (TypeError, ValueError):
    raise ValueError(f"{field} must be comma-separated {kind.__name__}s, not {text!r}") from None
  if kind is int and any(isinstance(item, float) and not float(item).is_integer() for item in items):
    raise ValueError(f"{field} must be comma-separated ints, not {text!r}")
  return values
