"""Reading a file the user gave: only a regular file, never blocking, never more than a bound.

:func:`read_bytes` asks :func:`~.kinds.kind_of` first, so a FIFO, a device, a directory or a symlink
loop is refused by name before anything is opened; it then opens without blocking and checks the open
file again (the path may have changed in between) and reads at most the role's limit plus one byte.
:func:`read_text` decodes UTF-8 with an error naming the byte, its line and how to fix it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputFileError, NpufuseError
from .kinds import Kind, kind_of, kind_of_mode
from .limits import MAX_JSON_BYTES

_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class FileRole:
    """What a file is to pytest-npufuse, for its errors: ``what`` it is ("baseline", "profile"), the error
    class a problem raises, the fix to suggest, and the largest size read."""

    what: str = "file"
    error: type[NpufuseError] = InputFileError
    fix: str = "fix the file or give the path of another one"
    limit: int = MAX_JSON_BYTES

    def fail(
        self, path: Path | str, problem: str, *, entry: str | None = None, bound: float | None = None
    ) -> NpufuseError:
        """The error for ``problem`` with ``path``: the file, what is wrong, and the fix; its fields name
        the file, the ``entry`` at fault in it and the ``bound`` it broke."""
        return self.error(f"{path}: {problem}; {self.fix}.", file=str(path), entry=entry, bound=bound)


def refuse_kind(path: Path | str, kind: Kind, role: FileRole) -> NpufuseError:
    """The error for a path that is not a regular file to read."""
    if kind is Kind.MISSING:
        return role.error(f"{path}: file not found.", file=str(path))
    if kind is Kind.LOOP:
        return role.fail(
            path, "is a symlink loop (a link that leads back to itself), not a file; fix or remove the link"
        )
    if kind.special:
        return role.fail(
            path,
            f"is {kind.value}, not a regular file; pytest-npufuse reads a {role.what} only from a regular "
            "file (reading this could wait forever or never end). Save the content to a file and give its path",
        )
    if kind is Kind.DIRECTORY:
        return role.fail(path, f"is a directory; give the path of a {role.what} file")
    return role.fail(path, f"is {kind.value} (cannot be read)")


def present(path: Path | str, role: FileRole) -> bool:
    """True for a regular file, False when nothing is there; anything else (a FIFO, a device, a directory,
    a symlink loop, a path under a file) is refused: treating it as missing would write over it later."""
    kind = kind_of(path)
    if kind is Kind.REGULAR:
        return True
    if kind is Kind.MISSING:
        return False
    raise refuse_kind(path, kind, role)


def read_bytes(path: Path | str, role: FileRole = FileRole()) -> bytes:
    """The bytes of the regular file ``path``, at most ``role.limit`` of them."""
    kind = kind_of(path)
    if kind is not Kind.REGULAR:
        raise refuse_kind(path, kind, role)
    try:
        handle = os.open(path, _O_FLAGS)
    except OSError as exc:
        raise role.fail(path, f"cannot be opened ({exc.strerror})") from None
    with os.fdopen(handle, "rb") as stream:
        opened = os.fstat(stream.fileno())
        if kind_of_mode(opened.st_mode) is not Kind.REGULAR:  # replaced between the check and the open
            raise refuse_kind(path, kind_of_mode(opened.st_mode), role)
        if opened.st_size > role.limit:
            raise _too_large(path, opened.st_size, role)
        data = stream.read(role.limit + 1)  # the file may have grown since
    if len(data) > role.limit:
        raise _too_large(path, len(data), role)
    return data


def _too_large(path: Path | str, size: int, role: FileRole) -> NpufuseError:
    """The error for a file of ``size`` bytes (at least) over the role's limit, naming both."""
    mib = 1024 * 1024
    return role.fail(
        path,
        f"is larger than {role.limit // mib} MiB ({size / mib:.1f} MiB; the bound is {role.limit} bytes), more "
        f"than any {role.what} can be",
        bound=role.limit,
    )


def decode(data: bytes, path: Path | str, role: FileRole = FileRole()) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark is dropped); a bad byte is named with its
    offset and line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise role.fail(
            path,
            f"not UTF-8 text: byte {exc.start} (line {line}) is 0x{data[exc.start]:02x} ({exc.reason}), so "
            f"not a {role.what} file; save it as UTF-8",
        ) from None


def read_text(path: Path | str, role: FileRole = FileRole()) -> str:
    """The UTF-8 text of the regular file ``path``, bounded by ``role.limit``."""
    return decode(read_bytes(path, role), path, role)
