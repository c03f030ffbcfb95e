"""The command line, ``python -m pytest_npufuse <command>``: compare, run, advise, ops."""
