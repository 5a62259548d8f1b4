"""Dropout check: the first step's loss under dropout 0.1, over many masks, jaxcse vs the official code.

The loop check (loop_check.txt) compares everything deterministic with dropout off; dropout masks cannot be made
equal across JAX and torch. What can be compared is their effect's distribution: on the same batch (jaxcse's
batch 0 of seed 1) from the raw encoder, the InfoNCE loss before any update, with dropout 0.1 on, over N
independent masks. Wrong dropout (e.g. one mask shared by both views, or attention dropout missing) would move
this loss far outside the Monte-Carlo error.

  jaxcse side:  PYTHONPATH=. python dropout_check.py jaxcse|jaxcse_per_element_attention_mask BATCHES.npz N OUT.json
  official:     (cd SIMCSE_CHECKOUT && python dropout_check.py official BATCHES.npz N OUT.json ENCODER [ATTENTION_P])
  compare:      python dropout_check.py compare JAXCSE.json OFFICIAL.json
"""

import json
import os
import sys

import numpy as np


def jaxcse_losses(batches_npz: str, n: int, per_element_attention_mask: bool = False) -> list[float]:
  """``per_element_attention_mask``: a diagnostic: jaxcse's model with the attention-weights dropout mask drawn per
  element (flax's ``broadcast_dropout=False``: per sentence, head, query and key, as torch draws it) instead of
  jaxcse's ``broadcast_dropout=True`` (one [query, key] mask per layer, shared by every sentence and head, so the two
  views of a sentence get the same attention mask)."""
  import jax
  import jax.numpy as jnp
  import optax

  from jaxcse.training import configured
  from jaxcse.training import train_step as step_lib
  from jaxcse.models import bert

  if per_element_attention_mask:
    weights_fn = bert.dot_product_attention_weights
    bert.dot_product_attention_weights = lambda *a, **k: weights_fn(*a, **{**k, "broadcast_dropout": False})
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from loop_check_jaxcse import regime_config

  config = regime_config("float32")
  config.model.dropout = 0.1
  built = configured.model(config)
  raw = np.load(batches_npz)
  batch = {"input_ids": jnp.asarray(raw["input_ids"][0]), "attention_mask": jnp.asarray(raw["attention_mask"][0])}
  passthrough = optax.GradientTransformation(lambda p: optax.EmptyState(), lambda g, s, p=None: (g, s))
  step = jax.jit(step_lib.make_train_step(config, built.spec, passthrough))
  out = []
  for k in range(n):  # the step number sets the dropout key (fold_in(key(seed), step)): one mask set per k
    state = step_lib.TrainState(step=jnp.int32(k), params=built.params, opt_state=optax.EmptyState())
    out.append(float(step(state, batch)[1]["loss"]))
  return out


def official_losses(batches_npz: str, n: int, encoder: str, attention_dropout: float | None = None) -> list[float]:
  """``attention_dropout``: a diagnostic override of the attention-weights dropout (default: the encoder's 0.1)."""
  import torch
  from transformers import AutoConfig

  sys.path.insert(0, os.getcwd())
  from simcse.models import BertForCL
  from train import ModelArguments

  config = AutoConfig.from_pretrained(encoder)
  assert config.hidden_dropout_prob == 0.1 and config.attention_probs_dropout_prob == 0.1, config
  if attention_dropout is not None:
    config.attention_probs_dropout_prob = attention_dropout
  model_args = ModelArguments(
    model_name_or_path=encoder,
    pooler_type="avg",
    temp=0.05,
    do_mlm=False,
    mlp_only_train=False,
    hard_negative_weight=0.0,
  )
  model = BertForCL.from_pretrained(encoder, config=config, model_args=model_args)
  model.train()
  raw = np.load(batches_npz)
  ids = torch.from_numpy(raw["input_ids"][0][:, [0, 0]].astype(np.int64)).contiguous()
  mask = torch.from_numpy(raw["attention_mask"][0][:, [0, 0]].astype(np.int64)).contiguous()
  out = []
  with torch.no_grad():
    for k in range(n):
      torch.manual_seed(k)
      out.append(float(model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).loss))
  return out


def compare(jaxcse_json: str, official_json: str) -> None:
  from scipy import stats

  a, b = json.load(open(jaxcse_json)), json.load(open(official_json))
  for name, v in (("jaxcse", a), ("official", b)):
    v = np.asarray(v)
    print(
      f"{name}: first-step loss over {len(v)} dropout masks: mean {v.mean():.4f}, SD {v.std(ddof=1):.4f}, "
      f"SE of the mean {v.std(ddof=1) / np.sqrt(len(v)):.4f}"
    )
  t = stats.ttest_ind(a, b, equal_var=False)
  print(
    f"difference of means (first - second) {np.mean(a) - np.mean(b):+.4f}; Welch t {t.statistic:.2f}, "
    f"p {t.pvalue:.2g}; dropout 0 gives {LOSS_WITHOUT_DROPOUT} (loop_check.txt)"
  )


LOSS_WITHOUT_DROPOUT = 1.7556


def main(argv: list[str]) -> None:
  if argv[0] == "compare":
    compare(argv[1], argv[2])
    return
  side, batches_npz, n, out = argv[0], argv[1], int(argv[2]), argv[3]
  if side in ("jaxcse", "jaxcse_per_element_attention_mask"):
    losses = jaxcse_losses(batches_npz, n, per_element_attention_mask=side != "jaxcse")
  elif side == "official":
    losses = official_losses(batches_npz, n, argv[4], float(argv[5]) if len(argv) > 5 else None)
  else:
    raise SystemExit(f"{side!r}: expected jaxcse, official or compare")
  with open(out, "w") as f:
    json.dump(losses, f)


if __name__ == "__main__":
  main(sys.argv[1:])
