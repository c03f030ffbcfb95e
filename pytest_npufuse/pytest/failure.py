"""How a library error becomes a pytest failure: its message alone, never a traceback from deep inside torch."""

from __future__ import annotations

import os
from typing import Callable, NoReturn, TypeVar

import pytest

from ..errors import NpufuseError
from ..report.escaping import terminal_text

T = TypeVar("T")


def fail(message: str) -> NoReturn:
    """Fail the test with ``message`` alone (no traceback). The message quotes users' scope, stream and
    op names, which pytest prints as they are, so they are shown as :func:`terminal_text` shows them;
    paths under the current directory are shown relative to it, as pytest shows test paths."""
    here = os.getcwd().rstrip(os.sep) + os.sep
    pytest.fail(terminal_text(message.replace(here, ""), multiline=True), pytrace=False)


def or_fail(action: Callable[[], T]) -> T:
    """Run ``action``; an NpufuseError fails the test with its message alone, outside the ``except``
    block so pytest shows no chained traceback."""
    try:
        return action()
    except NpufuseError as exc:
        message = f"npufuse: {exc.diagnosis}"
    fail(message)
