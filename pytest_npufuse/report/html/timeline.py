"""A case's BASELINE and VARIANT drawn as one SVG on one time axis.

Each run is a block of lanes: one per host thread, then one per stream. A SuperKernel is an outlined
box with its sub-kernels inside; the op that broke a scope is outlined in red; record->wait events and
races (or lifetime hazards) are arrows between the two places on the timeline.

Large programs stay cheap to draw: kernels narrower than a pixel are merged, lane by lane, with their
neighbours into one box per pixel of time (class ``agg``, with a count), so the number of SVG
elements is bounded by the width in pixels, not by the number of kernels. Breaking ops and racing
kernels are always drawn on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ...simulate.timeline import SUPERKERNEL_OP
from ..escaping import html_text, visible

LABEL_PX = 190
AXIS_PX = 1000
LANE_PX = 22
TITLE_PX = 22
AXIS_TOP_PX = 24
MIN_PX = 1.0
_SUB_INSET = 4
_TITLE_CHARS = 150
_LABEL_CHARS = 27  # 11px monospace characters that fit in LABEL_PX beside the 8px margin


@dataclass(frozen=True)
class Scale:
    """Microseconds to x pixels, shared by both runs of a case."""

    span_us: float

    def x(self, us: float) -> float:
        return LABEL_PX + AXIS_PX * us / self.span_us


def case_span(runs: Sequence[dict[str, Any]]) -> float:
    """The time axis's extent: the later end of any kernel, host slice or run of the case."""
    ends = [run["time_us"] or 0.0 for run in runs]
    ends += [k[4] for run in runs for k in run["kernels"]] + [h[3] for run in runs for h in run["host"]]
    return max([*ends, 1e-3])


def _nice_step(span: float) -> float:
    raw = span / 10
    power = 10 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _tick_label(us: float, step: float) -> str:
    """Microseconds, or milliseconds once the ticks are a millisecond or more apart."""
    return f"{us / 1000:g} ms" if step >= 1000 else f"{us:g} us"


def _axis(scale: Scale, height: float) -> list[str]:
    step = _nice_step(scale.span_us)
    parts = ['<g class="axis">']
    tick = 0.0
    while tick <= scale.span_us * 1.0001:
        x = _fmt(scale.x(tick))
        parts.append(f'<line x1="{x}" y1="{AXIS_TOP_PX - 4}" x2="{x}" y2="{_fmt(height)}" class="grid"/>')
        parts.append(f'<text x="{x}" y="{AXIS_TOP_PX - 8}" class="tick">{_tick_label(tick, step)}</text>')
        tick = round(tick + step, 9)
    parts.append("</g>")
    return parts


def _group(spans: Iterable[tuple[float, float, int]], keep: set[int]) -> list[tuple[float, float, list[int]]]:
    """Spans (x0, x1, kernel) sorted by x0, merged where narrower than a pixel: a group grows while it is
    under a pixel wide and the next narrow span touches it. Kernels in ``keep`` always stand alone."""
    groups: list[tuple[float, float, list[int]]] = []
    growing = False
    for x0, x1, kernel in spans:
        if x1 - x0 >= MIN_PX or kernel in keep:
            groups.append((x0, x1, [kernel]))
            growing = False
        elif growing and x0 <= groups[-1][1] + MIN_PX / 2 and groups[-1][1] - groups[-1][0] < MIN_PX:
            start, end, members = groups[-1]
            members.append(kernel)
            groups[-1] = (start, max(end, x1), members)
        else:
            groups.append((x0, x1, [kernel]))
            growing = True
    return groups


def _lane_label(label: str, y: float) -> str:
    """A lane's name in the space left of the plot: a stream tag too long for it is cut with '…' (the
    whole name is its tooltip), so it never runs over the kernels."""
    shown = visible(label)
    shown = shown if len(shown) <= _LABEL_CHARS else shown[: _LABEL_CHARS - 1] + "…"
    return (f'<text x="8" y="{_fmt(y + LANE_PX - 7)}" class="lane-label">{html_text(shown)}'
            f'<title>{html_text(label)}</title></text>')


