"""``advise --json FILE``: every advise run recorded as one attempt in a JSON file.

The SuperKernel scope analysis guide tunes a scope layout by trying, measuring and trying again; the
record keeps each try (the factory, the options, the ranked layouts, the recommendation, the findings)
in the order they ran, so a later attempt can be read against the earlier ones. A file that is not a
record this command wrote is refused, never replaced; a stream or FIFO named as the output gets this
attempt's record alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputFileError
from ..files import FileRole, locked_output, present, read_json, write_text
from .advice import Advice

FORMAT = "npufuse-advise/1"
RECORD = FileRole(
    what="advise record",
    error=InputFileError,
    fix="give --json a new file, or one an earlier 'advise --json' wrote",
)


def attempt_of(advice: Advice, factory: str, options: str) -> dict[str, Any]:
    """One attempt: what was advised on (the factory and options) and the advice."""
    return {"factory": factory, "options": options, **advice.to_json()}


def earlier_attempts(path: Path) -> list[dict[str, Any]]:
    """The attempts an advise record at ``path`` holds; none when nothing is there."""
    if not present(path, RECORD):
        return []
    document = read_json(path, RECORD)
    if not (isinstance(document, dict) and document.get("format") == FORMAT and isinstance(document.get("attempts"), list)):
        raise RECORD.fail(path, f"is not an advise record (no \"format\": \"{FORMAT}\" with a list of attempts)")
    return document["attempts"]


def record_attempt(path: Path, attempt: dict[str, Any]) -> int:
    """Append ``attempt`` to the record at ``path`` (created when missing) under the file's lock, and
    return how many attempts it now holds."""
    with locked_output(path, "advise record") as regular:
        attempts = [*(earlier_attempts(path) if regular else []), attempt]
        document = {"format": FORMAT, "attempts": attempts}
        write_text(path, json.dumps(document, indent=1) + "\n", "advise record", named=True)
    return len(attempts)
