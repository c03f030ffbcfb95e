"""``python -m pytest_npufuse <command>``: the command line, defined in :mod:`pytest_npufuse.cli`."""

import os
import sys

from .cli.main import main


def _run() -> int:
    """The command's exit status; a reader that stops early (``compare ... | head``) ends the output
    quietly, as other command-line tools do, instead of with a BrokenPipeError traceback."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(_run())
