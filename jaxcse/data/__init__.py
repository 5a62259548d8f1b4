"""Training data: the data root, corpora read strictly, deterministic batches, verified downloads.

root.py       where relative data paths resolve ($JAXCSE_DATA_DIR, then the shipped quickstart data); DataError
manifest.py   downloads.json: every known data file's sha256 (the downloads and the shipped quickstart data)
corpora.py    .txt / .csv / tfds: readers, each problem an error naming file and line
pairs.py      pair data in sentence-transformers' column convention (.jsonl/.csv/.parquet, save_to_disk, hf:),
              read with Hugging Face datasets (Arrow), every row checked
batching.py   Batches: deterministic, resumable, step-addressable batches, tokenized ahead in a thread
downloads.py  python -m jaxcse.data download ...: SimCSE's files, sha256-verified (digests in downloads.json)
"""

from jaxcse.data.batching import Batches, DistinctReport, PackedBatches, distinct_batches, text_ids
from jaxcse.data.corpora import (
  CSV_COLUMNS,
  TFDS_PREFIX,
  Corpus,
  is_heldout,
  load_corpus,
  read_csv,
  read_senteval_lines,
  read_text_lines,
  read_tfds,
  split_heldout,
)
from jaxcse.data.downloads import DOWNLOADS, DownloadError, download, extract_tar, fetch_file
from jaxcse.data.pairs import HF_PREFIX, LABEL_COLUMNS, PairCorpus, is_pairs_source, load_pairs
from jaxcse.data.root import (
  DATA_DIR_ENV,
  EMBEDDED_ROOT,
  DataError,
  data_dir,
  data_file,
  embedded_file,
  embedded_root_for,
  given_root,
  notes_held,
  resolve,
)

__all__ = [
  "TFDS_PREFIX",
  "HF_PREFIX",
  "LABEL_COLUMNS",
  "PairCorpus",
  "is_pairs_source",
  "load_pairs",
  "DistinctReport",
  "distinct_batches",
  "text_ids",
  "Batches",
  "PackedBatches",
  "is_heldout",
  "split_heldout",
  "CSV_COLUMNS",
  "Corpus",
  "DATA_DIR_ENV",
  "DOWNLOADS",
  "DataError",
  "DownloadError",
  "EMBEDDED_ROOT",
  "data_dir",
  "data_file",
  "embedded_file",
  "embedded_root_for",
  "given_root",
  "download",
  "extract_tar",
  "fetch_file",
  "load_corpus",
  "read_csv",
  "read_senteval_lines",
  "read_text_lines",
  "read_tfds",
  "resolve",
  "notes_held",
]
