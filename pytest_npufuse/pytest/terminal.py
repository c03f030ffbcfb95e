"""The terminal tables: one row per check, and the baseline gate's verdicts."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..gate.baseline import Change, Gate, count_line
from ..report.contributions import describe as describe_contributions
from ..report.escaping import terminal_text
from ..report.numerics import precision_word, shown_verdict
from ..report.table import aligned

WIDTH = 120
"""The table's width at default verbosity; ``-v`` prints every column at full width."""

_SHORT = ("case", "target", "mode", "baseline us", "variant us", "speedup", "SK", "streams", "gate", "verdict")
_LONG = ("case", "target", "mode", "baseline us", "variant us", "speedup", "segments", "streams", "host us",
         "device us", "bound", "precision", "gate", "verdict")
# Worst first: a failed test, then a regression, then the lowest speedup.
_VERDICT_RANK = {"failed": 0, "error": 0, "xpassed": 1}
_GATE_RANK = {"regressed": 0, "model changed": 1, "new": 2, "removed": 2}


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


def _worst_first(item: tuple[str, Mapping[str, Any], str]) -> tuple[Any, ...]:
    label, row, verdict = item
    speedup = -1.0 if row["variant_us"] is None else row["speedup"]
    return (_VERDICT_RANK.get(verdict, 2), _GATE_RANK.get(row.get("gate", ""), 3), speedup, label, row["target"])


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: directories dropped first, then the middle cut (a
    trailing ``(check N)`` is kept whole, it tells a test's checks apart)."""
    if len(text) <= width:
        return text
    path, sep, rest = text.partition("::")
    text = path.rsplit("/", 1)[-1] + sep + rest
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


def _fit(rows: list[tuple[str, ...]], width: int) -> list[tuple[str, ...]]:
    """Rows whose first column is shortened so the aligned table is at most ``width`` wide."""
    others = sum(max(len(row[i]) for row in rows) + 2 for i in range(1, len(rows[0])))
    room = max(width - others, 24)
    return [(shorten(row[0], room), *row[1:]) for row in rows]


def _totals(items: Sequence[tuple[str, Mapping[str, Any], str]]) -> str:
    """One line: checks and their verdicts, summed modeled times and the overall speedup."""
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
    return f"total: {len(items)} check(s) ({counts}); baseline {base:.1f} us, variant {variant:.1f} us{speedup}{unfinished}"


def results_table(
    terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]], verbose: bool = False
) -> None:
    """One row per check, worst first (failed, regressed, lowest speedup), then the totals. At default
    verbosity the table fits in :data:`WIDTH` columns (long test ids are shortened); ``verbose`` adds
    mode, host/device time, bound and precision, at full width. The order depends only on the rows, so
    a pytest-xdist run, whose reports arrive in any order, prints the same table."""
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
    terminalreporter.section("npufuse: modeled NPU results")
    for line in aligned(rows if verbose else _fit(rows, WIDTH)):
        _write(terminalreporter, line)
    _write(terminalreporter, _totals(items))


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
