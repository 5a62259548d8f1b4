r"""DCLR, BERT-base: the official code's setting (Zhou et al., ACL 2022).

Unsupervised SimCSE plus (1) noise negatives: batch x noise_times vectors drawn
from N(0, 1), pushed by 4 steps of normalised gradient ascent (step 1e-3) on the
contrastive loss, and (2) instance weighting: in-batch negatives that a frozen
complementary model (an unsup-SimCSE checkpoint) finds more similar to the
anchor than phi = 0.9 get weight 0. The loss is the released code's form.
3 epochs of wiki1m, batch 128, lr 3e-5, max_seq_len 32, temperature 0.05;
model selection by the mean of STS-B dev and SICK-R dev.

Run:
  python -m jaxcse.train --config configs/dclr.py --workdir workdirs/dclr_bert_base \
      --config.dclr.complementary_model=/path/to/unsup-simcse-bert-base-uncased

The complementary model is any jaxcse workdir or HF folder/hub id (the official
run uses princeton-nlp/unsup-simcse-bert-base-uncased, a hub id, fetched when
online). Its params are a frozen input of the train step: no gradient, not saved.

Known difference from the released code: it pools the encoder with BERT's
pretrained NSP pooler (dense + tanh) *and then* SimCSE's MLP, ignoring its own
``pooler_type``, and runs the encoder without an attention mask; we use
SimCSE's ``cls`` pooler (fresh MLP, dropped at test time) with the mask. The
complementary model is embedded with its own test pooler (for a SimCSE hub
checkpoint: ``cls``, i.e. BERT's pooler layer, which holds its trained MLP).
"""

import ml_collections

from jaxcse.configs import base


def get_config():
  config = base.get_config()
  config.method = "dclr"
  config.train.batch_size = 128
  config.train.num_epochs = 3
  config.eval.metric = "stsb_sickr_dev"  # DCLR selects on the mean of STS-B dev and SICK-R dev.
  config.dclr = ml_collections.ConfigDict()
  config.dclr.complementary_model = "princeton-nlp/unsup-simcse-bert-base-uncased"  # Frozen; workdir or HF.
  config.dclr.complementary_dropout = False  # True: run it with dropout on, a quirk of the released code.
  config.dclr.phi = 0.9  # Negatives the complementary model scores above this get weight 0.
  config.dclr.noise_times = 1.0  # Noise negatives per batch = batch_size x noise_times.
  config.dclr.noise_std = 1.0  # Initial noise ~ N(0, noise_std^2).
  config.dclr.ascent_steps = 4  # Gradient-ascent steps on the noise (the code's pgd).
  config.dclr.ascent_step_size = 1e-3  # Length of each normalised ascent step.
  config.dclr.loss_form = "official"  # official (released code) | infonce (the paper's weighted InfoNCE).
  return config
