"""What the dataset covers: its rows counted by kind, by op or model family, by SKU and by mode, so a gap
(no prefill step, no A2 gain pair, no eager op on one SKU) is seen before the figures are trusted."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Sequence

from .rows import PAIR_KINDS, Row


def family_of(row: Row) -> str:
    """The model family of a layer or step row; for a kernel or collective row, the op's own name (its
    first word, as msprof or the library names it)."""
    family = row.model.get("family") if row.model else None
    if family:
        return str(family)
    op = str(row.get("op", "")).strip()
    return re.split(r"[\s(]", op, maxsplit=1)[0] if op else "-"


def mode_of(row: Row) -> str:
    """How the measured code ran: a graph-mode pair's two modes, a row's mode, or ``kernel`` for a kernel
    measured alone (no graph around it)."""
    if row.get("mode_before") or row.get("mode_after"):
        return f"{row.get('mode_before', '?')} -> {row.get('mode_after', '?')}"
    if row.get("mode"):
        return str(row.get("mode"))
    return "kernel" if row.kind == "kernel" else "-"


def gain_kind(row: Row) -> str:
    """``gain`` for a before/after pair of the kinds whose size and sign are a mechanism of their own."""
    return "gain" if row.kind in PAIR_KINDS else "value"


AXES: tuple[tuple[str, Callable[[Row], str]], ...] = (
    ("kind", lambda row: row.kind),
    ("value or gain", gain_kind),
    ("family", family_of),
    ("SKU", lambda row: row.sku),
    ("mode", mode_of),
)


def coverage_counts(rows: Sequence[Row]) -> list[tuple[str, str, int, int]]:
    """(axis, value, rows, of them validation) for every value of every axis, the largest first: the
    counts ``calibration.py --coverage`` prints and docs/fidelity.md shows."""
    table = []
    for axis, key in AXES:
        counts = Counter(key(row) for row in rows)
        held = Counter(key(row) for row in rows if row.split == "validation")
        table += [(axis, value, count, held[value])
                  for value, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    return table


def coverage_lines(rows: Sequence[Row]) -> list[str]:
    """One block per axis: each value with its row count and how many of them are validation rows."""
    lines, axis_shown = [], None
    for axis, value, count, held in coverage_counts(rows):
        if axis != axis_shown:
            lines.append(f"by {axis}:")
            axis_shown = axis
        lines.append(f"  {value:<44} {count:>4} rows ({held} validation)")
    return lines
