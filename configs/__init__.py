"""The training configs (ml_collections): the papers' runs, the quickstart and MLM pretraining; `--config NAME` picks one.

This folder is the package's ``jaxcse.configs`` (``jaxcse/configs`` links here, so a pip install ships it); the
configs import each other as ``jaxcse.configs.<name>``. Imported as a top-level ``configs`` package (Python run
from the repository root) the same files would be a second copy of every module, so that import is refused.
"""

if __name__ != "jaxcse.configs":
  raise ImportError(f"import the configs as jaxcse.configs.<name>, not {__name__}.<name> (one module per file)")
