"""Every file pytest-npufuse reads or writes goes through this package (the lowest layer, torch-free).

Reading (:mod:`.reading`, :mod:`.jsonfile`, :mod:`.toml`): only a regular file (a FIFO, a device, a
directory or a symlink loop is refused by name before it is opened, so nothing blocks), at most a bounded
size, UTF-8 with the bad byte named, nesting and number lengths bounded before the parser runs, a key
given twice refused. Errors are the :class:`~.reading.FileRole`'s error class, naming file, problem and fix.

Writing (:mod:`.writing`, :mod:`.atomic`): a regular file is replaced atomically (never half-written,
never a read-only or special file replaced); a stream, FIFO or device is written through only when the
user named it as an output. Shared outputs are updated under an advisory lock (:mod:`.lock`) by
read-merge-write, so concurrent runs never drop each other's entries. :mod:`.kinds` tells what is at a
path without opening it; :mod:`.limits` holds the bounds; ``docs/files.md`` lists the promises.
"""

from .atomic import check_outputs, write_bytes_atomic, write_text_atomic
from .jsonfile import parse_json, read_json
from .kinds import Kind, kind_of
from .lock import locked, locked_output
from .reading import FileRole, present, read_bytes, read_text
from .toml import parse_toml, read_toml
from .writing import append_text, ensure_directory, write_bytes, write_text

__all__ = [
    "FileRole",
    "append_text",
    "ensure_directory",
    "Kind",
    "check_outputs",
    "kind_of",
    "locked",
    "locked_output",
    "parse_json",
    "parse_toml",
    "present",
    "read_bytes",
    "read_json",
    "read_text",
    "read_toml",
    "write_bytes",
    "write_bytes_atomic",
    "write_text",
    "write_text_atomic",
]
