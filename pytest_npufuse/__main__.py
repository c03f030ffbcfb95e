"""``python -m pytest_npufuse <command>``: the command line, defined in :mod:`pytest_npufuse.cli`."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
