r"""Using a trained encoder: embed files to numpy, and a Python API with exact top-k search.

  python -m jaxcse.encode --model PATH_OR_ID --input FILE --output OUT.npy \
      [--pooler P] [--normalize] [--batch_size N] [--max_seq_len L] [--column NAME] [--dtype float16]

Input: a text file (one sentence a line), or a ``.csv`` / ``.jsonl`` file with
the text in ``--column``. Row ``i`` of the output is always input row ``i``:
an empty line is embedded as the empty sentence (``[CLS] [SEP]``), never
skipped. The output is written through ``numpy.lib.format.open_memmap`` one
chunk at a time, so memory stays flat whatever the input size; an interrupted
run resumes at its last finished chunk and produces byte-identical output.
``OUT.json`` records the model, pooler, count, dim, dtype and normalisation.

  from jaxcse import Encoder
  enc = Encoder.load("workdirs/quickstart")
  vectors = enc.encode(["A man plays a guitar.", "Someone is playing music."])
  enc.build_index(corpus_sentences)
  scores, ids = enc.search(["a person with an instrument"], top_k=5)
"""

from __future__ import annotations

import csv
import errno
import json
import os
import sys
from collections.abc import Iterator, Sequence

import numpy as np

from jaxcse import data as data_lib
from jaxcse.core import errors, files, interrupts, platforms, provenance
from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress
from jaxcse.inference import embedder as embedder_lib
from jaxcse.inference.encoder import (  # noqa: F401  (Encoder and its errors: ``from jaxcse.encode import Encoder``)
  Encoder,
  PromptError,
  TruncateDimError,
  check_truncate_dim,
  chunks,
)
from jaxcse.models import poolers

# --------------------------------------------------------------------------
# Streaming input.


def _text_rows(path: str) -> Iterator[str]:
  with open(path, "rb") as f:
    for lineno, line in enumerate(f, start=1):
      try:
        text = line.decode("utf-8-sig" if lineno == 1 else "utf-8")
      except UnicodeDecodeError as e:
        raise data_lib.DataError(
          f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)"
        ) from None
      yield text.rstrip("\n").removesuffix("\r")


def _csv_rows(path: str, column: str) -> Iterator[str]:
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f, strict=True)
    header = next(reader, None)
    if header is None or column not in header:
      raise data_lib.DataError(f"{path}:1: no column {column!r} in the header {header}")
    index = header.index(column)
    while True:
      start = reader.line_num + 1
      try:
        row = next(reader)
      except StopIteration:
        return
      except (csv.Error, UnicodeDecodeError) as e:
        raise data_lib.DataError(f"{path}:{start}: malformed csv row ({e})") from None
      if len(row) != len(header):
        raise data_lib.DataError(f"{path}:{start}: expected {len(header)} fields, found {len(row)}")
      yield row[index]


def _jsonl_rows(path: str, column: str) -> Iterator[str]:
  with open(path, "rb") as f:
    for lineno, line in enumerate(f, start=1):
      try:
        record = json.loads(line)
      except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise data_lib.DataError(f"{path}:{lineno}: not a JSON object ({e})") from None
      if not isinstance(record, dict) or not isinstance(record.get(column), str):
        raise data_lib.DataError(f"{path}:{lineno}: no string field {column!r}")
      yield record[column]


def read_rows(path: str, column: str | None = None) -> Iterator[str]:
  """The input's sentences, one per row, streamed; ``column`` names the text field of a csv/jsonl file."""
  if not os.path.isfile(path):
    raise data_lib.DataError(f"{path}: no such file")
  if path.endswith((".csv", ".jsonl")):
    if not column:
      raise data_lib.DataError(f"{path}: a .csv or .jsonl input needs --column (the text field)")
    return _csv_rows(path, column) if path.endswith(".csv") else _jsonl_rows(path, column)
  return _text_rows(path)


# --------------------------------------------------------------------------
# The command.


class EncodeError(JaxcseError, RuntimeError):
  """An encoding job that cannot go on as asked; the message says why and what to do."""


def sidecar_path(output_path: str) -> str:
  """The JSON written beside an output ``X.npy``: ``X.json`` (model, pooler, provenance of the rows)."""
  return os.path.splitext(output_path)[0] + ".json"


def check_not_overwriting(output_path: str, overwrite: bool) -> None:
  """Refuses an output, or its sidecar, that exists already, unless ``overwrite``: nothing is replaced unasked."""
  if overwrite:
    return
  for path, what in ((output_path, "the output"), (sidecar_path(output_path), "its sidecar")):
    if os.path.exists(path):
      raise EncodeError(
        f"{path} exists ({what}{' of ' + output_path if path != output_path else ''}); pass "
        "--overwrite to replace it, or choose another --output"
      )


def _empty_input(input_path: str, column: str | None) -> str:
  rows = f"rows with a {column!r} field" if column else "lines"
  return f"{input_path}: no {rows}, so there is nothing to encode (an empty line is encoded, an empty file is not)"


