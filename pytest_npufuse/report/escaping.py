"""Users' names shown safely: one function per output format for every test id, scope, stream, op,
kernel and file name pytest-npufuse prints, writes into markdown or puts on the HTML report.

Those names are the user's text, and a test file name, a parametrize id, a scope label or a custom op
type can hold anything: HTML and script (``<script>``, ``"><img onerror=...>``), a terminal escape
sequence that clears the screen or rewrites an earlier line, a right-to-left override that shows
``test_ok[gpj.exe]`` for another name, a thousand combining marks stacked into one glyph, a NUL or a
line break that splits a table row. :func:`visible` turns what would act instead of being read into
the escape Python's ``repr`` writes (``\\x1b``, ``\\u202e``), as pytest shows non-ASCII parametrize
ids, and each format then escapes what is special to it: :func:`html_text`, :func:`markdown_code`,
:func:`spreadsheet_cell`, :func:`terminal_text` (and :class:`TerminalStream` for a whole command's
output).
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import TextIO

MAX_MARKS = 4
"""Combining marks kept on one character (Vietnamese stacks two, Devanagari and Thai a few); further
ones are shown escaped, so a name cannot grow into a tower over the rows around it."""

# Categories that are not read but act: controls (C0, DEL, C1: terminal escapes, NUL), format characters
# (bidirectional overrides and isolates, zero-width characters), lone surrogates, line and paragraph
# separators, and code points Unicode has not assigned.
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp", "Cn"))
_MARKS = frozenset(("Mn", "Me"))
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ASCII_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _escaped(char: str) -> str:
    """``char`` as Python's ``repr`` escapes it."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, multiline: bool = False) -> str:
    """``text`` with every character that would act rather than be read written as its escape: controls
    (line breaks too, unless ``multiline`` keeps line feeds and tabs), format characters, surrogates,
    unassigned code points, and combining marks beyond :data:`MAX_MARKS` on one character. Idempotent;
    printable text, whatever its script, is unchanged."""
    if text.isascii():
        control = _ASCII_CONTROL_BUT_LINES if multiline else _ASCII_CONTROL
        return control.sub(lambda match: _escaped(match.group()), text)
    shown = []
    marks = 0
    for char in text:
        category = unicodedata.category(char)
        marks = marks + 1 if category in _MARKS else 0
        if multiline and char in "\n\t":
            shown.append(char)
        elif category in _HIDDEN or marks > MAX_MARKS:
            shown.append(_escaped(char))
        else:
            shown.append(char)
    return "".join(shown)


def html_text(text: str, multiline: bool = False) -> str:
    """``text`` for an HTML (or inline SVG) element's content or a quoted attribute value: :func:`visible`,
    then ``& < > " '`` as character references, so no name opens a tag, ends a ``<script>`` or leaves
    its attribute. (Users' text never goes into a URL, a ``<script>`` or a style; links are ``#`` ids.)"""
    return html.escape(visible(text, multiline), quote=True)


def markdown_code(text: str, table: bool = False) -> str:
    """``text`` as one markdown code span (GitHub-flavoured): inside one, markdown and HTML are shown as
    written, never rendered or linked. The fence is one backtick longer than any run of backticks in
    the text; in a ``table`` cell a ``|`` is escaped (GitHub's tables split a row at a bare one even
    inside a code span, and remove the backslash)."""
    shown = visible(text)
    if table:
        shown = shown.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    pad = " " if not shown.strip(" ") or shown[0] in "` " or shown[-1] in "` " else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def spreadsheet_cell(text: str) -> str:
    """``text`` for a CSV cell a spreadsheet will open: :func:`visible`, and a leading ``'`` when it
    starts as a formula does (``=``, ``+``, ``-``, ``@``), so ``=HYPERLINK(...)`` stays text (the
    OWASP advice against CSV injection)."""
    shown = visible(text)
    return "'" + shown if shown[:1] in ("=", "+", "-", "@") else shown


def terminal_text(text: str, multiline: bool = False) -> str:
    """``text`` for a terminal: :func:`visible`, so no escape sequence reaches the terminal (to colour,
    move the cursor, retitle the window or hide a line) and no name reorders or splits the line."""
    return visible(text, multiline)


class TerminalStream:
    """A text stream that writes everything through :func:`terminal_text` (line feeds kept): a command
    whose output quotes users' names prints through one of these."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(terminal_text(text, multiline=True))

    def flush(self) -> None:
        self.stream.flush()
