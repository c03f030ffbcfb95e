"""The keys of ``CaseReport.contributions`` and how a person reads them.

The mapping (computed by :mod:`pytest_npufuse.pipeline.contributions`) gives the modeled microseconds each
scope and the side streams save, all else equal, plus the ``interaction`` and ``other`` terms that make it
sum to BASELINE minus VARIANT. Shown as a share of the BASELINE's time, the terms add up to the whole
gain's share: "scope sp1: -4.6%, stream 1: +10.9% (whole +5.6%)".
"""

from __future__ import annotations

from typing import Mapping, Sequence

SCOPE = "scope:"
STREAM = "stream:"
INTERACTION = "interaction"
OTHER = "other"
_TERMS = (INTERACTION, OTHER)  # shown only when they round to a visible share: a factor always is


def scope_key(scope: str) -> str:
    """The key of one SuperKernel scope's contribution (``scope:sp1``)."""
    return f"{SCOPE}{scope}"


def stream_key(side_streams: Sequence[str]) -> str:
    """The key of the side streams' contribution (``stream:1``; ``stream:1+2`` for two side streams)."""
    return STREAM + "+".join(side_streams)


def streams_contribution(contributions: Mapping[str, float]) -> float | None:
    """The side streams' contribution, or None when the VARIANT ran on one stream."""
    return next((us for key, us in contributions.items() if key.startswith(STREAM)), None)


def own_speedup(variant_us: float, saved_us: float) -> float:
    """A factor's own speedup: the VARIANT without it over the VARIANT (1.0 when both take no time)."""
    if variant_us <= 0:
        return 1.0 if saved_us == 0 else float("inf")
    return (variant_us + saved_us) / variant_us


def _label(key: str) -> str:
    """``scope:sp1`` as "scope sp1", ``stream:1`` as "stream 1"; the terms as they are."""
    kind, _, name = key.partition(":")
    return f"{kind} {name}" if name else key


def describe(contributions: Mapping[str, float], baseline_us: float) -> str:
    """Each contribution as a signed share of the BASELINE's time, then the whole's (empty without any)."""
    if not contributions or baseline_us <= 0:
        return ""
    shares = {key: 100.0 * us / baseline_us for key, us in contributions.items()}
    parts = [f"{_label(key)}: {share:+.1f}%" for key, share in shares.items() if key not in _TERMS or abs(share) >= 0.05]
    whole = 100.0 * sum(contributions.values()) / baseline_us
    return f"{', '.join(parts)} (whole {whole:+.1f}%)"


def to_json(contributions: Mapping[str, float]) -> dict[str, float]:
    """The mapping in microseconds to the nanosecond, as the run report and the HTML view store it."""
    return {key: round(us, 3) for key, us in contributions.items()}
