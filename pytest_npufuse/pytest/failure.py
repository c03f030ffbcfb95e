"""How a library error becomes a pytest failure: its message alone, never a traceback from deep inside torch."""

from __future__ import annotations

from typing import Callable, TypeVar

import pytest

from ..errors import NpufuseError

T = TypeVar("T")


def or_fail(action: Callable[[], T]) -> T:
    """Run ``action``; an NpufuseError fails the test with its message alone, outside the ``except``
    block so pytest shows no chained traceback."""
    try:
        return action()
    except NpufuseError as exc:
        message = f"npufuse: {exc}"
    pytest.fail(message, pytrace=False)
