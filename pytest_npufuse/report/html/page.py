"""The whole report page: a sortable summary table, then per case its facts, timelines and time tables.

Everything is inline (styles, the small sorting script, SVG), so the file opens offline and can be
attached to a CI job as it is. The page records in ``data-rendered-ms`` on ``<html>`` how long the
browser took from navigation start to a laid-out page, which the browser test and the render
benchmark read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ...files import write_text
from ..escaping import html_text
from ..numerics import not_compared_lines, precision_word
from .assets import SCRIPT, STYLE
from .timeline import case_svg

_SUMMARY_COLUMNS = (
    ("case", "case"), ("target", "target"), ("mode", "mode"), ("baseline_us", "baseline us"),
    ("variant_us", "variant us"), ("speedup", "speedup"), ("segments", "SK segments"), ("streams", "streams"),
    ("races", "races"), ("precision", "precision"), ("gate", "gate"), ("verdict", "verdict"), ("duration", "duration s"),
)


def _cell(value: Any, text: str | None = None, cls: str = "") -> str:
    shown = html_text(text if text is not None else ("" if value is None else str(value)))
    sort = html_text("" if value is None else str(value))
    attribute = f' class="{html_text(cls)}"' if cls else ""
    return f'<td data-v="{sort}"{attribute}>{shown}</td>'


def _time(value: float | None) -> str:
    return "does not finish" if value is None else f"{value:.1f}"


def _precision(view: Mapping[str, Any]) -> str:
    """The precision cell: bit-exact or differs, or what the numerics rest on when not all were computed."""
    numerics = view.get("numerics") or {}
    if numerics.get("status") == "not computed":
        return "not computed"
    if numerics.get("status") == "sampled":
        return f"{'bit-exact' if view['bit_exact'] else 'differs'} (sampled)"
    return precision_word(view["bit_exact"], numerics)


def _summary_row(index: int, view: Mapping[str, Any]) -> str:
    baseline, variant = view["runs"]
    gate = view["gate"]["status"] if view["gate"] else ""
    verdict = view.get("verdict", "")
    cells = [
        f'<td data-v="{html_text(view["case"])}"><a href="#case-{index}">{html_text(view["case"])}</a></td>',
        _cell(view["target"]), _cell(view["mode"]),
        _cell(baseline["time_us"], _time(baseline["time_us"])), _cell(variant["time_us"], _time(variant["time_us"])),
        _cell(view["speedup"], "" if view["speedup"] is None else f"{view['speedup']:.3f}x"),
        _cell(view["segments"]), _cell(len(view["streams"])), _cell(len(view["races"])),
        _cell(_precision(view)),
        _cell(gate, cls=f"g-{gate}" if gate else ""), _cell(verdict, cls=f"v-{verdict}" if verdict else ""),
        _cell(view.get("duration_s"), "" if view.get("duration_s") is None else f"{view['duration_s']:.2f}", "duration"),
    ]
    return f'<tr data-case="{html_text(view["case"])}" data-status="{_status(view)}">{"".join(cells)}</tr>'


def _status(view: Mapping[str, Any]) -> str:
    """The words the summary's filter buttons match: the test's verdict and the gate's status."""
    gate = view["gate"]["status"] if view["gate"] else ""
    return html_text(" ".join(word for word in (view.get("verdict", ""), gate) if word))


def _toolbar(views: Sequence[Mapping[str, Any]]) -> str:
    """Counts per verdict and gate status, each a button that shows only those checks, and a search
    box over the case ids."""
    counts: dict[str, int] = {}
    for view in views:
        for word in _status(view).split():
            counts[word] = counts.get(word, 0) + 1
    buttons = "".join(
        f'<button type="button" data-filter="{html_text(word)}">{n} {html_text(word)}</button>' for word, n in sorted(counts.items())
    )
    return (f'<div class="toolbar"><span id="shown">{len(views)}</span> of {len(views)} check(s) shown {buttons}'
            '<input id="search" type="search" placeholder="search case ids" aria-label="search case ids"></div>')


