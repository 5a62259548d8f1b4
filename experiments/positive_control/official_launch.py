"""Runs the (patched) official SimCSE train.py on a file of sentences in that file's order, recording its batches.

Launcher only; the official code is not changed. Run from the official checkout:

  python official_launch.py RECORD.npz train.py ARGS...

- Denormals flushed to zero (``torch.set_flush_denormal``), as for every official run here (see README).
- The Trainer's training sampler becomes a ``SequentialSampler``: batch k is lines 64k..64k+63 of the training
  file. With the file written by ``jaxcse_sentences.py`` that is exactly jaxcse's batch k of the same seed; the
  seed still sets the dropout masks (and the weight init of nothing: with ``--pooler_type avg`` there is no MLP).
- The first ``RECORDED`` training batches the model receives (``input_ids``, ``attention_mask`` as passed to
  ``BertForCL.forward``) are saved to RECORD.npz, so ``check_official_batches.py`` can compare them with jaxcse's.
"""

import functools
import os
import runpy
import sys

import numpy as np
import torch
import transformers
from torch.utils.data import SequentialSampler

RECORDED = 3


def main() -> None:
  record_path, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
  assert torch.set_flush_denormal(True)
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python train.py` would: `simcse` is beside it
  transformers.Trainer._get_train_sampler = lambda self, train_dataset=None: SequentialSampler(
    self.train_dataset if train_dataset is None else train_dataset
  )

  from simcse import models  # train.py imports BertForCL from here: the same class object is patched

  forward = models.BertForCL.forward
  seen: list[tuple[np.ndarray, np.ndarray]] = []

  @functools.wraps(forward)  # the Trainer keeps only the dataset columns named in forward's signature
  def recording_forward(self, *a, **kw):
    if self.training and not kw.get("sent_emb") and len(seen) < RECORDED:
      seen.append((kw["input_ids"].numpy().copy(), kw["attention_mask"].numpy().copy()))
      if len(seen) == RECORDED:
        # One array per batch: the collator pads each batch to its own longest sentence.
        np.savez(
          record_path,
          **{f"input_ids_{k}": i for k, (i, _) in enumerate(seen)},
          **{f"attention_mask_{k}": m for k, (_, m) in enumerate(seen)},
        )
    return forward(self, *a, **kw)

  models.BertForCL.forward = recording_forward
  sys.argv = [script, *args]
  runpy.run_path(script, run_name="__main__")
  if len(seen) < RECORDED:
    raise SystemExit(f"{record_path}: only {len(seen)} training batches were seen")


if __name__ == "__main__":
  main()
