"""The terminal tables: one row per check, and the baseline gate's verdicts."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..gate.baseline import Change, Gate, aligned, count_line

_HEADER = ("case", "target", "mode", "baseline us", "variant us", "speedup", "segments", "streams", "bound", "verdict")


def _cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    return (
        row["case"],
        row["target"],
        row["mode"],
        f"{row['baseline_us']:.1f}",
        "inf" if row["variant_us"] is None else f"{row['variant_us']:.1f}",
        f"{row['speedup']:.3f}x",
        str(row["segments"]),
        str(row["streams"]),
        row["bound"],
        row["verdict"],
    )


def results_table(terminalreporter: Any, tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
    """One row per check, with its test's outcome; sorted by test, so a pytest-xdist run, whose
    reports arrive in any order, prints the same table."""
    rows = [
        _cells({"case": nodeid, **row, "verdict": tests[nodeid][0]})
        for nodeid in sorted(tests) for row in tests[nodeid][1]
    ]
    if not rows:
        return
    terminalreporter.section("npufuse: modeled NPU results")
    for line in aligned([_HEADER, *rows]):
        terminalreporter.write_line(line)


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
                terminalreporter.write_line(f"{row['key']} [{row['target']}]: {shares}; top ops {ops}")
            for finding in row.get("affinity", ()):
                findings += 1
                where = finding["source"].rsplit("/", 1)[-1] or "?"
                terminalreporter.write_line(
                    f"  affinity: {finding['pattern']} at {where} x{finding['occurrences']}: {finding['rewrite']}; "
                    f"modeled gain {finding['gain_us']:.2f} us; {finding['exactness']}"
                )
    terminalreporter.write_line(f"{findings} affinity finding(s)")


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
            terminalreporter.write_line(f"{change.status:<13} {change.describe()}")
    if changes:
        terminalreporter.write_line(count_line(changes))
    for line in lines:
        terminalreporter.write_line(line)
    for error in errors:
        terminalreporter.write_line(f"npufuse error: {error}", red=True)


def notes_section(terminalreporter: Any, notes: Sequence[str]) -> None:
    """What happened to the report files: written, merged with another run's, or left as they were."""
    if not notes:
        return
    terminalreporter.section("npufuse: reports")
    for note in notes:
        terminalreporter.write_line(note)
