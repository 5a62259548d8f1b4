"""Pair and triplet data in sentence-transformers' convention, read with Hugging Face ``datasets``.

Sources (``config.data.train``, or a ``datasets.Dataset`` given to ``train.train_and_evaluate``):
  * ``.jsonl`` (or ``.json``), ``.parquet``, and ``.csv`` with ``data.csv_format=sentence_transformers``;
  * a folder written by ``Dataset.save_to_disk``;
  * ``hf:NAME[:CONFIG[:SPLIT]]``: a dataset of the Hugging Face hub (split default ``train``; ``hf:NAME::SPLIT``
    keeps the default config), through ``datasets.load_dataset`` and its cache (``HF_HUB_OFFLINE=1`` reads the
    cache only).

Columns, as sentence-transformers' data collator reads them: the first column named ``label``, ``labels``,
``score`` or ``scores`` (in that order) is the label: one number per row, or a list of numbers (a teacher's scores
or embedding) or a list of such lists (a teacher embedding per text column) of the same shape in every row; a
``dataset_name`` column is ignored; every other column, in the dataset's order whatever its name, is text: anchor,
positive, negative_1..k.

Every row is checked before training starts (``validate``): a missing value, an empty text (or one of only control,
format or space characters), text that is not valid UTF-8, or a label that is not a finite number is a
``DataError`` naming the source, the row (counted from 0, as ``dataset[i]``) and the column; for a ``.jsonl`` or
``.csv`` file also its line (``file:LINE:``, from 1, blank lines counted: datasets skips them, so a row's line is
not always its number + 1 or + 2). A file datasets cannot parse (a line that is not JSON, a number beyond float64,
a lone surrogate, a ragged csv row) is one such line too, found by reading the file again (``_json_problem``,
``_csv_problem``). The rows stay in Arrow (memory-mapped for files and folders): batches read their rows when they are made, and checks
and digests walk the data in chunks of ``CHUNK_ROWS``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import shutil
import unicodedata

import numpy as np

from jaxcse.core import files
from jaxcse.data.root import DataError, resolve

HF_PREFIX = "hf:"
LABEL_COLUMNS = ("label", "labels", "score", "scores")  # sentence-transformers' DEFAULT_LABEL_COLUMNS, in its order.
IGNORED_COLUMNS = ("dataset_name",)  # sentence-transformers' multi-dataset tag: never text.
FILE_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
CSV_FORMATS = ("simcse", "sentence_transformers")
CHUNK_ROWS = 65_536  # Rows per Arrow slice of the checks and digests: bounded memory whatever the dataset's size.
# Under datasets' cache: one folder per sha256 of a file's bytes (``_load_file``).
FILE_CACHE = "jaxcse_files"
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"  # What a csv's label must look like (no nan, no inf).
# A text of nothing but these Unicode categories (control, format, space, line and paragraph separators: U+0000,
# the zero-width characters, U+FEFF, ...) has no visible character: BERT's tokenizer drops them all, so it would
# train as [CLS] [SEP], an empty text. Private-use and unassigned characters count as visible.
INVISIBLE_CATEGORIES = ("Cc", "Cf", "Zs", "Zl", "Zp")
_INVISIBLE = r"^[\p{Cc}\p{Cf}\p{Z}]*$"  # The same, as an RE2 pattern for Arrow.


def visible(text: str) -> bool:
  """Whether ``text`` has a character outside ``INVISIBLE_CATEGORIES`` (the own dev sets' texts are held to it too)."""
  return any(unicodedata.category(c) not in INVISIBLE_CATEGORIES for c in text)


class RowError(DataError):
  """A bad value at a row (from 0, as ``dataset[i]``) and column; ``load_pairs`` adds a file's line to it."""

  def __init__(self, name: str, row: int, column: str, problem: str):
    super().__init__(f"{name}: row {row}, column {column!r}: {problem}")
    self.row, self.column, self.problem = row, column, problem


class MixedColumn(DataError):
  """A JSON column whose values are of two types that datasets kept as JSON text, with no row to name."""

  def __init__(self, name: str, column: str):
    super().__init__(f"{name}: column {column!r} holds values of more than one type (a column holds one type)")
    self.column = column


@contextlib.contextmanager
def quiet_datasets():
  """datasets without its progress bars ("Generating train split", "Creating json from Arrow format") and log
  lines ("Failed to read file ..."): a jaxcse command reports in its own lines, and a file that datasets cannot
  read is one ``DataError``. The previous settings come back afterwards."""
  import datasets
  from datasets.utils import logging as datasets_logging

  bars_were_off = datasets.are_progress_bars_disabled()
  logger = datasets_logging.get_logger()  # The library's root logger, "datasets".
  level = logger.level
  datasets.disable_progress_bars()
  logger.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    logger.setLevel(level)
    if not bars_were_off:
      datasets.enable_progress_bars()


def is_pairs_source(source, csv_format: str = "simcse") -> bool:
  """Whether ``source`` is read here: a ``datasets.Dataset``, ``hf:...``, a folder, or a file of this reader's kind.

  A ``.csv`` is this reader's only with ``csv_format="sentence_transformers"``; else it is SimCSE's
  ``sent0,sent1[,hard_neg]`` file (``corpora.read_csv``).
  """
  if not isinstance(source, str):
    return True
  if source.startswith(HF_PREFIX):
    return True
  suffix = os.path.splitext(source)[1].lower()
  if suffix == ".csv":
    return csv_format == "sentence_transformers"
  return suffix in FILE_SUFFIXES or os.path.isdir(source)


@dataclasses.dataclass
class PairCorpus:
  """Training rows of a ``datasets.Dataset``: text columns in order (anchor, positive, negatives), maybe a label.

  ``dataset`` holds only those columns, in Arrow format (``dataset[rows]`` is a ``pyarrow.Table``). ``labels`` is
  the label column as float64 (``labels[rows]``: ``[rows, *label_shape]``), or None: a number per row in memory, a
  list per row read from the (memory-mapped) rows a batch asks for (``ListLabels``).
  """

  path: str  # The source, as messages name it.
  dataset: object  # datasets.Dataset, with_format("arrow"), its columns text_columns (+ label_column).
  text_columns: tuple[str, ...]
  label_column: str | None
  labels: np.ndarray | ListLabels | None
  skipped_empty_lines: tuple = ()  # Nothing is skipped: a bad row is an error.
  file_sha256: str | None = None  # sha256 of the bytes the rows were read from (``_load_file``); None: not a file.

  def __len__(self) -> int:
    return len(self.dataset)

  def texts(self, rows) -> list[list[str]]:
    """The texts of ``rows``, one list per text column (anchor first)."""
    table = self.dataset[np.asarray(rows).tolist()]
    return [table.column(name).to_pylist() for name in self.text_columns]

  def text_columns_arrow(self):
    """Each text column as a ``pyarrow.ChunkedArray`` of all rows, in the dataset's order."""
    table = self.dataset[0 : len(self)]
    return [table.column(name) for name in self.text_columns]

  @property
  def label_shape(self) -> tuple[int, ...] | None:
    """One row's label's shape (``()``: a number), or None without labels."""
    return None if self.labels is None else tuple(self.labels.shape[1:])

  @functools.cached_property
  def content_sha256(self) -> str:
    """sha256 of the rows' content (column names, texts, labels), whatever the Arrow chunking."""
    return content_sha256(self.dataset, self.text_columns, self.label_column)


@dataclasses.dataclass(frozen=True)
class ListLabels:
  """A label column of lists (a teacher's scores or embeddings), each row's of ``row_shape``: read as float64 only
  for the rows asked for, so a corpus of millions of teacher embeddings stays on disk (Arrow, memory-mapped)."""

  dataset: object  # datasets.Dataset in Arrow format, holding ``column``.
  column: str
  row_shape: tuple[int, ...]

  @property
  def shape(self) -> tuple[int, ...]:
    return (len(self.dataset), *self.row_shape)

  def __len__(self) -> int:
    return len(self.dataset)

  def __getitem__(self, rows) -> np.ndarray:
    rows = np.asarray(rows)
    values = _flat_numbers(self.dataset[rows.reshape(-1).tolist()].column(self.column))
    return values.to_numpy().reshape(*rows.shape, *self.row_shape)


def _chunks(dataset):
  """``(start, pyarrow.Table)`` slices of ``dataset`` (Arrow format) in row order, ``CHUNK_ROWS`` rows each."""
  for start in range(0, len(dataset), CHUNK_ROWS):
    yield start, dataset[start : start + CHUNK_ROWS]


def content_sha256(dataset, text_columns, label_column) -> str:
  """sha256 of the texts (lengths and UTF-8 bytes) and labels (float64) of ``dataset``, column by column."""
  import pyarrow as pa

  names = list(text_columns) + ([label_column] if label_column else [])
  lengths = {name: hashlib.sha256() for name in names}
  values = {name: hashlib.sha256() for name in names}
  for _, table in _chunks(dataset):
    for name in text_columns:
      column = table.column(name).cast(pa.large_string()).combine_chunks()
      if not len(column):
        continue
      _, offsets, data = column.buffers()
      offsets = np.frombuffer(offsets, np.int64)[column.offset : column.offset + len(column) + 1]
      lengths[name].update(np.diff(offsets).astype("<i8").tobytes())
      values[name].update(memoryview(data)[offsets[0] : offsets[-1]])
    if label_column:
      column = table.column(label_column)
      numbers = _flat_numbers(column) if _list_depth(column.type) else column.cast(pa.float64())
      values[label_column].update(numbers.to_numpy().astype("<f8").tobytes())
  whole = hashlib.sha256()
  for name in names:
    whole.update(f"{name}\0{lengths[name].hexdigest()}\0{values[name].hexdigest()}\0".encode())
  return whole.hexdigest()


# --------------------------------------------------------------------------
# Reading.


_HF_SPEC = re.compile(r"hf:(?P<name>[^:]+)(?::(?P<config>[^:]*))?(?::(?P<split>.+))?")


def _load_hub(spec: str):
  """``hf:NAME[:CONFIG[:SPLIT]]`` through ``datasets.load_dataset`` (the hub, or its cache offline)."""
  import datasets

  match = _HF_SPEC.fullmatch(spec)
  if not match:
    raise DataError(
      f"{spec}: expected hf:NAME[:CONFIG[:SPLIT]] (e.g. hf:sentence-transformers/all-nli:triplet:train, "
      "or hf:NAME::SPLIT for the default config)"
    )
  name, config, split = match["name"], match["config"] or None, match["split"] or "train"
  try:
    with quiet_datasets():
      return datasets.load_dataset(name, config, split=split)
  except Exception as e:  # The hub client and datasets raise many types; all mean "cannot load this".
    raise DataError(
      f"{spec}: datasets.load_dataset({name!r}, {config!r}, split={split!r}) failed: {_describe(e)}"
    ) from None


def _csv_header(path: str) -> list[str]:
  """The header's names. Only its line is decoded: a bad byte further down is its own line's (``_csv_problem``)."""
  try:
    with open(path, "rb") as f:
      line = f.readline()
    return next(csv.reader([line.decode("utf-8-sig")]))
  except StopIteration:
    raise DataError(f"{path}: empty csv (expected a header naming the columns)") from None
  except UnicodeDecodeError as e:
    raise DataError(f"{path}:1: not valid UTF-8 ({e.reason} at byte {e.start} of the line)") from None
  except (OSError, csv.Error) as e:
    raise DataError(f"{path}: cannot read its header ({type(e).__name__}: {e})") from None


def _stat(path: str) -> tuple:
  """What changes when a file is written, renamed over or has its times set: ctime too, which no one sets back."""
  st = os.stat(path)
  return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _load_file(path: str, kind: str):
  """A ``.jsonl``/``.json``, ``.parquet`` or ``.csv`` file as ``(datasets.Dataset, sha256 of the bytes read)``.

  datasets keys its Arrow cache of a local file on the path and modification time only, so a file rewritten with
  its mtime kept (``cp -p``, ``rsync -a``, ``tar x``, a restored backup) would be served its old rows while its
  sha256 named the new ones. The cache is read under a folder named by the sha256 of the file's bytes: other bytes,
  another folder, and the digest a run records is the one its rows were read under. A file that changes while it
  is hashed and read (its ``_stat`` before and after differ) is refused, and the folder, which may hold rows of
  other bytes than its name's, removed.
  """
  import datasets

  try:
    before = _stat(path)
  except OSError as e:
    raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
  kwargs = {}
  if kind == "csv":
    # Every column as written: pandas would read "NA" or "null" as a missing value and "007" as the number 7.
    header = _csv_header(path)
    if len(set(header)) != len(header):
      raise DataError(f"{path}:1: header {','.join(header)} names a column twice")
    kwargs = {
      "features": datasets.Features({name: datasets.Value("string") for name in header}),
      "keep_default_na": False,
    }
  digest = files.file_sha256(path)
  cache_dir = os.path.join(datasets.config.HF_DATASETS_CACHE, FILE_CACHE, digest)
  try:
    with quiet_datasets():
      dataset = datasets.load_dataset(kind, data_files=path, split="train", cache_dir=cache_dir, **kwargs)
  except Exception as e:  # pyarrow's and pandas' parse errors come in many types; each names what is wrong.
    # datasets' error names no line (for JSON it is its fallback's, reading the file as one document: "Trailing
    # data"): read the file again for the first line that cannot be read, else say what datasets said.
    found = _json_problem(path) if kind == "json" else _csv_problem(path) if kind == "csv" else None
    raise DataError(found or f"{path}: cannot read as {kind}: {_describe(e)}") from None
  if not os.path.exists(path) or _stat(path) != before:
    shutil.rmtree(cache_dir, ignore_errors=True)
    raise DataError(f"{path}: changed while it was read; read it again once it is written")
  return dataset, digest


def _load_folder(path: str):
  import datasets

  try:
    with quiet_datasets():
      loaded = datasets.load_from_disk(path)
  except Exception as e:  # FileNotFoundError for a folder of something else; others for damaged files.
    raise DataError(f"{path}: not a folder written by Dataset.save_to_disk ({_describe(e)})") from None
  if isinstance(loaded, datasets.DatasetDict):
    splits = ", ".join(loaded)
    raise DataError(
      f"{path}: a DatasetDict (splits {splits}): give one split's folder, e.g. {os.path.join(path, next(iter(loaded)))}"
    )
  return loaded


def _describe(error: BaseException) -> str:
  """``Type: message`` of the error's root cause (datasets wraps a parse error in a DatasetGenerationError), on one
  line."""
  while error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
    error = error.__cause__ or error.__context__
  text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
  return f"{type(error).__name__}: {text[:500]}"


def load_pairs(source, *, root: str | None = None) -> PairCorpus:
  """Reads and checks ``source`` (see the module's docstring): a ``PairCorpus``, or a ``DataError``."""
  import datasets

  if isinstance(source, datasets.Dataset):
    name, dataset = "train_data (a datasets.Dataset)", source
  elif not isinstance(source, str):
    raise DataError(f"training data must be a path, hf:NAME or a datasets.Dataset, not a {type(source).__name__}")
  elif source.startswith(HF_PREFIX):
    name, dataset = source, _load_hub(source)
  else:
    name = resolve(source, root)
    if os.path.isdir(name):
      dataset = _load_folder(name)
    else:
      kind = FILE_SUFFIXES.get(os.path.splitext(name)[1].lower())
      if kind is None:
        raise DataError(f"{name}: not a .jsonl, .json, .parquet or .csv file, nor a Dataset.save_to_disk folder")
      dataset, digest = _load_file(name, kind)
      try:
        corpus = validate(dataset, name)
      except RowError as e:
        line = _line_of(name, kind, e.row, len(dataset))
        raise DataError(f"{name}{f':{line}' if line else ''}: row {e.row}, column {e.column!r}: {e.problem}") from None
      except MixedColumn as e:
        raise DataError((kind == "json" and _first_of_another_type(name, e.column)) or str(e)) from None
      return dataclasses.replace(corpus, file_sha256=digest)
  return validate(dataset, name)


def split_columns(names: list[str]) -> tuple[tuple[str, ...], str | None, list[str]]:
  """``(text columns in order, label column or None, other label-named columns)`` of a dataset's column names, as
  sentence-transformers reads them (it would tokenize a second label-named column as text: ``validate`` refuses)."""
  labels = [name for name in LABEL_COLUMNS if name in names]
  label = labels[0] if labels else None
  texts = tuple(name for name in names if name != label and name not in IGNORED_COLUMNS)
  return texts, label, labels[1:]


def validate(dataset, name: str) -> PairCorpus:
  """Checks every row of ``dataset`` (see the module's docstring) and returns it as a ``PairCorpus``."""
  import pyarrow as pa
  import pyarrow.compute as pc

  texts, label, extra = split_columns(list(dataset.column_names))
  if extra:
    raise DataError(
      f"{name}: columns {label!r} and {extra[0]!r} are both label columns (sentence-transformers "
      f"reads the first of {', '.join(LABEL_COLUMNS)} as the label): keep one"
    )
  if not texts:
    raise DataError(f"{name}: no text column (columns: {', '.join(dataset.column_names) or 'none'})")
  if len(dataset) == 0:
    raise DataError(f"{name}: no rows")
  types = dataset.features.arrow_schema
  for column in texts:
    kind = types.field(column).type
    if pa.types.is_null(kind):  # No value at all in the column (a key that no JSON line has a value for).
      raise RowError(name, 0, column, "missing value (null)")
    if isinstance(kind, pa.BaseExtensionType) and pa.types.is_string(kind.storage_type):  # JSON of mixed types.
      _first_bad(name, 0, column, _not_json_text(dataset, column), "not text")
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
      raise DataError(
        f"{name}: column {column!r} holds {kind}, not text (every column but a label "
        f"({'/'.join(LABEL_COLUMNS)}) and dataset_name is a text column: anchor, positive, negatives)"
      )
  if label:
    kind = types.field(label).type
    if isinstance(kind, pa.BaseExtensionType) and pa.types.is_string(kind.storage_type):  # JSON of mixed types.
      _first_bad(name, 0, label, _not_json_number(dataset, label), "not a number")
      raise MixedColumn(name, label)  # Numbers and strings of numbers: datasets kept no row's type.
    depth = _list_depth(kind)
    if depth > 2 or not (
      pa.types.is_integer(_innermost(kind))
      or pa.types.is_floating(_innermost(kind))
      or (not depth and (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_boolean(kind)))
    ):
      raise DataError(
        f"{name}: label column {label!r} holds {kind}, not numbers (a number per row, a list of numbers, or a "
        "list of lists of numbers)"
      )
  arrow = dataset.select_columns(list(texts) + ([label] if label else [])).with_format("arrow")
  labels, row_shape = [], None
  for start, table in _chunks(arrow):
    for column in texts:
      values = table.column(column)
      _check_utf8(name, start, column, values)
      _first_bad(name, start, column, pc.is_null(values), "missing value (null)")
      invisible = pc.match_substring_regex(values, _INVISIBLE)
      if pc.any(invisible).as_py():
        row = int(np.flatnonzero(invisible.to_numpy(zero_copy_only=False))[0])
        empty = not values[row].as_py().strip()
        problem = "empty text" if empty else "no visible character (only control, format or space characters)"
        raise RowError(name, start + row, column, problem)
    if label and _list_depth(types.field(label).type):
      row_shape = _check_list_labels(name, start, label, table.column(label), row_shape)
    elif label:
      values = table.column(label)
      _first_bad(name, start, label, pc.is_null(values), "missing label")
      text = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
      if text:
        _check_utf8(name, start, label, values)
        _first_bad(name, start, label, pc.invert(pc.match_substring_regex(values, _NUMBER)), "is not a number", values)
      numbers = pc.cast(values, pa.float64())  # A csv's '1e400' is inf: not finite, named as written.
      _first_bad(name, start, label, pc.invert(pc.is_finite(numbers)), "not a finite number", values if text else None)
      labels.append(numbers.to_numpy())
  if row_shape is not None:
    return PairCorpus(name, arrow, texts, label, ListLabels(arrow, label, row_shape))
  return PairCorpus(name, arrow, texts, label, np.concatenate(labels) if label else None)


def _list_depth(kind) -> int:
  """How many list types wrap a column's values (0: a number or a string)."""
  import pyarrow as pa

  depth = 0
  while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
    kind, depth = kind.value_type, depth + 1
  return depth


def _innermost(kind):
  for _ in range(_list_depth(kind)):
    kind = kind.value_type
  return kind


def _flat_numbers(column):
  """A list column's numbers, row after row, as one float64 Arrow array (``pyarrow.ChunkedArray`` in)."""
  import pyarrow as pa

  array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  for _ in range(_list_depth(array.type)):
    array = array.flatten()
  return array.cast(pa.float64())


def _check_list_labels(name: str, start: int, column: str, values, row_shape: tuple[int, ...] | None):
  """``RowError`` at the first row of a chunk's list labels that is missing, empty, of another shape than the
  corpus's first row (``row_shape``, once known), or holds a missing or non-finite number; returns the shape."""
  import pyarrow.compute as pc

  values = values.combine_chunks()
  _first_bad(name, start, column, pc.is_null(values), "missing label")
  level, owner = values, np.arange(len(values))  # owner: the row each element of this level belongs to.
  shape = []
  for depth in range(_list_depth(values.type)):
    lengths = pc.list_value_length(level).to_numpy(zero_copy_only=False)
    expected = row_shape[depth] if row_shape is not None else int(lengths[0])
    inner = " inner" if depth else ""
    if expected == 0:
      raise RowError(name, start + int(owner[0]), column, f"an empty{inner} list, not numbers")
    wrong = np.flatnonzero(lengths != expected)
    if len(wrong):
      problem = (
        f"a{'n' + inner if inner else ''} list of {int(lengths[wrong[0]])} numbers, where row 0's has {expected}"
      )
      raise RowError(name, start + int(owner[wrong[0]]), column, problem)
    shape.append(expected)
    owner, level = np.repeat(owner, lengths), level.flatten()
    _first_bad_owner(name, start, column, owner, pc.is_null(level).to_numpy(zero_copy_only=False), "a missing number")
  numbers = pc.cast(level, "float64").to_numpy(zero_copy_only=False)
  _first_bad_owner(name, start, column, owner, ~np.isfinite(numbers), "a number that is not finite (nan or inf)")
  return tuple(shape)


def _first_bad_owner(name: str, start: int, column: str, owner: np.ndarray, bad: np.ndarray, problem: str) -> None:
  """``RowError`` naming the row (``owner`` of the first ``bad`` element) whose label holds ``problem``."""
  if bad.any():
    raise RowError(name, start + int(owner[np.flatnonzero(bad)[0]]), column, f"{problem} in the label")


def _json_values(dataset, column: str):
  """The JSON text of each value of a column that ``datasets`` read as JSON (its values of mixed types)."""
  import pyarrow as pa

  values = dataset.with_format("arrow")[0 : len(dataset)].column(column)
  return pa.chunked_array([chunk.storage for chunk in values.chunks], pa.string())


def _not_json_text(dataset, column: str):
  import pyarrow.compute as pc

  return pc.invert(pc.starts_with(_json_values(dataset, column), '"'))


def _not_json_number(dataset, column: str):
  import pyarrow.compute as pc

  return pc.invert(pc.match_substring_regex(_json_values(dataset, column), _NUMBER))


def _first_bad(name: str, start: int, column: str, mask, problem: str, written=None) -> None:
  """Raises ``RowError`` naming the first row where ``mask`` (a boolean Arrow array of a chunk from row ``start``) is
  true; the problem follows the value as written (``repr``) when ``written``, the chunk's column, is given."""
  import pyarrow.compute as pc

  if pc.any(mask).as_py():
    row = int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])
    if written is not None:
      value = written[row].as_py()
      problem = f"{value!r} {problem}" if problem.startswith("is ") else f"{value!r} is {problem}"
    raise RowError(name, start + row, column, problem)


