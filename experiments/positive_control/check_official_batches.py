"""Proves that the official code was fed jaxcse's batches: compares its recorded first batches with jaxcse's.

jaxcse's arrays (``jaxcse_sentences.py``): ``[steps, 64, 1, 32]`` (one column: both views are the same ids),
padded to 32. The official code's (``official_launch.py``): ``[64, 2, L]`` per batch (each sentence twice),
padded to the batch's longest sentence L. Equal means: both official views equal jaxcse's column on the first L
positions, jaxcse's positions past L are padding (mask 0), and the masks agree. Exit 1 on any difference.

  python check_official_batches.py JAXCSE.npz OFFICIAL.npz
"""

import sys

import numpy as np


def main(jaxcse_npz: str, official_npz: str, views: str = "both") -> None:
  if views not in ("both", "first"):
    raise SystemExit(f"views: both or first, not {views!r}")
  jax_b, off_b = np.load(jaxcse_npz), np.load(official_npz)
  steps = len([k for k in off_b.files if k.startswith("input_ids_")])
  if steps == 0 or steps > len(jax_b["input_ids"]):
    raise SystemExit(f"{official_npz}: {steps} recorded batches, jaxcse's file has {len(jax_b['input_ids'])}")
  for k in range(steps):
    ids, mask = off_b[f"input_ids_{k}"], off_b[f"attention_mask_{k}"]
    j_ids, j_mask = jax_b["input_ids"][k][:, 0], jax_b["attention_mask"][k][:, 0]
    length = ids.shape[-1]
    problems = []
    if ids.shape[:2] != (j_ids.shape[0], 2):
      problems.append(f"shape {ids.shape} vs jaxcse {j_ids.shape}")
    else:
      if j_mask[:, length:].any():
        problems.append(f"jaxcse has tokens past the official batch's length {length}")
      for view in range(2 if views == "both" else 1):
        if not np.array_equal(mask[:, view], j_mask[:, :length]):
          problems.append(
            f"view {view}: attention masks differ in {int((mask[:, view] != j_mask[:, :length]).sum())} places"
          )
        on = j_mask[:, :length].astype(bool)
        if not np.array_equal(ids[:, view][on], j_ids[:, :length][on]):
          problems.append(f"view {view}: token ids differ")
    if problems:
      raise SystemExit(f"batch {k}: " + "; ".join(problems))
    print(
      f"batch {k}: equal (64 sentences x {2 if views == 'both' else 1} view(s), {int(j_mask.sum())} tokens, padded length {length})"
    )


if __name__ == "__main__":
  main(*sys.argv[1:])
