"""``python -m jaxcse.data download ...``: see ``jaxcse.data.downloads``."""

import sys

from jaxcse.data.downloads import main

if __name__ == "__main__":
  sys.exit(main())
