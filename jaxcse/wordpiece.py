r"""Train a WordPiece vocabulary (BERT's tokenizer) on a text corpus, saved as a Hugging Face tokenizer folder.

  python -m jaxcse.wordpiece --corpus corpora/wiki_offline.txt --vocab_size 8192 --out DIR \
      [--heldout_fraction 0.01] [--cased] [--model_max_length 128]

Uses the ``tokenizers`` library's WordPiece trainer with BERT's normaliser and
pre-tokeniser (``BertWordPieceTokenizer``: lowercased and accents stripped
unless ``--cased``) and BERT's special tokens ``[PAD] [UNK] [CLS] [SEP]
[MASK]``. Sentences of the held-out split (``data.is_heldout``) are left out,
so that a masked-LM evaluation on them never sees its own vocabulary fitted to
them. The folder loads with ``transformers.AutoTokenizer`` (a
``BertTokenizerFast``) and holds ``wordpiece.json``: what it was trained on,
with the corpus's and the vocabulary's sha256.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

from jaxcse import data as data_lib
from jaxcse.core import errors, files

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece(
  corpus_path: str,
  out_dir: str,
  *,
  vocab_size: int = 8192,
  heldout_fraction: float = 0.01,
  lowercase: bool = True,
  model_max_length: int = 512,
  data_dir: str | None = None,
) -> dict:
  """Trains the vocabulary and writes the tokenizer folder; returns its provenance record.

  ``out_dir`` must be absent or empty (checked before the corpus is read). The folder is written under a
  temporary name beside it and renamed into place, so it is complete or absent, never half-written.
  """
  from tokenizers import BertWordPieceTokenizer

  errors.check_output(out_dir, folder=True)
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise errors.OutputError(f"{out_dir}: exists and is not empty; choose a new folder or remove it")
  corpus = data_lib.load_corpus(corpus_path, root=data_dir)
  sentences = corpus.columns["sent0"]
  if heldout_fraction > 0:
    sentences = data_lib.split_heldout(corpus, heldout_fraction)[0].columns["sent0"]
  tokenizer = BertWordPieceTokenizer(lowercase=lowercase, clean_text=True, handle_chinese_chars=True)
  tokenizer.train_from_iterator(
    sentences,
    vocab_size=vocab_size,
    min_frequency=2,
    limit_alphabet=1000,
    special_tokens=list(SPECIAL_TOKENS),
    show_progress=False,
  )
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".tmp-", dir=parent)
  try:
    record = _write_tokenizer(
      tokenizer,
      tmp,
      corpus_path,
      data_dir,
      lowercase=lowercase,
      model_max_length=model_max_length,
      sentences=len(sentences),
      heldout_fraction=heldout_fraction,
    )
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)  # Empty (checked above); the rename needs the name free.
    os.rename(tmp, out_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return record


def _write_tokenizer(
  tokenizer,
  out_dir: str,
  corpus_path: str,
  data_dir: str | None,
  *,
  lowercase: bool,
  model_max_length: int,
  sentences: int,
  heldout_fraction: float,
) -> dict:
  """Writes the trained vocabulary as a ``BertTokenizerFast`` folder with ``wordpiece.json``; returns the record."""
  from transformers import BertTokenizerFast

  tokenizer.save_model(out_dir)  # vocab.txt
  fast = BertTokenizerFast(
    vocab_file=os.path.join(out_dir, "vocab.txt"), do_lower_case=lowercase, model_max_length=model_max_length
  )
  fast.save_pretrained(out_dir)
  resolved = data_lib.resolve(corpus_path, data_dir) if not corpus_path.startswith("tfds:") else corpus_path
  record = {
    "trainer": "tokenizers.BertWordPieceTokenizer.train_from_iterator",
    "corpus": os.path.basename(resolved),
    "corpus_sha256": files.file_sha256(resolved) if os.path.isfile(resolved) else None,
    "sentences": sentences,
    "heldout_fraction": heldout_fraction,
    "vocab_size": fast.vocab_size,
    "lowercase": lowercase,
    "min_frequency": 2,
    "limit_alphabet": 1000,
    "vocab_sha256": files.file_sha256(os.path.join(out_dir, "vocab.txt")),
  }
  files.write_json(os.path.join(out_dir, "wordpiece.json"), record)
  return record


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.wordpiece"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--corpus", required=True, help="a .txt corpus (relative paths: under the data root)")
  parser.add_argument("--out", required=True, help="the tokenizer folder to write")
  parser.add_argument("--vocab_size", type=int, default=8192)
  parser.add_argument("--heldout_fraction", type=float, default=0.01, help="leave this held-out split out")
  parser.add_argument("--cased", action="store_true", help="keep case and accents (default: BERT uncased)")
  parser.add_argument("--model_max_length", type=int, default=512, help="the tokenizer's cut, in tokens")
  parser.add_argument("--data_dir", default=None, help=f"data root (default ${data_lib.DATA_DIR_ENV})")
  args = parser.parse_args(argv)
  record = train_wordpiece(
    args.corpus,
    args.out,
    vocab_size=args.vocab_size,
    heldout_fraction=args.heldout_fraction,
    lowercase=not args.cased,
    model_max_length=args.model_max_length,
    data_dir=args.data_dir,
  )
  print(
    f"wrote {args.out}: {record['vocab_size']} tokens from {record['sentences']} sentences "
    f"(vocab.txt sha256 {record['vocab_sha256']})"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
