r"""Unsupervised SimCSE from ModernBERT-base (answerdotai/ModernBERT-base): rotary, local/global attention, GeGLU.

SimCSE's recipe (batch 64, length 32, temperature 0.05, one epoch of wiki1m) on ModernBERT with mean pooling,
the pooling ModernBERT sentence encoders use (its [CLS] was not trained for sentence meaning and it has no NSP
pooler layer). ModernBERT ships with dropout 0; SimCSE's positive pairs come from dropout, so model.dropout 0.1
sets its embedding, attention and MLP dropout. The learning rate is SimCSE's for BERT-base, not tuned here.

Run (the weights from the hub, or a local folder with config.json, tokenizer and model.safetensors):
  python -m jaxcse.train --config configs/modernbert.py --workdir workdirs/modernbert_base
  python -m jaxcse.compile --config configs/modernbert.py --target v5e-1      # the step, for a TPU, from here
"""

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.model.name = "answerdotai/ModernBERT-base"  # Any ModernBERT folder or hub id.
  config.model.pooler = "avg"  # Mean pooling for training, selection and test (no MLP head, no [CLS] reading).
  config.model.mlp_only_train = False
  config.model.dropout = 0.1  # ModernBERT's embedding_dropout, attention_dropout and mlp_dropout (0 as released).
  config.train.learning_rate = 3e-5  # SimCSE's BERT-base rate (untuned for ModernBERT).
  return config