class _RunDrawing:
    """The SVG elements of one run, laid out from ``top``."""

    def __init__(self, run: dict[str, Any], scale: Scale, top: float, marked: set[str], clip: str) -> None:
        self.run = run
        self.clip = clip
        self._named: list[tuple[str, float, float, float, bool]] = []
        self.scale = scale
        self.top = top
        self.kernels: list[list[Any]] = run["kernels"]
        self.keep = {i for i, k in enumerate(self.kernels) if k[0] in marked}
        self.breaks = marked
        self.children: dict[int, list[int]] = {}
        for index, kernel in enumerate(self.kernels):
            if kernel[7] >= 0:
                self.children.setdefault(kernel[7], []).append(index)

    @property
    def height(self) -> float:
        return TITLE_PX + LANE_PX * len(self.run["lanes"])

    def lane_y(self, lane: int) -> float:
        return self.top + TITLE_PX + LANE_PX * lane

    def kernel_x(self, name: str, at_end: bool) -> tuple[float, float] | None:
        """Where an arrow meets kernel ``name``: its end or start, at its lane's middle."""
        for kernel in self.kernels:
            if kernel[0] == name:
                x = self.scale.x(kernel[4] if at_end else kernel[3])
                return x, self.lane_y(kernel[2]) + LANE_PX / 2
        return None

    def draw(self, breaks_by_kernel: dict[str, str]) -> list[str]:
        variant = self.run["variant"]
        parts = [f'<g class="run" data-variant="{html_text(variant)}">',
                 f'<text x="4" y="{_fmt(self.top + TITLE_PX - 6)}" class="run-title">{html_text(variant.upper())}'
                 f'{self._subtitle()}</text>']
        for lane, info in enumerate(self.run["lanes"]):
            y = self.lane_y(lane)
            parts.append(f'<g class="lane" data-kind="{html_text(info["kind"])}" data-label="{html_text(info["label"])}">')
            parts.append(f'<rect x="0" y="{_fmt(y)}" width="{LABEL_PX + AXIS_PX}" height="{LANE_PX}" class="lane-bg"/>')
            parts.append(_lane_label(info["label"], y))
            parts.append(f'<g clip-path="url(#{self.clip})"><g class="zoomable">')
            parts.extend(self._lane_kernels(lane, y, breaks_by_kernel))
            parts.extend(self._lane_host(lane, y))
            parts.append('</g></g><g class="names">')
            parts.extend(self._names())
            parts.append("</g></g>")
        parts.append("</g>")
        return parts

    def _subtitle(self) -> str:
        """After the run's name: its time, or why it does not finish, cut to the drawing's width (the
        whole sentence is in the case's findings)."""
        run = self.run
        if run["failure"]:
            why = run["failure"] if len(run["failure"]) <= _TITLE_CHARS else run["failure"][: _TITLE_CHARS - 1] + "…"
            return f" — does not finish: {html_text(why)}"
        return f" — {run['time_us']} us ({html_text(run['execution'])}, {html_text(run['bound'])}-bound)"

    def _spans(self, indices: Iterable[int]) -> list[tuple[float, float, int]]:
        x = self.scale.x
        return sorted((x(self.kernels[i][3]), x(self.kernels[i][4]), i) for i in indices)

    def _names(self) -> list[str]:
        """A name for every kernel the lane drew on its own (sub-kernels inside their SuperKernel). The
        page's script shows each one that fits its box at the current zoom, cut with '…' if needed."""
        parts = [
            f'<text class="name{" sub-name" if sub else ""}" y="{_fmt(baseline)}" data-x0="{_fmt(x0)}" '
            f'data-x1="{_fmt(x1)}">{html_text(name)}</text>'
            for name, x0, x1, baseline, sub in self._named
        ]
        self._named.clear()
        return parts

    def _lane_kernels(self, lane: int, y: float, breaks_by_kernel: dict[str, str]) -> list[str]:
        top_level = [i for i, k in enumerate(self.kernels) if k[2] == lane and k[7] < 0]
        parts: list[str] = []
        for x0, x1, members in _group(self._spans(top_level), self.keep):
            if len(members) > 1:
                parts.append(self._aggregate(x0, x1, y, LANE_PX, members))
                continue
            kernel = self.kernels[members[0]]
            if kernel[1] == SUPERKERNEL_OP and x1 - x0 >= MIN_PX:
                parts.append(self._superkernel(members[0], x0, x1, y, breaks_by_kernel))
            else:
                parts.append(self._box(kernel, x0, x1, y + 2, LANE_PX - 4, "k", breaks_by_kernel))
        return parts

    def _superkernel(self, index: int, x0: float, x1: float, y: float, breaks_by_kernel: dict[str, str]) -> str:
        kernel = self.kernels[index]
        subs = self.children.get(index, [])
        parts = [f'<g class="superkernel" data-name="{html_text(kernel[0])}" data-subkernels="{len(subs)}">',
                 f'<rect x="{_fmt(x0)}" y="{_fmt(y + 1)}" width="{_fmt(x1 - x0)}" height="{LANE_PX - 2}" class="sk">'
                 f'<title>{html_text(kernel[0])}: SuperKernel of {len(subs)} sub-kernels, {_fmt(kernel[4] - kernel[3])} us, '
                 f'block dim {kernel[5]}</title></rect>']
        inner_y, inner_h = y + _SUB_INSET, LANE_PX - 2 * _SUB_INSET
        for s0, s1, members in _group(self._spans(subs), self.keep):
            if len(members) > 1:
                parts.append(self._aggregate(s0, s1, inner_y, inner_h, members))
            else:
                parts.append(self._box(self.kernels[members[0]], s0, s1, inner_y, inner_h, "sub", breaks_by_kernel))
        parts.append("</g>")
        return "".join(parts)

    def _box(self, kernel: list[Any], x0: float, x1: float, y: float, h: float, cls: str, breaks_by_kernel: dict[str, str]) -> str:
        name, op_type, _, start, end, dim, engine, _ = kernel
        classes = f"{cls} e-{html_text(engine)}"
        tip = f"{name} ({op_type}) {start}–{end} us, {_fmt(end - start)} us, block dim {dim}, {engine}"
        if name in breaks_by_kernel:
            classes += " break"
            tip += f" — breaks scope {breaks_by_kernel[name]}"
        width = max(x1 - x0, 2.0 if name in self.keep else MIN_PX)
        self._named.append((name, x0, x1, y + h - (3 if cls == "sub" else 5), cls == "sub"))
        return (f'<rect x="{_fmt(x0)}" y="{_fmt(y)}" width="{width:.2f}" height="{h}" class="{classes}" '
                f'data-name="{html_text(name)}"><title>{html_text(tip)}</title></rect>')

    def _aggregate(self, x0: float, x1: float, y: float, h: float, members: list[int]) -> str:
        """One box for kernels that share a pixel, coloured by the engine that spends most time in it."""
        first, last = self.kernels[members[0]], self.kernels[members[-1]]
        busy: dict[str, float] = {}
        for index in members:
            kernel = self.kernels[index]
            busy[kernel[6]] = busy.get(kernel[6], 0.0) + kernel[4] - kernel[3]
        engine = max(sorted(busy), key=busy.__getitem__)
        tip = f"{len(members)} kernels narrower than a pixel, {first[0]} … {last[0]}, {first[3]}–{last[4]} us"
        return (f'<rect x="{_fmt(x0)}" y="{_fmt(y)}" width="{max(x1 - x0, MIN_PX):.2f}" height="{h}" '
                f'class="agg e-{html_text(engine)}" data-count="{len(members)}"><title>{html_text(tip)}</title></rect>')

    def _lane_host(self, lane: int, y: float) -> list[str]:
        x = self.scale.x
        pieces = [p for p in self.run["host"] if p[1] == lane]
        spans = sorted((x(p[2]), x(p[3]), i) for i, p in enumerate(pieces))
        parts = []
        for x0, x1, members in _group(spans, set()):
            if len(members) > 1:
                parts.append(f'<rect x="{_fmt(x0)}" y="{_fmt(y + 2)}" width="{max(x1 - x0, MIN_PX):.2f}" '
                             f'height="{LANE_PX - 4}" class="agg host" data-count="{len(members)}"/>')
                continue
            name, _, start, end = pieces[members[0]]
            parts.append(f'<rect x="{_fmt(x0)}" y="{_fmt(y + 2)}" width="{max(x1 - x0, MIN_PX):.2f}" height="{LANE_PX - 4}" '
                         f'class="host"><title>{html_text(f"{name} {start}–{end} us")}</title></rect>')
        return parts

    def event_arrows(self) -> list[str]:
        parts = []
        for name, record_lane, _, record_end, wait_lane, _, wait_end in self.run["events"]:
            x1, y1 = self.scale.x(record_end), self.lane_y(record_lane) + LANE_PX / 2
            x2, y2 = self.scale.x(wait_end), self.lane_y(wait_lane) + LANE_PX / 2
            parts.append(f'<path d="M{_fmt(x1)} {_fmt(y1)} L{_fmt(x2)} {_fmt(y2)}" class="arrow event" '
                         f'marker-end="url(#arrow-event)"><title>{html_text(f"event {name}: record -> wait")}</title></path>')
        return parts


