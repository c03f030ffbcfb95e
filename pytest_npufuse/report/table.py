"""Text tables for the terminal: the one aligner every printed table goes through (the gate's comparison
and summary, the CLI's op and calibration tables, the advisor's ranked layouts)."""

from __future__ import annotations

from typing import Sequence

from .escaping import terminal_text


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Text rows with every column padded to its widest cell, two spaces apart, trailing blanks dropped.
    Cells are shown as :func:`~pytest_npufuse.report.escaping.terminal_text` (a test id, scope or op name
    may hold any character) before they are measured, so the columns stay aligned."""
    shown = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in shown]
