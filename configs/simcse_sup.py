r"""Supervised SimCSE, BERT-base: the paper's setting (run_sup_example.sh).

NLI triplets (premise, entailment, contradiction) from ``nli_for_simcse.csv``
(275,601 rows, columns ``sent0,sent1,hard_neg``): the entailment is the
positive, every other entailment and every contradiction in the batch are
negatives, the anchor's own contradiction optionally up-weighted by
``loss.hard_negative_weight``. 3 epochs, batch 512, lr 5e-5, max_seq_len 32,
temperature 0.05, ``cls`` pooler with its MLP kept at test time.

Run:
  python -m jaxcse.train --config configs/simcse_sup.py --workdir workdirs/simcse_sup_bert_base

Gradient clipping at norm 1 acts on the gradient / 4, as in the official
4-GPU run (``train.official_world_size``; 1 clips the full gradient).

Needs ``$JAXCSE_DATA_DIR/corpora/nli_for_simcse.csv``. Pairs without hard
negatives (a ``sent0,sent1`` csv) train the same way with in-batch negatives only.
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.data.train = "corpora/nli_for_simcse.csv"  # sent0,sent1,hard_neg (or sent0,sent1).
  config.model.pooler = "cls"  # The supervised run keeps the MLP at test time.
  config.model.mlp_only_train = False
  config.train.batch_size = 512  # 4 GPUs x 128 in the official run.
  config.train.learning_rate = 5e-5
  config.train.num_epochs = 3
  # The official run's 4 GPUs each take the loss over the gathered batch with gradient through their own rows,
  # and DDP averages: the gradient it clips at norm 1 is the full gradient / 4.
  config.train.official_world_size = 4
  config.eval.at_end = False  # The official schedule evaluates every 125 steps only (3 epochs: 1,614 steps).
  return config
