"""Writing files the user owns so that a crash, a kill or a full disk never loses or half-writes one.

Every file pytest-npufuse writes for the user (baseline, run report, HTML report) goes through
:func:`check_outputs` when the run starts and :func:`write_text_atomic` when it ends, the rules trusted
snapshot tools follow: two outputs never share a path; a symlink is written through to its target (the
link stays a link); a read-only file is refused, not replaced behind the user's back; the new text goes
to a temporary file of our own naming that is renamed over the old one, so a reader (or a run killed
with ``kill -9`` at any instant) sees the old file or the new one, never a mix; and temporary files left
by a killed writer are removed by the next write. A special file (FIFO, device, socket) or a symlink
loop is never replaced: :mod:`.writing` writes through to the FIFOs and devices the user named.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Collection, Mapping

from ..errors import OutputFileError
from .kinds import Kind, descriptor_named, kind_of

# What an output the user named may be besides a regular file: written through, never replaced.
THROUGH_KINDS = (Kind.FIFO, Kind.CHAR_DEVICE)
# ``.<name>.npufuse-<pid>-<n>.tmp``: the pid tells a live writer's file from a dead one's.
_TEMP = ".{name}.npufuse-{pid}-{n}.tmp"


def write_target(path: Path) -> Path:
    """The file a write to ``path`` changes: a symlink's final target, else ``path`` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_writable(path: Path, what: str) -> Path:
    """Refuse, before anything is written, a path that cannot take ``what`` safely; returns the file
    the write will change (a symlink's target). A file without write permission bits counts as
    read-only even for root, who could replace it: the user marked it so on purpose. A FIFO, device
    or socket is never replaced (as root, a rename over a device node destroys it)."""
    kind = kind_of(path)
    if kind is Kind.LOOP:
        raise OutputFileError(f"{what} {path}: is a symlink loop, so it was not replaced; fix or remove the link.")
    if kind.special:
        raise OutputFileError(
            f"{what} {path}: is {kind.value}, which pytest-npufuse never replaces; give the path of a regular file"
            " (only an output you name, such as --npufuse-json, is written through to a FIFO or device)."
        )
    target = write_target(path)
    if target.is_dir():
        raise OutputFileError(f"{what} {path}: is a directory; give the path of a file.")
    if target.exists() and (target.stat().st_mode & 0o222 == 0 or not os.access(target, os.W_OK)):
        raise OutputFileError(
            f"{what} {path}: the file is read-only, so it was not replaced; make it writable (chmod u+w) "
            "or give another path.", file=str(path)
        )
    return target


def check_outputs(
    outputs: Mapping[str, Path | None], kept: Collection[str] = (), streams: Collection[str] = ()
) -> None:
    """Each named output is writable and no two of them are the same file (after symlinks): one would
    silently overwrite the other, e.g. a run report written over the baseline. Outputs named in
    ``kept`` are written only if needed, so a read-only one is refused only when a write comes. Outputs
    named in ``streams`` may be a stream (``-``, ``/dev/stdout``), a FIFO or a character device, which
    are written through (several may share one); any other output must be a regular file."""
    seen: dict[Path, str] = {}
    for what, path in outputs.items():
        if path is None:
            continue
        if what in streams and (descriptor_named(path) is not None or kind_of(path) in THROUGH_KINDS):
            continue
        if descriptor_named(path) is not None:
            raise OutputFileError(f"{what} {path}: names a stream, but the {what} must be a file; give a file path.")
        target = write_target(path) if what in kept else check_writable(path, what)
        parent = next((p for p in (target.parent, *target.parent.parents) if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise OutputFileError(f"{what} {path}: {parent} is a file, not a directory; give a path in a directory.")
        real = Path(os.path.realpath(target))
        if real in seen:
            raise OutputFileError(
                f"{seen[real]} and {what} are the same file ({path}); the second would overwrite the first. "
                "Give each output its own path."
            )
        seen[real] = what


def write_text_atomic(path: Path, text: str, what: str = "output") -> None:
    """Write ``text`` to the regular file ``path`` as UTF-8 (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"), what)


def write_bytes_atomic(path: Path, data: bytes, what: str = "output") -> None:
    """Write ``data`` to ``path`` (through a symlink to its target) atomically, after removing stale
    temporary files a killed writer left beside it.

    The file keeps its permissions, or gets the ones an ordinary write would give (a CI step run by
    another user must be able to read the result).
    """
    target = check_writable(path, what)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputFileError(
            f"{what} {path}: {target.parent} is a file (or lies under one); give a path in a directory."
        ) from None
    remove_stale_temporaries(target)
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
    temporary, handle = _create_temporary(target, what)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise write_failed(path, what, exc, len(data)) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


# Why a write fails that the user can act on, and what to do (a disk or a quota full, ``ulimit -f``).
_WRITE_FIXES = {
    errno.ENOSPC: "the disk is full; free space on it or give a path on another disk",
    errno.EDQUOT: "your disk quota is used up; free space or give a path on another disk",
    errno.EFBIG: "the file is larger than this process may write (a file size limit, ulimit -f); raise the limit "
                 "or give a path on another file system",
    errno.EROFS: "the file system is mounted read-only; give a path on a writable one",
    errno.EACCES: "permission denied; give a path in a directory you can write to",
    errno.EPERM: "permission denied; give a path in a directory you can write to",
}


def write_failed(path: Path, what: str, exc: OSError, size: int | None) -> OutputFileError:
    """The error for a write of ``size`` bytes to ``path`` that the system refused: the file, the reason
    and the fix, and that the file as it was is kept (the new text went only to a temporary file)."""
    fix = _WRITE_FIXES.get(exc.errno, "fix the cause and run again")
    written = "" if size is None else f" {size} bytes"
    return OutputFileError(
        f"{what} {path}: writing{written} failed ({exc.strerror or exc}): {fix}. The file was left as it was "
        "(nothing of the new content reached it).",
        file=str(path), bound=size,
    )


def _create_temporary(target: Path, what: str) -> tuple[Path, int]:
    """A new private file of our naming beside ``target``, opened for writing."""
    for n in range(1000):
        temporary = target.parent / _TEMP.format(name=target.name, pid=os.getpid(), n=n)
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_failed(target, what, exc, None) from None
    raise OutputFileError(
        f"{target}: could not create a temporary file beside it; remove the .{target.name}.npufuse-*.tmp files."
    )


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Delete temporary files of our naming beside ``target`` whose writing process is gone; another
    live process's file is left alone. Returns what was removed."""
    pattern = re.compile(re.escape(f".{target.name}.npufuse-") + r"(\d+)-\d+\.tmp")
    removed = []
    for candidate in target.parent.glob(f".{target.name}.npufuse-*.tmp"):
        match = pattern.fullmatch(candidate.name)
        if match and not _alive(int(match.group(1))):
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (ours counts as dead: we have no write in flight here)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; not every platform can open a directory, which is fine."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
