"""Reading the TOML data files (profiles, op catalog) with errors that name the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``path``; a syntax error names the file and the line so the user can fix it."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ProfileError(f"{path}: file not found.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}. Fix the syntax at that line.") from None


def typed_value(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """Fetch ``table[key]`` and check its type; ints are accepted where floats are expected."""
    if key not in table:
        raise ProfileError(f"{where}: missing key '{key}' (expected {_kind_name(kind)}).")
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ProfileError(f"{where}: key '{key}' is {value!r}, expected {_kind_name(kind)}.")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
