"""Word-deletion step check, the official side, and the comparison with jaxcse's (``word_deletion_step_jaxcse.py``).

The deleted views are made by the official code's own data path, not taken from jaxcse: the patched ``train.py``
(simcse_official.patch + simcse_crop.patch + simcse_word_deletion.patch) runs as the budget runs ran it
(``run_official_budget.sh``'s arguments, ``--word_deletion 0.1``, the launcher's sequential sampler) on jaxcse's
sentences of each batch in jaxcse's order: it tokenizes them (truncation at 32), deletes words of each second
view (``delete_words_of_second_views``: fast-tokenizer ``word_ids``, its count), and its collator pads the batch.
Only the random choice is replaced: the patch's generator (``np.random.default_rng([seed, 2])``) is handed a
stand-in whose ``choice(n, size=count, replace=False)`` returns, row by row, the words jaxcse's step deleted
(jaxcse's word indices, which index the patch's word list: ``check_word_counts.py``), after checking that the
patch asks for jaxcse's ``n`` and count. The batches ``BertForCL.forward`` receives are recorded (the Trainer is
stopped there, before any optimizer step).

Then the official model (``BertForCL``, ``--pooler_type avg --temp 0.05``, the same raw encoder folder), dropout
0, float64, on each recorded batch: its loss and gradient (``loss.backward()``), compared with jaxcse's:

- the views: every row of both views, token ids and mask, against jaxcse's (the official rows are padded to the
  batch's longest, jaxcse's to 32);
- the loss: |official - jaxcse| / |official|;
- the gradient: max |diff| over all tensors / the largest |value| of all tensors (as ``loop_check_official.py``),
  and the largest per-tensor relative difference (max |diff| / max |value| of that tensor).

Two controls show what the comparison can see: the same official batch with its two views swapped (the deleted
view as the anchor instead of the positive), and with the second view undeleted (the None row's batch).

  (cd SIMCSE_CHECKOUT && python word_deletion_step_official.py ENCODER JAXCSE.npz)
"""

import functools
import math
import os
import runpy
import sys
import tempfile

import numpy as np
import torch
import transformers
from torch.utils.data import SequentialSampler

FRACTION = 0.1


class Recorded(Exception):
  """Raised by the recording forward once every batch is recorded: training stops before any optimizer step."""


class JaxcseChoices:
  """Stands in for the patch's deletion generator: row by row, the words jaxcse deleted (its word indices)."""

  def __init__(self, deleted: list[np.ndarray], num_words: list[int]):
    self.deleted, self.num_words, self.calls = deleted, num_words, 0

  def choice(self, n, size, replace):
    row = self.calls
    if row >= len(self.deleted):
      raise SystemExit(f"the patch asked for a deletion for row {row}; jaxcse has {len(self.deleted)} rows")
    if replace or n != self.num_words[row] or size != len(self.deleted[row]):
      raise SystemExit(
        f"row {row}: the patch asks for {size} of {n} words (replace={replace}); jaxcse deleted "
        f"{len(self.deleted[row])} of {self.num_words[row]}"
      )
    self.calls += 1
    return self.deleted[row]


