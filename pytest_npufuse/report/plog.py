"""CANN-style plog files, where TorchAir users look for SuperKernel scope diagnostics.

CANN writes one file per process, ``plog-<pid>_<timestamp>.log``, under ``$ASCEND_PROCESS_LOG_PATH`` if set,
else ``$HOME/ascend/log/run/plog/``; users grep it for the keyword ``super_kernel_scope``. We write the same
lines to the same place so their habits (and scripts) carry over. The timestamp only names the file and
stamps lines; no modeled number depends on it.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Iterable

from ..errors import OutputFileError
from ..files import append_text
from ..plan.tasks import LogRecord
from ..session import Scope, SessionKey, current_session
from .escaping import terminal_text

# Per process id, its plog file: a file belongs to the real process (a forked child names its own), so every
# session of the process shares one.
PLOG_FILES: SessionKey[dict[int, Path]] = SessionKey("plog files", dict, Scope.PROCESS)


def plog_dir() -> Path:
    """Where CANN puts run logs: ``$ASCEND_PROCESS_LOG_PATH``, else ``$HOME/ascend/log/run/plog``."""
    override = os.environ.get("ASCEND_PROCESS_LOG_PATH")
    if override:
        return Path(override)
    return Path(os.environ.get("HOME", str(Path.home()))) / "ascend" / "log" / "run" / "plog"


def _now() -> datetime.datetime:
    return datetime.datetime.now()


def plog_path() -> Path:
    """This process's plog file, named when first needed, as CANN does (pid and start time)."""
    pid = os.getpid()
    directory = plog_dir()
    files = current_session()[PLOG_FILES]
    cached = files.get(pid)
    if cached is None or cached.parent != directory:
        stamp = _now().strftime("%Y%m%d%H%M%S%f")[:-3]
        cached = directory / f"plog-{pid}_{stamp}.log"
        files[pid] = cached
    return cached


def _named(directory: Path) -> str:
    """The plog directory as the user set it (the variable, when it came from there)."""
    where = "ASCEND_PROCESS_LOG_PATH" if os.environ.get("ASCEND_PROCESS_LOG_PATH") else "the plog directory"
    return f"{where} {directory}"


def write_plog(records: Iterable[LogRecord]) -> Path | None:
    """Append ``records`` to this process's plog file; returns its path, or None when there was nothing."""
    records = list(records)
    if not records:
        return None
    path = plog_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputFileError(
            f"{_named(path.parent)} is a file (or lies under one), so the plog cannot be written there; "
            "point ASCEND_PROCESS_LOG_PATH at a directory."
        ) from None
    except OSError as exc:
        raise OutputFileError(
            f"{_named(path.parent)} cannot be created ({exc.strerror or exc}), so the plog cannot be written there; "
            "point ASCEND_PROCESS_LOG_PATH at a directory you can write to.", file=str(path),
        ) from None
    stamp = _now().strftime("%Y-%m-%d-%H:%M:%S.%f")
    # One record, one line: a scope name holding a line break or an escape sequence must not forge another
    # line for the users and scripts that grep this file.
    lines = "".join(
        f"[{record.level}] GE({os.getpid()},python):{stamp} [{record.keyword}] {terminal_text(record.message)}\n"
        for record in records
    )
    append_text(path, lines, "plog")
    return path
