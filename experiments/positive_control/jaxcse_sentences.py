"""Writes the training sentences jaxcse's committed run of one seed saw, in its batch order, for the official code.

jaxcse's trainer (``training.inputs.make_batches``) reads the corpus with ``data.load_corpus`` (empty lines skipped) and batches
it with ``data.Batches`` (seed = the run's seed; epoch 0's order is ``np.random.default_rng([seed, 0])
.permutation`` of the corpus, cut into batches of 64). The committed runs (``paper_ablations/runs/dropout/
p0.1-lr1e-3-seed{1,2,3}``, jaxcse commit ffacdb9, whose data code equals this one's) trained 250 steps, so they saw
batches 0..249 of that layout (the study's ``horizon`` runs: 1,500 steps, STEPS, the optional fourth argument).
This script asks jaxcse's own ``Batches`` for those rows (no re-implementation of the order), writes their texts
one per line, step by step, and saves the token arrays jaxcse's loader gives for the first CHECK_STEPS steps, so
the run can prove the official code was fed the same batches
(``check_official_batches.py``).

  PYTHONPATH=/work/wt-... python jaxcse_sentences.py SEED OUT.txt OUT.batches.npz [STEPS]
"""

import os
import sys

import numpy as np

from jaxcse.training import configured
from jaxcse import data as data_lib
from jaxcse.configs import base as base_config

BATCH, MAX_LEN, CORPUS = 64, 32, "corpora/wiki_offline.txt"
CHECK_STEPS = 3
# str.splitlines (which the `datasets` text loader uses) also breaks lines at these; a sentence holding one would
# reach the official code as two lines, so the file would no longer be jaxcse's sentences.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def main(seed: str, out_txt: str, out_npz: str, steps: str = "250") -> None:
  config = base_config.get_config()
  config.model.name = "jaxcse/bert-mini-wiki-uncased"
  config.data.train, config.data.max_seq_len = CORPUS, MAX_LEN
  config.train.batch_size, config.seed = BATCH, int(seed)
  spec = configured.model(config).spec  # the trainer's tokenizer, as training.inputs.read builds it
  corpus = data_lib.load_corpus(CORPUS, skip_empty_lines=True)
  batches = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=MAX_LEN, seed=int(seed))
  texts = corpus.columns["sent0"]
  lines = [texts[r] for step in range(int(steps)) for r in batches.indices(step)]
  bad = [i for i, t in enumerate(lines) if any(c in LINE_BREAKS for c in t)]
  if bad:
    raise SystemExit(f"{CORPUS}: {len(bad)} of seed {seed}'s sentences hold a line-break character (first: #{bad[0]})")
  with open(out_txt + ".partial", "w", encoding="utf-8", newline="\n") as f:
    f.writelines(t + "\n" for t in lines)
  first = [batches.batch(step) for step in range(CHECK_STEPS)]
  np.savez(
    out_npz + ".partial.npz",
    input_ids=np.stack([b["input_ids"] for b in first]),
    attention_mask=np.stack([b["attention_mask"] for b in first]),
  )
  os.replace(out_npz + ".partial.npz", out_npz)
  os.replace(out_txt + ".partial", out_txt)
  print(
    f"seed {seed}: {len(lines)} sentences ({len(set(lines))} distinct) of {len(corpus)} -> {out_txt}; "
    f"jaxcse's batches 0..{CHECK_STEPS - 1} -> {out_npz}"
  )


if __name__ == "__main__":
  main(*sys.argv[1:])
