"""A :class:`~.comparison.Comparison` as text for the terminal, markdown for a pull-request comment, JSON
for tools, CSV for spreadsheets and a self-contained HTML page with each case's trend.

Every format lists the cases in the same order (regressions first, then by test) and, for a case
that changed between two run reports, the op types and kernels behind the change, largest first.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Mapping, Sequence

from ..report.escaping import html_text, markdown_code, spreadsheet_cell
from ..report.html.assets import STYLE
from ..report.html.trend import trend_svg
from ..report.table import aligned
from .baseline import IMPROVED, MODEL_CHANGED, NEW, REGRESSED, REMOVED, TOOL, count_line
from .comparison import CaseHistory, Comparison, Delta

TOP_DELTAS = 8
"""Op types and kernels shown per changed case in the text and markdown (JSON and CSV have all)."""
_ORDER = {REGRESSED: 0, MODEL_CHANGED: 1, IMPROVED: 2, NEW: 3, REMOVED: 4}


def ordered(comparison: Comparison) -> list[CaseHistory]:
    """Regressions first, then model changes, improvements, new and removed cases, then the rest."""
    return sorted(comparison.cases, key=lambda case: (_ORDER.get(case.change.status, 5), case.change.key, case.change.target))


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(case: CaseHistory) -> str:
    pct = case.change.change_pct
    return "-" if pct is None else f"{pct:+.2f}%"


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _headers(comparison: Comparison) -> list[str]:
    """Time columns: ``old us`` / ``new us`` for two runs, else one per run by its label."""
    if len(comparison.runs) == 2:
        return ["old us", "new us"]
    return [f"{run.label} us" for run in comparison.runs]


def _changed(case: CaseHistory) -> bool:
    return case.change.status in (REGRESSED, IMPROVED) and (_detailed(case) or bool(case.sites))


def _detailed(case: CaseHistory) -> bool:
    return case.detailed and bool(case.op_types or case.kernels)


def _unlocated(case: CaseHistory) -> bool:
    """A regression with no op-level detail at all: an entry from before sites were recorded."""
    return case.change.status == REGRESSED and case.sites is None and not _detailed(case)


_DELTA_TABLES = (("op at line", True), ("op type", True), ("kernel", False))


def _delta_head(title: str, counted: bool) -> tuple[str, ...]:
    return (title, "old us", "new us", "delta us", *(("kernels" if title == "op at line" else "tasks",) if counted else ()))


def _delta_rows(deltas: Sequence[Delta], counted: bool) -> list[tuple[str, ...]]:
    """The largest deltas; op types also show a changed task count."""
    rows = []
    for delta in deltas[:TOP_DELTAS]:
        counts = f"{delta.old_count} -> {delta.new_count}" if delta.old_count != delta.new_count else ""
        rows.append((delta.name, _us(delta.old_us), _us(delta.new_us), f"{delta.delta_us:+.3f}", *((counts,) if counted else ())))
    return rows


def _delta_tables(case: CaseHistory) -> list[tuple[str, bool, Sequence[Delta]]]:
    """The case's per-line, op-type and kernel deltas that are not empty, with their titles."""
    tables = (case.sites or (), case.op_types, case.kernels)
    return [(title, counted, deltas) for (title, counted), deltas in zip(_DELTA_TABLES, tables) if deltas]


UNLOCATED = (
    "per-op detail is unavailable: the baseline entry was recorded before pytest-npufuse stored time per op and "
    "line; re-baseline (--npufuse-update-baseline) to record it"
)


def located_lines(deltas: Sequence[Delta] | None, code: Mapping[str, str], top: int = 5) -> list[str]:
    """Where a regression comes from, for a failing test: the ``top`` ops at lines whose modeled VARIANT
    time changed most against the baseline, each with the code of its line (``code`` maps a site key to
    it); a note when the baseline entry has no per-op detail."""
    if deltas is None:
        return [f"note: {UNLOCATED}."]
    if not deltas:
        return []
    rows = [(*row, code.get(delta.name, "")) for delta, row in zip(deltas, _delta_rows(deltas[:top], True))]
    head = (*_delta_head("op at line", True), "code")
    return ["what changed most (VARIANT, baseline -> now):", *("  " + line for line in aligned([head, *rows]))]


