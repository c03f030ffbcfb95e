"""How to take back each change the shim made, newest last (:func:`pytest_npufuse.uninstall_shims`
runs them in reverse)."""

from __future__ import annotations

from typing import Any, Callable

from ..session import Scope, SessionKey, current_session

# The shim changes the real process (sys.meta_path, torch's modules), so every session shares one list.
UNDO: SessionKey[list[Callable[[], None]]] = SessionKey("the shim's changes, to undo", list, Scope.PROCESS)


def on_undo(undo: Callable[[], None]) -> None:
    """Have :func:`pytest_npufuse.uninstall_shims` call ``undo``."""
    current_session()[UNDO].append(undo)


def undo_all() -> None:
    """Take back every change recorded, newest first."""
    changes = current_session()[UNDO]
    while changes:
        changes.pop()()


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
    on_undo(undo)
