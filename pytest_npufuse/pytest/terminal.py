"""The terminal tables: one row per check, and the baseline gate's verdicts."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..gate.baseline import Change, Gate, count_line
from ..report.contributions import describe as describe_contributions
from ..report.escaping import terminal_text
from ..report.numerics import precision_word, shown_verdict
from ..report.table import aligned

WIDTH = 120
"""The table's widest at default verbosity (narrower in a narrower terminal); ``-v`` prints every column at
full width."""
MIN_CASE = 16
"""The case column is never shortened below this: a test's name stays recognisable."""
_TERSE = {"baseline us": "base us", "variant us": "var us", "streams": "str"}
"""Shorter headers for a narrow terminal (the values are no wider)."""
_SHARED = ("target", "mode")
"""Columns left out of a narrow table when every row has the same value: the section title gives it."""

_SHORT = ("case", "target", "mode", "baseline us", "variant us", "speedup", "SK", "streams", "gate", "verdict")
_LONG = ("case", "target", "mode", "baseline us", "variant us", "speedup", "segments", "streams", "host us",
         "device us", "bound", "precision", "gate", "verdict")
# Worst first: a failed test, then a regression, then the lowest speedup.
_VERDICT_RANK = {"failed": 0, "error": 0, "xpassed": 1}
_GATE_RANK = {"regressed": 0, "model changed": 1, "new": 2, "removed": 2}


def terminal_width(terminalreporter: Any) -> int:
    """The terminal's width as pytest sees it (``COLUMNS``, else the terminal, else 80)."""
    writer = getattr(terminalreporter, "_tw", None)
    return int(getattr(writer, "fullwidth", WIDTH))


def _write(terminalreporter: Any, line: str, **markup: bool) -> None:
    """One line of npufuse's sections; users' names in it are shown as :func:`terminal_text` shows them."""
    terminalreporter.write_line(terminal_text(line), **markup)


