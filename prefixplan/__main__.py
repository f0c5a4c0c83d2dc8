"""``python -m prefixplan``: the same command line as the ``prefixplan`` script."""

import sys

from prefixplan.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
