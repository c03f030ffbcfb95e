"""How to take back each change the shim made, newest last (:func:`pytest_npufuse.uninstall_shims`
runs them in reverse)."""

from __future__ import annotations

from typing import Any, Callable

UNDO: list[Callable[[], None]] = []


def patch(owner: Any, name: str, value: Any) -> None:
    """Set ``owner.name = value`` and record how to restore what was there (or its absence)."""
    missing = object()
    original = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name, missing)

    def undo() -> None:
        if original is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, original)

    setattr(owner, name, value)
    UNDO.append(undo)
