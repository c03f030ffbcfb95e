"""The trend of one case across runs as a small inline SVG: modeled VARIANT time per run, oldest first.

A run where the case is absent, or where its VARIANT never finishes, leaves a gap in the line (and a
hollow mark at the axis), so a missing point never reads as a time of zero.
"""

from __future__ import annotations

from typing import Sequence

from ..escaping import html_text

WIDTH, HEIGHT = 360, 90
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 10, 22


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def trend_svg(labels: Sequence[str], values: Sequence[float | None], title: str) -> str:
    """``values[i]`` is the time in run ``labels[i]``; the y axis spans the smallest to the largest."""
    known = [v for v in values if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 1.0)
    pad = (high - low) * 0.1 or max(high * 0.05, 1e-3)
    low, high = max(0.0, low - pad), high + pad
    step = (WIDTH - _LEFT - _RIGHT) / max(len(values) - 1, 1)

    def x(i: int) -> float:
        return _LEFT + step * i

    def y(v: float) -> float:
        return _TOP + (HEIGHT - _TOP - _BOTTOM) * (high - v) / (high - low)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html_text(title)}"><title>{html_text(title)}</title>',
             f'<line x1="{_LEFT}" y1="{HEIGHT - _BOTTOM}" x2="{WIDTH - _RIGHT}" y2="{HEIGHT - _BOTTOM}" class="base"/>',
             f'<text x="{_LEFT - 4}" y="{_fmt(y(high) + 8)}" text-anchor="end">{high:.1f}</text>',
             f'<text x="{_LEFT - 4}" y="{HEIGHT - _BOTTOM}" text-anchor="end">{low:.1f}</text>']
    segment: list[str] = []
    for i, value in enumerate([*values, None]):
        if value is None:
            if len(segment) > 1:
                parts.append(f'<polyline points="{" ".join(segment)}" class="line"/>')
            segment = []
            continue
        segment.append(f"{_fmt(x(i))},{_fmt(y(value))}")
    for i, (label, value) in enumerate(zip(labels, values)):
        tip = f"{label}: {'absent or never finishes' if value is None else f'{value:.3f} us'}"
        if value is None:
            parts.append(f'<circle cx="{_fmt(x(i))}" cy="{HEIGHT - _BOTTOM}" r="3" class="missing" '
                         f'style="fill:#fff;stroke:#999"><title>{html_text(tip)}</title></circle>')
        else:
            parts.append(f'<circle cx="{_fmt(x(i))}" cy="{_fmt(y(value))}" r="3" data-us="{value:g}">'
                         f'<title>{html_text(tip)}</title></circle>')
        parts.append(f'<text x="{_fmt(x(i))}" y="{HEIGHT - 6}" text-anchor="middle">{html_text(label[:12])}</text>')
    parts.append("</svg>")
    return "".join(parts)
