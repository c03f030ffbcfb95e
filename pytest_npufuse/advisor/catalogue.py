"""The affinity-API catalogue (``advisor/affinity.toml``) as frozen data: each documented slow form,
the matcher and FX pattern that find it, its replacement, the conditions under which the replacement
applies, the tolerance it is judged by when the fused op rounds differently, and its source."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Mapping

from pathlib import Path

from ..files.toml import read_toml
from ..vocabulary import Phase

CATALOGUE_PATH = Path(__file__).with_name("affinity.toml")


@dataclass(frozen=True)
class Tolerance:
    """A documented precision threshold: per output dtype the mean relative error must stay below T
    and the largest below ``max_factor`` x T."""

    name: str
    thresholds: Mapping[str, float]
    max_factor: float
    source: str


@dataclass(frozen=True)
class Entry:
    """One catalogue entry (see the header of ``affinity.toml`` for each field)."""

    name: str
    form: str
    pattern: str
    replacement: str
    fused_op: str
    grad_op: str
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    phases: tuple[str, ...]
    tolerance: Tolerance | None
    source: str
    note: str = ""
    inference_op: str = ""
    shares_input: bool = False

    def applies_to(self, phase_set: frozenset[Phase]) -> bool:
        """Whether the replacement applies to a run with these graphs: a training-only API needs a
        backward or an optimizer graph, an inference-only one a run without them."""
        training = bool(phase_set & {Phase.BACKWARD, Phase.OPTIMIZER})
        return ("training" if training else "inference") in self.phases

    def takes(self, dtype: str) -> bool:
        return not self.dtypes or dtype in self.dtypes


@dataclass(frozen=True)
class Catalogue:
    entries: tuple[Entry, ...]
    optimizer_min_share_pct: float


def _tolerances(data: Mapping[str, Any]) -> dict[str, Tolerance]:
    found = {}
    for name, table in data.get("tolerance", {}).items():
        thresholds = {k: float(v) for k, v in table.items() if k not in ("max_factor", "source")}
        found[name] = Tolerance(name, MappingProxyType(thresholds), float(table["max_factor"]), table["source"])
    return found


@lru_cache(maxsize=1)
def load_affinity_catalogue() -> Catalogue:
    """The catalogue as shipped (read once: it is package data)."""
    data = read_toml(CATALOGUE_PATH)
    tolerances = _tolerances(data)
    entries = tuple(
        Entry(
            api["name"], api["form"], api["pattern"], api["replacement"], api["fused_op"], api["grad_op"],
            tuple(api["dtypes"]), tuple(api["layouts"]), tuple(api["phases"]),
            tolerances[api["tolerance"]] if api["tolerance"] else None, api["source"], api.get("note", ""),
            api.get("inference_op", ""), bool(api.get("shares_input", False)),
        )
        for api in data["api"]
    )
    return Catalogue(entries, float(data["optimizer"]["min_share_pct"]))
