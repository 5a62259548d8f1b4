r"""Quickstart: unsupervised SimCSE from a raw masked-LM encoder, offline, about five CPU minutes.

Starts from jaxcse/bert-mini-wiki-uncased (shipped with jaxcse: a 4-layer BERT
pretrained here by configs/pretrain_mlm.py, never trained on sentence pairs),
trains 250 steps of batch 64 on ``corpora/wiki_offline_20k.txt`` with SimCSE's
dropout positives, and prints STS-B dev before training and at the best step
(measured on a 2-core CPU: 53.17 -> 57.28; the same work took 4.5 minutes idle; the raw-encoder
study in experiments/from_raw_plm/ has the longer runs and the other methods).
The corpus and STS-B dev are shipped with jaxcse (jaxcse/data/quickstart/), so
it runs after ``pip install`` with no data root; with one, files it has win.
Mean pooling, where the paper uses [CLS]: this encoder's [CLS] was never trained
(no next-sentence task), and SimCSE with it stayed far lower (experiments/from_raw_plm/).
configs/quickstart_minilm.py is the same job from all-MiniLM-L6-v2.

Run:
  jaxcse-train --config quickstart --workdir workdirs/quickstart    # = python -m jaxcse.train --config configs/quickstart.py ...
  jaxcse-evaluate --model workdirs/quickstart --tasks sts
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.model.name = "jaxcse/bert-mini-wiki-uncased"  # Shipped in jaxcse/pretrained/: no download.
  config.model.pooler = "avg"  # Trained and evaluated with mean pooling (no MLP head); see the docstring.
  config.model.mlp_only_train = False
  # 20k Wikipedia sentences shipped with jaxcse (jaxcse/data/quickstart/README.md: sources, CC BY-SA).
  config.data.train = "corpora/wiki_offline_20k.txt"
  config.train.learning_rate = 3e-4  # The best of 3e-5, 1e-4, 3e-4 for this small encoder (experiments/from_raw_plm/).
  config.train.max_steps = 250  # 250 x 64 = 16,000 sentences: about 4.5 minutes on a 2-core CPU.
  config.train.log_every = 25
  config.eval.every = 125  # SimCSE's evaluation interval.
  config.eval.at_start = True  # Report STS-B dev before training, to compare.
  config.eval.at_end = True  # The last step is evaluated (once at 250): a shortened run serves its trained model.
  config.eval.sickr_dev = False  # STS-B dev only, the selection its published numbers used (SICK-R dev ships too).
  config.checkpoint.every = 125
  return config
