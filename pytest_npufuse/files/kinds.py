"""What is at a path, told from ``os.stat`` before anything opens it.

Opening a FIFO for reading waits for a writer, reading ``/dev/zero`` never ends, a symlink loop looks
like a missing file to ``Path.exists``, and replacing a device node by renaming a file over it destroys
the node. So every reader and writer of :mod:`pytest_npufuse.files` first asks :func:`kind_of`, which
never opens the path and so never blocks.
"""

from __future__ import annotations

import enum
import errno
import os
import re
import stat
from pathlib import Path


class Kind(enum.Enum):
    """What a path names, after following symlinks; the value reads as the end of "the path is ..."."""

    MISSING = "missing"
    REGULAR = "a regular file"
    DIRECTORY = "a directory"
    FIFO = "a FIFO (named pipe)"
    CHAR_DEVICE = "a character device"
    BLOCK_DEVICE = "a block device"
    SOCKET = "a socket"
    LOOP = "a symlink loop"
    UNDER_FILE = "under a file, not a directory"
    UNREADABLE = "not accessible"

    @property
    def special(self) -> bool:
        """A FIFO, device or socket: reading one may block or never end, and it must never be replaced."""
        return self in (Kind.FIFO, Kind.CHAR_DEVICE, Kind.BLOCK_DEVICE, Kind.SOCKET)


_MODES = (
    (stat.S_ISREG, Kind.REGULAR),
    (stat.S_ISDIR, Kind.DIRECTORY),
    (stat.S_ISFIFO, Kind.FIFO),
    (stat.S_ISCHR, Kind.CHAR_DEVICE),
    (stat.S_ISBLK, Kind.BLOCK_DEVICE),
    (stat.S_ISSOCK, Kind.SOCKET),
)


def kind_of_mode(mode: int) -> Kind:
    return next((kind for test, kind in _MODES if test(mode)), Kind.UNREADABLE)


def kind_of(path: Path | str) -> Kind:
    """What ``path`` names (symlinks followed); never opens it, so never blocks."""
    try:
        return kind_of_mode(os.stat(path).st_mode)
    except FileNotFoundError:
        return Kind.MISSING
    except NotADirectoryError:
        return Kind.UNDER_FILE
    except ValueError:  # an embedded NUL byte: no file can have that name
        return Kind.UNREADABLE
    except OSError as exc:
        return Kind.LOOP if exc.errno == errno.ELOOP else Kind.UNREADABLE


# Names of an already open descriptor rather than of a file: the user means "write to that stream".
_DESCRIPTORS = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def descriptor_named(path: Path | str) -> int | None:
    """The descriptor ``path`` names (``-`` and ``/dev/stdout`` are 1, ``/dev/stderr`` 2, ``/dev/fd/N``
    N), or None for the path of a file. Such a path may resolve to a regular file (``> out.txt``), and a
    rename over it would break the shell's redirection, so it is written through, never replaced."""
    text = str(path)
    if text in _DESCRIPTORS:
        return _DESCRIPTORS[text]
    match = _FD_PATH.fullmatch(text)
    return int(match.group(1)) if match else None


def fingerprint(path: Path | str) -> tuple[int, int, int, int] | None:
    """Identity and version of the regular file at ``path`` (device, inode, size, modification time), or
    None when none is there: a writer compares the one it saw when its run started with the one it sees
    when it writes, to know whether another process wrote the file meanwhile."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if kind_of_mode(info.st_mode) is not Kind.REGULAR:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