def _summary(views: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(f'<th data-key="{key}">{html_text(label)}</th>' for key, label in _SUMMARY_COLUMNS)
    rows = "".join(_summary_row(i, view) for i, view in enumerate(views))
    return f'<table id="summary" class="sortable"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


_OPEN_LIMIT = 12  # longer lists of scopes or races start folded, so the timelines stay in view


def _scopes(view: Mapping[str, Any]) -> str:
    if not view["scopes"]:
        return ""
    items = []
    for scope in view["scopes"]:
        text = (f'<b>{html_text(scope["scope"])}</b>: {html_text(scope["outcome"])}, {scope["segments"]} segment(s), '
                f'block dim {scope["block_dim"]}')
        if scope["reason"]:
            text += f' — {html_text(scope["reason"])}'
        breaks = "".join(_break_site(b) for b in scope["breaks"])
        items.append(f'<li class="scope" data-scope="{html_text(scope["scope"])}">{text}{f"<ul>{breaks}</ul>" if breaks else ""}</li>')
    shown = " open" if len(items) <= _OPEN_LIMIT else ""
    return (f'<details class="scopes-block"{shown}><summary><b>SuperKernel scopes</b> ({len(items)})</summary>'
            f'<ul class="scopes">{"".join(items)}</ul></details>')


def _break_site(site: Mapping[str, str]) -> str:
    """The op that broke a scope, with the user's source line it came from and why it cannot be fused."""
    where = f" at <code>{html_text(site['source'])}</code>" if site["source"] else ""
    why = f'<div class="note why">{html_text(site["why"])}</div>' if site.get("why") else ""
    return f'<li class="break-site">broken by <b>{html_text(site["op_type"])}</b> ({html_text(site["kernel"])}){where}{why}</li>'


def _races(view: Mapping[str, Any]) -> str:
    lines = [f'<li class="race-item">{html_text(race["text"], multiline=True)}</li>' for race in view["races"]]
    if view["deadlock"]:
        lines.append(f'<li class="race-item">{html_text(view["deadlock"], multiline=True)}</li>')
    if not lines:
        return ""
    shown = " open" if len(lines) <= _OPEN_LIMIT else ""
    return (f'<details class="races-block"{shown}><summary><b>Races and lifetime hazards</b> ({len(lines)})</summary>'
            f'<ul>{"".join(lines)}</ul></details>')


def _side_by_side(
    view: Mapping[str, Any], table: str, key: Callable[[Mapping[str, Any]], str], columns: Sequence[tuple[str, str]]
) -> list[tuple[str, list[str]]]:
    """Rows of one time table for both runs, matched by ``key``: per row its BASELINE and VARIANT cells."""
    baseline, variant = ({key(row): row for row in run[table]} for run in view["runs"])
    keys = list(variant) + [k for k in baseline if k not in variant]
    rows = []
    for name in keys:
        cells = []
        for side in (baseline, variant):
            row = side.get(name)
            cells += [_cell(row[c], fmt.format(row[c])) for c, fmt in columns] if row else [_cell(None)] * len(columns)
        rows.append((name, cells))
    return rows


def _table(title: str, cls: str, head: Sequence[str], rows: Sequence[str]) -> str:
    if not rows:
        return ""
    heads = "".join(f"<th>{html_text(h)}</th>" for h in head)
    return (f'<div><h3>{html_text(title)}</h3><table class="sortable {cls}"><thead><tr>{heads}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _op_types(view: Mapping[str, Any]) -> str:
    """Device time per op type and core type (msprof's op_statistic), BASELINE beside VARIANT."""
    columns = (("count", "{}"), ("total_us", "{:.2f}"), ("ratio_pct", "{:.1f}%"))
    matched = _side_by_side(view, "op_types", lambda row: f'{row["op_type"]} ({row["core_type"]})', columns)
    rows = [f"<tr>{_cell(name)}{''.join(cells)}</tr>" for name, cells in matched]
    head = ("op type (core)", "baseline tasks", "baseline us", "share", "variant tasks", "variant us", "share")
    return _table("Device time per op type", "op-types", head, rows)


def _modules(view: Mapping[str, Any]) -> str:
    """Device time per module path (inclusive and self), BASELINE beside VARIANT, as an indented tree."""
    columns = (("total_us", "{:.2f}"), ("self_us", "{:.2f}"), ("ratio_pct", "{:.1f}%"))
    depth = {row["path"]: row["depth"] for run in view["runs"] for row in run["modules"]}
    rows = [
        f'<tr><td data-v="{html_text(path)}" style="padding-left:{6 + 12 * depth[path]}px">{html_text(path)}</td>{"".join(cells)}</tr>'
        for path, cells in _side_by_side(view, "modules", lambda row: row["path"], columns)
    ]
    head = ("module", "baseline us", "self", "share", "variant us", "self", "share")
    return _table("Device time per module", "modules", head, rows)


def _overlap(view: Mapping[str, Any]) -> str:
    """msprof's overlap analysis of each run, on one line."""
    parts = [f'{run["variant"].upper()}: ' + ", ".join(f"{name} {share:.1f}%" for name, share in run["overlap"].items())
             for run in view["runs"] if run["overlap"]]
    return f'<p class="overlap">{html_text("; ".join(parts))}</p>' if parts else ""


_LEGEND = (
    '<div class="legend"><span><i style="background:#4e79a7"></i>Cube</span>'
    '<span><i style="background:#59a14f"></i>Vector</span><span><i style="background:#f28e2b"></i>AI CPU</span>'
    '<span><i style="background:#b07aa1"></i>communication</span><span><i style="background:#9c755f"></i>host</span>'
    '<span><i style="background:#fff4c2;border:1px solid #6b5300"></i>SuperKernel (sub-kernels inside)</span>'
    '<span><i style="background:#fff;border:2px solid #e00000"></i>op that broke a scope</span>'
    '<span><i style="background:#4e79a7;opacity:.7"></i>kernels narrower than a pixel, merged</span>'
    '<span style="color:#1f4e9c">⇢ record→wait</span><span style="color:#e00000">→ race</span>'
    '<span style="color:#d1006f">⇢ lifetime hazard</span></div>'
)


def _why(view: Mapping[str, Any]) -> str:
    """Where the modeled gain came from, and the model's measured error on published gains of its kind."""
    if not view.get("why"):
        return ""
    trust = "".join(f'<p class="note trust">{html_text(line)}</p>' for line in view.get("trust", ()))
    return f'<p class="note why"><b>Why this gain:</b> {html_text(view["why"])}</p>{trust}'


def _case(index: int, view: Mapping[str, Any]) -> str:
    gate = view["gate"]
    facts = [f"<span>{html_text(view['summary'])}</span>"]
    if view.get("verdict"):
        facts.append(f'<span class="v-{html_text(view["verdict"])}">test {html_text(view["verdict"])}</span>')
    if gate:
        facts.append(f'<span class="gate g-{html_text(gate["status"])}">gate: {html_text(gate["status"])} — {html_text(gate["text"])}</span>')
    mismatches = "".join(f"<li>{html_text(m)}</li>" for m in view["mismatches"])
    uncompared = "".join(f"<li>{html_text(line)}</li>" for line in not_compared_lines(view.get("numerics")))
    failures = "".join(f'<p class="failure"><b>{html_text(run["variant"].upper())} does not finish:</b> {html_text(run["failure"], multiline=True)}</p>'
                       for run in view["runs"] if run["failure"])
    failures += "".join(f'<p class="note stream-note">{html_text(note)}</p>' for note in view.get("stream_notes", ()))
    failures += _why(view)
    message = f'<pre class="message">{html_text(view["message"], multiline=True)}</pre>' if view.get("message") else ""
    if view.get("duration_s") is not None:
        facts.append(f'<span class="duration">test took {view["duration_s"]:.2f} s</span>')
    if view.get("captured"):
        message += (f'<details class="captured"><summary>Captured output</summary>'
                    f'<pre>{html_text(view["captured"], multiline=True)}</pre></details>')
    return (
        f'<section class="case" id="case-{index}" data-case="{html_text(view["case"])}" data-status="{_status(view)}">'
        f'<h2>{html_text(view["case"])}</h2><div class="facts">{"".join(facts)}</div>{message}'
        f'{case_svg(view, str(index))}{_ZOOM_BAR}<div class="below"><div class="findings">{failures}{_scopes(view)}{_races(view)}'
        f'{f"<h3>Outputs that differ</h3><ul>{mismatches}</ul>" if mismatches else ""}'
        f'{f"<h3>Outputs not compared</h3><ul>{uncompared}</ul>" if uncompared else ""}</div>'
        f'{_op_types(view)}{_modules(view)}</div>{_overlap(view)}</section>'
    )


_ZOOM_BAR = (
    '<div class="zoom-bar"><button type="button" data-zoom="in">zoom in</button><button type="button" '
    'data-zoom="out">zoom out</button><button type="button" data-zoom="reset">whole run</button> '
    '<span class="range"></span> — wheel to zoom, drag to pan, double-click for the whole run</div>'
)


def _environment(environment: Mapping[str, str]) -> str:
    """What produced the numbers: versions, profile digests, model version, commit."""
    if not environment:
        return ""
    rows = "".join(f"<dt>{html_text(name)}</dt><dd>{html_text(value)}</dd>" for name, value in environment.items())
    return f'<details class="environment" open><summary><b>Environment</b></summary><dl class="env">{rows}</dl></details>'


def _other_tests(tests: Sequence[Mapping[str, str]]) -> str:
    """Tests that made no check (skipped ones with their reason, failures before a check), so the
    report accounts for the whole run."""
    if not tests:
        return ""
    rows = "".join(
        f'<tr data-case="{html_text(test["nodeid"])}" data-status="{html_text(test["outcome"])}">'
        f'<td data-v="{html_text(test["nodeid"])}">{html_text(test["nodeid"])}</td>'
        f'{_cell(test["outcome"], cls="v-" + test["outcome"])}'
        f'<td class="reason" data-v="{html_text(test["message"])}"><pre>{html_text(test["message"], multiline=True)}</pre></td></tr>'
        for test in tests
    )
    return (f'<h2 id="other-tests">Tests without a check ({len(tests)})</h2><table id="other" class="sortable">'
            f'<thead><tr><th>test</th><th>outcome</th><th>reason or message</th></tr></thead><tbody>{rows}</tbody></table>')


def render_page(
    views: Sequence[Mapping[str, Any]],
    title: str = "pytest-npufuse: modeled NPU run",
    tests: Sequence[Mapping[str, str]] = (),
    environment: Mapping[str, str] | None = None,
) -> str:
    """The report of ``views`` (from :func:`~.view.case_view`, each with an optional ``verdict`` and
    failure ``message``), the ``tests`` that made no check (``nodeid``, ``outcome``, ``message``: a
    skip reason or a failure), and the ``environment`` that produced the numbers."""
    cases = "".join(_case(i, view) for i, view in enumerate(views))
    empty = "" if views else '<p class="note">No npufuse.check() ran in this session.</p>'
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html_text(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html_text(title)}</h1>{_environment(environment or {})}"
        f'<p class="note">{len(views)} check(s). Times are modeled, in microseconds; click a column to sort.</p>'
        f"{_toolbar(views)}{_summary(views)}{empty}{_other_tests(tests)}{_LEGEND}{cases}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def write_html_report(
    path: Path,
    views: Sequence[Mapping[str, Any]],
    tests: Sequence[Mapping[str, str]] = (),
    environment: Mapping[str, str] | None = None,
) -> None:
    """Write the page atomically (a reader sees the previous report or this one, never half a file), or
    through to the stream, FIFO or device the user named."""
    write_text(path, render_page(views, tests=tests, environment=environment), "HTML report", named=True)