def official_batches(encoder: str, jx, order: list[str], checkout: str) -> tuple[list[dict], int]:
  """The batches ``BertForCL.forward`` receives from the patched train.py, with jaxcse's choices."""
  deleted, num_words = [], []
  for tag in order:
    chosen, n = jx[f"{tag}/deleted"], jx[f"{tag}/num_words"]
    for r in range(len(n)):
      # A row with no words is skipped by the patch (it never asks), so it gets no entry.
      if n[r] > 0:
        deleted.append(np.flatnonzero(chosen[r]))
        num_words.append(int(n[r]))
  choices = JaxcseChoices(deleted, num_words)
  real_rng = np.random.default_rng

  def rng(seed=None, *a, **kw):  # Only the patch's word-deletion generator ([seed, 2]) is replaced.
    if isinstance(seed, list) and len(seed) == 2 and seed[1] == 2:
      return choices
    return real_rng(seed, *a, **kw)

  np.random.default_rng = rng
  assert torch.set_flush_denormal(True)  # as every official run here (official_launch.py)
  transformers.Trainer._get_train_sampler = lambda self, train_dataset=None: SequentialSampler(
    self.train_dataset if train_dataset is None else train_dataset
  )
  # The checkout (as `python train.py` there would have it), and its SentEval, which simcse/trainers.py imports
  # by a path relative to the checkout, while train.py runs in a fresh folder (below).
  sys.path[:0] = [checkout, os.path.join(checkout, "SentEval")]
  from simcse import models

  forward, seen = models.BertForCL.forward, []

  @functools.wraps(forward)  # the Trainer keeps only the dataset columns named in forward's signature
  def recording_forward(self, *a, **kw):
    if self.training and not kw.get("sent_emb"):
      seen.append({k: kw[k].numpy().copy() for k in ("input_ids", "attention_mask", "token_type_ids")})
      if len(seen) == len(order):
        raise Recorded
    return forward(self, *a, **kw)

  models.BertForCL.forward = recording_forward
  with tempfile.TemporaryDirectory() as tmp:
    texts = os.path.join(tmp, "sentences.txt")
    with open(texts, "w", encoding="utf-8", newline="\n") as f:
      f.writelines(str(t) + "\n" for t in jx["texts"])
    # The budget runs' arguments (run_official_budget.sh); seed 1 (the seed draws nothing here: no dropout is
    # recorded, the choices are jaxcse's). cwd: a fresh folder, so that train.py's "./data/" cache is new.
    sys.argv = [
      "train.py",
      *("--model_name_or_path", encoder, "--train_file", texts, "--output_dir", os.path.join(tmp, "train")),
      *("--max_seq_length", "32", "--per_device_train_batch_size", "64", "--learning_rate", "1e-3"),
      *("--max_steps", str(len(order)), "--pooler_type", "avg", "--temp", "0.05", "--do_train", "--seed", "1"),
      *("--word_deletion", str(FRACTION), "--eval_strategy", "no", "--save_strategy", "no"),
      *("--report_to", "none", "--overwrite_output_dir", "--overwrite_cache"),
    ]
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
      runpy.run_path(os.path.join(checkout, "train.py"), run_name="__main__")
    except Recorded:
      pass
    finally:
      os.chdir(cwd)
      np.random.default_rng = real_rng
      models.BertForCL.forward = forward
  if len(seen) != len(order):
    raise SystemExit(f"only {len(seen)} of {len(order)} training batches were seen")
  return seen, choices.calls


def compare_views(official: dict, ids: np.ndarray, mask: np.ndarray) -> int:
  """Rows (of 2 x batch) whose ids and mask equal jaxcse's on every position (jaxcse's past L: padding)."""
  length = official["input_ids"].shape[-1]
  same = (official["input_ids"] == ids[..., :length]) & (official["attention_mask"] == mask[..., :length])
  return int((same.all(axis=-1) & (mask[..., length:] == 0).all(axis=-1)).sum())


