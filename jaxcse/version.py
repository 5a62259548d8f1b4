"""jaxcse's version, in a module of its own: pyproject.toml reads it without importing jaxcse, and
``provenance`` without running back up to the package's ``__init__``; ``jaxcse.__version__`` re-exports it."""

__version__ = "0.1.0"
