"""The probe SentEval scores transfer tasks with: its ``nhid=0`` PyTorch classifier (one linear layer, softmax
cross-entropy, the L2 penalty as the optimizer's weight decay, early stopping on a validation split), many problems
at once: ``jax.vmap`` over problems inside one ``jax.jit``, each with its own training rows, validation rows, L2
value, shuffling key and early stopping (a stopped problem's updates are masked out). ``transfer`` runs it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
  """SentEval's classifier settings (``params['classifier']`` and ``kfold``)."""

  optimizer: str  # "adam" or "rmsprop", with PyTorch's default hyperparameters.
  batch_size: int
  tenacity: int  # Validation rounds without improvement tolerated (SentEval never resets the count).
  epoch_size: int  # Passes over the training rows between two validation rounds.
  kfold: int
  max_epoch: int = 200  # Training stops once more than this many passes were made.


MODES = {
  "test": ProbeConfig(optimizer="adam", batch_size=64, tenacity=5, epoch_size=4, kfold=10),
  "dev": ProbeConfig(optimizer="rmsprop", batch_size=128, tenacity=3, epoch_size=2, kfold=5),
}


@dataclasses.dataclass
class Problems:
  """``P`` probe fits over one feature matrix, each with its own rows and L2 value.

  Attributes:
    train_rows: ``[P, T]`` int32 row indices of the features, padded past ``n_train``.
    n_train: ``[P]`` number of real entries of ``train_rows``.
    val_mask: ``[P, N]`` bool, the validation rows (early stopping and scoring) of each problem.
    l2: ``[P]`` float32 weight decay.
  """

  train_rows: np.ndarray
  n_train: np.ndarray
  val_mask: np.ndarray
  l2: np.ndarray

  @classmethod
  def build(cls, n_rows: int, train: Sequence[np.ndarray], val: Sequence[np.ndarray], l2: Sequence[float]) -> Problems:
    """From lists of train and validation row-index arrays (one per problem) over ``n_rows`` features."""
    if not (len(train) == len(val) == len(l2)) or not train:
      raise ValueError(f"need as many train sets, val sets and L2 values (>0); got {len(train)}, {len(val)}, {len(l2)}")
    width = max(len(t) for t in train)
    train_rows = np.zeros((len(train), width), np.int32)
    val_mask = np.zeros((len(train), n_rows), bool)
    for p, (t, v) in enumerate(zip(train, val)):
      if len(t) == 0 or len(v) == 0:
        raise ValueError(f"problem {p} has {len(t)} training and {len(v)} validation rows; both must be > 0")
      train_rows[p, : len(t)] = t
      val_mask[p, v] = True
    return cls(train_rows, np.asarray([len(t) for t in train], np.int32), val_mask, np.asarray(l2, np.float32))


def _optimizer(name: str, l2: jax.Array) -> optax.GradientTransformation:
  # PyTorch's weight_decay is an L2 term added to the gradient before the adaptive scaling, hence the order.
  # Learning rates and constants are PyTorch's defaults (SentEval passes none).
  if name == "adam":
    return optax.chain(optax.add_decayed_weights(l2), optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8))
  if name == "rmsprop":
    return optax.chain(optax.add_decayed_weights(l2), optax.rmsprop(1e-2, decay=0.99, eps=1e-8, eps_in_sqrt=False))
  raise ValueError(f"unknown optimizer {name!r}; choose adam or rmsprop")


class _Problem(NamedTuple):
  """One probe's data: the shared features and labels, its training rows and its validation rows."""

  features: jax.Array  # [N, D] float32.
  labels: jax.Array  # [N] int32.
  rows: jax.Array  # [W] int32: its training rows, then padding (W: the widest problem's count).
  n_rows: jax.Array  # (): how many of ``rows`` are real.
  val: jax.Array  # [N] bool: its validation rows.


