"""Word-deletion step check, jaxcse's side: the deleted views, the words deleted, one step's loss and gradient.

Issue 69 item 7. At the tables' budget the official code with word deletion 10% scored 0.71 STS avg below jaxcse
in 5 of 5 seeds (README, "The official code at the tables' budget: outcome"); this check asks whether the deleted
view is encoded as the official code encodes it, deterministically: dropout 0, float64.

For each SEED and STEP: jaxcse's own loader's batch STEP of SEED (``data.Batches``, as the study's runs and
``jaxcse_sentences.py``), the step the study's ``mask/word_deletion10-lr1e-3-seedS`` run trains with (its config,
checked against the committed ``config.json``, less dropout, in float64) at ``state.step = STEP``, so that the
words deleted are the ones that run deleted at that step. From the raw encoder (the one-step comparison: what the
deleted view does to the loss and gradient is what is asked, not where 250 steps lead):

- the loss and the gradient of that step (``train_step.make_train_step`` with an optimizer that keeps the gradient
  in its state and does not move the parameters: the step's own gradient, exactly, through its own augmentation,
  loss and keys);
- the second view the step made, recomputed outside it with the step's augmentation key (``augment.delete_words``
  with ``split(fold_in(fold_in(key(seed), step), tag), 4)[1]``, as ``augment.SecondView`` splits it), and checked
  equal to what the step's own ``_second_view`` gives;
- which of each row's words were deleted (jaxcse's word indices, from ``augment.words`` and the same choice as
  ``delete_words`` makes), so the official side can delete the same words through its own code path.

Arrays are saved under PyTorch names (``loop_check_jaxcse.torch_named``), float64.

  PYTHONPATH=JAXCSE JAXCSE_DATA_DIR=DATA python word_deletion_step_jaxcse.py SEEDS STEPS OUT.npz  (e.g. 1,2,3 0,1)
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import data as data_lib
from jaxcse import models
from jaxcse.training import augment, configured
from jaxcse.training import train_step as step_lib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_check_jaxcse  # noqa: E402  (beside this file: the regime's config and the PyTorch names)

FRACTION = 0.1
RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "paper_ablations", "runs", "mask")


def study_config(seed: int):
  """The config of ``mask/word_deletion10-lr1e-3-seedS`` (the per-element mask stage), dropout 0, float64."""
  config = loop_check_jaxcse.regime_config("float64")
  config.augment.word_deletion = FRACTION
  config.model.attention_dropout_per_element = True  # the stage's mask (no effect at dropout 0; set as the run's)
  config.seed = seed
  committed = os.path.join(RUNS, f"word_deletion10-lr1e-3-seed{seed}", "config.json")
  if os.path.exists(committed):  # Every field the step reads, as the run had it (dropout and dtype aside).
    with open(committed) as f:
      run = json.load(f)
    for section, field in [
      ("augment", None),
      ("loss", None),
      ("model", "pooler"),
      ("model", "mlp_only_train"),
      ("model", "name"),
      ("data", "max_seq_len"),
      ("train", "batch_size"),
      ("seed", None),
    ]:
      ours = config[section] if field is None else config[section][field]
      ours = ours.to_dict() if hasattr(ours, "to_dict") else ours
      theirs = run[section] if field is None else run[section][field]
      if isinstance(theirs, dict):  # Fields added since the run (e.g. crop_before_truncation) are off by default.
        shared = set(theirs) & set(ours)
        ours, theirs = {k: ours[k] for k in shared}, {k: theirs[k] for k in shared}
      if ours != theirs:
        raise SystemExit(f"{committed}: {section}.{field or ''} is {theirs!r}, this check uses {ours!r}")
  return config


class GradientKeeper:
  """An optax-like transformation whose state is the last gradient and whose updates are 0 (params unchanged)."""

  @staticmethod
  def init(params):
    return jax.tree.map(jnp.zeros_like, params)

  @staticmethod
  def update(grads, state, params=None):
    return jax.tree.map(jnp.zeros_like, grads), grads


def deleted_words(key, ids, mask, pieces: augment.WordPieces):
  """``(view ids, view mask, deleted [rows, len] bool over word slots, num_words [rows])``, as ``delete_words``."""
  _, _, num_words = augment.words(ids, mask, pieces)
  wanted = augment.share_of_words(FRACTION, num_words)
  count = jnp.clip(wanted, 0, jnp.maximum(num_words - 1, 0))
  chosen = augment._choose_words(key, num_words, count, ids.shape[1])
  view_ids, view_mask = augment.delete_words(key, ids, mask, pieces=pieces, fraction=FRACTION)
  return view_ids, view_mask, chosen, num_words


def main(seeds: str, steps: str, out_npz: str) -> None:
  jax.config.update("jax_enable_x64", True)  # before any array is made
  models.DTYPES["float64"] = jnp.float64  # this check only: the trainer offers float32/bf16/fp16
  seeds_, steps_ = [int(s) for s in seeds.split(",")], [int(s) for s in steps.split(",")]
  built = configured.model(study_config(seeds_[0]))
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), built.params)
  pieces = augment.WordPieces.from_tokenizer(built.spec.tokenizer)
  corpus = data_lib.load_corpus(loop_check_jaxcse.regime_config("float64").data.train, skip_empty_lines=True)
  out: dict[str, np.ndarray] = {f"params0/{k}": v for k, v in loop_check_jaxcse.torch_named(params).items()}
  texts, lines = [], []
  for seed in seeds_:
    config = study_config(seed)
    keeper = GradientKeeper()
    step = jax.jit(step_lib.make_train_step(config, built.spec, keeper))
    second_view = step_lib._second_view(config, built.spec, None)
    batches = data_lib.Batches(corpus, built.spec.tokenizer, batch_size=64, max_seq_len=32, seed=seed)
    for k in steps_:
      batch = {name: jnp.asarray(v) for name, v in batches.batch(k).items()}
      state = step_lib.TrainState(step=jnp.asarray(k, jnp.int32), params=params, opt_state=keeper.init(params))
      moved, metrics = step(state, batch)
      grads = moved.opt_state
      unused = [float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["backbone"]["pooler"])]
      assert max(unused) == 0.0, f"BERT's pooler layer got a gradient under the avg pooler: {unused}"
      # The augmentation key as the step derives it, and the deletion's own key as SecondView splits it.
      step_key = jax.random.fold_in(jax.random.key(seed), k)
      aug_key = jax.random.fold_in(step_key, step_lib._AUGMENT_KEY_TAG)
      k_deletion = jax.random.split(aug_key, 4)[1]
      ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
      view_ids, view_mask, chosen, num_words = deleted_words(k_deletion, ids, mask, pieces)
      stepped = second_view(batch, aug_key, None)  # what the step's own augmentation makes of this batch
      assert np.array_equal(stepped["input_ids"][:, 1], view_ids), "the recomputed view is not the step's"
      assert np.array_equal(stepped["attention_mask"][:, 1], view_mask), "the recomputed mask is not the step's"
      assert np.array_equal(stepped["input_ids"][:, 0], ids), "the step changed the first view"
      tag = f"s{seed}k{k}"
      out[f"{tag}/loss"] = np.asarray(metrics["loss"], np.float64)
      out[f"{tag}/input_ids"] = np.asarray(jnp.stack([ids, view_ids], axis=1))
      out[f"{tag}/attention_mask"] = np.asarray(jnp.stack([mask, view_mask], axis=1))
      out[f"{tag}/deleted"] = np.asarray(chosen)
      out[f"{tag}/num_words"] = np.asarray(num_words)
      out.update({f"{tag}/grad/{n}": v for n, v in loop_check_jaxcse.torch_named(grads).items()})
      texts += [corpus.columns["sent0"][r] for r in batches.indices(k)]
      removed = np.asarray(chosen).sum(axis=1)
      lines.append(
        f"jaxcse seed {seed} step {k}: loss {float(metrics['loss']):.15f}, gradient norm "
        f"{float(metrics['grad_norm']):.12f}, dtype {metrics['loss'].dtype}; words deleted per row "
        f"{ {int(a): int(b) for a, b in zip(*np.unique(removed, return_counts=True))} }"
      )
  np.savez(out_npz, order=np.array([f"s{s}k{k}" for s in seeds_ for k in steps_]), texts=np.array(texts), **out)
  print("\n".join(lines))


if __name__ == "__main__":
  main(*sys.argv[1:])
