r"""DCLR, RoBERTa-base: the official setting (phi 0.85, 2.5 noise negatives per sentence).

Run:
  python -m jaxcse.train --config configs/dclr_roberta.py --workdir workdirs/dclr_roberta_base \
      --config.dclr.complementary_model=/path/to/unsup-simcse-roberta-base
"""

from jaxcse.configs import dclr


def get_config():
  config = dclr.get_config()
  config.model.name = "roberta-base"
  config.dclr.complementary_model = "princeton-nlp/unsup-simcse-roberta-base"
  config.dclr.phi = 0.85
  config.dclr.noise_times = 2.5
  return config
