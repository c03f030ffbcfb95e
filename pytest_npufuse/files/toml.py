"""Reading the TOML data files (profiles, op catalog, pyproject.toml) with errors that name the file.

The file is read by :func:`~.reading.read_bytes` (a regular file, bounded), decoded as UTF-8 with the
bad byte named, scanned for nesting before ``tomllib`` (which recurses once per level) sees it, and its
integers are held to TOML's signed 64-bit range. ``tomllib`` itself refuses a key given twice.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from .limits import MAX_DEPTH, MAX_TOML_BYTES, TOML_INT_RANGE, TOML_TOKENS, deepest
from .reading import FileRole, decode, read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

PROFILE_FILE = FileRole("TOML", ProfileError, "fix the file or give the path of another one", MAX_TOML_BYTES)


def parse_toml(text: str, source: Path | str, role: FileRole = PROFILE_FILE) -> dict[str, Any]:
    """The tables of the TOML ``text`` read from ``source`` (named in errors)."""
    too_deep = deepest(text, TOML_TOKENS)
    if too_deep is not None:
        line = text.count("\n", 0, too_deep) + 1
        raise role.fail(source, f"nests arrays and tables deeper than {MAX_DEPTH} levels (line {line})")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise role.error(
            f"{source}: not valid TOML: {exc}. Fix the syntax at that line.",
            file=str(source),
        ) from None
    except ValueError:  # Python's limit on the digits of an int (4300), which tomllib does not catch
        raise role.fail(
            source, "holds an integer thousands of digits long, far outside TOML's signed 64-bit range"
        ) from None
    except RecursionError:
        raise role.fail(source, "nests arrays and tables too deeply to parse") from None
    _check_integers(data, source, role)
    return data


def read_toml(path: Path, role: FileRole = PROFILE_FILE) -> dict[str, Any]:
    """Parse the TOML file ``path``; a syntax error names the file and the line so the user can fix it."""
    return parse_toml(decode(read_bytes(path, role), path, role), path, role)


def _check_integers(data: dict[str, Any], source: Path | str, role: FileRole) -> None:
    """Every integer within TOML's signed 64-bit range (toml.io: an out-of-range value must be an error),
    and no deeper nesting than the scan allows (dotted keys such as ``a.b.c = 1`` nest without brackets).
    Iterative, so a deep file cannot exhaust the stack here either."""
    pending: list[tuple[Any, str, int]] = [(data, "", 0)]
    while pending:
        value, where, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise role.fail(source, f"nests tables deeper than {MAX_DEPTH} levels (at {where[:80]}...)")
        if isinstance(value, dict):
            pending.extend((item, f"{where}.{key}" if where else str(key), depth + 1) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value))
        elif (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not TOML_INT_RANGE[0] <= value <= TOML_INT_RANGE[1]
        ):
            raise role.fail(source, f"key {where} is an integer outside TOML's signed 64-bit range")


def typed_value(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """Fetch ``table[key]`` and check its type; ints are accepted where floats are expected."""
    if key not in table:
        raise ProfileError(f"{where}: missing key '{key}' (expected {_kind_name(kind)}).", entry=f"{where} {key}")
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ProfileError(f"{where}: key '{key}' is {value!r}, expected {_kind_name(kind)}.", entry=f"{where} {key}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
