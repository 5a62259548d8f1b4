"""The trainer's step for the compile table's configs (BERT-base's published shape, bfloat16), lowered to
StableHLO without debug information (source locations stripped): its sha256 and length.

Run with one jaxcse version and then another, in their environments, to see whether they train the same program:
  python experiments/own_encoders/lowered_step_sha256.py
"""

import hashlib
import re

import jax

from jaxcse.compile import lowering
from jaxcse.configs import base, mixcse, simcse_sup

for name, module in (("base", base), ("simcse_sup", simcse_sup), ("mixcse", mixcse)):
  config = module.get_config()
  config.model.dtype = "bfloat16"
  program = lowering.train_step_program(config, jax.devices())
  text = re.sub(r"loc\([^)]*\)", "", program.jitted.lower(*program.args).as_text(debug_info=False))
  print(name, hashlib.sha256(text.encode()).hexdigest()[:16], len(text))
