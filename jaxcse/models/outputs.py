"""What every backbone module of ``jaxcse.models`` returns, whatever its family."""

from __future__ import annotations

from typing import NamedTuple

import jax


class BackboneOutput(NamedTuple):
  """A backbone's forward pass.

  Attributes:
    last_hidden_state: ``[batch, len, hidden]``, the last layer's output (after the final norm, for pre-norm models).
    hidden_states: with ``output_hidden_states=True``, the embedding output followed by each layer's output
      (``num_hidden_layers + 1`` arrays of ``[batch, len, hidden]``), as transformers returns them; else None.
    pooler_output: ``[batch, hidden]``, BERT's NSP pooler layer (Linear + tanh on the first token) when the
      family has one and it was built; else None.
  """

  last_hidden_state: jax.Array
  hidden_states: tuple[jax.Array, ...] | None = None
  pooler_output: jax.Array | None = None
