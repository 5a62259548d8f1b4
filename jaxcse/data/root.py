"""The data root: where relative data paths resolve, and the error every bad input raises.

Relative paths are looked up under the data directory, which is
``--data_dir``/``config.data.data_dir`` or else ``$JAXCSE_DATA_DIR``, laid out
like SentEval's and SimCSE's: ``senteval/downstream/...``, ``corpora/...``.
"""

from __future__ import annotations

import os

from jaxcse.errors import JaxcseError

DATA_DIR_ENV = "JAXCSE_DATA_DIR"


class DataError(JaxcseError, ValueError):
  """Bad or missing input data; the message names the file and line."""


def data_dir(explicit: str | None = None) -> str:
  """The data root: ``explicit`` if given, else ``$JAXCSE_DATA_DIR``."""
  root = explicit or os.environ.get(DATA_DIR_ENV)
  if not root:
    raise DataError(
        f"no data directory: pass --data_dir (config.data.data_dir) or set ${DATA_DIR_ENV} to a folder "
        "laid out as senteval/downstream/... and corpora/..."
    )
  if not os.path.isdir(root):
    raise DataError(f"data directory {root!r} does not exist")
  return root


def resolve(path: str, root: str | None = None) -> str:
  """``path`` as given if it exists, else under the data root."""
  if os.path.isabs(path) or os.path.exists(path):
    return path
  candidate = os.path.join(data_dir(root), path)
  if not os.path.exists(candidate):
    raise DataError(f"{path}: no such file (looked in the current directory and in {candidate})")
  return candidate
