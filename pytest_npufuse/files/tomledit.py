"""Adding or replacing one table of a user's TOML file, every other byte kept (comments, order, spacing).

No TOML writer in the standard library keeps comments, so the file is edited as text: the table
``[a.b.NAME]`` and its sub-tables ``[a.b.NAME.x]`` are found by their header lines (outside strings), the
replaced lines are cut out and the new text goes where the table was, or at the end for a new table.
The result is parsed again and must equal the old file with exactly that table changed; anything the
text edit cannot do safely (the table written inline or as dotted keys, a parent defined inline) is an
error before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import ProfileError
from .limits import TOML_TOKENS
from .toml import parse_toml

_HEADER = re.compile(r"^[ \t]*\[(?!\[)(?P<key>[^\]\n#]*)\][ \t]*(?:#[^\n]*)?$", re.M)
_ANY_HEADER = re.compile(r"^[ \t]*\[\[?[^\n]*$", re.M)
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def key_parts(key: str) -> tuple[str, ...]:
    """``tool.npufuse."a b"`` -> ("tool", "npufuse", "a b"): the dotted key of a table header."""
    parts = []
    for match in re.finditer(r'\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*(?:\.|$)', key):
        part = match.group(1)
        parts.append(part[1:-1] if part[0] in "\"'" else part)
    return tuple(parts)


def dotted(parts: Sequence[str]) -> str:
    """The header spelling of ``parts`` (bare keys where TOML allows them)."""
    return ".".join(part if _BARE.fullmatch(part) else basic_string(part) for part in parts)


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_UNWRITABLE = re.compile(r'[\\"\x00-\x1f\x7f]|[\ud800-\udfff]')


def basic_string(text: str) -> str:
    """``text`` as a TOML basic string (a quoted key or value) that reads back as ``text``: a backslash, a
    quote and the control characters TOML forbids raw (U+0000 to U+001F, U+007F) escaped, everything else
    as written. (``json.dumps`` is not TOML: it leaves U+007F raw and splits a character beyond U+FFFF
    into two ``\\u`` surrogates, which TOML refuses.) A lone surrogate, which UTF-8 cannot hold, is
    written as U+FFFD."""
    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if "\ud800" <= char <= "\udfff":
            return "\ufffd"
        return _TOML_ESCAPES.get(char) or f"\\u{ord(char):04x}"

    return '"' + _UNWRITABLE.sub(escape, text) + '"'


def lookup(data: dict[str, Any], parts: Sequence[str]) -> Any:
    """The value at ``parts`` in parsed TOML, or None."""
    value: Any = data
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _strings(text: str) -> list[tuple[int, int]]:
    """Where the strings and comments of ``text`` are (a header inside a multi-line string is not one)."""
    return [m.span() for m in TOML_TOKENS.finditer(text) if m.group(0)[0] in "\"'#"]


def _segments(text: str, parts: tuple[str, ...]) -> list[tuple[int, int]]:
    """The spans of the table ``parts`` and its sub-tables: each from its header line to the next
    header that is not one of them."""
    inside = _strings(text)
    headers = [
        m for m in _ANY_HEADER.finditer(text)
        if not any(start < m.start() < end for start, end in inside)
    ]
    spans = []
    for index, header in enumerate(headers):
        plain = _HEADER.fullmatch(header.group(0))
        if plain is None or key_parts(plain.group("key"))[: len(parts)] != parts:
            continue
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        if spans and spans[-1][1] == header.start():
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((header.start(), end))
    return spans


def with_table(text: str, parts: Sequence[str], block: str, source: Path | str, *, replace: bool) -> str:
    """``text`` with the table ``parts`` set to ``block`` (its header and sub-tables, as text). An existing
    table is replaced only with ``replace``; otherwise it is an error naming the file and the fix."""
    parts = tuple(parts)
    name = f"[{dotted(parts)}]"
    old = parse_toml(text, source)
    present = lookup(old, parts) is not None
    if present and not replace:
        raise ProfileError(
            f"{source}: already has {name}; choose another name, or pass --force to replace it.",
            file=str(source), entry=name,
        )
    spans = _segments(text, parts) if present else []
    if present and not spans:
        raise ProfileError(
            f"{source}: defines {name} inline or with dotted keys, which this command cannot replace without "
            "touching other lines; remove it by hand, or choose another name.", file=str(source), entry=name
        )
    newline = "\r\n" if "\r\n" in text else "\n"
    if spans:
        first, rest = spans[0], spans[1:]
        kept = text[: first[0]] + block + _gap(text, first[1], newline)
        cursor = first[1]
        for start, end in rest:
            kept += text[cursor:start]
            cursor = end
        edited = kept + text[cursor:]
    else:
        edited = text + ("" if not text or text.endswith("\n") else newline) + (newline if text.strip() else "") + block
    _check(old, edited, parts, block, source, name)
    return edited


def _gap(text: str, end: int, newline: str) -> str:
    """A blank line between the new table and the header that follows it."""
    return newline if end < len(text) else ""


def _check(old: dict[str, Any], edited: str, parts: tuple[str, ...], block: str, source: Path | str, name: str) -> None:
    """The edited file must parse, hold ``block`` at ``parts`` and otherwise equal the old one."""
    wanted = lookup(parse_toml(block, "new table"), parts)
    try:
        new = parse_toml(edited, source)
    except ProfileError:
        new = None
    if new is None or lookup(new, parts) != wanted or _without(new, parts) != _without(old, parts):
        raise ProfileError(
            f"{source}: adding {name} as a table would change other settings or break the file (a parent table "
            "is defined inline?); nothing was written. Add the table by hand, or use another file.",
            file=str(source), entry=name,
        )


def _without(data: dict[str, Any], parts: tuple[str, ...]) -> dict[str, Any]:
    """``data`` without the table at ``parts`` (and without parents it leaves empty)."""
    if not parts or not isinstance(data, dict) or parts[0] not in data:
        return data
    copy = dict(data)
    if len(parts) == 1:
        del copy[parts[0]]
        return copy
    inner = _without(copy[parts[0]], parts[1:])
    if inner:
        copy[parts[0]] = inner
    else:
        del copy[parts[0]]
    return copy
