"""The bounds every file pytest-npufuse reads is held to, checked before (or while) it is parsed.

A parser given hostile content can run out of memory (a huge file), out of stack (100,000 nested
lists), or spend quadratic time on one number (a 5,000-digit integer, which Python refuses with a
ValueError the JSON and TOML parsers do not turn into their own errors). No file pytest-npufuse reads
comes near these bounds: a baseline of 3,000 cases is about 1 MB and nests 5 deep.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Callable

# Largest file read, in bytes: a JSON document (baseline, run report) or a TOML file.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_TOML_BYTES = 16 * 1024 * 1024
# Deepest nesting of arrays and objects/tables.
MAX_DEPTH = 64
# Longest number literal, in characters (a signed 64-bit integer has 20).
MAX_NUMBER_CHARS = 64
# CSV tables (msprof's kernel_details.csv): a model step of 100,000 kernels is about 100,000 rows of 40
# columns; fields longer than Python's csv default (128 Ki characters) are not a profiler's.
MAX_CSV_BYTES = 1024 * 1024 * 1024
MAX_CSV_ROWS = 10_000_000
MAX_CSV_COLUMNS = 1024
MAX_CSV_FIELD_CHARS = 131_072
# The longest time, in microseconds, a file may state (a baseline entry, a profiled kernel): 11.6 days,
# which no modeled run or profiled kernel comes near; within it, sums and ratios stay finite.
MAX_TIME_US = 1e12
# Largest JSON integer, in size: RFC 8259 section 6 calls integers in [-(2**53)+1, 2**53-1] interoperable
# (a double holds them exactly); a count or a time in microseconds never comes near.
MAX_JSON_INT = 2**53 - 1
# TOML integers are signed 64-bit (toml.io, "Integer": out-of-range values must be an error).
TOML_INT_RANGE = (-(2**63), 2**63 - 1)

# Strings and comments are skipped whole, so a bracket inside one does not count.
JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]', re.S
)
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


def deepest(text: str, tokens: re.Pattern[str], limit: int = MAX_DEPTH) -> int | None:
    """The character offset where the nesting of ``text`` first goes deeper than ``limit``, or None.

    A linear scan of brackets outside strings and comments; the parser, which recurses once per level,
    runs only when this passes. (Unbalanced brackets are the parser's to report.)
    """
    depth = 0
    for match in tokens.finditer(text):
        token = match.group()
        if token in _OPEN:
            depth += 1
            if depth > limit:
                return match.start()
        elif token in _CLOSE:
            depth = max(0, depth - 1)
    return None


@dataclass(frozen=True)
class OutOfBounds:
    """A number literal past a bound, kept in place of its value while the rest of the document is
    parsed, so the error can name where in the document it stands."""

    problem: str
    bound: float


def bounded_number(text: str, convert: Callable[[str], object]) -> object:
    """``convert(text)`` for a number literal no longer than :data:`MAX_NUMBER_CHARS` whose value is a
    finite double (``1e999`` would read as infinity, which JSON cannot hold) or an integer within
    :data:`MAX_JSON_INT`; an :class:`OutOfBounds` for any other."""
    if len(text) > MAX_NUMBER_CHARS:
        return OutOfBounds(
            f"a number {len(text)} characters long ({text[:12]}...); numbers are at most {MAX_NUMBER_CHARS} "
            "characters", MAX_NUMBER_CHARS,
        )
    value = convert(text)
    if isinstance(value, float) and not math.isfinite(value):
        return OutOfBounds(f"the number {text} is out of the range of a double (at most {sys.float_info.max:.6g})",
                           sys.float_info.max)
    if isinstance(value, int) and abs(value) > MAX_JSON_INT:
        return OutOfBounds(
            f"the integer {text} is beyond {MAX_JSON_INT} (2**53 - 1) in size, the range JSON readers agree on",
            MAX_JSON_INT,
        )
    return value
