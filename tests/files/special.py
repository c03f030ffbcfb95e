"""What the file tables put at a path: special files of every kind, made in a test's directory."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

_SOCKETS: list[tuple[socket.socket, str]] = []


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.mkdir()


def loop(path: Path) -> None:
    other = path.with_name(path.name + ".other")
    path.symlink_to(other)
    other.symlink_to(path)


def unix_socket(path: Path) -> None:
    """A listening Unix socket reached at ``path``. It is bound in a short directory and linked to, since a
    socket's own path may be at most 107 bytes, less than pytest's temporary paths under xdist."""
    folder = tempfile.mkdtemp(prefix="npf", dir="/tmp")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"{folder}/s")
    path.symlink_to(f"{folder}/s")
    _SOCKETS.append((server, folder))


def close_sockets() -> None:
    """Close the sockets :func:`unix_socket` made and remove their directories."""
    while _SOCKETS:
        server, folder = _SOCKETS.pop()
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def under_a_file(path: Path) -> Path:
    """``path`` moved under a regular file, so no directory can ever be made there."""
    path.parent.joinpath("plain").write_text("x")
    return path.parent / "plain" / path.name
