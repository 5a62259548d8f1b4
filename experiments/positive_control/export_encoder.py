"""Writes a trained PyTorch checkpoint's BERT encoder as a plain Hugging Face BertModel folder (for jaxcse.evaluate).

SimCSE's BertForCL stores the encoder under ``bert.``; a sentence-transformers checkpoint keeps it in its root
folder. Either way ``BertModel.from_pretrained`` reads the encoder; this script refuses a checkpoint whose encoder
weights do not all load (missing or unexpected keys other than a head), so a silently re-initialised encoder
cannot be scored.

  python export_encoder.py SRC DST
"""

import sys

from transformers import AutoTokenizer, BertModel


def main(src: str, dst: str) -> None:
  model, info = BertModel.from_pretrained(src, add_pooling_layer=False, output_loading_info=True)
  if info["missing_keys"] or info["mismatched_keys"]:
    raise SystemExit(f"{src}: encoder weights missing or mismatched: {info}")
  model.save_pretrained(dst)
  AutoTokenizer.from_pretrained(src).save_pretrained(dst)
  print(f"{src} -> {dst} (unexpected keys left out: {info['unexpected_keys']})")


if __name__ == "__main__":
  main(*sys.argv[1:])
