"""The shim in the processes a script starts: ``multiprocessing`` spawn and forkserver children, and
``subprocess`` runs of Python.

A forked child inherits the parent's shim in memory; a spawned one is a fresh interpreter that imports
the script's module again (as ``__mp_main__``), so its ``import torchair`` would fail without the shim.
While ``python -m pytest_npufuse run`` runs a script, :func:`shim_in_children` puts a directory on
``PYTHONPATH`` whose ``sitecustomize`` installs the shim (torch patched when torch is imported) and
names the target, then runs the ``sitecustomize`` it stands in front of, if there is one. Torch-free:
it runs in every child at start-up.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..files import write_text
from ..target.profile import CHILD_PYPROJECT_VARIABLE, CHILD_TARGET_VARIABLE

_SITECUSTOMIZE = '''"""Written by ``python -m pytest_npufuse run``: a process the script starts gets the shim too."""
import importlib.machinery
import importlib.util
import os
import sys

_ARGV = getattr(sys, "orig_argv", [])
# A pytest child (``python -m pytest``, the pytest script, an xdist worker's execnet gateway) loads the
# plugin, which installs the shim after pytest's assertion rewriting is set up; importing it here first
# would make pytest warn.
_PYTEST = (
    "".join(_ARGV[1:3]).startswith("-mpytest")
    or os.path.basename(_ARGV[1] if len(_ARGV) > 1 else "") in ("pytest", "py.test")
    or any("sys.stdin.readline" in argument for argument in _ARGV[1:])
)
if os.environ.get("{variable}") and not _PYTEST:
    from pytest_npufuse.shim import install_shims

    install_shims(defer_torch=True)

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [entry for entry in sys.path if os.path.abspath(entry or ".") != _HERE]
)
if _SPEC is not None:  # the sitecustomize this one stands in front of
    _SPEC.loader.exec_module(importlib.util.module_from_spec(_SPEC))
'''


@contextmanager
def shim_in_children(target: str, pyproject: Path | None = None) -> Iterator[Path]:
    """Within the block, Python processes started from this one install the shim and model ``target``,
    looked up among ``pyproject``'s own targets first when one is given; yields the directory put on
    ``PYTHONPATH``. The environment is restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", CHILD_TARGET_VARIABLE, CHILD_PYPROJECT_VARIABLE)}
    with tempfile.TemporaryDirectory(prefix="npufuse-shim-") as folder:
        write_text(Path(folder) / "sitecustomize.py", _SITECUSTOMIZE.format(variable=CHILD_TARGET_VARIABLE), "child shim")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (folder, saved["PYTHONPATH"])))
        os.environ[CHILD_TARGET_VARIABLE] = target
        if pyproject is not None:
            os.environ[CHILD_PYPROJECT_VARIABLE] = str(pyproject.resolve())
        try:
            yield Path(folder)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