def _us(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def _label(nodeid: str, row: Mapping[str, Any]) -> str:
    """The test's node id, with ``(check N)`` for a test's second and later checks."""
    key = row["key"]
    at = key.rfind(" (check ")
    return nodeid + (key[at:] if at >= 0 and key.endswith(")") else "")


def _cells(label: str, row: Mapping[str, Any], verdict: str, long: bool) -> tuple[str, ...]:
    values = {
        "case": terminal_text(label), "target": row["target"], "mode": row["mode"],
        "baseline us": _us(row["baseline_us"]),
        "variant us": _us(row["variant_us"]), "speedup": f"{row['speedup']:.3f}x", "segments": str(row["segments"]),
        "SK": str(row["segments"]), "streams": str(row["streams"]), "host us": _us(row.get("host_us")),
        "device us": _us(row.get("device_us")), "bound": row.get("bound", ""),
        "precision": precision_word(row.get("bit_exact", True), row.get("numerics")), "gate": row.get("gate", ""),
        "verdict": verdict,
    }
    return tuple(values[column] for column in (_LONG if long else _SHORT))


def worst_first(verdict: str, gate: str, speedup: float | None, label: str, target: str) -> tuple[Any, ...]:
    """The order of the results, here and in the HTML report: failed tests, then baseline regressions,
    then the lowest speedup (a VARIANT that never finishes, ``speedup`` None, lowest of all)."""
    return (_VERDICT_RANK.get(verdict, 2), _GATE_RANK.get(gate, 3), -1.0 if speedup is None else speedup, label, target)


def _worst_first(item: tuple[str, Mapping[str, Any], str]) -> tuple[Any, ...]:
    label, row, verdict = item
    speedup = None if row["variant_us"] is None else row["speedup"]
    return worst_first(verdict, row.get("gate", ""), speedup, label, row["target"])


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: directories dropped first, then the file when the
    test's own name is long (the table is a summary; the failures above name the file), then the
    middle cut (a trailing ``(check N)`` is kept whole, it tells a test's checks apart)."""
    if len(text) <= width:
        return text
    path, sep, rest = text.partition("::")
    text = path.rsplit("/", 1)[-1] + sep + rest
    if len(text) <= width:
        return text
    if sep and len(rest) >= width // 2:
        text = rest
        if len(text) <= width:
            return text
    at = text.rfind(" (check ")
    body, suffix = (text[:at], text[at:]) if at > 0 and text.endswith(")") else (text, "")
    room = width - len(suffix) - 1
    name, bracket, param = body.partition("[")
    if bracket and len(name) + 6 <= room:  # the test's name whole, its parameters' end
        return name + "[…" + param[len(param) - (room - len(name) - 1):] + suffix
    head = room // 2
    return body[:head] + "…" + body[len(body) - (room - head):] + suffix


def _others(rows: Sequence[tuple[str, ...]]) -> int:
    """The width of every column but the case, with the separators."""
    return sum(max(len(row[i]) for row in rows) + 2 for i in range(1, len(rows[0])))


def _fit(rows: list[tuple[str, ...]], width: int) -> list[tuple[str, ...]]:
    """Rows whose first column is shortened so the aligned table is at most ``width`` wide."""
    room = max(width - _others(rows), MIN_CASE)
    return [(shorten(row[0], room), *row[1:]) for row in rows]


def _narrowed(rows: list[tuple[str, ...]], width: int) -> tuple[list[tuple[str, ...]], str]:
    """A table that fits ``width`` columns (a narrow terminal): first the columns every row shares
    (target, mode) move to the title, returned as ``(a3, max-autotune)``, then headers get shorter; the
    case column is shortened last."""
    def too_wide(rows: Sequence[tuple[str, ...]]) -> bool:
        return max(len(row[0]) for row in rows) + _others(rows) > width

    shared: list[str] = []
    for name in _SHARED:
        if not too_wide(rows) or name not in rows[0]:
            continue
        column = rows[0].index(name)
        values = {row[column] for row in rows[1:]}
        if len(values) == 1:
            shared.append(values.pop())
            rows = [row[:column] + row[column + 1 :] for row in rows]
    if too_wide(rows):
        rows = [tuple(_TERSE.get(cell, cell) for cell in rows[0]), *rows[1:]]
    return _fit(rows, width), f" ({', '.join(shared)})" if shared else ""


def _totals(items: Sequence[tuple[str, Mapping[str, Any], str]], width: int = WIDTH) -> str:
    """One line: checks and their verdicts, summed modeled times and the overall speedup; shorter words
    when the full line would not fit ``width``."""
    verdicts: dict[str, int] = {}
    for _, _, verdict in items:
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    finite = [row for _, row, _ in items if row["variant_us"] is not None]
    base = sum(row["baseline_us"] for row in finite)
    variant = sum(row["variant_us"] for row in finite)
    never = len(items) - len(finite)
    counts = ", ".join(f"{n} {verdict}" for verdict, n in sorted(verdicts.items(), key=lambda kv: (_VERDICT_RANK.get(kv[0], 2), kv[0])))
    speedup = f", speedup {base / variant:.3f}x" if variant else ""
    unfinished = f"; {never} never finish" if never else ""
    line = f"total: {len(items)} check(s) ({counts}); baseline {base:.1f} us, variant {variant:.1f} us{speedup}{unfinished}"
    if len(line) <= width:
        return line
    ratio = f", {base / variant:.3f}x" if variant else ""
    return f"total: {len(items)} ({counts}); {base:.1f} -> {variant:.1f} us{ratio}{unfinished}"


def results_table(
    terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]], verbose: bool = False
) -> None:
    """One row per check, worst first (failed, regressed, lowest speedup), then the totals. At default
    verbosity the table fits the terminal, at most :data:`WIDTH` columns (see :func:`_narrowed`);
    ``verbose`` adds host/device time, bound and precision, at full width. The order depends only on
    the rows, so a pytest-xdist run, whose reports arrive in any order, prints the same table."""
    items = sorted(
        ((_label(nodeid, row), row, shown_verdict(tests[nodeid][0], row.get("numerics")))
         for nodeid in tests for row in tests[nodeid][1]), key=_worst_first
    )
    if not items:
        return
    header = _LONG if verbose else _SHORT
    rows = [header, *(_cells(label, row, verdict, verbose) for label, row, verdict in items)]
    if not any(row.get("gate") for _, row, _ in items):
        gate = header.index("gate")
        rows = [row[:gate] + row[gate + 1 :] for row in rows]
    shared, width = "", min(WIDTH, terminal_width(terminalreporter))
    if not verbose:
        rows, shared = _narrowed(rows, width)
    terminalreporter.section(f"npufuse: modeled NPU results{shared}")
    for line in aligned(rows):
        _write(terminalreporter, line)
    _write(terminalreporter, _totals(items, width if not verbose else 10**6))


