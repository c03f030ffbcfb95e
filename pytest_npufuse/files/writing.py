"""Writing an output: a regular file atomically, or through to the stream, FIFO or device the user named.

``--npufuse-json=-`` (or ``/dev/stdout``) writes the report to standard output; ``/dev/null`` discards
it; a FIFO feeds the process reading it. Those are what the user named, so they are written through
(opened without ``O_CREAT`` or ``O_TRUNC``, never renamed over). A file pytest-npufuse names itself (a
trace under ``--npufuse-trace-dir``, a plog) is written only as a regular file: a FIFO or device found
there is refused, never written to and never replaced.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import OutputFileError
from .atomic import THROUGH_KINDS, write_bytes_atomic, write_failed
from .kinds import Kind, descriptor_named, kind_of, kind_of_mode

_WRITE_FLAGS = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def write_text(path: Path, text: str, what: str = "output", *, named: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path``; see :func:`write_bytes`."""
    write_bytes(path, text.encode("utf-8"), what, named=named)


def write_bytes(path: Path, data: bytes, what: str = "output", *, named: bool = False) -> None:
    """Write ``data`` to ``path``: a regular file (or a new one) atomically; with ``named`` (the user gave
    this path as an output) also a stream, FIFO or character device, written through."""
    descriptor = descriptor_named(path)
    kind = Kind.REGULAR if descriptor is not None else kind_of(path)
    if descriptor is None and kind not in THROUGH_KINDS:
        write_bytes_atomic(path, data, what)  # refuses a loop, a directory and any other special file
        return
    if not named:
        raise OutputFileError(
            f"{what} {path}: is {kind.value if descriptor is None else 'a stream'}, and pytest-npufuse writes this "
            "file only as a regular file; remove it or choose another directory."
        )
    if descriptor is not None:
        _write_descriptor(descriptor, data, what, path)
    else:
        _write_through(path, data, what)


def ensure_directory(path: Path, what: str = "output directory") -> Path:
    """``path`` as a directory, created with its parents if missing; a file, a FIFO or a device there
    (or above it) is a clear error instead of a raw ``FileExistsError``."""
    kind = kind_of(path)
    if kind is Kind.DIRECTORY:
        return path
    if kind is not Kind.MISSING:
        raise OutputFileError(f"{what} {path}: is {kind.value}, not a directory; give the path of a directory.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputFileError(
            f"{what} {path}: lies under a file, not a directory; give the path of a directory."
        ) from None
    except OSError as exc:
        raise OutputFileError(f"{what} {path}: could not be created ({exc.strerror}).") from None
    return path


def append_text(path: Path, text: str, what: str = "log") -> None:
    """Append ``text`` to the regular file ``path`` (created if missing), as a log is written: a FIFO, a
    device, a directory or a symlink loop there is refused, never written to."""
    kind = kind_of(path)
    if kind not in (Kind.REGULAR, Kind.MISSING):
        raise OutputFileError(
            f"{what} {path}: is {kind.value}, not a regular file, so nothing was written to it; remove it."
        )
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = os.open(path, flags, 0o666)
    except OSError as exc:
        raise OutputFileError(f"{what} {path}: could not be opened for appending ({exc.strerror}).") from None
    try:
        opened = kind_of_mode(os.fstat(handle).st_mode)
        if opened is not Kind.REGULAR:  # replaced between the check and the open
            raise OutputFileError(
                f"{what} {path}: is {opened.value}, not a regular file, so nothing was written to it."
            )
        _append_whole(handle, text.encode("utf-8"), path, what)
    finally:
        os.close(handle)


def _append_whole(handle: int, data: bytes, path: Path, what: str) -> None:
    """Append ``data`` or nothing: a write the system stops part way (a full disk, ``ulimit -f``) is cut
    back to the file's old end, so a log never ends in half a record."""
    end = os.fstat(handle).st_size
    try:
        _write_all(handle, data)
    except OSError as exc:
        try:
            os.ftruncate(handle, end)
        except OSError:
            pass  # the write's own error says what to fix; a file that cannot even be cut is left as it is
        raise write_failed(path, what, exc, len(data)) from None


def _write_descriptor(descriptor: int, data: bytes, what: str, path: Path) -> None:
    """Write to an open descriptor (after Python's own buffered output, so the order is kept)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
    try:
        _write_all(descriptor, data)
    except OSError as exc:
        raise OutputFileError(f"{what} {path}: could not write to descriptor {descriptor} ({exc.strerror}).") from None


def _write_through(path: Path, data: bytes, what: str) -> None:
    """Write to a FIFO or character device. Opening does not block: a FIFO nobody reads is an error
    now, not a run that never ends; once open, writes wait for the reader as a pipe's do."""
    try:
        handle = os.open(path, _WRITE_FLAGS)
    except OSError as exc:
        reader = " (no process is reading the FIFO; start the reader first)" if kind_of(path) is Kind.FIFO else ""
        raise OutputFileError(f"{what} {path}: could not be opened for writing ({exc.strerror}){reader}.") from None
    try:
        os.set_blocking(handle, True)
        _write_all(handle, data)
    except OSError as exc:
        raise OutputFileError(f"{what} {path}: writing failed ({exc.strerror}).") from None
    finally:
        os.close(handle)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
