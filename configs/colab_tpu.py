r"""The TPU notebook's run (notebooks/tpu.ipynb): the paper's unsupervised SimCSE on a Colab or Kaggle TPU.

configs/base.py (BERT-base, wiki1m, the ``cls`` pooler with ``mlp_only_train``, lr 3e-5, length 32) with the
paper's global batch of 64 whatever the number of devices (one v5e chip on today's free Colab TPU: all 64 on it;
8 per device on a v5e-8 or a v2-8), in bfloat16, for 2,000 steps (a Colab session's worth; the paper's epoch
is 15,625 steps: ``--config.train.max_steps=-1``).

Before renting the TPU, check that it fits (CI does for v5e-1 and v5e-8):
  jaxcse-compile --config colab_tpu --target v5e-1
Run:
  python -m jaxcse.train --config colab_tpu --workdir workdirs/colab_tpu
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.model.dtype = "bfloat16"  # TPUs (and GPUs) compute bfloat16 at full speed; params stay float32.
  config.train.batch_size = 64  # The global batch: split over however many devices there are.
  config.train.max_steps = 2000  # 128,000 sentences; -1 = one epoch of wiki1m (15,625 steps), as the paper.
  return config