def encode_file(
  encoder: Encoder,
  input_path: str,
  output_path: str,
  *,
  column: str | None = None,
  normalize: bool = False,
  dtype: str = "float32",
  chunk_size: int = 8192,
  model_name: str = "",
  progress: bool = True,
  overwrite: bool = False,
  prompt_name: str | None = None,
  prompt: str | None = None,
) -> dict:
  """Embeds every row of ``input_path`` into ``output_path`` (.npy), resuming a partial run; returns the sidecar.

  ``prompt_name``/``prompt``: as ``Encoder.encode``'s (the text put before every row is part of the job).

  A run resumes a partial output only if everything that determines its rows is the same: the input file, the
  model (its checkpoint step and a fingerprint of its parameters), pooler, dtype, normalisation, length and
  chunking; a partial output of another job is refused (``EncodeError``), never continued. An existing
  ``output_path`` or sidecar (``sidecar_path``) is refused unless ``overwrite``. An input without a row is an
  ``EncodeError`` (a 0-row array is almost always a wrong file, not a wanted result).
  """
  if dtype not in ("float32", "float16"):
    raise ValueError(f"dtype must be float32 or float16, not {dtype!r}")
  check_not_overwriting(output_path, overwrite)
  count = sum(1 for _ in read_rows(input_path, column))  # A first pass: the output's shape, and bad rows early.
  if count == 0:
    raise EncodeError(_empty_input(input_path, column))
  prefix = encoder.prompt(prompt_name, prompt)  # An unknown prompt name stops here, before anything is written.
  stat = os.stat(input_path)
  job = {
    "input": os.path.abspath(input_path),
    "input_size": stat.st_size,
    "input_mtime": stat.st_mtime,
    "model": model_name,
    "checkpoint_step": encoder.step,
    "params_sha256": encoder.fingerprint,
    "pooler": encoder.pooler,
    "count": count,
    "dim": encoder.dim,
    "dtype": dtype,
    "normalized": normalize,
    "column": column,
    "chunk_size": chunk_size,
    "max_seq_len": encoder.embedder.max_seq_len,
    "prompt": prefix,
  }
  partial, state_path = output_path + ".partial", output_path + ".progress.json"
  done = 0
  if os.path.exists(partial) and os.path.exists(state_path):
    with open(state_path) as f:
      saved = json.load(f)
    if saved.get("job") != job:
      differ = sorted(k for k in set(job) | set(saved.get("job", {})) if saved.get("job", {}).get(k) != job.get(k))
      raise EncodeError(
        f"{partial} holds a partial output of another job (it differs in {', '.join(differ)}); "
        f"rerun the same command to resume it, or delete {partial} and {state_path} to start over"
      )
    done = saved["rows_done"]
  elif os.path.exists(state_path):  # The progress of a partial output that is gone: nothing to resume.
    os.remove(state_path)
  os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)  # As evaluate and export do.
  out = None
  try:
    out = np.lib.format.open_memmap(
      partial, mode="r+" if done else "w+", dtype=np.dtype(dtype), shape=(count, encoder.dim)
    )
    _reserve(partial)
  except OSError as e:
    del out
    if not done:  # Nothing of this job written yet: leave nothing behind.
      for path in (partial, state_path):
        if os.path.exists(path):
          os.remove(path)
    if e.filename is None:  # numpy's own writes (the header, the map's last byte) name no file.
      raise OSError(e.errno, e.strerror or str(e), partial) from None
    raise
  bar = Progress(count, initial=done, unit="sent", desc=f"encode {os.path.basename(input_path)}", enabled=progress)
  rows = read_rows(input_path, column)
  for _ in range(done):
    next(rows)
  start = done
  try:
    for chunk in chunks(rows, chunk_size):  # Chunks start at multiples of chunk_size, as in the first run.
      vectors = encoder.encode(chunk, normalize_embeddings=normalize, prompt=prefix)
      if not np.isfinite(vectors).all():
        bad = start + int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise EncodeError(
          f"the model gives non-finite embeddings (row {bad} of {input_path}); nothing was written to {output_path}"
        )
      out[start : start + len(chunk)] = vectors.astype(dtype)
      start += len(chunk)
      out.flush()
      files.write_json(state_path, {"job": job, "rows_done": start})
      bar.update(len(chunk))
  except BaseException as e:
    del out
    # A model that cannot embed a row makes the whole job void; with no finished chunk there is nothing to resume.
    # Otherwise (a kill, Ctrl-C, a full disk) the partial output and its progress stay, to resume.
    if isinstance(e, (EncodeError, embedder_lib.EmbeddingError)) or not os.path.exists(state_path):
      for path in (partial, state_path):
        if os.path.exists(path):
          os.remove(path)
    if isinstance(e, KeyboardInterrupt):
      kept = (
        f"{start} of {count} rows are in {partial}: rerun the same command to resume"
        if os.path.exists(state_path)
        else "nothing was written"
      )
      raise KeyboardInterrupt(f"interrupted; {kept}") from None
    raise
  try:
    bar.close()
    del out
    sidecar = {
      k: job[k]
      for k in (
        "model",
        "checkpoint_step",
        "params_sha256",
        "pooler",
        "count",
        "dim",
        "dtype",
        "normalized",
        "max_seq_len",
        "prompt",
      )
    }
    sidecar["input"] = job["input"]
    sidecar["packed"] = encoder.embedder.packed  # A layout, not part of the job: rows resume across it alike.
    sidecar["provenance"] = provenance.provenance(
      model=model_name,
      checkpoint_step=encoder.step,
      revision=encoder.spec.revision,
      data={os.path.basename(input_path): files.file_sha256(input_path)},
    )
  except KeyboardInterrupt:  # Every row is in the partial output and its progress: the same command finishes it.
    raise KeyboardInterrupt(
      f"interrupted; {start} of {count} rows are in {partial}: rerun the same command to resume"
    ) from None
  # The output and its sidecar together: a Ctrl-C between them left an output with no sidecar (which the same
  # command then refuses to overwrite), so it waits the few milliseconds until both are written.
  with interrupts.uninterrupted():
    os.replace(partial, output_path)
    if os.path.exists(state_path):
      os.remove(state_path)
    files.write_json(sidecar_path(output_path), sidecar)
  return sidecar