def text_table(comparison: Comparison) -> list[str]:
    """The terminal table: one row per case, by test (both speedups for two runs)."""
    two = len(comparison.runs) == 2
    header = ("test", "target", *_headers(comparison), "change", *(("old speedup", "new speedup") if two else ("speedup",)), "status")
    rows: list[tuple[str, ...]] = [header]
    for case in sorted(comparison.cases, key=lambda c: (c.change.key, c.change.target)):
        speedups = (case.speedup[-2], case.speedup[-1]) if two else (case.speedup[-1],)
        rows.append((case.change.key, case.change.target, *case.times(), _pct(case),
                     *map(_speedup, speedups), case.change.status))
    return aligned(rows)


def text_deltas(comparison: Comparison) -> list[str]:
    """Per changed case (between two run reports), the op types and kernels behind the change."""
    lines: list[str] = []
    for case in ordered(comparison):
        if _unlocated(case):
            lines.append(f"{case.label} {case.change.status} {_pct(case)}; note: {UNLOCATED}")
        if not _changed(case):
            continue
        lines.append(f"{case.label} {case.change.status} {_pct(case)}; what changed (VARIANT, old -> new):")
        for title, counted, deltas in _delta_tables(case):
            lines.extend("  " + line for line in aligned([_delta_head(title, counted), *_delta_rows(deltas, counted)]))
    return lines


def _markdown_headers(comparison: Comparison) -> list[str]:
    """The time columns' headers in markdown: a run's label is its file's name, shown as code."""
    if len(comparison.runs) == 2:
        return _headers(comparison)
    return [f"{markdown_code(run.label, table=True)} us" for run in comparison.runs]


def markdown(comparison: Comparison) -> str:
    """A pull-request comment: the verdict, the changed cases with their op-type and kernel deltas
    folded under each, and every case in a folded table."""
    changes = comparison.changes
    regressed = comparison.regressed
    verdict = (f"**{len(regressed)} case(s) slower** than {comparison.tolerance_pct:g}%" if regressed
               else f"no case slower than {comparison.tolerance_pct:g}%")
    files = " → ".join(markdown_code(run.path.name) for run in comparison.runs)
    lines = ["## pytest-npufuse: modeled NPU time", "", f"{verdict} ({count_line(changes) or 'no entries'}); {files}", ""]
    heads = _markdown_headers(comparison)
    table = ["| test | target | " + " | ".join(heads) + " | change | speedup | status |",
             "|---|---|" + "---:|" * len(heads) + "---:|---:|---|"]
    interesting = [case for case in ordered(comparison) if case.change.status not in ("unchanged", "absent")]
    for case in ordered(comparison):
        names = f"| {markdown_code(case.change.key, table=True)} | {markdown_code(case.change.target, table=True)} | "
        table.append(names + " | ".join(case.times())
                     + f" | {_pct(case)} | {_speedup(case.speedup[-1])} | {case.change.status} |")
    if interesting:
        lines += ["### Changed cases", ""]
        for case in interesting:
            lines.append(f"- **{case.change.status}** {markdown_code(case.label)}: {case.change.numbers()}")
            lines += [f"  ({UNLOCATED})"] if _unlocated(case) else []
            if _changed(case):
                lines += ["", "  <details><summary>ops at lines, op types and kernels behind the change</summary>", ""]
                for title, counted, deltas in _delta_tables(case):
                    head = _delta_head(title, counted)
                    lines += ["  | " + " | ".join(head) + " |", "  |---|" + "---:|" * (len(head) - 1)]
                    lines += [f"  | {markdown_code(r[0], table=True)} | " + " | ".join(r[1:]) + " |"
                              for r in _delta_rows(deltas, counted)]
                    lines.append("")
                lines += ["  </details>", ""]
        lines.append("")
    lines += [f"<details><summary>All {len(comparison.cases)} case(s)</summary>", "", *table, "", "</details>", ""]
    return "\n".join(lines)


