"""Reading JSON documents (baselines, run reports) strictly: bounded, and refusing what ``json`` lets pass.

Python's ``json`` keeps the last of two equal keys (a baseline whose case or ``"entries"`` block appears
twice after a bad merge would silently lose one), accepts ``NaN`` and ``Infinity`` (not JSON), parses a
5,000-digit integer into a ValueError and 100,000 nested lists into a RecursionError. Here each of
these is a :class:`~.reading.FileRole` error naming the file and the place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .limits import JSON_TOKENS, MAX_DEPTH, bounded_number, deepest
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
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys(fail),
            parse_int=lambda literal: bounded_number(literal, int, fail),
            parse_float=lambda literal: bounded_number(literal, float, fail),
            parse_constant=lambda name: _refuse_constant(name, fail),
        )
    except json.JSONDecodeError as exc:
        raise fail(f"corrupt JSON ({exc.msg} at {_place(text, exc.pos)})") from None
    except RecursionError:  # only if the scan above missed a level: still ours, never a crash
        raise fail(f"nests arrays and objects too deeply to parse, deeper than any {role.what} can be") from None


def read_json(path: Path | str, role: FileRole = FileRole()) -> Any:
    """The value of the JSON file ``path``: a regular file, bounded, UTF-8, with unique keys."""
    return parse_json(decode(read_bytes(path, role), path, role), path, role)


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
