r"""DCLR exactly as the released code (RUCAIBox/DCLR) trains and selects, for reproducing its numbers.

Four differences from configs/dclr.py, all from ``dclr.as_released = True``:
  (a) the encoder attends to the padding (the released code calls BERT without an attention mask; batches
      are padded to their longest sentence), for the trained and the complementary model;
  (b) training pools through BERT's own pretrained pooler layer (dense + tanh on [CLS]) and then a fresh MLP
      (``bert_pooler_mlp``);
  (c) checkpoints are selected on the pooler layer's output without the mask (its dev evaluation function,
      ``bert_pooler``), while the final test uses [CLS] without the MLP, with the mask (``cls_before_pooler``);
  (d) the complementary model runs with dropout on (a submodule in train mode, kept out of the optimizer).

Run:
  python -m jaxcse.train --config configs/dclr_as_released.py --workdir workdirs/dclr_released \
      --config.dclr.complementary_model=/path/to/unsup-simcse-bert-base-uncased
"""

from jaxcse.configs import dclr


def get_config():
  config = dclr.get_config()
  config.dclr.as_released = True
  # (b), (c): the released code's poolers (dclr.as_released refuses others).
  config.model.pooler = "bert_pooler_mlp"  # Train on BERT's pooler layer (dense + tanh on [CLS]) + a fresh MLP.
  config.model.mlp_only_train = False
  config.model.dev_pooler = "bert_pooler"  # Select checkpoints on the pooler layer's output (no MLP).
  config.model.test_pooler = "cls_before_pooler"  # Test on [CLS] without the MLP.
  return config
