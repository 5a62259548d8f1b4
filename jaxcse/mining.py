r"""Hard negatives mined for (anchor, positive) pairs, as sentence-transformers 6.2's mine_hard_negatives mines them.

  jaxcse-mine --model M --input pairs.jsonl --output mined.jsonl [--corpus FILE] \
      --num_negatives 3 --range_max 20 --relative_margin 0.05 [--sampling_strategy random --seed 0] \
      [--output_format triplet|n-tuple|labeled-pair|labeled-list] [--output_scores]

  from jaxcse.mining import mine_hard_negatives
  mined = mine_hard_negatives("pairs.jsonl", "sentence-transformers/all-MiniLM-L6-v2", relative_margin=0.05)

Given the same embeddings, the selection is sentence-transformers 6.2's (``tests/test_mining.py``): the corpus is
the positives (deduplicated, first occurrence kept) or the given corpus followed by the positives; duplicate
anchors are one query whose positives are all of theirs; each query's ``range_max + max_positives`` most similar
corpus texts (cosine) are the candidates, its positives are taken out, then the margins (against the query's
lowest positive score), ``max_score`` and ``min_score``; ``range_min`` skips the best remaining candidates, and
``num_negatives`` are taken from the next ones (``top``), or drawn (``random``: ``random.Random(seed).sample``,
query by query, as sentence-transformers' ``random.sample`` draws after ``random.seed(seed)``).

Where it differs: a named anchor or positive column that the data lacks is an error (sentence-transformers falls
back to the first two columns); the data's columns are read as the pair reader reads them (``data.pairs``: a
``label``/``score`` or ``dataset_name`` column is never a text column); an invalid ``sampling_strategy`` is an
error; a cross-encoder, ``include_positives`` and prompt names (rather than prompt strings) are not offered. The
search is exact: ``jax.lax.top_k`` over the whole corpus for a block of queries at a time (memory: one block of
scores, ``SCORE_BLOCK_BYTES``); equal scores keep the earlier corpus text first.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

import numpy as np

from jaxcse.core import errors, files
from jaxcse.core.progress import Progress
from jaxcse.inference.hard_negatives import (  # noqa: F401  (the selection's API, as jaxcse.mining's)
  FILTERS,
  OUTPUT_FORMATS,
  SAMPLING_STRATEGIES,
  SCORE_BLOCK_BYTES,
  Grouped,
  MiningError,
  Options,
  Selection,
  group_pairs,
  output_columns,
  select_negatives,
  summary,
  top_k,
)

OUTPUT_SUFFIXES = {".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


# --------------------------------------------------------------------------
# From a dataset and an encoder.


def _embed(
  encoder, texts: list[str], prompt: str | None, what: str, progress: bool, batch_size: int | None
) -> np.ndarray:
  """Unit-length float32 embeddings of ``prompt + text`` for each text."""
  from jaxcse.inference import embedder as embedder_lib
  from jaxcse.inference.encoder import Encoder

  if prompt:
    texts = [prompt + text for text in texts]
  if isinstance(encoder, Encoder):
    with Progress(len(texts), unit="sent", desc=f"embedding the {what}", enabled=progress) as bar:
      vectors = embedder_lib.normalize_rows(encoder.embed(texts, batch_size=batch_size, progress=bar))
  else:  # Any encoder with sentence-transformers' call shape.
    vectors = np.asarray(encoder.encode(texts, normalize_embeddings=True), np.float32)
  if vectors.ndim != 2 or vectors.shape[0] != len(texts):
    raise ValueError(f"the encoder gave embeddings of shape {vectors.shape} for {len(texts)} texts")
  if not np.isfinite(vectors).all():
    raise MiningError(f"the model gives non-finite embeddings for the {what}; nothing was mined")
  return vectors


def read_corpus(corpus, column: str | None = None, *, root: str | None = None) -> list[str]:
  """The extra corpus: a list of texts, a ``.txt`` file (a text a line, empty lines skipped), or any source the
  pair reader reads (``data.load_pairs``), its ``column`` (default: the first text column)."""
  from jaxcse import data as data_lib

  if corpus is None or isinstance(corpus, (list, tuple)):
    if column:
      raise MiningError("corpus_column names a column of a corpus file, but the corpus is not a file")
    return list(corpus or ())
  if isinstance(corpus, str) and corpus.endswith(".txt"):
    if column:
      raise MiningError(f"{corpus}: a .txt corpus is one text a line, it has no columns (corpus_column {column!r})")
    return data_lib.read_text_lines(data_lib.resolve(corpus, root)).columns["sent0"]
  pairs = data_lib.load_pairs(corpus, root=root)
  if column and column not in pairs.text_columns:
    raise MiningError(f"{pairs.path}: no text column {column!r} (its text columns: {', '.join(pairs.text_columns)})")
  return pairs.dataset[0 : len(pairs)].column(column or pairs.text_columns[0]).to_pylist()


def _columns(pairs, anchor_column: str | None, positive_column: str | None) -> tuple[str, str]:
  names = pairs.text_columns
  if len(names) < 2:
    raise MiningError(
      f"{pairs.path}: mining needs an anchor and a positive column; its only text column is {names[0]!r}"
    )
  for given, what in ((anchor_column, "anchor_column"), (positive_column, "positive_column")):
    if given and given not in names:
      raise MiningError(f"{pairs.path}: no text column {given!r} ({what}); its text columns: {', '.join(names)}")
  anchor = anchor_column or names[0]
  positive = positive_column or next(n for n in names if n != anchor)
  if anchor == positive:
    raise MiningError(f"{pairs.path}: anchor_column and positive_column are both {anchor!r}")
  return anchor, positive


def mine_hard_negatives(
  dataset,
  encoder,
  *,
  anchor_column: str | None = None,
  positive_column: str | None = None,
  corpus=None,
  corpus_column: str | None = None,
  query_prompt: str | None = None,
  corpus_prompt: str | None = None,
  range_min: int = 0,
  range_max: int | None = None,
  max_score: float | None = None,
  min_score: float | None = None,
  absolute_margin: float | None = None,
  relative_margin: float | None = None,
  num_negatives: int = 3,
  sampling_strategy: str = "top",
  output_format: str = "triplet",
  output_scores: bool = False,
  seed: int = 0,
  batch_size: int | None = None,
  block_rows: int | None = None,
  use_faiss: bool = False,
  root: str | None = None,
  verbose: bool = True,
  progress: bool = True,
):
  """Hard negatives for a dataset of (anchor, positive) pairs: a ``datasets.Dataset`` in ``output_format``.

  The options are sentence-transformers 6.2's (``Options``, the module's docstring); given the same embeddings,
  the rows are its rows, in its order.

  Args:
    dataset: a ``datasets.Dataset``, or a source the pair reader reads (``.jsonl``/``.csv``/``.parquet``, a
      ``save_to_disk`` folder, ``hf:NAME[:CONFIG[:SPLIT]]``; ``data.load_pairs``), every row checked.
    encoder: a jaxcse ``Encoder``, a model ``Encoder.load`` loads (a workdir, a Hugging Face folder or hub id;
      loaded after the data and options are checked), or any object with ``encode(texts,
      normalize_embeddings=True)``.
    anchor_column, positive_column: default the first two text columns.
    corpus: more candidate texts besides the positives: a list, a ``.txt`` file (a text a line) or a pair-reader
      source (its ``corpus_column``, default its first text column).
    query_prompt, corpus_prompt: prepended to each anchor / corpus text before embedding.
    seed: the draw of ``sampling_strategy="random"``.
    batch_size: sentences per forward pass (default: the encoder's).
    block_rows: queries searched at a time (default: as many as ``SCORE_BLOCK_BYTES`` of scores hold).
    use_faiss: search with FAISS's exact ``IndexFlatIP`` (``pip install "jaxcse[faiss]"``), as s-t's ``use_faiss``.
    root: the data root that relative paths resolve under (default ``$JAXCSE_DATA_DIR``).
    verbose: print what was mined (``summary``).
    progress: progress bars while embedding and searching.

  Raises:
    MiningError, data.DataError: bad options or data, before the model is loaded.
  """
  options = Options(
    range_min=range_min,
    range_max=range_max,
    max_score=max_score,
    min_score=min_score,
    absolute_margin=absolute_margin,
    relative_margin=relative_margin,
    num_negatives=num_negatives,
    sampling_strategy=sampling_strategy,
    output_format=output_format,
    output_scores=output_scores,
    seed=seed,
    block_rows=block_rows,
    use_faiss=use_faiss,
  )
  job = prepare(
    dataset,
    options,
    anchor_column=anchor_column,
    positive_column=positive_column,
    corpus=corpus,
    corpus_column=corpus_column,
    root=root,
  )
  if isinstance(encoder, str):
    from jaxcse.inference.encoder import Encoder

    encoder = Encoder.load(encoder)
  return mine(
    job,
    encoder,
    query_prompt=query_prompt,
    corpus_prompt=corpus_prompt,
    batch_size=batch_size,
    verbose=verbose,
    progress=progress,
  )


@dataclasses.dataclass(frozen=True)
class Job:
  """A mining job, its data read and its options checked: all that is left is the model."""

  grouped: Grouped
  options: Options  # range_max resolved.
  anchor_column: str
  positive_column: str


def prepare(
  dataset,
  options: Options,
  *,
  anchor_column: str | None = None,
  positive_column: str | None = None,
  corpus=None,
  corpus_column: str | None = None,
  root: str | None = None,
) -> Job:
  """Reads and checks the data and the options (``mine_hard_negatives``' arguments), loading no model."""
  from jaxcse import data as data_lib

  options.check()
  pairs = data_lib.load_pairs(dataset, root=root)
  anchor, positive = _columns(pairs, anchor_column, positive_column)
  table = pairs.dataset[0 : len(pairs)]
  grouped = group_pairs(
    table.column(anchor).to_pylist(), table.column(positive).to_pylist(), read_corpus(corpus, corpus_column, root=root)
  )
  return Job(grouped, options.resolved(grouped.max_positives), anchor, positive)


def mine(
  job: Job,
  encoder,
  *,
  query_prompt: str | None = None,
  corpus_prompt: str | None = None,
  batch_size: int | None = None,
  verbose: bool = True,
  progress: bool = True,
):
  """Embeds the job's queries and corpus with ``encoder`` and mines: the ``datasets.Dataset`` of
  ``mine_hard_negatives``."""
  import datasets

  grouped = job.grouped
  corpus_embeddings = _embed(encoder, grouped.corpus, corpus_prompt, "corpus", progress, batch_size)
  query_embeddings = _embed(encoder, grouped.queries, query_prompt, "queries", progress, batch_size)
  with Progress(len(grouped.queries), unit="query", desc="searching", enabled=progress) as bar:
    selection = select_negatives(
      query_embeddings,
      corpus_embeddings,
      grouped.positive_indices,
      job.options,
      max_positives=grouped.max_positives,
      progress=bar,
    )
  mined = datasets.Dataset.from_dict(output_columns(grouped, selection, job.anchor_column, job.positive_column))
  if verbose:
    print("\n".join(summary(grouped, selection, len(mined))))
  return mined


def write_dataset(dataset, path: str) -> None:
  """Writes ``dataset`` as ``.jsonl``, ``.csv`` or ``.parquet`` (by ``path``'s extension), whole or not at all."""
  kind = OUTPUT_SUFFIXES.get(os.path.splitext(path)[1].lower())
  if kind is None:
    raise MiningError(f"{path}: the output must end in {', '.join(OUTPUT_SUFFIXES)}")
  from jaxcse.data.pairs import quiet_datasets

  with quiet_datasets():  # No "Creating json from Arrow format" bar: the command says what it wrote.
    if kind == "json":
      files.write_atomically(path, lambda tmp: dataset.to_json(tmp, lines=True, force_ascii=False))
    elif kind == "csv":
      files.write_atomically(path, lambda tmp: dataset.to_csv(tmp, index=False))
    else:
      files.write_atomically(path, dataset.to_parquet)


def has_list_columns(output_format: str, output_scores: bool) -> bool:
  """Whether that format's dataset has a column of lists (which a ``.csv`` cannot hold)."""
  return output_format == "labeled-list" or (output_scores and output_format in ("triplet", "n-tuple"))


# --------------------------------------------------------------------------
# The command.


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  from jaxcse.core import platforms
  from jaxcse.inference import embedder as embedder_lib
  from jaxcse.inference.encoder import Encoder
  from jaxcse.models import poolers

  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.mining"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument(
    "--input",
    required=True,
    help="the (anchor, positive) pairs: .jsonl, .csv (with a header), .parquet, a save_to_disk "
    "folder or hf:NAME[:CONFIG[:SPLIT]]",
  )
  parser.add_argument("--output", required=True, help="the mined dataset: .jsonl, .csv or .parquet")
  parser.add_argument(
    "--corpus",
    default=None,
    help="more candidate negatives besides the positives: a .txt file (a text a line) or any "
    "source --input takes (its --corpus_column)",
  )
  parser.add_argument("--corpus_column", default=None, help="text column of --corpus (default: its first)")
  parser.add_argument("--anchor_column", default=None, help="default: the first text column")
  parser.add_argument("--positive_column", default=None, help="default: the second text column")
  parser.add_argument("--num_negatives", type=int, default=3, help="negatives per query (default 3)")
  parser.add_argument("--range_min", type=int, default=0, help="skip this many best candidates (default 0)")
  parser.add_argument(
    "--range_max",
    type=int,
    default=None,
    help="candidates considered per query (default: range_min + num_negatives + the most rows of "
    "an anchor, with 10 * num_negatives if a margin or --max_score is set)",
  )
  parser.add_argument("--max_score", type=float, default=None, help="drop candidates scoring above this")
  parser.add_argument("--min_score", type=float, default=None, help="drop candidates scoring below this")
  parser.add_argument(
    "--absolute_margin", type=float, default=None, help="drop candidates scoring above (lowest positive score - margin)"
  )
  parser.add_argument(
    "--relative_margin",
    type=float,
    default=None,
    help="drop candidates scoring above (lowest positive score - |its score| * margin)",
  )
  parser.add_argument(
    "--sampling_strategy",
    choices=SAMPLING_STRATEGIES,
    default="top",
    help="top: the best candidates left; random: drawn among them (--seed)",
  )
  parser.add_argument("--seed", type=int, default=0, help="seed of --sampling_strategy random (default 0)")
  parser.add_argument("--output_format", choices=OUTPUT_FORMATS, default="triplet")
  parser.add_argument("--output_scores", action="store_true", help="add the similarities (see docs/own_data.md)")
  parser.add_argument("--query_prompt", default=None, help="prepended to each anchor before embedding")
  parser.add_argument("--corpus_prompt", default=None, help="prepended to each corpus text before embedding")
  parser.add_argument("--pooler", choices=poolers.names(), default=None, help="default: the model's test pooler")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per forward pass (at least 1)")
  parser.add_argument("--max_seq_len", type=int, default=None, help="cut texts to this many tokens (at least 3)")
  parser.add_argument(
    "--packed",
    action="store_true",
    help="embed with texts packed end to end into rows of real tokens (docs/models.md, Packed rows): the same "
    "embeddings to float32 rounding",
  )
  parser.add_argument(
    "--block_rows",
    type=int,
    default=None,
    help="queries searched at a time (default: as many as 256 MiB of scores hold)",
  )
  parser.add_argument(
    "--use_faiss",
    action="store_true",
    help="search with FAISS's exact inner-product index (pip install \"jaxcse[faiss]\"), as sentence-transformers' "
    "use_faiss; default: jaxcse's exact blocked top-k",
  )
  parser.add_argument("--data_dir", default=None, help="data root for relative paths (default $JAXCSE_DATA_DIR)")
  parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()

  # Everything that can be checked before the data is read and the model loads.
  if os.path.splitext(args.output)[1].lower() not in OUTPUT_SUFFIXES:
    raise MiningError(f"{args.output}: --output must end in {', '.join(OUTPUT_SUFFIXES)}")
  if args.output.lower().endswith(".csv") and has_list_columns(args.output_format, args.output_scores):
    raise MiningError(
      f"{args.output}: --output_format {args.output_format}"
      f"{' with --output_scores' if args.output_scores else ''} has a column of lists, which a .csv "
      "cannot hold; write .jsonl or .parquet"
    )
  errors.check_output(args.output, folder=False)
  if os.path.exists(args.output) and not args.overwrite:
    raise MiningError(f"{args.output} exists; pass --overwrite to replace it, or choose another --output")
  embedder_lib.check_settings(args.batch_size, args.max_seq_len)

  options = Options(
    range_min=args.range_min,
    range_max=args.range_max,
    max_score=args.max_score,
    min_score=args.min_score,
    absolute_margin=args.absolute_margin,
    relative_margin=args.relative_margin,
    num_negatives=args.num_negatives,
    sampling_strategy=args.sampling_strategy,
    output_format=args.output_format,
    output_scores=args.output_scores,
    seed=args.seed,
    block_rows=args.block_rows,
    use_faiss=args.use_faiss,
  )
  job = prepare(
    args.input,
    options,
    anchor_column=args.anchor_column,
    positive_column=args.positive_column,
    corpus=args.corpus,
    corpus_column=args.corpus_column,
    root=args.data_dir,
  )
  encoder = Encoder.load(
    args.model,
    args.pooler,
    checkpoint=args.checkpoint,
    revision=args.revision,
    batch_size=args.batch_size,
    max_seq_len=args.max_seq_len,
    packed=args.packed,
  )
  mined = mine(job, encoder, query_prompt=args.query_prompt, corpus_prompt=args.corpus_prompt)
  if not len(mined):  # An empty output trains nothing (the pair reader refuses it): say so rather than write it.
    raise MiningError(
      f"no anchor got a negative: nothing written to {args.output} (the lines above say what each filter skipped; "
      "loosen the margins or the score limits, or raise --range_max)"
    )
  os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
  write_dataset(mined, args.output)
  print(f"wrote {args.output}: {len(mined)} rows, columns {', '.join(mined.column_names)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