def _check_utf8(name: str, start: int, column: str, values) -> None:
  """``RowError`` at the first value of a chunk's text column that is not valid UTF-8. pyarrow's JSON and Parquet
  readers pass such bytes through; every later use (tokenizing, Arrow's string functions) then fails."""
  import pyarrow as pa

  try:
    values.validate(full=True)
  except pa.ArrowInvalid:
    for row, raw in enumerate(values.cast(pa.binary()).to_pylist()):  # The bytes as they are; no copy is checked.
      try:
        raw is None or raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise RowError(name, start + row, column, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    raise


# --------------------------------------------------------------------------
# A file's lines: only when something is wrong, to name the line (datasets' rows skip the blank lines).


def _jsonl_lines(path: str):
  """``(line number from 1, row from 0, bytes)`` of each line of a JSON-lines file that is not blank (datasets
  skips those; a line of spaces is blank too)."""
  row = -1
  with open(path, "rb") as f:
    for number, line in enumerate(f, start=1):
      if line.strip():
        row += 1
        yield number, row, line


def _csv_records(path: str):
  """``(first line from 1, row from 0, fields)`` of each record under a csv's header that is not blank (pandas
  skips empty lines and lines of spaces); a quoted field may span lines."""
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f)
    next(reader, None)
    row, before = -1, reader.line_num
    for fields in reader:
      if fields and (len(fields) > 1 or fields[0].strip()):
        row += 1
        yield before + 1, row, fields
      before = reader.line_num


