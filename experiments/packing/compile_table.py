"""The compile table of README.md from compile.sh's reports: per target, padded against packed at the same batch.

python experiments/packing/compile_table.py
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = (
  ("padded", "padded, 128 texts x 32"),
  ("packed28", "packed, texts of 28 tokens"),
  ("packed16", "packed, texts of 16 tokens"),
)


def rows() -> list[str]:
  out = [
    "| target | layout | rows x length | GFLOP/step | GB accessed/step | bound | step bound (ms) | sentences/s bound "
    "| vs padded | memory (GiB) |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for target in ("v5e-1", "h100"):
    padded = None
    for variant, label in VARIANTS:
      path = os.path.join(HERE, "compile", f"{target}_{variant}.json")
      if not os.path.exists(path):
        continue
      with open(path) as f:
        r = json.load(f)
      shape = r.get("packed_rows") or [r["batch_shape"][0] * 2, r["batch_shape"][2]]  # Padded: 2 views a sentence.
      if variant == "padded":
        padded = r["roofline_step_seconds"]
      ratio = f"{padded / r['roofline_step_seconds']:.2f}x" if padded else ""
      out.append(
        f"| {target} | {label} | {shape[0]} x {shape[1]} | {r['flops_per_device'] / 1e9:.0f} | "
        f"{r['bytes_accessed_per_device'] / 1e9:.1f} | {r['roofline_bound']} | {1e3 * r['roofline_step_seconds']:.2f} | "
        f"{r['sentences_per_second_bound']:.0f} | {ratio} | {r['memory_bytes']['total'] / 2**30:.2f} |"
      )
  return out


if __name__ == "__main__":
  print("\n".join(rows()))