def _race_arrows(drawing: _RunDrawing, races: Sequence[dict[str, Any]]) -> list[str]:
    parts = []
    for race in races:
        start = drawing.kernel_x(race["first"]["kernel"], at_end=True)
        end = drawing.kernel_x(race["second"]["kernel"], at_end=False)
        if start is None or end is None:
            continue
        cls = "hazard" if race["kind"].startswith("lifetime") else "race"
        (x1, y1), (x2, y2) = start, end
        bend = min(abs(y2 - y1), LANE_PX) + LANE_PX
        parts.append(f'<path d="M{_fmt(x1)} {_fmt(y1)} C{_fmt(x1)} {_fmt(y1 - bend)} {_fmt(x2)} {_fmt(y2 - bend)} '
                     f'{_fmt(x2)} {_fmt(y2)}" class="arrow {cls}" marker-end="url(#arrow-{cls})" '
                     f'data-first="{html_text(race["first"]["kernel"])}" data-second="{html_text(race["second"]["kernel"])}">'
                     f'<title>{html_text(race["text"])}</title></path>')
    return parts


_DEFS = (
    "<defs>"
    + "".join(
        f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="5" markerHeight="5" '
        f'orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" class="head-{kind}"/></marker>'
        for kind in ("event", "race", "hazard")
    )
    + "</defs>"
)


