"""Loop check, jaxcse's side: loss, gradient and parameters after 3 AdamW steps, deterministically, in float64.

From the raw encoder, dropout 0 (the only random part of the step), jaxcse's own train step
(``train_step.make_train_step``) on jaxcse's own batches 0-2 of seed 1 (``jaxcse_sentences.py``'s npz), in float64
(``jax_enable_x64``; the model built with a float64 compute dtype and its params cast to float64, so float rounding
is ~1e-16 and any larger difference from the official code is a difference of computation):

- the gradient of step 1: the same step with an optimizer that returns the gradient unchanged (``params + grad``
  minus ``params``: the step's own gradient, through its own loss and keys);
- the parameters after steps 1, 2, 3 of the optimizer the trainer builds (``train_step.make_optimizer``: global-norm
  clipping at 1.0, AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay, linear decay to 0 over 250 steps),
  and each step's loss and gradient norm.

Arrays are saved under their PyTorch names (``models.weights.checkpoint_name``; kernels transposed) in float64.

  PYTHONPATH=. python loop_check_jaxcse.py BATCHES.npz OUT.npz
"""

import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcse.training import configured
from jaxcse import models
from jaxcse.training import train_step as step_lib
from jaxcse.configs import base as base_config
from jaxcse.models import weights

STEPS, TOTAL_STEPS = 3, 250


def regime_config(dtype: str):
  """The committed runs' config (``paper_ablations/runs/dropout/p0.1-lr1e-3-seed1/config.json``), dropout 0."""
  config = base_config.get_config()
  config.model.name = "jaxcse/bert-mini-wiki-uncased"
  config.model.pooler = config.model.test_pooler = "avg"
  config.model.mlp_only_train = False
  config.model.dropout, config.model.dtype = 0.0, dtype
  config.data.train, config.data.max_seq_len = "corpora/wiki_offline.txt", 32
  config.train.batch_size, config.train.learning_rate, config.train.max_steps = 64, 1e-3, TOTAL_STEPS
  config.train.weight_decay, config.train.warmup_steps, config.train.max_grad_norm = 0.0, 0, 1.0
  config.loss.temperature, config.seed = 0.05, 1
  return config


def torch_named(params) -> dict[str, np.ndarray]:
  """Every parameter under its PyTorch name (``bert.`` + the encoder's), float64, kernels transposed.

  BERT's own pooler layer (``pooler.dense``) is left out: the official ``BertForCL`` has none, and the ``avg``
  pooler never reads it (``main`` checks that its gradient is exactly 0).
  """
  out = {}
  for path, value in flax.traverse_util.flatten_dict(jax.device_get(params)).items():
    assert path[0] == "backbone", f"a parameter outside the encoder: {path} (the avg pooler has none)"
    if path[1] == "pooler":
      continue
    value = np.asarray(value, np.float64)
    out["bert." + weights.checkpoint_name(path[1:])] = value.T if path[-1] == "kernel" else value
  return out


def main(batches_npz: str, out_npz: str) -> None:
  jax.config.update("jax_enable_x64", True)  # before any array is made (here, not at import: dropout_check imports us)
  models.DTYPES["float64"] = jnp.float64  # this check only: the trainer offers float32/bf16/fp16
  config = regime_config("float64")
  built = configured.model(config)
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), built.params)
  raw = np.load(batches_npz)
  batches = [
    {"input_ids": jnp.asarray(raw["input_ids"][k]), "attention_mask": jnp.asarray(raw["attention_mask"][k])}
    for k in range(STEPS)
  ]
  out = {f"params0/{k}": v for k, v in torch_named(params).items()}

  passthrough = optax.GradientTransformation(lambda p: optax.EmptyState(), lambda g, s, p=None: (g, s))
  grad_step = jax.jit(step_lib.make_train_step(config, built.spec, passthrough))
  state = step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=passthrough.init(params))
  moved, metrics = grad_step(state, batches[0])
  grads = jax.tree.map(lambda a, b: a - b, moved.params, params)
  unused = [float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["backbone"]["pooler"])]
  assert max(unused) == 0.0, f"BERT's pooler layer got a gradient under the avg pooler: {unused}"
  out.update({f"grad1/{k}": v for k, v in torch_named(grads).items()})

  tx = step_lib.make_optimizer(config.train, TOTAL_STEPS)
  step = jax.jit(step_lib.make_train_step(config, built.spec, tx))
  state = step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
  losses, norms = [], []
  for k in range(STEPS):
    state, metrics = step(state, batches[k])
    losses.append(float(metrics["loss"]))
    norms.append(float(metrics["grad_norm"]))
    out.update({f"params{k + 1}/{n}": v for n, v in torch_named(state.params).items()})
  dtypes = {str(x.dtype) for x in jax.tree.leaves(state.params)} | {str(metrics["loss"].dtype)}
  np.savez(out_npz, loss=np.array(losses), grad_norm=np.array(norms), **out)
  print(f"jaxcse: dtypes {sorted(dtypes)}; loss {losses}; grad norm (before clipping) {norms} -> {out_npz}")


if __name__ == "__main__":
  main(*sys.argv[1:])