def gains_section(terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
    """Per check with SuperKernel segments or a second stream: where the modeled gain came from, and the
    model's measured error on published gains of that kind (docs/fidelity.md)."""
    lines = [
        (f"{row['key']} [{row['target']}]", row["why"]["line"], [t["line"] for t in row.get("trust", ())])
        for nodeid in sorted(tests) for row in tests[nodeid][1] if row.get("why") and row.get("trust")
    ]
    if not lines:
        return
    terminalreporter.section("npufuse: why these gains")
    for label, why, trust in lines:
        _write(terminalreporter, f"{label}: {why}")
        for line in trust:
            _write(terminalreporter, f"  {line}")


def contributions_section(terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
    """Per check with more than one scope or stream, what each saves all else equal, as a share of its
    BASELINE's time (the terms add up to the whole gain): what the superkernel and multistream markers judge."""
    lines = [
        f"{row['key']} [{row['target']}]: {text}"
        for nodeid in sorted(tests) for row in tests[nodeid][1]
        if len(row.get("contributions", {})) > 1 and (text := describe_contributions(row["contributions"], row["baseline_us"]))
    ]
    if not lines:
        return
    terminalreporter.section("npufuse: gain by scope and stream (each all else equal)")
    for line in lines:
        _write(terminalreporter, line)


def advise_section(terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
    """``--npufuse-advise``: per check, where the VARIANT's modeled time goes and each affinity-op finding."""
    terminalreporter.section("npufuse: advisors (time attribution, known-slow op forms)")
    findings = 0
    for nodeid in sorted(tests):
        for row in tests[nodeid][1]:
            variant = row.get("attribution", {}).get("variant")
            if variant is not None:
                shares = ", ".join(f"{name} {value:.1f}%" for name, value in variant["overlap"].items() if name != "span_us")
                ops = ", ".join(f"{op['OP Type']} {op['Ratio(%)']}%" for op in variant["op_statistic"][:3])
                _write(terminalreporter, f"{row['key']} [{row['target']}]: {shares}; top ops {ops}")
            for finding in row.get("affinity", ()):
                findings += 1
                where = finding["source"].rsplit("/", 1)[-1] or "?"
                _write(
                    terminalreporter,
                    f"  affinity: {finding['pattern']} at {where} x{finding['occurrences']}: {finding['rewrite']}; "
                    f"modeled gain {finding['gain_us']:.2f} us; {finding['exactness']}"
                )
    _write(terminalreporter, f"{findings} affinity finding(s)")


def gate_section(
    terminalreporter: Any, gate: Gate | None, changes: Sequence[Change], lines: Sequence[str], errors: Sequence[str]
) -> None:
    """Every baseline entry that changed, the counts, files written and errors; nothing without a gate or errors."""
    if gate is None and not errors:
        return
    title = "npufuse: baseline gate"
    if gate is not None:
        title += f" ({gate.path}, tolerance {gate.tolerance_pct:g}%{', updating' if gate.update else ''})"
    terminalreporter.section(title)
    for change in changes:
        if change.status != "unchanged":
            _write(terminalreporter, f"{change.status:<13} {change.describe()}")
    if changes:
        _write(terminalreporter, count_line(changes))
    for line in lines:
        _write(terminalreporter, line)
    for error in errors:
        _write(terminalreporter, f"npufuse error: {error}", red=True)


def notes_section(terminalreporter: Any, notes: Sequence[str]) -> None:
    """What happened to the report files: written, merged with another run's, or left as they were."""
    if not notes:
        return
    terminalreporter.section("npufuse: reports")
    for note in notes:
        _write(terminalreporter, note)