def case_svg(view: dict[str, Any], key: str = "0") -> str:
    """Both runs of a case, BASELINE above VARIANT, on one time axis; races drawn in the VARIANT.

    ``key`` makes the drawing's element ids unique in the page. Everything drawn against time sits in
    ``g.zoomable`` groups clipped to the plot area, which the page's script scales and shifts to zoom
    and pan (``data-span-us``, ``data-left`` and ``data-width`` give it the axis)."""
    runs = view["runs"]
    scale = Scale(case_span(runs))
    breaks_by_kernel = {b["kernel"]: s["scope"] for s in view["scopes"] for b in s["breaks"]}
    marked = set(breaks_by_kernel) | {r[side]["kernel"] for r in view["races"] for side in ("first", "second")}
    drawings, top = [], float(AXIS_TOP_PX)
    for run in runs:
        drawings.append(_RunDrawing(run, scale, top, marked, f"plot-{key}"))
        top += drawings[-1].height + 8
    height = top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{LABEL_PX + AXIS_PX + 10}" '
             f'height="{_fmt(height)}" viewBox="0 0 {LABEL_PX + AXIS_PX + 10} {_fmt(height)}" '
             f'data-span-us="{scale.span_us:g}" data-left="{LABEL_PX}" data-width="{AXIS_PX}">', _DEFS,
             f'<clipPath id="plot-{key}"><rect x="{LABEL_PX}" y="0" width="{AXIS_PX + 10}" height="{_fmt(height)}"/></clipPath>']
    parts.extend(_axis(scale, height))
    for drawing in drawings:
        parts.extend(drawing.draw(breaks_by_kernel if drawing is drawings[-1] else {}))
    parts.append(f'<g clip-path="url(#plot-{key})"><g class="arrows zoomable">')
    for drawing in drawings:
        parts.extend(drawing.event_arrows())
    parts.extend(_race_arrows(drawings[-1], view["races"]))
    parts.append("</g></g></svg>")
    return "".join(parts)
