"""Reading JSON documents (baselines, run reports) strictly: bounded, and refusing what ``json`` lets pass.

Python's ``json`` keeps the last of two equal keys (a baseline whose case or ``"entries"`` block appears
twice after a bad merge would silently lose one), accepts ``NaN`` and ``Infinity`` (not JSON), parses a
5,000-digit integer into a ValueError and 100,000 nested lists into a RecursionError. Here each of
these is a :class:`~.reading.FileRole` error naming the file and the place.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from .limits import JSON_TOKENS, MAX_DEPTH, OutOfBounds, bounded_number, deepest
from .reading import FileRole, decode, read_bytes


def parse_json(text: str, source: Path | str, role: FileRole = FileRole()) -> Any:
    """The value of the JSON ``text`` read from ``source`` (named in errors)."""

    def fail(problem: str) -> Exception:
        return role.fail(source, problem)

    too_deep = deepest(text, JSON_TOKENS)
    if too_deep is not None:
        raise fail(
            f"nests arrays and objects deeper than {MAX_DEPTH} levels (at {_place(text, too_deep)}), "
            f"deeper than any {role.what} can be"
        )
    refused: list[OutOfBounds] = []

    def number(literal: str, convert: Callable[[str], object]) -> object:
        value = bounded_number(literal, convert)
        if isinstance(value, OutOfBounds):
            refused.append(value)
        return value

    try:
        data = json.loads(
            text,
            object_pairs_hook=_unique_keys(fail),
            parse_int=lambda literal: number(literal, int),
            parse_float=lambda literal: number(literal, float),
            parse_constant=lambda name: _refuse_constant(name, fail),
        )
    except json.JSONDecodeError as exc:
        raise fail(f"corrupt JSON ({exc.msg} at {_place(text, exc.pos)})") from None
    except RecursionError:  # only if the scan above missed a level: still ours, never a crash
        raise fail(f"nests arrays and objects too deeply to parse, deeper than any {role.what} can be") from None
    if refused:
        entry = json_path(_path_to(data, refused[0]))
        raise role.fail(source, f"{entry}: {refused[0].problem}", entry=entry, bound=refused[0].bound)
    return data


def read_json(path: Path | str, role: FileRole = FileRole()) -> Any:
    """The value of the JSON file ``path``: a regular file, bounded, UTF-8, with unique keys."""
    return parse_json(decode(read_bytes(path, role), path, role), path, role)


def json_path(parts: Sequence[str | int]) -> str:
    """Where a value stands in a JSON document, as jq writes it: ``.entries["t.py::test"].a3.variant_us``
    (a key that is not a plain name is quoted as a JSON string; a list index is ``[3]``; ``.`` is the
    whole document)."""
    shown = []
    for part in parts:
        if isinstance(part, int):
            shown.append(f"[{part}]")
        elif _PLAIN_KEY.fullmatch(part):
            shown.append(f".{part}")
        else:
            shown.append(f"[{json.dumps(part)}]")
    path = "".join(shown)
    return path if path.startswith(".") else "." + path


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _path_to(document: Any, wanted: object) -> list[str | int]:
    """The keys and indices that lead to the value ``wanted`` (by identity) in ``document``; iterative,
    so a document at the nesting bound cannot exhaust the stack."""
    pending: list[tuple[Any, list[str | int]]] = [(document, [])]
    while pending:
        value, parts = pending.pop()
        if value is wanted:
            return parts
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        pending.extend(reversed([(item, [*parts, key]) for key, item in items]))
    return []


def _place(text: str, offset: int) -> str:
    """``line L column C (byte B)`` of a character offset, as an editor and ``dd`` count them."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line} column {column} (byte {len(text[:offset].encode('utf-8', 'surrogatepass'))})"


def _unique_keys(fail: Callable[[str], Exception]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise fail(
                    f"key {key!r} appears twice in one object (JSON keeps only the last copy, so the other "
                    "would be lost silently; a bad merge does this); keep one copy"
                )
            result[key] = value
        return result

    return build


def _refuse_constant(name: str, fail: Callable[[str], Exception]) -> Any:
    raise fail(f"{name} is not a JSON number (JSON has no NaN or infinity)")
