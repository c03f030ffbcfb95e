"""``torch_npu.utils._path_manager``: ``PathManager``, torch_npu's checked file-system helpers.

torch_npu's own tests (its ONNX export tests) import it to make and remove their output folders. The
behaviour is torch_npu's (Ascend/pytorch ``torch_npu/utils/_path_manager.py`` @9e73e708ab93): directories
are made with mode 0o750 and files with 0o640, a path that exists is left alone when asked to make it and a
missing one when asked to remove it, a symbolic link or an unusual path only warns, and a failure of the
operating system is a RuntimeError (:class:`~pytest_npufuse.errors.PathManagerError`) naming the path.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from typing import Callable

from ...errors import PathManagerError

__all__ = ["PathManager"]

_PLAIN_PATH = re.compile(r"[\w.~/\s\u4e00-\u9fa5-]+")


def _change(path: str, action: str, operation: Callable[[], object], when_exists: bool) -> None:
    """Run ``operation`` on ``path`` when the path exists (removals) or does not (creations), warning first
    for a symbolic link as torch_npu does; an OS failure is the error."""
    if os.path.islink(path):
        warnings.warn(f"Failed to {action}: {path}")
    if os.path.exists(path) != when_exists:
        return
    try:
        operation()
    except OSError as error:
        raise PathManagerError(f"Failed to {action}: {path} ({error.strerror or error})") from error


class PathManager:
    """Checks and safe creation/removal of paths, with torch_npu's limits and modes."""

    MAX_PATH_LENGTH = 4096
    MAX_FILE_NAME_LENGTH = 255
    DATA_FILE_AUTHORITY = 0o640
    DATA_DIR_AUTHORITY = 0o750

    @classmethod
    def _warn_if_unusual(cls, path: str) -> None:
        """torch_npu warns, never refuses, for a long or linked path or one with unusual characters."""
        too_long = len(path) > cls.MAX_PATH_LENGTH or any(len(part) > cls.MAX_FILE_NAME_LENGTH
                                                          for part in path.split("/"))
        if too_long:
            warnings.warn("Length of input path exceeds the limit.")
        if os.path.islink(path):
            warnings.warn(f"Invalid input path is a symbolic link: {path}")
        if not _PLAIN_PATH.fullmatch(path):
            warnings.warn(f"Invalid input path: {path}")

    @classmethod
    def check_input_directory_path(cls, path: str) -> None:
        """A directory path (which need not exist yet): an existing file there is refused."""
        cls._warn_if_unusual(path)
        if os.path.isfile(path):
            raise PathManagerError(f"Invalid input path is a file path: {path}")

    @classmethod
    def check_input_file_path(cls, path: str) -> None:
        """A file path (which need not exist yet): an existing directory there is refused."""
        cls._warn_if_unusual(path)
        if os.path.isdir(path):
            raise PathManagerError(f"Invalid input path is a directory path: {path}")

    @classmethod
    def _check_existing(cls, path: str, access: int, what: str) -> None:
        if not os.path.exists(path):
            raise PathManagerError(f"The path does not exist: {path}")
        if os.path.islink(path):
            warnings.warn(f"Invalid path is a symbolic link: {path}")
        if not os.access(path, access):
            warnings.warn(f"The path permission check failed ({what}): {path}")

    @classmethod
    def check_directory_path_writeable(cls, path: str) -> None:
        cls._check_existing(path, os.W_OK, "write")

    @classmethod
    def check_directory_path_readable(cls, path: str) -> None:
        cls._check_existing(path, os.R_OK, "read")

    @classmethod
    def remove_path_safety(cls, path: str) -> None:
        """Remove a directory tree; a missing one is already removed."""
        _change(path, "remove path", lambda: shutil.rmtree(path), when_exists=True)

    @classmethod
    def remove_file_safety(cls, file: str) -> None:
        """Remove a file; a missing one is already removed."""
        _change(file, "remove file", lambda: os.remove(file), when_exists=True)

    @classmethod
    def make_dir_safety(cls, path: str) -> None:
        """Make a directory (and its parents) with mode 0o750, unless the path exists."""
        _change(path, "make directory", lambda: os.makedirs(path, mode=cls.DATA_DIR_AUTHORITY, exist_ok=True),
                when_exists=False)

    @classmethod
    def create_file_safety(cls, path: str) -> None:
        """Create an empty file with mode 0o640, unless the path exists."""
        _change(path, "create file",
                lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT, cls.DATA_FILE_AUTHORITY)), when_exists=False)

    @classmethod
    def check_path_is_readable(cls, path: str) -> bool:
        return os.access(path, os.R_OK)

    @classmethod
    def check_path_is_writeable(cls, path: str) -> bool:
        return os.access(path, os.W_OK)
