"""Training data: reading corpora strictly, and deterministic, resumable batches.

Formats:
  * ``.txt``: one sentence per line (SimCSE's ``wiki1m_for_simcse.txt``),
    UTF-8. A line with only whitespace is skipped and counted
    (``skip_empty_lines=True``, the default) or is an error.
  * ``.csv``: a header naming the columns (``sent0,sent1[,hard_neg]``; a
    single ``sent0`` or ``text`` column is read as unsupervised text). Every
    row must have every column, non-empty.

Anything else wrong (a missing file, undecodable bytes, a malformed row) is a
``DataError`` naming the file and line; nothing is dropped silently.

  * ``tfds:NAME[:split]``: one text feature of a tensorflow-datasets dataset,
    read through ``tfds.data_source`` (ArrayRecord files, no TensorFlow);
    needs ``pip install tensorflow-datasets array-record``.

Data root: relative paths are looked up under the data directory, which is
``--data_dir``/``config.data.data_dir`` or else ``$JAXCSE_DATA_DIR``, laid out
like SentEval's and SimCSE's: ``senteval/downstream/...``, ``corpora/...``.

Downloads: ``python -m jaxcse.data download senteval|wiki1m|nli [--data_dir DIR]``
fetches SimCSE's files into that layout, verified by sha256, resumable, and
renamed into place only once verified (see ``download``).
"""

from __future__ import annotations

import argparse
import codecs
import concurrent.futures
import copy
import csv
import dataclasses
import hashlib
import http.client
import io
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

import numpy as np
import tqdm

from jaxcse import models

DATA_DIR_ENV = "JAXCSE_DATA_DIR"


class DataError(ValueError):
  """Bad or missing input data; the message names the file and line."""


def data_dir(explicit: str | None = None) -> str:
  """The data root: ``explicit`` if given, else ``$JAXCSE_DATA_DIR``."""
  root = explicit or os.environ.get(DATA_DIR_ENV)
  if not root:
    raise DataError(
        f"no data directory: pass --data_dir (config.data.data_dir) or set ${DATA_DIR_ENV} to a folder "
        "laid out as senteval/downstream/... and corpora/..."
    )
  if not os.path.isdir(root):
    raise DataError(f"data directory {root!r} does not exist")
  return root


def resolve(path: str, root: str | None = None) -> str:
  """``path`` as given if it exists, else under the data root."""
  if os.path.isabs(path) or os.path.exists(path):
    return path
  candidate = os.path.join(data_dir(root), path)
  if not os.path.exists(candidate):
    raise DataError(f"{path}: no such file (looked in the current directory and in {candidate})")
  return candidate


@dataclasses.dataclass
class Corpus:
  """Training examples as columns of equal length: ``sent0`` always, ``sent1``/``hard_neg`` when present."""

  path: str
  columns: dict[str, list[str]]
  skipped_empty_lines: list[int] = dataclasses.field(default_factory=list)

  def __len__(self) -> int:
    return len(self.columns["sent0"])


def read_text_lines(path: str, *, skip_empty_lines: bool = True) -> Corpus:
  """Reads one sentence per line (``\\n`` or ``\\r\\n`` endings; a last line without one counts)."""
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f"{path}: cannot read ({e.strerror})") from e
  lines = raw.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()  # The file's final newline ends the last line; it does not start an empty one.
  sentences, skipped = [], []
  for lineno, line in enumerate(lines, start=1):
    try:
      text = line.decode("utf-8-sig" if lineno == 1 else "utf-8")  # A BOM is not part of the first sentence.
    except UnicodeDecodeError as e:
      raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)") from None
    text = text.removesuffix("\r")
    if not text.strip():
      if not skip_empty_lines:
        raise DataError(f"{path}:{lineno}: empty line (set data.skip_empty_lines=True to skip and count them)")
      skipped.append(lineno)
      continue
    sentences.append(text)
  if not sentences:
    raise DataError(f"{path}: no sentences")
  return Corpus(path, {"sent0": sentences}, skipped)


CSV_COLUMNS = ("sent0", "sent1", "hard_neg")


