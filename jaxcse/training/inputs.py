"""What a training run reads, loaded and checked before it writes anything: the workdir's start point, the model,
the training corpus and its batches, the dev sets and the method's frozen models.

So a mistake (a missing or undecodable data file, an unknown model, a workdir that cannot be used) stops the run
with the workdir exactly as it was, and the corrected command then starts cleanly.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec

from jaxcse import data as data_lib, models
from jaxcse.core import provenance
from jaxcse.evaluation import dev_sets as dev_sets_lib, sts_data
from jaxcse.storage.workdir import StartPoint, Workdir
from jaxcse.training import configuration, configured, objectives

log = logging.getLogger("jaxcse")


@dataclasses.dataclass
class Inputs:
  """Everything a run reads, loaded and checked before it writes anything (``read``)."""

  needs: objectives.Needs  # What the config's method needs (objectives.needs), resolved once for the whole run.
  start: StartPoint  # Fresh or resume (``Workdir.start_point``), and the bad latest checkpoints to set aside.
  spec: models.ModelSpec  # The configured model's, or the workdir's description when the run resumes.
  params: Any  # The configured model's parameters; None when the run resumes (``start.start`` restores them).
  batches: Any  # data.Batches or data.PackedBatches over the training corpus.
  heldout: data_lib.Corpus | None  # The held-out part of the corpus (data.heldout_fraction), else None.
  dev_sets: dict[str, sts_data.PairSet]  # sts_data.load_dev_sets: STS-B dev (and SICK-R dev).
  own_dev_sets: dev_sets_lib.OwnDevSets  # The config's own dev sets (eval.pairs, eval.retrieval), maybe none.
  # The method's frozen complementary model (DCLR's, GISTEmbed's guide: ``configured.complementary``).
  complementary: tuple[models.ModelSpec | None, Any]
  augment_mlm: tuple[models.ModelSpec | None, Any]  # The frozen MLM of augment.mlm (``configured.augment_mlm``).
  corpus_digests: dict[str, str] | None  # sha256 of the training corpus (``digest_corpus``); None: TFDS.


def read(config: ml_collections.ConfigDict, workdir: Workdir, restart: bool, mesh, train_data=None) -> Inputs:
  """Checks the workdir and loads the model, corpus and dev sets; writes nothing.

  So a mistake (a missing or undecodable data file, an unknown model, a workdir that cannot be used) stops the
  run with the workdir exactly as it was, and the corrected command then starts cleanly. ``train_data``: a
  ``datasets.Dataset`` to train on instead of ``config.data.train``'s.
  """
  pair_data = train_data is not None or data_lib.is_pairs_source(data_source(config), csv_format(config))
  corpus = read_corpus(config, train_data) if pair_data else None  # Its digest is of its content: read it first.
  corpus_digests = digest_corpus(config, corpus)
  needs = objectives.needs(config)
  start = workdir.start_point(restart)
  workdir.check_config(config, restart, start)
  if start.holds_checkpoints:
    workdir.check_corpus(corpus_digests)
  if start.step is not None:  # start.start restores the checkpoint's params; the description has the same config.
    described = workdir.model_spec(
      dtype=models.DTYPES[config.model.dtype],
      gradient_checkpointing=config.model.gradient_checkpointing,
      attention_dropout_per_element=configuration.attention_dropout_per_element(config),  # How it trains.
    )
    spec, params = described, None
  else:
    built = configured.model(config, needs=needs)
    spec, params = built.spec, built.params
  check_label_shape(config, corpus, spec.hidden_size)
  batches, heldout = make_batches(config, spec, corpus)
  dev_sets = sts_data.load_dev_sets(config.data.data_dir or None, sickr=config.eval.sickr_dev)
  # .get: a config.json from before these fields (a resumed older workdir) has none.
  own_dev_sets = dataclasses.replace(
    dev_sets_lib.OwnDevSets.load(
      config.eval.get("pairs", ""), config.eval.get("retrieval", ""), config.data.data_dir or None
    ),
    query_prompt=config.data.get("query_prompt", ""),
    document_prompt=config.data.get("document_prompt", ""),
  )
  replicated = NamedSharding(mesh, PartitionSpec())
  complementary = frozen_model(configured.complementary(config, spec, needs=needs), replicated)
  augment_mlm = frozen_model(configured.augment_mlm(config, spec), replicated)
  return Inputs(
    needs, start, spec, params, batches, heldout, dev_sets, own_dev_sets, complementary, augment_mlm, corpus_digests
  )


def check_training_data(config: ml_collections.ConfigDict, train_data) -> None:
  """Exactly one source of training data: ``config.data.train``, or ``train_data``, a ``datasets.Dataset``."""
  if train_data is None:
    if not config.data.train:
      raise configuration.ConfigError(
        "data.train is empty: give the training data (a file, a save_to_disk folder, "
        "hf:NAME[:CONFIG[:SPLIT]] or tfds:NAME), or pass train_data=a datasets.Dataset"
      )
    return
  import datasets

  if not isinstance(train_data, datasets.Dataset):
    raise configuration.ConfigError(
      f"train_data must be a datasets.Dataset (one split), not a {type(train_data).__name__}"
    )
  if config.data.train:
    raise configuration.ConfigError(
      f"train_data is given, and data.train is {config.data.train!r} too: set "
      "config.data.train = '' to train on train_data"
    )


def data_source(config: ml_collections.ConfigDict) -> str:
  """``config.data.train`` resolved under the data root where it is there (so a folder is seen as one), else as is."""
  source = config.data.train
  if source.startswith((data_lib.TFDS_PREFIX, data_lib.HF_PREFIX)):
    return source
  try:
    return data_lib.resolve(source, config.data.data_dir or None)
  except data_lib.DataError:
    return source  # The reader says what is missing.


def digest_corpus(config: ml_collections.ConfigDict, corpus=None) -> dict[str, str] | None:
  """sha256 of the training corpus: of its files, by path relative to the corpus's folder (a file, or a
  ``save_to_disk`` folder; a pair file's is the digest its rows were read under, ``PairCorpus.file_sha256``); of its
  content for a hub dataset or a ``datasets.Dataset`` (``corpus``, read already); None for a TFDS dataset."""
  if corpus is not None and (not config.data.train or config.data.train.startswith(data_lib.HF_PREFIX)):
    return {corpus.path: corpus.content_sha256}
  if getattr(corpus, "file_sha256", None):  # Hashed as its rows were read (pairs._load_file): not hashed again.
    return {os.path.basename(corpus.path): corpus.file_sha256}
  if config.data.train.startswith(data_lib.TFDS_PREFIX):
    return None  # TFDS versions its datasets itself (the name holds the version).
  path = os.path.abspath(data_lib.resolve(config.data.train, config.data.data_dir or None))
  if not os.path.exists(path):
    return None  # The corpus reader says what is missing, naming the download.
  return provenance.data_digests([path], root=os.path.dirname(path))


def frozen_model(built: configured.Built | None, replicated) -> tuple[models.ModelSpec | None, Any]:
  """A frozen model of the step (``(spec, params replicated on every device)``), or ``(None, None)``.

  Through host memory: a restored checkpoint's arrays sit on this process's device, and JAX cannot copy a device
  array to other hosts' devices; from numpy, each process fills its own devices.
  """
  if built is None:
    return None, None
  return built.spec, jax.device_put(jax.device_get(built.params), replicated)


def csv_format(config: ml_collections.ConfigDict) -> str:
  """``data.csv_format``; a config.json written before the field existed read its csv as SimCSE's."""
  return config.data.get("csv_format", "simcse")