def _line_of(path: str, kind: str, row: int, rows: int) -> int | None:
  """The line of ``path`` that holds ``row``, or None where the lines do not map to rows (a ``.json`` that is one
  JSON document, a file datasets read otherwise than counted here: the count of rows must agree)."""
  try:
    found, count = None, 0
    for line, index, _ in _jsonl_lines(path) if kind == "json" else _csv_records(path) if kind == "csv" else ():
      found = line if index == row else found
      count += 1
    return found if count == rows else None
  except (OSError, UnicodeDecodeError, csv.Error):
    return None


class _Number(float):
  """A JSON number that keeps its text (``1e400`` reads as inf: the message names what was written)."""

  def __new__(cls, text: str):
    number = super().__new__(cls, text)
    number.text = text
    return number


class _Constant(str):
  """JSON's ``NaN``, ``Infinity`` or ``-Infinity`` as written (Python's json reads them; JSON has no such values)."""


def _json_kind(value) -> str:
  return {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(
    type(value), "a number"
  )


def _json_problem(path: str) -> str | None:
  """The first line of a JSON-lines file that pyarrow cannot read, as a message naming the line, row and column: not
  UTF-8, not JSON, a number beyond float64 or NaN/Infinity, a lone surrogate (``"\\ud800"``: no UTF-8 encodes it);
  no rows at all. None when every line reads (or the file is one JSON document, not lines)."""
  lines = 0
  try:
    for number, row, line in _jsonl_lines(path):
      lines += 1
      where = f"{path}:{number}: row {row}"
      if row == 0 and line.lstrip().startswith(b"["):
        return None  # A JSON array, one document: datasets' own message.
      try:
        value = json.loads(line.decode("utf-8").strip(), parse_float=_Number, parse_constant=_Constant)
      except UnicodeDecodeError as e:
        return f"{where}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)"
      except json.JSONDecodeError as e:
        if row == 0 and _one_document(path):
          return None  # A JSON object over several lines, not JSON lines: datasets' own message.
        return f"{where}: not JSON ({e.msg} at column {e.colno})"
      if not isinstance(value, dict):
        return f'{where}: {_json_kind(value)}, where a row is an object ({{"column": value, ...}})'
      for column, cell in value.items():
        if isinstance(cell, _Constant) or (isinstance(cell, float) and not math.isfinite(cell)):
          return f"{where}, column {column!r}: {getattr(cell, 'text', cell)} is not a finite number"
        if isinstance(cell, str):
          try:
            cell.encode("utf-8")
          except UnicodeEncodeError as e:
            return f"{where}, column {column!r}: a lone surrogate (U+{ord(cell[e.start]):04X}), not text"
  except OSError:
    return None
  return None if lines else f"{path}: no rows (every line of the file is blank)"


def _one_document(path: str) -> bool:
  try:
    with open(path, encoding="utf-8") as f:
      json.load(f)
    return True
  except (OSError, ValueError):
    return False


def _first_of_another_type(path: str, column: str) -> str | None:
  """The first line of a JSON-lines file whose ``column`` holds another JSON type than the first row's."""
  first = None
  for number, row, line in _jsonl_lines(path):
    try:
      cell = json.loads(line).get(column)
    except (ValueError, AttributeError):
      return None
    if cell is None:
      continue
    if first is None:
      first = _json_kind(cell)
    elif _json_kind(cell) != first:
      return (
        f"{path}:{number}: row {row}, column {column!r}: {_json_kind(cell)}, where row 0 holds {first} (a column "
        "holds one type)"
      )
  return None


def _csv_problem(path: str) -> str | None:
  """The first line of a csv that pandas cannot read, as a message naming the line (and row): not UTF-8, more
  fields than the header. None when no such line is found."""
  try:
    with open(path, "rb") as f:
      for number, line in enumerate(f, start=1):
        try:
          line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as e:
          return f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)"
    header = _csv_header(path)
    for number, row, fields in _csv_records(path):
      if len(fields) > len(header):
        return f"{path}:{number}: row {row}: {len(fields)} fields, the header has {len(header)} ({','.join(header)})"
  except (OSError, csv.Error, DataError):
    return None
  return None