def to_json(comparison: Comparison) -> dict[str, Any]:
    """Everything of the comparison, as data."""
    return {
        "tool": TOOL,
        "kind": "comparison",
        "runs": [{"file": str(run.path), "label": run.label, "kind": run.kind,
                  "model_version": run.results.model.version if run.results.model else None} for run in comparison.runs],
        "tolerance_pct": comparison.tolerance_pct,
        "counts": {status: n for status, n in _counts(comparison).items()},
        "cases": [
            {"key": case.change.key, "target": case.change.target, "status": case.change.status,
             "change_pct": None if case.change.change_pct is None else round(case.change.change_pct, 3),
             "variant_us": list(case.variant_us), "speedup": list(case.speedup),
             "sites": None if case.sites is None else [d.to_json() for d in case.sites],
             "op_types": [d.to_json() for d in case.op_types], "kernels": [d.to_json() for d in case.kernels]}
            for case in ordered(comparison)
        ],
    }


def _counts(comparison: Comparison) -> dict[str, int]:
    counts: dict[str, int] = {}
    for change in comparison.changes:
        counts[change.status] = counts.get(change.status, 0) + 1
    return dict(sorted(counts.items()))


def to_csv(comparison: Comparison) -> str:
    """One row per case, then one per op type and per kernel of a changed case (their times in the
    last two runs' columns), so a spreadsheet can filter by ``level``."""
    heads = [spreadsheet_cell(f"{run.label} us") for run in comparison.runs]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["test", "target", "level", "name", *heads, "delta us", "change %", "status"])
    pad = [""] * (len(heads) - 2)
    for case in ordered(comparison):
        change = case.change
        delta = ("" if None in case.variant_us[-2:] else f"{case.variant_us[-1] - case.variant_us[-2]:.3f}")
        pct = "" if change.change_pct is None else f"{change.change_pct:.3f}"
        writer.writerow([spreadsheet_cell(change.key), spreadsheet_cell(change.target), "case", "",
                         *("" if v is None else v for v in case.variant_us),
                         delta, pct, change.status])
        for level, deltas in (("op at line", case.sites or ()), ("op type", case.op_types), ("kernel", case.kernels)):
            for d in deltas:
                writer.writerow([spreadsheet_cell(change.key), spreadsheet_cell(change.target), level,
                                 spreadsheet_cell(d.name), *pad, "" if d.old_us is None else d.old_us,
                                 "" if d.new_us is None else d.new_us, f"{d.delta_us:.3f}", "", ""])
    return buffer.getvalue()


def html(comparison: Comparison) -> str:
    """One offline page: the cases table and, per case, the trend of its VARIANT time over the runs
    as an inline SVG with the op types and kernels behind its newest change."""
    labels = [run.label for run in comparison.runs]
    heads = "".join(f"<th>{html_text(h)}</th>" for h in _headers(comparison))
    rows = "".join(
        f'<tr data-status="{html_text(c.change.status)}"><td><a href="#trend-{i}">{html_text(c.change.key)}</a></td>'
        f"<td>{html_text(c.change.target)}</td>" + "".join(f"<td>{t}</td>" for t in c.times())
        + f'<td>{_pct(c)}</td><td class="g-{html_text(c.change.status)}">{html_text(c.change.status)}</td></tr>'
        for i, c in enumerate(ordered(comparison))
    )
    sections = []
    for i, case in enumerate(ordered(comparison)):
        tables = ""
        for title, counted, deltas in _delta_tables(case):
            head = "".join(f"<th>{html_text(h)}</th>" for h in _delta_head(title, counted))
            body = "".join("<tr>" + "".join(f"<td>{html_text(cell)}</td>" for cell in row) + "</tr>"
                           for row in _delta_rows(deltas, counted))
            tables += f'<table class="deltas"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

        sections.append(
            f'<section class="trend-case" id="trend-{i}" data-case="{html_text(case.label)}"><h2>{html_text(case.label)}</h2>'
            f'<p class="g-{html_text(case.change.status)}">{html_text(case.change.status)} {_pct(case)}</p>'
            f"{trend_svg(labels, case.variant_us, f'{case.label}: VARIANT us per run')}{tables}</section>"
        )
    title = "pytest-npufuse: modeled NPU time across runs"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{STYLE}</style></head>'
        f"<body><h1>{title}</h1><p class=\"note\">{html_text(' → '.join(labels))}: "
        f"{html_text(count_line(comparison.changes) or 'no entries')} (tolerance {comparison.tolerance_pct:g}%)</p>"
        f'<table id="cases"><thead><tr><th>test</th><th>target</th>{heads}<th>change</th><th>status</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>{''.join(sections)}</body></html>\n"
    )
