"""Reading a CSV table (msprof's ``kernel_details.csv``, ``op_summary``, ``op_statistic.csv``) with bounds.

A profiler writes these files, but people open them in spreadsheets and save them again: with a
byte-order mark, as UTF-16 ("Unicode text"), with ``;`` or tabs between fields. :func:`read_table`
reads all of those; what no profiler and no spreadsheet writes (binary junk, a column named twice, a
row with another number of fields than the header, more rows, columns or characters in a field than
the bounds of :mod:`.limits`) is a :class:`~.reading.FileRole` error naming the file, the line or
column, and the bound.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from .limits import MAX_CSV_COLUMNS, MAX_CSV_FIELD_CHARS, MAX_CSV_ROWS
from .reading import FileRole, decode, read_bytes

_DELIMITERS = (",", ";", "\t")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(frozen=True)
class Table:
    """A CSV file's header (cells stripped) and data rows, each with the line it starts on; blank rows
    are left out and a trailing separator at the end of a row is dropped."""

    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]
    delimiter: str


def read_table(path: Path | str, role: FileRole) -> Table:
    """The table in the CSV file ``path``. The separator is the one that splits the header line into the
    most pieces."""
    text = _text(path, role)
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise role.fail(path, f"line {line}: holds a NUL character, so this is not a text table", entry=f"line {line}")
    first = _LINE_BREAK.split(text, 1)[0]
    delimiter = max(_DELIMITERS, key=lambda mark: len(first.split(mark)))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    limit = csv.field_size_limit(MAX_CSV_FIELD_CHARS)
    try:
        header = tuple(cell.strip() for cell in next(reader, []))
        _check_header(path, header, role)
        rows = []
        for cells in reader:
            if not any(cell.strip() for cell in cells):
                continue
            while len(cells) > len(header) and not cells[-1].strip():
                cells = cells[:-1]  # a separator at the end of the row
            if len(cells) != len(header):
                raise role.fail(
                    path, f"line {reader.line_num}: has {len(cells)} fields where the header has {len(header)} "
                    f"(separated by {delimiter!r}); a field holding the separator must be quoted",
                    entry=f"line {reader.line_num}",
                )
            if len(rows) == MAX_CSV_ROWS:
                raise role.fail(path, f"line {reader.line_num}: more than {MAX_CSV_ROWS} rows",
                                entry=f"line {reader.line_num}", bound=MAX_CSV_ROWS)
            rows.append((reader.line_num, tuple(cells)))
    except csv.Error as exc:
        bound = MAX_CSV_FIELD_CHARS if "field limit" in str(exc) else None
        detail = f"a field longer than {MAX_CSV_FIELD_CHARS} characters" if bound else f"not CSV ({exc})"
        where = f"line {reader.line_num}"
        raise role.fail(path, f"{where}: {detail}", entry=where, bound=bound) from None
    finally:
        csv.field_size_limit(limit)
    return Table(header, tuple(rows), delimiter)


def _text(path: Path | str, role: FileRole) -> str:
    """The file's text: UTF-16 when it starts with a UTF-16 byte-order mark, else UTF-8 (with or
    without one)."""
    data = read_bytes(path, role)
    if data.startswith(_UTF16_MARKS):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise role.fail(path, f"starts as UTF-16 text but byte {exc.start} is not ({exc.reason}); save it "
                            "again as UTF-8 or UTF-16", entry=f"byte {exc.start}") from None
    return decode(data, path, role)


def _check_header(path: Path | str, header: tuple[str, ...], role: FileRole) -> None:
    """At most :data:`MAX_CSV_COLUMNS` columns, none of them named twice (which one would a reader take?)."""
    if len(header) > MAX_CSV_COLUMNS:
        raise role.fail(path, f"line 1: {len(header)} columns, more than {MAX_CSV_COLUMNS}", entry="line 1",
                        bound=MAX_CSV_COLUMNS)
    seen: dict[str, int] = {}
    for index, name in enumerate(header, start=1):
        if name and name in seen:
            raise role.fail(path, f"line 1: the column {name!r} is named twice (columns {seen[name]} and {index}); "
                            "keep one", entry=f"line 1 column {index}")
        seen[name] = index
