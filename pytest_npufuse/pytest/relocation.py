"""Warnings a check raises from inside this package, moved to the user's line or into the failure.

A warning is shown at the file and line it was raised from; one raised deep inside pytest-npufuse
(``pipeline/chain.py:224``) points the user at code they cannot change, and pytest adds its warnings
summary and documentation link after the failure. During ``npufuse.check()`` such warnings are held:
when the check fails they become ``note:`` lines of the failure, which already says what to do; when
it passes they are raised again at the test's call of ``check()``, with their category and text, so
``pytest.warns`` and ``-W error`` see them as before. Warnings already located in the user's code
(or in torch) pass through unchanged.
"""

from __future__ import annotations

import sys
import warnings
from types import TracebackType

from ..errors import PACKAGE_DIR


def _inside_package(filename: str) -> bool:
    return filename.startswith(str(PACKAGE_DIR))


def _caller(depth: int) -> tuple[str, int, dict]:
    """The first frame outside this package, ``depth`` frames up or more: the user's call of check()."""
    frame = sys._getframe(depth)
    while frame.f_back is not None and _inside_package(frame.f_code.co_filename):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


class HeldWarnings:
    """Hold the warnings raised inside the ``with`` block; see the module docstring for where they go."""

    def __init__(self) -> None:
        self._filename, self._lineno, self._globals = _caller(2)
        self._recorder = warnings.catch_warnings(record=True)
        self.held: list[warnings.WarningMessage] = []
        self._absorbed = False

    def __enter__(self) -> HeldWarnings:
        self.held = self._recorder.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self._recorder.__exit__(kind, value, trace)

    def ours(self) -> list[warnings.WarningMessage]:
        """The held warnings raised from inside this package, each text once."""
        seen: dict[str, warnings.WarningMessage] = {}
        for each in self.held:
            if _inside_package(each.filename):
                seen.setdefault(f"{each.category.__name__}: {each.message}", each)
        return list(seen.values())

    def notes(self) -> list[str]:
        """The package's warnings as lines of a failure (``note: <Category>: <text>``); they are then
        not raised again."""
        self._absorbed = True
        return [f"note: {key}" for key in (f"{w.category.__name__}: {w.message}" for w in self.ours())]

    def release(self) -> None:
        """Raise the held warnings again: the package's at the user's call of check() (unless they went
        into a failure as notes), the others where they were raised."""
        ours = {id(each) for each in self.ours()}
        for each in self.held:
            if _inside_package(each.filename):
                if self._absorbed or id(each) not in ours:
                    continue
                filename, lineno, module_globals = self._filename, self._lineno, self._globals
            else:
                filename, lineno, module_globals = each.filename, each.lineno, None
            warnings.warn_explicit(
                each.message, each.category, filename, lineno, registry=None, module_globals=module_globals,
                source=each.source,
            )