def read_corpus(config: ml_collections.ConfigDict, train_data=None):
  """The training corpus: ``train_data`` (a ``datasets.Dataset``) if given, else ``config.data.train``'s, checked
  against the method (``check_labels``)."""
  corpus = data_lib.load_corpus(
    config.data.train if train_data is None else train_data,
    root=config.data.data_dir or None,
    skip_empty_lines=config.data.skip_empty_lines,
    tfds_text_feature=config.data.tfds_text_feature,
    tfds_data_dir=config.data.tfds_data_dir or None,
    csv_format=csv_format(config),
  )
  check_labels(config, corpus)
  check_columns(config, corpus)
  check_one_row_batch(config, corpus)
  check_crop_before_truncation(config, corpus)
  return corpus


def check_crop_before_truncation(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses ``augment.crop_before_truncation`` on anything but one text column (one sentence per example, as
  unsupervised SimCSE's corpus): the step crops a copy of that sentence as the second view; pair data has none."""
  before = config.augment.get("crop_before_truncation", 0)
  columns = getattr(corpus, "text_columns", None) or tuple(corpus.columns)
  if before and len(columns) != 1:
    raise configuration.ConfigError(
      f"augment.crop_before_truncation={before} crops a copy of each sentence before it is cut: it needs a "
      f"one-column text corpus (one sentence per example); {corpus.path} has {len(columns)} text columns"
      f" ({', '.join(columns)})"
    )


# Methods with a negative even in a batch of one row: DCLR's noise negatives; MLM pretraining compares nothing.
_NEGATIVES_WITHOUT_OTHER_ROWS = ("dclr", "mlm")
# Methods whose hard-negative columns (a third text column on) give a row negatives of its own.
_HARD_NEGATIVE_COLUMNS = ("simcse", "mnrl", "gist")


def check_one_row_batch(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses ``train.batch_size`` 1 where the method would have no negative at all.

  The contrastive losses score an anchor against the other rows of its batch (and its own hard negatives, where the
  method reads them and the data has them); CoSENT ranks the batch's pairs against each other, MixCSE mixes with
  another row. With one row and nothing else, loss and gradient are 0 and the run would train nothing.
  """
  if config.train.batch_size > 1 or config.method in _NEGATIVES_WITHOUT_OTHER_ROWS:
    return
  columns = getattr(corpus, "text_columns", None) or tuple(corpus.columns)
  if config.method in _HARD_NEGATIVE_COLUMNS and len(columns) >= 3:
    return
  raise configuration.ConfigError(
    f"train.batch_size 1 leaves method {config.method} no negative to contrast with ({corpus.path}: "
    f"{len(columns)} text column{'s' * (len(columns) != 1)}, no other row in the batch): its loss and gradient "
    "would be 0; use a batch of 2 or more"
  )


def check_columns(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses a corpus with fewer or more text columns than the method reads (``objectives.Objective.min_columns``,
  ``max_columns``)."""
  columns = getattr(corpus, "text_columns", None) or tuple(corpus.columns)
  objective = objectives.get(config.method)
  if len(columns) < objective.min_columns:
    raise data_lib.DataError(
      f"{corpus.path}: method {config.method} needs at least {objective.min_columns} text columns (an anchor and "
      f"its positive, then any hard negatives); this data has {len(columns)} ({', '.join(columns)})"
    )
  if objective.max_columns is not None and len(columns) > objective.max_columns:
    raise data_lib.DataError(
      f"{corpus.path}: method {config.method} reads {objective.max_columns} text column (each text's two dropout "
      f"views); this data has {len(columns)} ({', '.join(columns)}): keep the one its labels describe"
    )


def check_labels(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses labelled rows (scored pairs) for a method that does not read ``batch["labels"]``, and the reverse.

  A method reads the labels when its ``objectives.Objective`` says ``labels`` (CoSENT's); for any other, a score
  column would be silently ignored, and its pairs all trained as positives.
  """
  label = getattr(corpus, "label_column", None)
  uses_labels = objectives.get(config.method).labels
  if label and not uses_labels:
    # The methods that read labels of this shape with this many text columns (a teacher's embedding: of its width).
    shape, columns = corpus.label_shape, len(corpus.text_columns)
    readers = [
      name
      for name in objectives.names()
      if objectives.get(name).labels
      and objectives.label_shape_allowed(shape, objectives.get(name).label_shapes(columns, (shape or (0,))[-1]))
    ]
    train = f"train them with {' or '.join(f'--config.method={name}' for name in readers)}, or " if readers else ""
    raise data_lib.DataError(
      f"{corpus.path}: column {label!r} holds a label per row (scored pairs, a teacher's scores or embeddings), "
      f"which method {config.method} does not use: {train}drop the column to train the pairs as positives"
    )
  if uses_labels and not label:
    raise data_lib.DataError(
      f"{corpus.path}: method {config.method} needs a label per row (a column named "
      f"{' or '.join(data_lib.LABEL_COLUMNS)})"
    )


def _size(n: int | None) -> str:
  return "N" if n is None else str(n)


def check_label_shape(config: ml_collections.ConfigDict, corpus, embedding_dim: int) -> None:
  """Refuses labels of a shape the method's loss cannot read (``objectives.Objective.label_shapes``): a teacher
  embedding of another width than the model's embeddings, scores for another number of candidates."""
  shape = getattr(corpus, "label_shape", None)
  objective = objectives.get(config.method)
  if shape is None or not objective.labels:
    return
  columns = len(corpus.text_columns)
  allowed = objective.label_shapes(columns, embedding_dim)
  if not objectives.label_shape_allowed(shape, allowed):
    said = lambda s: "a number" if s == () else "a list of " + " x ".join(map(_size, s)) + " numbers"  # noqa: E731
    raise data_lib.DataError(
      f"{corpus.path}: column {corpus.label_column!r} holds {said(shape)} per row; method {config.method} with "
      f"{columns} text columns and {embedding_dim}-dimensional embeddings reads {' or '.join(map(said, allowed))}"
    )


def make_batches(config: ml_collections.ConfigDict, spec: models.ModelSpec, corpus=None):
  """``(train batches, held-out corpus or None)`` for the configured corpus (``corpus``, if read already).

  The batches' sentences are tokenized to ``configuration.tokenized_length`` (``augment.crop_before_truncation``
  when set: the step cuts them to ``data.max_seq_len``); the held-out corpus is evaluated at ``data.max_seq_len``.
  """
  if corpus is None:
    corpus = read_corpus(config)
  heldout = None
  if isinstance(corpus, data_lib.PairCorpus) and (config.data.heldout_fraction > 0 or config.data.pack):
    raise data_lib.DataError(
      f"{corpus.path}: data.heldout_fraction and data.pack are for one-sentence-a-line "
      "corpora (.txt, tfds:), not pair data"
    )
  if config.data.heldout_fraction > 0:
    corpus, heldout = data_lib.split_heldout(corpus, config.data.heldout_fraction)
  if config.data.pack:
    batches = data_lib.PackedBatches(
      corpus, spec.tokenizer, batch_size=config.train.batch_size, max_seq_len=config.data.max_seq_len, seed=config.seed
    )
  else:
    no_duplicates = no_duplicate_batches(config)
    batches = data_lib.Batches(
      corpus,
      spec.tokenizer,
      batch_size=config.train.batch_size,
      max_seq_len=configuration.tokenized_length(config),
      seed=config.seed,
      no_duplicates=no_duplicates,
      query_prompt=config.data.get("query_prompt", ""),
      document_prompt=config.data.get("document_prompt", ""),
    )
    if no_duplicates:
      report = batches.epoch_report(0)
      log.info(
        "%s: data.no_duplicates: epoch 0 has %d batches of %d examples with no text twice (plain batching: "
        "%d); %d examples were deferred to a later batch and %d left out of the epoch (plain: %d)",
        corpus.path,
        report.batches,
        config.train.batch_size,
        report.examples // config.train.batch_size,
        report.deferred,
        report.left_out,
        report.examples % config.train.batch_size,
      )
  return batches, heldout


def no_duplicate_batches(config: ml_collections.ConfigDict) -> bool:
  """Whether the run's batches keep every text once (``data.no_duplicates``): only for a loss with in-batch
  negatives, as sentence-transformers recommends its NO_DUPLICATES sampler for; CoSENT's batches stay plain (the
  ``pairs`` config's default left on for ``--config.method=cosent`` would defer rows for nothing)."""
  return bool(config.data.no_duplicates) and objectives.get(config.method).in_batch_negatives


def count_steps(config, batches) -> int:
  if config.train.max_steps > 0:
    return config.train.max_steps
  return batches.total_steps(config.train.num_epochs)
