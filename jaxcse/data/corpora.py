"""Training corpora, read strictly: every example kept, every problem an error naming the file and line.

Formats:
  * ``.txt``: one sentence per line (SimCSE's ``wiki1m_for_simcse.txt``),
    UTF-8. A line with only whitespace is skipped and counted
    (``skip_empty_lines=True``, the default) or is an error.
  * ``.csv``: a header naming the columns (``sent0,sent1[,hard_neg]``; a
    single ``sent0`` or ``text`` column is read as unsupervised text). Every
    row must have every column, non-empty.
  * pair data (``.jsonl``, ``.parquet``, a ``save_to_disk`` folder, ``hf:NAME``,
    a ``.csv`` with ``csv_format="sentence_transformers"``): ``pairs.py``.
  * ``tfds:NAME[:split]``: one text feature of a tensorflow-datasets dataset,
    read through ``tfds.data_source`` (ArrayRecord files, no TensorFlow);
    needs ``pip install tensorflow-datasets array-record``.

Anything else wrong (a missing file, undecodable bytes, a malformed row) is a
``DataError`` naming the file and line; nothing is dropped silently.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import logging
import re
import zlib

from jaxcse.data import pairs
from jaxcse.data.root import DataError, resolve


@dataclasses.dataclass
class Corpus:
  """Training examples as columns of equal length: ``sent0`` always, ``sent1``/``hard_neg`` when present."""

  path: str
  columns: dict[str, list[str]]
  skipped_empty_lines: list[int] = dataclasses.field(default_factory=list)

  def __len__(self) -> int:
    return len(self.columns["sent0"])


def read_senteval_lines(path: str, encoding: str = "utf-8") -> list[str]:
  """The lines of a SentEval task file (STS or transfer), as SentEval reads them."""
  try:
    with open(path, encoding=encoding) as f:
      return f.read().splitlines()
  except FileNotFoundError:
    raise DataError(f"{path}: missing SentEval file (is the data root laid out as senteval/downstream/...?)") from None
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not valid {encoding} ({e.reason} at byte {e.start})") from None


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
    raise DataError(
      f"{path}:1: header {','.join(header)}: expected sent0[,sent1[,hard_neg]] (or text); for "
      "columns in order whatever their names (anchor, positive, negatives, a label/score), as "
      "sentence-transformers reads them, set data.csv_format=sentence_transformers"
    )
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


def read_tfds(
  spec: str, *, text_feature: str = "text", data_dir: str | None = None, skip_empty_lines: bool = True
) -> Corpus:
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
    raise DataError(
      f"{spec}: reading TFDS datasets needs the tensorflow-datasets and array-record packages "
      "(pip install tensorflow-datasets array-record)"
    ) from None
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
    raise DataError(
      f"{spec}: feature {text_feature!r} is {type(features[text_feature]).__name__}, not Text "
      f"(Text features: {', '.join(texts) or 'none'})"
    )
  sentences, skipped = [], []
  for start in range(0, len(source), _TFDS_READ_CHUNK):
    indices = list(range(start, min(start + _TFDS_READ_CHUNK, len(source))))
    for index, record in zip(indices, source.__getitems__(indices)):
      value = record[text_feature]
      try:
        text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
      except UnicodeDecodeError as e:
        raise DataError(
          f"{spec}: record {index}: {text_feature} is not valid UTF-8 ({e.reason} at byte {e.start})"
        ) from None
      if not text.strip():
        if not skip_empty_lines:
          raise DataError(
            f"{spec}: record {index}: empty {text_feature} (set data.skip_empty_lines=True to skip and count them)"
          )
        skipped.append(index)
        continue
      sentences.append(text)
  if not sentences:
    raise DataError(f"{spec}: no non-empty {text_feature} in {len(source)} records")
  return Corpus(spec, {"sent0": sentences}, skipped)


def load_corpus(
  path,
  *,
  root: str | None = None,
  skip_empty_lines: bool = True,
  tfds_text_feature: str = "text",
  tfds_data_dir: str | None = None,
  csv_format: str = "simcse",
) -> Corpus | pairs.PairCorpus:
  """Reads a training corpus: ``tfds:NAME[:split]``, pair data (``pairs.is_pairs_source``: ``hf:``, a
  ``datasets.Dataset``, a ``save_to_disk`` folder, ``.jsonl``/``.json``/``.parquet``, a ``.csv`` with
  ``csv_format="sentence_transformers"``), else a file by its extension (SimCSE's ``.csv``, or text)."""
  if csv_format not in pairs.CSV_FORMATS:
    raise DataError(f"data.csv_format must be one of {', '.join(pairs.CSV_FORMATS)}, not {csv_format!r}")
  if pairs.is_pairs_source(
    path if not isinstance(path, str) or path.startswith(pairs.HF_PREFIX) else _resolved_if_present(path, root),
    csv_format,
  ):
    return pairs.load_pairs(path, root=root)
  if path.startswith(TFDS_PREFIX):
    corpus = read_tfds(path, text_feature=tfds_text_feature, data_dir=tfds_data_dir, skip_empty_lines=skip_empty_lines)
    if corpus.skipped_empty_lines:
      first = ", ".join(map(str, corpus.skipped_empty_lines[:5]))
      logging.warning(
        "%s: skipped %d empty text(s) (records %s%s)",
        path,
        len(corpus.skipped_empty_lines),
        first,
        ", ..." if len(corpus.skipped_empty_lines) > 5 else "",
      )
    return corpus
  full = resolve(path, root)
  corpus = read_csv(full) if full.endswith(".csv") else read_text_lines(full, skip_empty_lines=skip_empty_lines)
  if corpus.skipped_empty_lines:
    first = ", ".join(map(str, corpus.skipped_empty_lines[:5]))
    logging.warning(
      "%s: skipped %d empty line(s) (lines %s%s)",
      full,
      len(corpus.skipped_empty_lines),
      first,
      ", ..." if len(corpus.skipped_empty_lines) > 5 else "",
    )
  return corpus


def _resolved_if_present(path: str, root: str | None) -> str:
  """``path`` resolved under the data root if it is there (so a folder is recognised), else as given."""
  try:
    return resolve(path, root)
  except DataError:
    return path  # The reader names what is missing.


def is_heldout(text: str, fraction: float) -> bool:
  """Whether a sentence belongs to the held-out split: ``crc32(its UTF-8 bytes) mod 10000 < 10000 * fraction``.

  Decided by the text alone, so the split is the same whatever the file's order, on any machine, and a
  sentence that occurs twice is on one side only.
  """
  return zlib.crc32(text.encode("utf-8")) % 10_000 < round(10_000 * fraction)


def split_heldout(corpus: Corpus, fraction: float) -> tuple[Corpus, Corpus]:
  """``(training part, held-out part)`` of a one-column corpus, by ``is_heldout``, each in the corpus's order."""
  if list(corpus.columns) != ["sent0"]:
    raise DataError(f"{corpus.path}: a held-out split is for one-column (text) corpora, not {list(corpus.columns)}")
  train, heldout = [], []
  for text in corpus.columns["sent0"]:
    (heldout if is_heldout(text, fraction) else train).append(text)
  if not heldout or not train:
    raise DataError(
      f"{corpus.path}: a held-out fraction of {fraction} leaves {len(train)} training and "
      f"{len(heldout)} held-out sentences; both must be non-empty"
    )
  return (
    Corpus(corpus.path, {"sent0": train}, corpus.skipped_empty_lines),
    Corpus(f"{corpus.path} (held out)", {"sent0": heldout}),
  )