def read_csv(path: str) -> Corpus:
  """Reads a csv with a header: ``sent0[,sent1[,hard_neg]]`` (or one ``text`` column)."""
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f"{path}: cannot read ({e.strerror})") from e
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    offset = e.start + (len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0)  # e.start skips the BOM.
    lineno = raw.count(b"\n", 0, offset) + 1
    raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e.reason})") from None
  reader = csv.reader(io.StringIO(text, newline=""), strict=True)
  try:
    header = next(reader)
  except StopIteration:
    raise DataError(f"{path}: empty csv (expected a header such as sent0,sent1,hard_neg)") from None
  header = [h.strip() for h in header]
  if header == ["text"]:
    header = ["sent0"]
  if header != list(CSV_COLUMNS[: len(header)]):  # An unknown or misplaced column must not be dropped.
    raise DataError(f"{path}:1: header {','.join(header)}: expected sent0[,sent1[,hard_neg]] (or text)")
  names = header
  index = {name: i for i, name in enumerate(names)}
  columns: dict[str, list[str]] = {name: [] for name in names}
  while True:
    start_line = reader.line_num + 1
    try:
      row = next(reader)
    except StopIteration:
      break
    except csv.Error as e:
      raise DataError(f"{path}:{start_line}: malformed csv row ({e})") from None
    if len(row) != len(header):
      raise DataError(f"{path}:{start_line}: expected {len(header)} fields ({','.join(header)}), found {len(row)}")
    for name, i in index.items():
      if not row[i].strip():
        raise DataError(f"{path}:{start_line}: empty {name}")
      columns[name].append(row[i])
  if not columns["sent0"]:
    raise DataError(f"{path}: no rows after the header")
  return Corpus(path, columns)


TFDS_PREFIX = "tfds:"
# NAME may carry a config and a version (``wiki40b/en:1.3.0``); the split may hold slices (``train[:10%]``).
_TFDS_SPEC = re.compile(r"tfds:(?P<name>[^:\[\]]+?(?::\d+\.\d+\.\d+)?)(?::(?P<split>[^:].*))?")
_TFDS_READ_CHUNK = 4096  # Records per random-access read: large enough to amortise the per-call cost.


