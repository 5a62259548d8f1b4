r"""MixCSE, BERT-base: the official code's setting (Zhang et al., AAAI 2022).

Unsupervised SimCSE plus mixed hard negatives: each anchor also sees a mix of
its positive and a neighbour's (lambda = 0.2, the neighbour fixed by a cyclic
shift of the batch, both directions, under stop-gradient), as the released code
does. 1 epoch of wiki1m, batch 64, lr 3e-5, max_seq_len 32, temperature 0.05;
trained with the ``cls`` pooler and its MLP (selected on STS-B dev with the MLP)
and tested with ``cls_before_pooler``.

Run:
  python -m jaxcse.train --config configs/mixcse.py --workdir workdirs/mixcse_bert_base

Ablations from the paper: ``--config.mixcse.symmetric=False`` (MixCSE_single),
``--config.mixcse.stop_gradient=False``; the paper's wording instead of the
code's neighbour: ``--config.mixcse.neighbour=random`` or ``hardest``.
"""

import ml_collections

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.method = "mixcse"
  config.model.pooler = "cls"
  config.model.mlp_only_train = False  # The official run trains and selects with the MLP ...
  config.model.test_pooler = "cls_before_pooler"  # ... and reports test numbers without it.
  config.mixcse = ml_collections.ConfigDict()
  config.mixcse.mix_lambda = 0.2  # Weight of the positive in each mixed negative.
  config.mixcse.neighbour = "roll"  # roll (official: the next row) | random | hardest (paper's wording).
  config.mixcse.symmetric = True  # Both directions (official); False = the paper's MixCSE_single ablation.
  config.mixcse.stop_gradient = True  # False = the paper's "w/o stop-gradient" ablation.
  return config
