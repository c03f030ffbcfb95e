"""Gaps a check meets (a missing torch_npu op or module, a name the shim lacks, an argument the CPU model
does not implement), raised at once or collected so that one error lists them all.

A gap is raised where the user's code asks for the missing thing (an attribute of ``torch_npu``, an
argument of an op). Outside a survey it raises its own error at once, carrying its :class:`Gap` as
``error.gap``, as before. A check that meets one then runs the model again inside :func:`surveying`: there
every gap is recorded with the user's line and the code goes on with a :class:`StandIn` in place of the
missing thing, so the check can name every gap in one :class:`~pytest_npufuse.errors.GapsError`
(:mod:`pytest_npufuse.frontend.survey`). Torch-free: the shim's modules raise gaps from their
``__getattr__``.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from pathlib import Path
from typing import Any, Iterator, NoReturn

from .errors import PACKAGE_DIR, Gap, NpufuseError

MODULE_FIX = "keep its use out of the checked model, or check the model where the real torch_npu is installed"
"""What to do about a module the shim does not model."""

_FOUND: contextvars.ContextVar[list[Gap] | None] = contextvars.ContextVar("npufuse_gaps", default=None)


@contextlib.contextmanager
def surveying() -> Iterator[list[Gap]]:
    """Inside, gaps are recorded (each once per kind, name, argument and line) instead of raised; yields
    the list they are recorded in."""
    listed: list[Gap] = []
    token = _FOUND.set(listed)
    try:
        yield listed
    finally:
        _FOUND.reset(token)


def user_line() -> str:
    """The innermost frame of the running code outside this package, torch and contextlib, as
    ``path:line``: the user's line that asked for the missing thing ("" when there is none)."""
    outside = [str(PACKAGE_DIR), str(Path(contextlib.__file__))]
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        outside.append(str(Path(torch.__file__).parent))
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(tuple(outside)):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def record(gap: Gap) -> None:
    """Record ``gap`` in the running survey (once), if a survey is running."""
    listed = _FOUND.get()
    if listed is not None and gap not in listed:
        listed.append(gap)


def _raise(error: NpufuseError, gap: Gap) -> NoReturn:
    """Raise ``error`` with its gap (the data a check's survey starts from) and, where it names none, the op
    (the missing thing as the user wrote it), the argument and the user's line the gap was found at."""
    error.gap = gap
    error.op = error.op or gap.name
    error.argument = error.argument or gap.argument
    error.where = error.where or gap.where or None
    raise error


def gap_of(error: BaseException) -> Gap | None:
    """The gap an error was raised for, if it was raised for one."""
    return error.gap if isinstance(error, NpufuseError) else None


class StandIn:
    """What a survey hands the model for a missing op, module or name, so the model runs on to its next gap.
    Its first use (a call, an attribute, a ``with``) records the gap at the user's line; a call returns its
    first tensor argument (the shape most ops keep) or None, an attribute is a stand-in too. Only the
    survey sees one: ``hasattr`` on a missing name stays False everywhere else."""

    def __init__(self, kind: str, name: str, fix: str) -> None:
        self._gap = (kind, name, fix)

    def _use(self) -> None:
        kind, name, fix = self._gap
        record(Gap(kind, name, user_line(), fix))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._use()
        return next((value for value in (*args, *kwargs.values()) if hasattr(value, "shape")), None)

    def __getattr__(self, name: str) -> Any:
        """An attribute of a missing "op" (``torch_npu.op_plugin.atb``) shows it is a module the code
        imports from, not an op: the gap is recorded as a missing module."""
        if name.startswith("__"):
            raise AttributeError(name)
        kind, missing_name, _ = self._gap
        if kind == "op":
            self._gap = ("module", missing_name, MODULE_FIX)
        self._use()
        return StandIn(*self._gap)

    def __enter__(self) -> "StandIn":
        self._use()
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def missing(error: NpufuseError, kind: str, name: str, fix: str) -> StandIn:
    """A missing op, module or name (``kind``) the user's code looked up: ``error`` at once, or in a
    survey a :class:`StandIn` that records the gap where it is used."""
    if _FOUND.get() is None:
        _raise(error, Gap(kind, name, user_line(), fix))
    return StandIn(kind, name, fix)


def refused(error: NpufuseError, op: str, argument: str, fix: str) -> None:
    """An argument of ``op`` the CPU model does not implement: ``error`` at once, or in a survey the gap
    recorded and the op computed without the argument's feature."""
    gap = Gap("argument", op, user_line(), fix, argument)
    if _FOUND.get() is None:
        _raise(error, gap)
    record(gap)