class _ProbeState(NamedTuple):
  """The loop state of one probe's training: SentEval's early stopping on validation accuracy."""

  params: dict  # {"w": [D, C], "b": [C]}.
  opt_state: Any
  key: jax.Array  # Shuffles the next pass.
  best_params: dict  # The params after the best validation round so far.
  best_correct: jax.Array  # (): that round's correct validation rows (-1 before any round).
  bad_rounds: jax.Array  # (): rounds without improvement so far (never reset, as SentEval).
  stop: jax.Array  # (): bool, set by the round that stops training.
  epoch: jax.Array  # (): passes trained.


def _probe_loss(params: dict, x: jax.Array, y: jax.Array, valid: jax.Array) -> jax.Array:
  """Mean cross-entropy over the batch's real rows (PyTorch's CrossEntropyLoss reduction)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(x @ params["w"] + params["b"], y)
  return jnp.sum(ce * valid) / jnp.maximum(jnp.sum(valid), 1)


def _train_pass(
  state: _ProbeState, problem: _Problem, opt: optax.GradientTransformation, config: ProbeConfig
) -> _ProbeState:
  """One pass over the problem's training rows in a fresh shuffle, ``config.batch_size`` rows per update."""
  width = problem.rows.shape[0]
  key, sub = jax.random.split(state.key)
  # A uniform shuffle of the real rows, padding last: sort random keys, padding keyed +inf.
  in_train = jnp.arange(width) < problem.n_rows
  order = jnp.argsort(jnp.where(in_train, jax.random.uniform(sub, (width,)), jnp.inf))

  def update(s, params_and_opt):
    params, opt_state = params_and_opt
    pos = s * config.batch_size + jnp.arange(config.batch_size)
    valid = pos < problem.n_rows
    batch = problem.rows[order[jnp.minimum(pos, width - 1)]]
    grads = jax.grad(_probe_loss)(params, problem.features[batch], problem.labels[batch], valid)
    updates, new_opt_state = opt.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    # The last pass of a problem with fewer rows than the widest one has empty steps: no update at all.
    keep = jnp.any(valid)
    return jax.tree.map(lambda a, b: jnp.where(keep, a, b), (new_params, new_opt_state), (params, opt_state))

  params, opt_state = jax.lax.fori_loop(0, -(-width // config.batch_size), update, (state.params, state.opt_state))
  return state._replace(params=params, opt_state=opt_state, key=key)


def _validation_round(
  state: _ProbeState, problem: _Problem, opt: optax.GradientTransformation, config: ProbeConfig
) -> _ProbeState:
  """``config.epoch_size`` passes, then SentEval's validation and early-stopping rule."""
  state = jax.lax.fori_loop(0, config.epoch_size, lambda _, st: _train_pass(st, problem, opt, config), state)
  pred = jnp.argmax(problem.features @ state.params["w"] + state.params["b"], axis=-1)
  correct = jnp.sum((pred == problem.labels) & problem.val)
  improved = correct > state.best_correct
  # SentEval's rule: a round without improvement stops training once `tenacity` such rounds came before it; the
  # count is never reset.
  return state._replace(
    best_params=jax.tree.map(lambda a, b: jnp.where(improved, a, b), state.params, state.best_params),
    best_correct=jnp.maximum(state.best_correct, correct),
    bad_rounds=state.bad_rounds + (~improved).astype(jnp.int32),
    stop=~improved & (state.bad_rounds >= config.tenacity),
    epoch=state.epoch + config.epoch_size,
  )


def _fit_one(key: jax.Array, problem: _Problem, weight_decay: jax.Array, *, nclasses: int, config: ProbeConfig):
  """One probe, trained until SentEval's early stopping: ``(best params, best correct count, rounds)``."""
  dim = problem.features.shape[1]
  init_key, key = jax.random.split(key)
  # nn.Linear's default initialisation: U(-1/sqrt(D), 1/sqrt(D)) for weight and bias.
  bound = 1.0 / np.sqrt(dim)
  wkey, bkey = jax.random.split(init_key)
  params = {
    "w": jax.random.uniform(wkey, (dim, nclasses), jnp.float32, -bound, bound),
    "b": jax.random.uniform(bkey, (nclasses,), jnp.float32, -bound, bound),
  }
  opt = _optimizer(config.optimizer, weight_decay)
  start = _ProbeState(
    params=params,
    opt_state=opt.init(params),
    key=key,
    best_params=params,
    best_correct=jnp.int32(-1),
    bad_rounds=jnp.int32(0),
    stop=jnp.bool_(False),
    epoch=jnp.int32(0),
  )
  end = jax.lax.while_loop(
    lambda st: ~st.stop & (st.epoch <= config.max_epoch), lambda st: _validation_round(st, problem, opt, config), start
  )
  return end.best_params, end.best_correct, end.epoch // config.epoch_size


@functools.partial(jax.jit, static_argnames=("nclasses", "config"))
def _fit_problems(
  features: jax.Array,
  labels: jax.Array,
  keys: jax.Array,
  train_rows: jax.Array,
  n_train: jax.Array,
  val_mask: jax.Array,
  l2: jax.Array,
  *,
  nclasses: int,
  config: ProbeConfig,
):
  """Trains every problem with early stopping; returns best params and best validation correct counts.

  Args:
    features: ``[N, D]`` float32, shared by all problems.
    labels: ``[N]`` int32.
    keys, train_rows, n_train, val_mask, l2: per problem (leading axis ``P``), see ``Problems``.

  Returns:
    ``({"w": [P, D, C], "b": [P, C]}, best_correct [P], rounds [P])``: the parameters after the validation round
    with the most correct validation rows (the first such round), that count, and the rounds trained.
  """

  def fit(key, rows, n_rows, val, weight_decay):
    return _fit_one(key, _Problem(features, labels, rows, n_rows, val), weight_decay, nclasses=nclasses, config=config)

  return jax.vmap(fit)(keys, train_rows, n_train, val_mask, l2)


def fit_probes(
  features: np.ndarray, labels: np.ndarray, problems: Problems, *, nclasses: int, config: ProbeConfig, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
  """Fits all ``problems`` at once (vmap in one jit); deterministic given ``seed``.

  Args:
    features: ``[N, D]`` frozen embeddings (or pair features).
    labels: ``[N]`` integer labels in ``[0, nclasses)``.

  Returns:
    ``(params, val_accuracy)``: ``{"w": [P, D, C], "b": [P, C]}`` of each problem's best validation round, and that
    round's validation accuracy ``[P]`` (a fraction, as SentEval's ``clf.score`` on the validation rows).
  """
  labels = np.asarray(labels, np.int32)
  if labels.min() < 0 or labels.max() >= nclasses:
    raise ValueError(f"labels must lie in [0, {nclasses}), got range [{labels.min()}, {labels.max()}]")
  keys = jax.random.split(jax.random.PRNGKey(seed), len(problems.l2))
  params, best, _ = _fit_problems(
    jnp.asarray(features, jnp.float32),
    jnp.asarray(labels),
    keys,
    jnp.asarray(problems.train_rows),
    jnp.asarray(problems.n_train),
    jnp.asarray(problems.val_mask),
    jnp.asarray(problems.l2),
    nclasses=nclasses,
    config=config,
  )
  params = jax.tree.map(np.asarray, params)
  return params, np.asarray(best) / problems.val_mask.sum(axis=1)


def predict(params: dict[str, np.ndarray], features: np.ndarray) -> np.ndarray:
  """Class predictions ``[P, n]`` of each problem's probe for ``features`` ``[n, D]``."""
  logits = np.einsum("nd,pdc->pnc", np.asarray(features, np.float32), params["w"]) + params["b"][:, None, :]
  return np.argmax(logits, axis=-1)
