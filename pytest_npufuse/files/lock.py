"""An advisory lock per shared output, so processes that update one file take turns instead of losing data.

Two pytest runs with ``--npufuse-update-baseline`` on one baseline each read the file, add their
entries and rename their version over it: without a lock the last rename wins and the other run's
entries are gone, though both said "wrote". Under :func:`locked`, each writer re-reads the file, merges
and writes while no other writer can, so every entry survives.

The lock is ``flock`` on a sidecar file beside the output, ``.<name>.npufuse-lock`` (the output itself
cannot carry it: each write renames a new file over it). The holder removes the sidecar before it lets
go, so nothing is left in the user's tree. That is safe because a process that opened the sidecar and
then got the lock checks that the file it locked is still the one at that path; if the holder before
it removed it meanwhile, it opens the path again. ``flock`` is released by the kernel when its process
dies, so a killed run leaves at most an unlocked sidecar, which the next writer takes over and removes.
Linux and macOS have it; elsewhere writing a shared output fails with an error that says so.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import OutputFileError
from .atomic import write_target
from .kinds import Kind, descriptor_named, kind_of

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

# A writer holds the lock for one read-merge-write (milliseconds); a minute means it is stuck.
TIMEOUT_S = 60.0
# Lock file -> depth, so one process may nest (the lock is per open file). The locks are the real process's,
# held across sessions while another process waits, so this is not session state.
_HELD: dict[str, int] = {}
_GUARD = threading.RLock()


def lock_path(path: Path, directory: bool = False) -> Path:
    """The sidecar lock file of the output ``path`` (of its target, when ``path`` is a symlink); a
    directory of outputs pytest-npufuse owns (a case's traces) keeps its lock file inside."""
    if directory:
        return path / ".npufuse-lock"
    target = write_target(path)
    return target.parent / f".{target.name}.npufuse-lock"


@contextmanager
def locked(
    path: Path, what: str = "output", *, directory: bool = False, timeout_s: float = TIMEOUT_S
) -> Iterator[None]:
    """Hold the lock of ``path`` (a file, or with ``directory`` a directory of files written together)
    for the ``with`` block; wait for another process's turn at most ``timeout_s`` seconds, then fail
    naming the holder."""
    sidecar = lock_path(path, directory)
    key = os.path.realpath(sidecar)
    with _GUARD:
        if key in _HELD:
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        handle = _acquired(sidecar, what, path, timeout_s)
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
            _release(handle, sidecar)


@contextmanager
def locked_output(path: Path, what: str = "output") -> Iterator[bool]:
    """:func:`locked` for an output that is (or will be) a regular file; a stream, FIFO or device the
    user named is written through unlocked (nothing is read back or merged there). Yields whether the
    output is a file, i.e. whether the block may read and merge what is there."""
    if descriptor_named(path) is not None or kind_of(path) not in (Kind.REGULAR, Kind.MISSING):
        yield False
        return
    with locked(path, what):
        yield True


def _open(sidecar: Path, what: str, path: Path) -> int:
    if fcntl is None:
        raise OutputFileError(
            f"{what} {path}: updating a shared file safely needs fcntl.flock (Linux or macOS); this platform "
            "has none, so nothing was written."
        )
    kind = kind_of(sidecar)
    if kind is Kind.UNDER_FILE:
        raise OutputFileError(
            f"{what} {path}: {sidecar.parent} is a file (or lies under one); give a path in a directory."
        )
    if kind not in (Kind.REGULAR, Kind.MISSING):
        raise OutputFileError(f"{what} {path}: its lock file {sidecar} is {kind.value}; remove it.")
    try:
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        return os.open(
            sidecar, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0), 0o666
        )
    except OSError as exc:
        raise OutputFileError(
            f"{what} {path}: cannot create its lock file {sidecar} ({exc.strerror}); the directory must be writable."
        ) from None


def _acquired(sidecar: Path, what: str, path: Path, timeout_s: float) -> int:
    """An open, locked handle on the sidecar that is at ``sidecar`` now: a handle whose file the previous
    holder removed while this process waited on it locks nothing anyone else sees, so it is dropped and the
    path opened again (the new file, or a new one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        handle = _open(sidecar, what, path)
        try:
            _acquire(handle, sidecar, what, path, timeout_s, deadline)
        except BaseException:
            os.close(handle)
            raise
        if _is_at(handle, sidecar):
            return handle
        os.close(handle)


def _is_at(handle: int, sidecar: Path) -> bool:
    """Whether the open file ``handle`` is still the file named ``sidecar``."""
    try:
        named = os.stat(sidecar, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _release(handle: int, sidecar: Path) -> None:
    """Remove the sidecar while still holding it, then unlock: a waiter that locks the removed file next
    sees that it is gone and opens the path anew."""
    try:
        os.unlink(sidecar)
    except FileNotFoundError:
        pass
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)


def _acquire(handle: int, sidecar: Path, what: str, path: Path, timeout_s: float, deadline: float) -> None:
    """Poll for the lock until ``deadline`` (a blocking ``flock`` could wait forever on a stuck holder),
    then note our pid in the file so that the next waiter's error can name us."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise OutputFileError(
                    f"{what} {path}: another process ({_holder(sidecar)}) has held its lock {sidecar} for "
                    f"{timeout_s:g} s; nothing was written. Let that run finish, or stop it."
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)


def _holder(sidecar: Path) -> str:
    try:
        pid = sidecar.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "pid unknown"