def main(encoder: str, jaxcse_npz: str) -> None:
  checkout = os.getcwd()
  jx = np.load(jaxcse_npz)
  order = [str(t) for t in jx["order"]]
  batches, calls = official_batches(encoder, jx, order, checkout)

  from simcse.models import BertForCL
  from train import ModelArguments

  torch.manual_seed(0)  # nothing random is drawn (dropout 0, no MLP for avg); fixed anyway
  config = transformers.AutoConfig.from_pretrained(encoder, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  model_args = ModelArguments(
    model_name_or_path=encoder, pooler_type="avg", temp=0.05, do_mlm=False, mlp_only_train=False
  )
  model = BertForCL.from_pretrained(encoder, config=config, model_args=model_args).double()
  model.train()
  named = dict(model.named_parameters())
  start = {n: p.detach().numpy() for n, p in named.items()}
  initial = max(float(np.abs(start[n] - jx[f"params0/{n}"]).max()) for n in named)
  lines = [
    f"official: transformers {transformers.__version__}, torch {torch.__version__}; {len(named)} parameter tensors, "
    f"{sum(p.numel() for p in named.values())} numbers, float64; initial parameters max |diff| {initial:.3g}; "
    f"the patch asked for {calls} rows' deletions (every second view with a word)"
  ]

  def loss_and_grads(batch: dict) -> tuple[float, dict]:
    model.zero_grad()
    loss = model(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}).loss
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().numpy().copy() for n, p in named.items()}

  worst = {"loss": 0.0, "grad": 0.0, "tensor": 0.0}
  zero_in_theory: set[str] = set()
  for tag, batch in zip(order, batches):
    ids, mask = jx[f"{tag}/input_ids"], jx[f"{tag}/attention_mask"]
    rows = compare_views(batch, ids, mask)
    loss, grads = loss_and_grads(batch)
    theirs = {n: jx[f"{tag}/grad/{n}"] for n in named}
    if set(theirs) != set(grads):
      raise SystemExit("parameter names differ")
    scale = max(float(np.abs(g).max()) for g in grads.values())
    per = {n: float(np.abs(grads[n] - theirs[n]).max()) for n in grads}
    where = max(per, key=per.get)
    # Per tensor, relative to its own largest |value|: only for tensors whose gradient is not 0 in exact
    # arithmetic. The attention key biases' is (softmax does not change when every key's score of a query moves
    # by the same q.b), so both sides hold rounding noise there (~1e-15) and a ratio of two noises says nothing;
    # those tensors (largest |value| below 1e-9 of the largest of all) are reported by their size instead.
    tiny = {n for n in grads if np.abs(grads[n]).max() < 1e-9 * scale}
    tensor_rel = {n: per[n] / float(np.abs(grads[n]).max()) for n in grads if n not in tiny}
    tensor_where = max(tensor_rel, key=tensor_rel.get)
    zero_in_theory |= tiny
    tiny_size = max((max(float(np.abs(grads[n]).max()), float(np.abs(theirs[n]).max())) for n in tiny), default=0.0)
    loss_rel = abs(loss - float(jx[f"{tag}/loss"])) / abs(loss)
    worst = {
      "loss": max(worst["loss"], loss_rel),
      "grad": max(worst["grad"], per[where] / scale),
      "tensor": max(worst["tensor"], tensor_rel[tensor_where]),
    }
    swapped = {k: np.ascontiguousarray(v[:, ::-1]) for k, v in batch.items()}
    undeleted = {k: np.ascontiguousarray(v[:, [0, 0]]) for k, v in batch.items()}
    lines.append(
      f"{tag}: views equal to jaxcse's in {rows} of {2 * len(ids)} rows (length {batch['input_ids'].shape[-1]}); "
      f"loss official {loss:.15f} jaxcse {float(jx[f'{tag}/loss']):.15f} (relative {loss_rel:.2g}); gradient "
      f"max |diff| {per[where]:.3g} (relative to the largest |value| {per[where] / scale:.2g}, in {where}); "
      f"largest per-tensor relative {tensor_rel[tensor_where]:.2g} ({tensor_where}); {len(tiny)} tensors 0 in "
      f"exact arithmetic, largest |value| there {tiny_size:.2g} (official and jaxcse); "
      f"controls: views swapped loss {loss_and_grads(swapped)[0]:.6f}, second view undeleted "
      f"{loss_and_grads(undeleted)[0]:.6f}"
    )
    if rows != 2 * len(ids):
      lines.append(f"{tag}: VIEWS DIFFER")
  lines.append(
    f"over {len(order)} batches: largest relative difference of the loss {worst['loss']:.2g}, of the gradient "
    f"(max |diff| / largest |value|) {worst['grad']:.2g}, per tensor {worst['tensor']:.2g} (less the tensors "
    f"whose gradient is 0 in exact arithmetic: {', '.join(sorted(zero_in_theory))})"
  )
  print("\n".join(lines))
  if not all(math.isfinite(v) and v < 1e-10 for v in worst.values()):
    raise SystemExit(1)


if __name__ == "__main__":
  main(*sys.argv[1:])