def _reserve(path: str) -> None:
  """Allocates every block of ``path`` on disk now, so that a full disk is an ``OSError`` naming it here.

  The output is written through a memory map of a sparse file; a page that the disk has no room for is then
  SIGBUS, which kills the process with no message. Where the file system cannot allocate ahead (no
  ``posix_fallocate``), nothing is reserved.
  """
  if not hasattr(os, "posix_fallocate"):
    return
  fd = os.open(path, os.O_RDWR)
  try:
    os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
  except OSError as e:
    if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # The file system cannot: write as before.
      return
    raise OSError(e.errno, f"{e.strerror or e} (reserving the output's {os.fstat(fd).st_size} bytes)", path) from None
  finally:
    os.close(fd)


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.encode"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument("--input", required=True, help="text file (a sentence a line), or .csv/.jsonl with --column")
  parser.add_argument("--output", required=True, help="the .npy file to write (its folders are created)")
  parser.add_argument("--column", default=None, help="text field of a .csv/.jsonl input")
  parser.add_argument("--pooler", choices=poolers.names(), default=None, help="default: the model's test pooler")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--normalize", action="store_true", help="L2-normalise every embedding")
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per forward pass (at least 1)")
  parser.add_argument("--max_seq_len", type=int, default=None, help="cut sentences to this many tokens (at least 3)")
  parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
  parser.add_argument(
    "--packed",
    action="store_true",
    help="pack the sentences end to end into rows of real tokens (docs/models.md, Packed rows) instead of sorted "
    "padded batches: the same embeddings to float32 rounding; faster where texts are short against their bucket",
  )
  parser.add_argument("--chunk_size", type=int, default=8192, help="rows embedded and written at a time")
  parser.add_argument(
    "--overwrite",
    action="store_true",
    help="replace an existing --output and its sidecar (OUTPUT.json); without it they are refused",
  )
  parser.add_argument(
    "--prompt_name", default=None, help="one of the model's prompts (e.g. query, document), put before every row"
  )
  parser.add_argument("--prompt", default=None, help="a text put before every row instead of a named prompt")
  parser.add_argument(
    "--truncate_dim",
    type=int,
    default=None,
    help="keep the first this many dims of each embedding (a Matryoshka-trained model's smaller size; before "
    "--normalize); default: the model's own (a sentence-transformers folder's truncate_dim), else all",
  )
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()
  # The cheap checks before the model loads (encode_file reads the whole input before it writes anything).
  if not args.output.endswith(".npy"):
    parser.error("--output must end in .npy")
  embedder_lib.check_settings(args.batch_size, args.max_seq_len)
  if args.chunk_size < 1:
    raise EncodeError(f"chunk_size must be >= 1, not {args.chunk_size}")
  errors.check_output(args.output, folder=False)
  check_not_overwriting(args.output, args.overwrite)
  if next(iter(read_rows(args.input, args.column)), None) is None:
    raise EncodeError(_empty_input(args.input, args.column))
  encoder = Encoder.load(
    args.model,
    args.pooler,
    checkpoint=args.checkpoint,
    revision=args.revision,
    batch_size=args.batch_size,
    max_seq_len=args.max_seq_len,
    packed=args.packed,
    **({"truncate_dim": args.truncate_dim} if args.truncate_dim is not None else {}),
  )
  sidecar = encode_file(
    encoder,
    args.input,
    args.output,
    column=args.column,
    normalize=args.normalize,
    dtype=args.dtype,
    chunk_size=args.chunk_size,
    model_name=args.model,
    overwrite=args.overwrite,
    prompt_name=args.prompt_name,
    prompt=args.prompt,
  )
  print(
    f"wrote {args.output}: {sidecar['count']} x {sidecar['dim']} {sidecar['dtype']} (pooler {sidecar['pooler']}) "
    f"and its sidecar {sidecar_path(args.output)}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