def read_tfds(spec: str, *, text_feature: str = "text", data_dir: str | None = None,
              skip_empty_lines: bool = True) -> Corpus:
  """Reads one text feature of a TFDS split (``tfds:NAME[:split]``, split default ``train``).

  Goes through ``tfds.data_source``, which reads the prepared ArrayRecord files
  by index and does not need TensorFlow. The dataset must have been prepared
  with ``file_format="array_record"`` (or be downloadable by TFDS in that
  format); ``data_dir`` is TFDS's data folder (``None``: ``$TFDS_DATA_DIR`` or
  ``~/tensorflow_datasets``). Record ``i`` of the split becomes example ``i``;
  records whose text is empty or whitespace are skipped and counted (their
  indices in ``skipped_empty_lines``), or are an error if not
  ``skip_empty_lines``, as for a ``.txt`` file.
  """
  match = _TFDS_SPEC.fullmatch(spec)
  if not match:
    raise DataError(f"{spec}: expected tfds:NAME[:split] (e.g. tfds:imdb_reviews:train or tfds:wiki40b/en:1.3.0:train)")
  name, split = match["name"], match["split"] or "train"
  try:
    import tensorflow_datasets as tfds  # Optional: only this source needs it.
  except ImportError:
    raise DataError(f"{spec}: reading TFDS datasets needs the tensorflow-datasets and array-record packages "
                    "(pip install tensorflow-datasets array-record)") from None
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir or None)
  except Exception as e:  # TFDS raises many types (not found, bad split, wrong file format); all mean "cannot open".
    raise DataError(f"{spec}: tfds.data_source({name!r}, split={split!r}) failed: {type(e).__name__}: {e}") from e
  features = source.dataset_info.features
  if text_feature not in features.keys():
    available = ", ".join(f"{key} ({type(features[key]).__name__})" for key in sorted(features.keys()))
    raise DataError(f"{spec}: no feature {text_feature!r}; set data.tfds_text_feature to one of: {available}")
  if not isinstance(features[text_feature], tfds.features.Text):
    texts = sorted(key for key in features.keys() if isinstance(features[key], tfds.features.Text))
    raise DataError(f"{spec}: feature {text_feature!r} is {type(features[text_feature]).__name__}, not Text "
                    f"(Text features: {', '.join(texts) or 'none'})")
  sentences, skipped = [], []
  for start in range(0, len(source), _TFDS_READ_CHUNK):
    indices = list(range(start, min(start + _TFDS_READ_CHUNK, len(source))))
    for index, record in zip(indices, source.__getitems__(indices)):
      value = record[text_feature]
      try:
        text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
      except UnicodeDecodeError as e:
        raise DataError(f"{spec}: record {index}: {text_feature} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
      if not text.strip():
        if not skip_empty_lines:
          raise DataError(f"{spec}: record {index}: empty {text_feature} (set data.skip_empty_lines=True to skip "
                          "and count them)")
        skipped.append(index)
        continue
      sentences.append(text)
  if not sentences:
    raise DataError(f"{spec}: no non-empty {text_feature} in {len(source)} records")
  return Corpus(spec, {"sent0": sentences}, skipped)


def load_corpus(path: str, *, root: str | None = None, skip_empty_lines: bool = True,
                tfds_text_feature: str = "text", tfds_data_dir: str | None = None) -> Corpus:
  """Reads a training corpus: ``tfds:NAME[:split]``, else a file by its extension (``.csv`` or text)."""
  if path.startswith(TFDS_PREFIX):
    corpus = read_tfds(path, text_feature=tfds_text_feature, data_dir=tfds_data_dir,
                       skip_empty_lines=skip_empty_lines)
    if corpus.skipped_empty_lines:
      first = ", ".join(map(str, corpus.skipped_empty_lines[:5]))
      logging.warning("%s: skipped %d empty text(s) (records %s%s)", path, len(corpus.skipped_empty_lines), first,
                      ", ..." if len(corpus.skipped_empty_lines) > 5 else "")
    return corpus
  full = resolve(path, root)
  corpus = read_csv(full) if full.endswith(".csv") else read_text_lines(full, skip_empty_lines=skip_empty_lines)
  if corpus.skipped_empty_lines:
    first = ", ".join(map(str, corpus.skipped_empty_lines[:5]))
    logging.warning("%s: skipped %d empty line(s) (lines %s%s)", full, len(corpus.skipped_empty_lines), first,
                    ", ..." if len(corpus.skipped_empty_lines) > 5 else "")
  return corpus


class Batches:
  """Deterministic batches of a corpus, addressable by step, for exact resume.

  Epoch ``e`` visits the examples in the order
  ``np.random.default_rng([seed, e]).permutation(n)``, cut into batches of
  ``batch_size``; step ``s`` is batch ``s % steps_per_epoch`` of epoch
  ``s // steps_per_epoch``. The last ``n % batch_size`` examples of each
  epoch's order are left out of that epoch (fixed shapes; they differ from
  epoch to epoch). So a run resumed at step ``s`` sees exactly the batches the
  uninterrupted run saw.

  With ``no_duplicates=True`` no batch holds the same text twice in any column
  (a repeated sentence would be a false negative): walking the epoch's order,
  an example whose text is already in the batch being filled is deferred to the
  next batch that has room for it. Epochs then may have a few batches fewer,
  and whatever cannot be placed at the end of an epoch is left out of it.

  A batch is ``{"input_ids", "attention_mask"}``, int32 ``[batch, columns,
  max_seq_len]``, where columns are the corpus's sentence columns in order
  (``sent0[, sent1[, hard_neg]]``).
  """

  def __init__(self, corpus: Corpus, tokenizer, *, batch_size: int, max_seq_len: int, seed: int,
               no_duplicates: bool = False):
    if batch_size > len(corpus):
      raise DataError(f"{corpus.path}: {len(corpus)} examples, fewer than one batch of {batch_size}")
    self.corpus = corpus
    # A copy of its own: `iterate` tokenizes in a thread while the caller (evaluation during training) may use
    # the original, and a Hugging Face fast tokenizer used by two threads at once fails ("Already borrowed").
    self.tokenizer = copy.deepcopy(tokenizer)
    self.batch_size = batch_size
    self.max_seq_len = max_seq_len
    self.seed = seed
    self.no_duplicates = no_duplicates
    self._layouts: dict[int, np.ndarray] = {}

  @property
  def steps_per_epoch(self) -> int:
    """Batches in epoch 0 (every epoch has this many unless ``no_duplicates``)."""
    return self.steps_in_epoch(0)

  def steps_in_epoch(self, epoch: int) -> int:
    if not self.no_duplicates:
      return len(self.corpus) // self.batch_size
    return len(self._layout(epoch))

  def total_steps(self, num_epochs: int) -> int:
    return sum(self.steps_in_epoch(e) for e in range(num_epochs))

  def locate(self, step: int) -> tuple[int, int]:
    """(epoch, batch within the epoch) of a step."""
    if not self.no_duplicates:
      return divmod(step, self.steps_per_epoch)
    epoch = 0
    while step >= self.steps_in_epoch(epoch):
      step -= self.steps_in_epoch(epoch)
      epoch += 1
    return epoch, step

  def _layout(self, epoch: int) -> np.ndarray:
    """``[batches, batch_size]`` example indices of one epoch."""
    layout = self._layouts.get(epoch)
    if layout is None:
      order = np.random.default_rng([self.seed, epoch]).permutation(len(self.corpus))
      if self.no_duplicates:
        layout = self._distinct_batches(order)
      else:
        nb = len(order) // self.batch_size
        layout = order[: nb * self.batch_size].reshape(nb, self.batch_size)
      if len(self._layouts) > 4:  # Resume and prefetch only look near the current epoch.
        self._layouts.pop(min(self._layouts))
      self._layouts[epoch] = layout
    return layout

  def _distinct_batches(self, order: np.ndarray) -> np.ndarray:
    columns = list(self.corpus.columns.values())
    texts = [frozenset(col[r] for col in columns) for r in range(len(self.corpus))]
    batches, deferred, rest = [], [], iter(order.tolist())
    while True:
      batch, seen, still_deferred = [], set(), []
      for r in deferred:  # Deferred examples go first, in the order they were deferred.
        if len(batch) < self.batch_size and seen.isdisjoint(texts[r]):
          batch.append(r)
          seen.update(texts[r])
        else:
          still_deferred.append(r)
      deferred = still_deferred
      for r in rest if len(batch) < self.batch_size else ():
        if seen.isdisjoint(texts[r]):
          batch.append(r)
          seen.update(texts[r])
          if len(batch) == self.batch_size:
            break
        else:
          deferred.append(r)
      if len(batch) < self.batch_size:
        break
      batches.append(batch)
    if not batches:
      raise DataError(f"{self.corpus.path}: cannot fill one batch of {self.batch_size} distinct sentences")
    return np.asarray(batches, dtype=np.int64)

  def indices(self, step: int) -> np.ndarray:
    epoch, k = self.locate(step)
    return self._layout(epoch)[k]

  def batch(self, step: int, positions: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The batch of ``step``, or only its rows ``positions`` (one process's shard in multi-host training).

    Rows are tokenized one by one to ``max_seq_len``, so a shard equals the
    same rows of the whole batch, whichever process reads it.
    """
    rows = self.indices(step) if positions is None else self.indices(step)[positions]
    ids, masks = [], []
    for column in self.corpus.columns.values():
      i, m = models.tokenize_padded(self.tokenizer, [column[r] for r in rows], self.max_seq_len)
      ids.append(i)
      masks.append(m)
    return {"input_ids": np.stack(ids, axis=1), "attention_mask": np.stack(masks, axis=1)}

  def iterate(self, start_step: int, end_step: int, prefetch: int = 2, positions: np.ndarray | None = None
              ) -> Iterator[dict[str, np.ndarray]]:
    """Batches (or their rows ``positions``) for steps ``start_step .. end_step - 1``, tokenized ahead in a thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      ahead = [pool.submit(self.batch, s, positions) for s in range(start_step, min(start_step + prefetch, end_step))]
      for step in range(start_step, end_step):
        batch = ahead.pop(0).result()
        if step + prefetch < end_step:
          ahead.append(pool.submit(self.batch, step + prefetch, positions))
        yield batch


# ------------------------------------------------------------------------
# Downloads.

# SimCSE's download scripts (data/download_wiki.sh, data/download_nli.sh,
# SentEval/data/downstream/download_dataset.sh) fetch these files from this
# Hugging Face dataset's ``main``; we pin its current head so the bytes cannot
# change under a pinned checksum.
SIMCSE_HF_REVISION = "e145e8bb659b2aa2669f32ef79cb4cdef6c58fef"
DEFAULT_BASE_URL = f"https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/{SIMCSE_HF_REVISION}"
BASE_URL_ENV = "JAXCSE_DOWNLOAD_BASE_URL"  # Overrides DEFAULT_BASE_URL (a mirror, or a local server in tests).
_CHUNK_BYTES = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class DownloadError(RuntimeError):
  """A download that failed or did not verify; the message names the URL and what to do."""


@dataclasses.dataclass(frozen=True)
class RemoteFile:
  """One file of a download: ``filename`` under the base URL, saved as ``target`` under the data root.

  ``sha256`` is the pinned digest of the file, or ``None`` where none is known
  offline: then the digest the server announces for the file (Hugging Face's
  LFS sha256 in ``X-Linked-Etag``) is checked, and ``verified_members`` (paths
  inside ``extract_to``) carry the pinned digests instead. ``extract_to``: a
  tar archive to unpack under the data root, then delete.
  """

  filename: str
  target: str
  sha256: str | None
  extract_to: str | None = None
  verified_members: tuple[tuple[str, str], ...] = ()


# sha256 of every file jaxcse's STS/SICK evaluation reads, as SimCSE's
# senteval.tar unpacks them under senteval/downstream. These are the files the
# evaluation was validated on (../shared/data: SentEval results reproduced to
# 0.0012), byte-identical in two independent public copies of SimCSE's
# SentEval data (see shared/data/senteval/SOURCES.md). The archive's own digest
# is not known offline (the Hugging Face pages show it for an older revision).
_SENTEVAL_EVAL_SHA256 = """
21c0c6cc32f68f69d672dfae0f86935cdc2627bae4941381692941aa9320f8c4  STS/STS12-en-test/STS.input.MSRpar.txt
5526be59228bc34ccb3cb6f1f56c0d7278d3419b8886713ae016fd92b151f19c  STS/STS12-en-test/STS.gs.MSRpar.txt
c4a92a3645744f77d1cda9f2af7da5d11e807ae296f6a20fe5930403fb9c4dfe  STS/STS12-en-test/STS.input.MSRvid.txt
9c6096c6bcfb0144c8bbddb00900ca9198c88498630cd0c8f08d18365f1d7150  STS/STS12-en-test/STS.gs.MSRvid.txt
05acf33c0fcb592347f49e279137a17e0244d7b0d37cc113134320a5d3f586e1  STS/STS12-en-test/STS.input.SMTeuroparl.txt
708530c4d006d06881f3289fce35d624d7efe562dcf0fe5f8aa0eec3a135f6d4  STS/STS12-en-test/STS.gs.SMTeuroparl.txt
e605c67de4b7cee2c5629239d209e2845920f475ebd0468bdcf03d8da2ffa9cf  STS/STS12-en-test/STS.input.surprise.OnWN.txt
088d8ca22c0aa406e4a5d2e6e308a4f38b482b8e736c2445a38ffb6e4c4fb4fd  STS/STS12-en-test/STS.gs.surprise.OnWN.txt
cc4a0b9a1355c5680a8a37c02f2d08e35f95754b9f89a2a4a05088ee5ff57ffe  STS/STS12-en-test/STS.input.surprise.SMTnews.txt
aa6dfc868db333c43dc59be14d46fa6587c7ebddc0d497e717f647bf35121cf1  STS/STS12-en-test/STS.gs.surprise.SMTnews.txt
a20cb41a33a528f3c089c94ef24da8eb5e26ed594937cf6fa90f3d1c79d6c53c  STS/STS13-en-test/STS.input.FNWN.txt
8ca95b7228119578e2007839cf7969f22c4f1fd41fd610c4b7f9683072d98066  STS/STS13-en-test/STS.gs.FNWN.txt
637f3b4afdc8d1cc789e91a4d7217efff30e503c34a872d93e8b27e7b1136cb7  STS/STS13-en-test/STS.input.headlines.txt
f49f64089011436dd296ef384c07160219406feef7dc4b9fa2af52a519f32bc6  STS/STS13-en-test/STS.gs.headlines.txt
cb74993eef23cfa2c03da7e5a08c62e50c9baafae0fa9ba0bb5a09d8e7d2be65  STS/STS13-en-test/STS.input.OnWN.txt
0cd497aaddb00a2fb6db25f77bccfc09e8aa012e11549b81b434bab1a27ad954  STS/STS13-en-test/STS.gs.OnWN.txt
b39579e59c7b9f4063545c3d4643f8db16dc060cd0a35447ef56ff0aabec9d83  STS/STS14-en-test/STS.input.deft-forum.txt
ba6dc76696b5c93985590a325b4d142449932cdf0d715b2bab1b1743fe3c488c  STS/STS14-en-test/STS.gs.deft-forum.txt
cc450dcd9228211c1a311de1ff28199f166dce6f7fc81dcb5ce968a3a8a80d2d  STS/STS14-en-test/STS.input.deft-news.txt
105c5b333abd50c274efb4dae9e3e0dab36ed63eee780cfb49955b1586bd62f2  STS/STS14-en-test/STS.gs.deft-news.txt
2ed0ea55d196cdbb440ed428eb1846dcb43486a692aafb22b3bc5c14c44407c8  STS/STS14-en-test/STS.input.headlines.txt
f243c34647255cd0b994565ed4f58dd31506e7d9c9d6250d1a6dd14095625832  STS/STS14-en-test/STS.gs.headlines.txt
295fc99f8a9215c330b36a08bc1ff3e428f10057be5bb915262111494b3616e2  STS/STS14-en-test/STS.input.images.txt
fc994ebacc7074c332626fa9e29542d7340a48a3cdb999b47cdb59c378523a62  STS/STS14-en-test/STS.gs.images.txt
8cd2333328d17e3212afa2d43dd934c5521e3fd35fc786b992dc7864f9d34f8f  STS/STS14-en-test/STS.input.OnWN.txt
1c80147df270ea4cfce14a47ed29f8a2f10d5dc016d02836077fd786ff7f535b  STS/STS14-en-test/STS.gs.OnWN.txt
b25b3768762aa7cdcd89f2a25ce5049de7e4cd51b138227c3a31092ae8e2b5f5  STS/STS14-en-test/STS.input.tweet-news.txt
0098c644bfeaa2d511a8297b1940771865900c372c9dd49a62726dc5ec02c9a3  STS/STS14-en-test/STS.gs.tweet-news.txt
b8f1bc125559adbb3ac5b33206472b217c12621c3a6b5a8575da47dc0b536fc4  STS/STS15-en-test/STS.input.answers-forums.txt
1644301a7540e5484da285002e9269062852efb2272be614cad99c9530f6a102  STS/STS15-en-test/STS.gs.answers-forums.txt
4893f736e84cea176c39c882250f6513d5bbcfa6ebe8d3ffabcef6056d0471a7  STS/STS15-en-test/STS.input.answers-students.txt
028db213140f8c7aef7497c4ae38b6380938f20359852231669c83dce11c3701  STS/STS15-en-test/STS.gs.answers-students.txt
a54ec7af1924c900d8474586abae465819d2c03c73561aa2e76e7fa5e836faff  STS/STS15-en-test/STS.input.belief.txt
5736192faaccbdbecd0ef6b73ec04b24115cd2e48d55dc3b1b170da3d2a81c75  STS/STS15-en-test/STS.gs.belief.txt
85d90b0f8f258a47758808d382188ba2ee7b1adbbf84feb776afad0e4691d5d1  STS/STS15-en-test/STS.input.headlines.txt
e8e432f769c8a94ddb62ae3343890ac24a9dd78a116d56c707313bc59413dd56  STS/STS15-en-test/STS.gs.headlines.txt
0dac9494186838a8f4dfbb4ee290fec8d7581cf84a33d615c522700b3b50e0d6  STS/STS15-en-test/STS.input.images.txt
ed8878209098c77ca7f02ac413d3fd698f92ad3425999555e50fda89fc46012a  STS/STS15-en-test/STS.gs.images.txt
ebbffced7d4630755e61d4dfe4d82121198965a14b9f5734b5abedb961f0725c  STS/STS16-en-test/STS.input.answer-answer.txt
332efd741b0cb247d20dd2a6cec854360c921c7e6b395f328f562d8d26057214  STS/STS16-en-test/STS.gs.answer-answer.txt
705c3e82fb85fa3b6706a481b790e1030304ddc9c72d39e126693ed44b258ba6  STS/STS16-en-test/STS.input.headlines.txt
01e33a95996201a6e81e3cce9eda0f15048b77613ea64dce2929bb35479f7d85  STS/STS16-en-test/STS.gs.headlines.txt
dd4ca54d1dfcd7d1cabe67f0de98cde23f4c1696ecc0003afbecae1274305d63  STS/STS16-en-test/STS.input.plagiarism.txt
29984944a91aaff484f2b2e5d4d434fc8a6f5ef6f578a880cccd2786f5142fdc  STS/STS16-en-test/STS.gs.plagiarism.txt
9b455d8da1d1bae692d038da1d431827d23bfec04c64b109efc3b6b620fd422f  STS/STS16-en-test/STS.input.postediting.txt
81947ed9dbe7f85b7bd249df68ed5c7b2f16f06390ad568eb5554b1e26bc5577  STS/STS16-en-test/STS.gs.postediting.txt
58920c7da7dbc1b860609310782d88b7457d599c90a226819b5880262dd7f58a  STS/STS16-en-test/STS.input.question-question.txt
cf9ebf9d140191f73620cda0560947ad9283c910735d0d541b8a401a5e64afb0  STS/STS16-en-test/STS.gs.question-question.txt
c558fa95fec006608f13e3d942f153b614beabccbf33e64f36418d406a895e37  STS/STSBenchmark/sts-dev.csv
22ef3e10603b6655d7c7978c8eee26e7d5291dd5a71c5531b934fb025c108cbf  STS/STSBenchmark/sts-test.csv
0d0786bd8671a0a70614f2f890b8ab24b3c24d1ccb624bcca87618091fbe4f11  SICK/SICK_trial.txt
d0362afe8304c8d08166b82d76da2a8c665d5b635ac1f3f1ee82054511749f97  SICK/SICK_test_annotated.txt
"""

# The wiki1m and NLI digests are the LFS sha256 that Hugging Face shows for
# these files (unchanged since the dataset's first commit, d0065b9).
DOWNLOADS: dict[str, tuple[RemoteFile, ...]] = {
    "wiki1m": (RemoteFile("wiki1m_for_simcse.txt", "corpora/wiki1m_for_simcse.txt",
                          "7b1825863a99aa76479b0456f7c210539dfaeeb69598b41fb4de4f524dd5a706"),),
    "nli": (RemoteFile("nli_for_simcse.csv", "corpora/nli_for_simcse.csv",
                       "0747687ec3594fa449d2004fd3757a56c24bf5f7428976fb5b67176775a68d48"),),
    "senteval": (RemoteFile("senteval.tar", "senteval/senteval.tar", None, extract_to="senteval/downstream",
                            verified_members=tuple((path, digest) for digest, path in
                                                   (line.split() for line in _SENTEVAL_EVAL_SHA256.split("\n") if line))),),
}


def file_sha256(path: str) -> str:
  """Hex sha256 of a file, read in chunks."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
      digest.update(chunk)
  return digest.hexdigest()


class _RecordRedirects(urllib.request.HTTPRedirectHandler):
  """Keeps the headers of every redirect hop: Hugging Face announces an LFS file's sha256 on the first one."""

  def __init__(self):
    self.hop_headers = []

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    self.hop_headers.append(headers)
    return super().redirect_request(req, fp, code, msg, headers, newurl)


def _announced_sha256(all_headers) -> str | None:
  """The sha256 a server announces for the file: ``X-Linked-Etag`` (HF LFS) or a 64-hex ``ETag``."""
  for key in ("X-Linked-Etag", "ETag"):
    for headers in all_headers:
      value = (headers.get(key) or "").removeprefix("W/").strip('"').lower()
      if _SHA256_HEX.fullmatch(value):
        return value
  return None


def _offline_error(url: str, dest: str, sha256: str | None, cause: object) -> DownloadError:
  check = f" (sha256 {sha256})" if sha256 else ""
  return DownloadError(
      f"cannot download {url}: {cause}. If this machine has no network access, download the file elsewhere and "
      f"copy it by hand to {dest}{check}; running the command again then verifies it and goes on.")


def _write_part(response, part: str, url: str, *, offset: int) -> str:
  """Writes the response body into ``part`` after its first ``offset`` bytes; returns the whole file's sha256."""
  length = response.headers.get("Content-Length")
  expected_size = offset + int(length) if length is not None else None
  digest = hashlib.sha256()
  with open(part, "r+b" if offset else "wb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b"") if offset else ():  # The kept bytes count in the digest.
      digest.update(chunk)
    with tqdm.tqdm(total=expected_size, initial=offset, unit="B", unit_scale=True, desc=os.path.basename(part),
                   disable=None) as progress:  # disable=None: shown on a terminal only.
      try:
        for chunk in iter(lambda: response.read(_CHUNK_BYTES), b""):
          f.write(chunk)
          digest.update(chunk)
          progress.update(len(chunk))
      except (OSError, http.client.HTTPException) as e:  # Reset connection, timeout, short read.
        raise DownloadError(f"download of {url} broke off after {f.tell()} bytes ({e}); {part} is kept and running "
                            "the command again resumes it") from None
    size = f.tell()
  if expected_size is not None and size != expected_size:
    raise DownloadError(f"download of {url} broke off at {size} of {expected_size} bytes; {part} is kept and "
                        "running the command again resumes it")
  return digest.hexdigest()


def fetch_file(url: str, dest: str, *, sha256: str | None = None, timeout: float = 60.0) -> str:
  """Downloads ``url`` to ``dest``, verified, resumable, atomically; returns the file's sha256.

  Bytes go to ``dest + ".part"``; a ``.part`` left by an interrupted run is
  resumed with an HTTP ``Range`` request (from scratch if the server ignores
  it). The finished file must match ``sha256``, else the digest the server
  announces (``X-Linked-Etag``/``ETag``); with neither, it is kept unverified
  with a warning. A file that does not verify is deleted, never renamed into
  place; a verified one is renamed to ``dest`` in one step.

  Raises:
    DownloadError: the server cannot be reached (offline), answers an HTTP
      error, the transfer breaks off (the ``.part`` is kept for a resume), or
      the digest differs (the ``.part`` is deleted).
  """
  os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
  part = dest + ".part"
  offset = os.path.getsize(part) if os.path.exists(part) else 0
  redirects = _RecordRedirects()
  opener = urllib.request.build_opener(redirects)
  request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
  response = None
  try:
    response = opener.open(request, timeout=timeout)
  except urllib.error.HTTPError as e:
    if not (e.code == 416 and offset):  # 416 on a resume: the .part already holds every byte; verify it below.
      raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    announced = _announced_sha256([*redirects.hop_headers, e.headers])
  except (urllib.error.URLError, OSError) as e:
    raise _offline_error(url, dest, sha256, getattr(e, "reason", e)) from None
  if response is not None:
    with response:
      announced = _announced_sha256([*redirects.hop_headers, response.headers])
      if sha256 and announced and announced != sha256:  # Fail before fetching bytes that cannot verify.
        raise DownloadError(f"{url}: the server announces sha256 {announced}, not the expected {sha256}; the remote "
                            "file has changed, so it is not downloaded")
      resumed = response.status == 206 and (response.headers.get("Content-Range") or "").startswith(f"bytes {offset}-")
      actual = _write_part(response, part, url, offset=offset if resumed else 0)  # A 200 (Range ignored): start over.
  else:
    actual = file_sha256(part)
  expected = sha256 or announced
  if expected is None:
    logging.warning("%s: no sha256 known or announced by the server; kept unverified (sha256 %s)", url, actual)
  elif actual != expected:
    os.remove(part)
    source = "pinned" if sha256 else "announced by the server"
    raise DownloadError(f"{url}: downloaded sha256 {actual} differs from the expected {expected} ({source}); the "
                        "corrupted file was deleted, run the command again to retry")
  os.replace(part, dest)
  return actual


def _verify_members(root: str, members: Sequence[tuple[str, str]], origin: str) -> None:
  for relpath, digest in members:
    path = os.path.join(root, relpath)
    if not os.path.isfile(path):
      raise DownloadError(f"{origin}: {relpath} is missing")
    actual = file_sha256(path)
    if actual != digest:
      raise DownloadError(f"{origin}: {relpath} has sha256 {actual}, expected {digest}")


def _members_ok(root: str, members: Sequence[tuple[str, str]]) -> bool:
  try:
    _verify_members(root, members, root)
  except DownloadError:
    return False
  return True


def extract_tar(archive: str, dest: str, *, verified_members: Sequence[tuple[str, str]] = ()) -> list[str]:
  """Unpacks a tar archive into ``dest`` safely; returns the files written (paths relative to ``dest``).

  Extraction uses tarfile's ``data`` filter, which refuses absolute paths,
  ``..``, links pointing outside and special files. Everything is unpacked
  into a temporary folder beside ``dest`` and checked against
  ``verified_members`` first; only then are the files moved into ``dest``
  (existing files of the same name are replaced, others left alone).
  """
  parent = os.path.dirname(os.path.abspath(dest))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=".extract-", dir=parent)
  try:
    try:
      with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    except (tarfile.TarError, OSError) as e:
      raise DownloadError(f"{archive}: cannot extract safely ({type(e).__name__}: {e}); nothing was written to {dest}")
    _verify_members(staging, verified_members, f"{archive} (nothing was written to {dest})")
    written = []
    for folder, _, files in os.walk(staging):
      for name in files:
        relpath = os.path.relpath(os.path.join(folder, name), staging)
        os.makedirs(os.path.dirname(os.path.join(dest, relpath)), exist_ok=True)
        os.replace(os.path.join(folder, name), os.path.join(dest, relpath))
        written.append(relpath)
    return sorted(written)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def download(name: str, root: str, *, base_url: str | None = None) -> list[str]:
  """Fetches one of ``DOWNLOADS`` (``senteval``, ``wiki1m``, ``nli``) into the data root ``root``.

  ``base_url`` (else ``$JAXCSE_DOWNLOAD_BASE_URL``, else SimCSE's Hugging Face
  dataset at a pinned revision) is where the files are, by name. Files already
  present and verified are not fetched again; a present file with the wrong
  digest is an error (it is not overwritten). Returns the paths it checked or
  wrote.
  """
  if name not in DOWNLOADS:
    raise DownloadError(f"unknown download {name!r}; choose from {', '.join(DOWNLOADS)}")
  base = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
  done = []
  for remote in DOWNLOADS[name]:
    url = f"{base}/{remote.filename}"
    target = os.path.join(root, remote.target)
    if remote.extract_to:
      extract_dir = os.path.join(root, remote.extract_to)
      if remote.verified_members and _members_ok(extract_dir, remote.verified_members):
        logging.info("%s: already there, %d files verified", extract_dir, len(remote.verified_members))
        done.append(extract_dir)
        continue
      fetched = not os.path.exists(target)
      if fetched:
        fetch_file(url, target, sha256=remote.sha256)
      else:
        logging.info("%s: using the archive already there (its files are verified after extraction)", target)
      try:
        written = extract_tar(target, extract_dir, verified_members=remote.verified_members)
      except DownloadError as e:
        if not fetched:
          raise DownloadError(f"{e}; {target} was there before this run: remove it to download it again") from None
        os.remove(target)  # Else every later run would reuse the bad archive.
        raise DownloadError(f"{e}; the downloaded archive was deleted") from None
      os.remove(target)  # Its content is in place and verified; the archive would only double the disk use.
      logging.info("%s: extracted %d files (%d verified by sha256)", extract_dir, len(written),
                   len(remote.verified_members))
      done.append(extract_dir)
      continue
    if os.path.exists(target):
      actual = file_sha256(target)
      if remote.sha256 and actual != remote.sha256:
        raise DownloadError(f"{target} exists but its sha256 is {actual}, not {remote.sha256}; remove it to "
                            "download it again")
      logging.info("%s: already there%s", target, ", sha256 verified" if remote.sha256 else "")
    else:
      fetch_file(url, target, sha256=remote.sha256)
      logging.info("%s: downloaded and verified", target)
    done.append(target)
  return done


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m jaxcse.data", description=__doc__.split("\n\n")[0])
  commands = parser.add_subparsers(dest="command", required=True)
  fetch = commands.add_parser("download", help="fetch SimCSE's training and evaluation data, verified by sha256")
  fetch.add_argument("names", nargs="+", choices=sorted(DOWNLOADS), metavar="NAME",
                     help=f"what to fetch: {', '.join(DOWNLOADS)}")
  fetch.add_argument("--data_dir", default=None, help=f"data root (default ${DATA_DIR_ENV}); created if missing")
  fetch.add_argument("--base_url", default=None,
                     help=f"where the files are (default ${BASE_URL_ENV}, else {DEFAULT_BASE_URL})")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  root = args.data_dir or os.environ.get(DATA_DIR_ENV)
  if not root:
    parser.error(f"no data directory: pass --data_dir or set ${DATA_DIR_ENV}")
  os.makedirs(root, exist_ok=True)
  try:
    for name in args.names:
      for path in download(name, root, base_url=args.base_url):
        print(path)
  except DownloadError as e:
    raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
  main()
