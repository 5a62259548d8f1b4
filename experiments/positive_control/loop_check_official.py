"""Loop check, the official code's side, and the comparison with jaxcse's (``loop_check_jaxcse.py``'s npz).

The official model (``simcse.models.BertForCL``, ``--pooler_type avg --temp 0.05``, from the same raw encoder
folder), dropout 0, in float64 (``model.double()``), on the same batches 0-2 (jaxcse's token ids; each sentence
twice, as the official collator gives it). The optimizer and schedule are the Hugging Face Trainer's own
(``Trainer.create_optimizer_and_scheduler`` with the official run's arguments: AdamW (torch) lr 1e-3, weight decay 0,
betas (0.9, 0.999), eps 1e-8, linear decay to 0 over 250 steps); each step is the Trainer's inner loop: backward,
``clip_grad_norm_(1.0)``, optimizer step, scheduler step, zero grad.

Reported: the initial parameters (must be equal: both read one folder), the loss of each step, the gradient of
step 1 (before clipping) and the parameters after steps 1-3: max |difference| and the largest relative to the
array's max |value|; and the optimizer's one known formula difference: HF clips by max_norm / (norm + 1e-6),
optax by max_norm / norm.

  (cd SIMCSE_CHECKOUT && python loop_check_official.py ENCODER BATCHES.npz JAXCSE.npz [hf|as_optax])
"""

import os
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoConfig, Trainer, TrainingArguments

STEPS, TOTAL_STEPS = 3, 250


def diff(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> tuple[float, float, str]:
  """(max |a - b| over all tensors, that / max |b| over all tensors, the tensor holding the max |a - b|)."""
  if set(ours) != set(theirs):
    raise SystemExit(f"parameter names differ: {sorted(set(ours) ^ set(theirs))[:5]}")
  per_tensor = {name: float(np.abs(ours[name] - b).max()) for name, b in theirs.items()}
  where = max(per_tensor, key=per_tensor.get)
  scale = max(float(np.abs(b).max()) for b in theirs.values())
  return per_tensor[where], per_tensor[where] / scale, where


def clip_as_optax(parameters, max_norm: float) -> float:
  """optax.clip_by_global_norm's formula (g * max_norm / norm when norm > max_norm), for the diagnostic variant."""
  grads = [p.grad for p in parameters]
  norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
  if norm > max_norm:
    for g in grads:
      g.mul_(max_norm / norm)
  return float(norm)


def main(encoder: str, batches_npz: str, jaxcse_npz: str, variant: str = "hf") -> None:
  """``variant``: ``hf``, the Trainer's step as it is; or ``as_optax``, a diagnostic: the same step with the two
  rounding-level differences from jaxcse's optax optimizer removed: optax's clipping formula (max_norm / norm;
  HF's is max_norm / (norm + 1e-6)) and the learning rate rounded to float32 (optax's ``linear_schedule`` returns
  a float32 learning rate: 1e-3 becomes 1.0000000475e-3 even under ``jax_enable_x64``)."""
  if variant not in ("hf", "as_optax"):
    raise SystemExit(f"variant {variant!r}: expected hf or as_optax")
  sys.path.insert(0, os.getcwd())  # the official checkout
  from simcse.models import BertForCL
  from train import ModelArguments

  torch.manual_seed(0)  # nothing random is drawn (dropout 0, no MLP for avg); fixed anyway
  config = AutoConfig.from_pretrained(encoder, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  model_args = ModelArguments(
    model_name_or_path=encoder,
    pooler_type="avg",
    temp=0.05,
    do_mlm=False,
    mlp_only_train=False,
    hard_negative_weight=0.0,
  )
  model = BertForCL.from_pretrained(encoder, config=config, model_args=model_args).double()
  model.train()
  named = dict(model.named_parameters())
  snapshot = lambda: {n: p.detach().numpy().copy() for n, p in named.items()}  # noqa: E731

  jx = np.load(jaxcse_npz)
  of = lambda prefix: {k[len(prefix) + 1 :]: jx[k] for k in jx.files if k.startswith(prefix + "/")}  # noqa: E731
  lines = [
    f"variant: {variant}; parameters: {len(named)} tensors, {sum(p.numel() for p in named.values())} "
    "numbers, float64 (relative = max |diff| / the largest |value| of all tensors)"
  ]
  a, r, w = diff(snapshot(), of("params0"))
  lines.append(f"initial parameters: max |diff| {a:.3g} (relative {r:.3g})")

  with tempfile.TemporaryDirectory() as tmp:
    args = TrainingArguments(
      output_dir=tmp,
      learning_rate=1e-3,
      weight_decay=0.0,
      adam_beta1=0.9,
      adam_beta2=0.999,
      adam_epsilon=1e-8,
      lr_scheduler_type="linear",
      warmup_steps=0,
      max_steps=TOTAL_STEPS,
      max_grad_norm=1.0,
      optim="adamw_torch",
      report_to="none",
      use_cpu=True,
      per_device_train_batch_size=64,
    )
    trainer = Trainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=TOTAL_STEPS)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler

  raw = np.load(batches_npz)
  losses, norms, step_grads = [], [], []
  for k in range(STEPS):
    ids = torch.from_numpy(raw["input_ids"][k][:, [0, 0]].astype(np.int64)).contiguous()  # [64, 2 views, 32]
    mask = torch.from_numpy(raw["attention_mask"][k][:, [0, 0]].astype(np.int64)).contiguous()
    loss = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).loss
    loss.backward()
    step_grads.append({n: p.grad.detach().numpy().copy() for n, p in named.items()})
    if k == 0:
      grads = step_grads[0]
    if variant == "hf":
      norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
    else:
      norms.append(clip_as_optax(list(model.parameters()), 1.0))
      for group in optimizer.param_groups:  # the scheduler's float64 value, rounded as optax's schedule gives it
        group["lr"] = float(np.float32(group["lr"]))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    losses.append(float(loss))
    if k == 0:
      a, r, w = diff(grads, of("grad1"))
      lines.append(f"gradient of step 1 (before clipping): max |diff| {a:.3g}, relative {r:.3g} (in {w})")
    a, r, w = diff(snapshot(), of(f"params{k + 1}"))
    lines.append(f"parameters after step {k + 1}: max |diff| {a:.3g}, relative {r:.3g} (in {w})")
    # Where the parameters differ most: Adam's step is lr * m / (sqrt(v) + 1e-8), which turns a gradient
    # difference at a near-zero gradient (|g| ~ 1e-8 or less) into a parameter difference up to lr * that / 1e-8.
    ours, theirs = snapshot()[w], of(f"params{k + 1}")[w]
    at = np.unravel_index(np.abs(ours - theirs).argmax(), ours.shape)
    history = ", ".join(f"{g[w][at]:.3g}" for g in step_grads)
    lines.append(f"  at {w}{list(map(int, at))}: official's gradient there, steps 1..{k + 1}: {history}")
  lines.insert(
    2,
    "loss per step: official "
    + ", ".join(f"{x:.15f}" for x in losses)
    + "; jaxcse "
    + ", ".join(f"{x:.15f}" for x in jx["loss"])
    + "; max |diff| "
    + f"{np.abs(np.array(losses) - jx['loss']).max():.3g}",
  )
  lines.insert(
    3,
    "gradient norm per step (before clipping): official "
    + ", ".join(f"{x:.12f}" for x in norms)
    + "; jaxcse "
    + ", ".join(f"{x:.12f}" for x in jx["grad_norm"]),
  )
  print("\n".join(lines))


if __name__ == "__main__":
  main(*sys.argv[1:])
