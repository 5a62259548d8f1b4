"""``python -m jaxcse.data download ...``: see ``jaxcse.data.downloads``."""

from jaxcse.data.downloads import main

if __name__ == "__main__":
  main()
