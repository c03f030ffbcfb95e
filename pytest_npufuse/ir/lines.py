"""The code of the user's source line an op came from, as messages quote it.

Kernels, scope breaks and syncs record where they came from as ``path:line``; a message that shows
the line's code as well lets the user see the mistake without opening the file."""

from __future__ import annotations

import linecache


def code_at(source: str) -> str:
    """The stripped code of ``path:line`` ('' when the file or line cannot be read)."""
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit():
        return ""
    return linecache.getline(path, int(line)).strip()



def file_line(source: str) -> str:
    """``path:line`` as records keep it: the file name and line without the directory, so checkouts in
    different places (CI shards, a colleague's machine) record the same text."""
    return source.rsplit("/", 1)[-1]
