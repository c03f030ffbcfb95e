"""The published rows and the target each one ran on."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

import tomllib

from pytest_npufuse.target.profile import (
    BUILTIN_TARGETS, HardwareProfile, TargetTable, builtin_data, load_profile, merge_tables
)

from . import trace

DATA = Path(__file__).resolve().parents[1] / "data" / "published.toml"
PAIR_KINDS = ("superkernel", "multistream", "graph_mode")


@dataclass(frozen=True)
class Row:
    """One published measurement: its id, kind, split, SKU and unit, and every field of the row."""

    id: str
    kind: str
    split: str
    sku: str
    unit: str
    fields: Mapping[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def model(self) -> Mapping[str, Any]:
        return self.fields.get("model", {})

    @property
    def is_pair(self) -> bool:
        """A before/after (or saved-time) row rather than one value."""
        return "value" not in self.fields

    @property
    def group(self) -> str:
        return self.fields.get("group", self.id)

    @property
    def on_vllm_ascend(self) -> bool:
        """Whether the row ran on vLLM-Ascend, whose graph capture sizes and MoE layout the builders follow."""
        return str(self.fields.get("framework", "")).startswith("vllm-ascend")

    @property
    def eager_prefill(self) -> bool:
        """Whether the row's stack runs a prefill eager whatever its graph mode: cann-recipes-infer's
        executor calls its compiled forward for decode only (hicann/cann-recipes-infer
        executor/core/model_worker/model_worker.py ``ModelWorker.inference``
        @fbc225d2de3157a093a2e7dfc2b23086d23ed8f9: "Use eager execution for prefill or non-graph mode")."""
        return str(self.fields.get("framework", "")).startswith("cann-recipes-infer executor")


def load_rows(path: Path = DATA) -> list[Row]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    return [Row(r["id"], r["kind"], r["split"], r["sku"], r["unit"], r) for r in data["row"]]


def sku_target(row: Row) -> str:
    """The built-in target of the row's SKU. A row on an unnamed A2 bin (``910b``) runs on the bin its
    ``sku_note`` implies by core count (20 AIC: 910B3, the 1.8 GHz one of the two 20-core bins; else the
    24-core 910B2, which ``a2`` also names)."""
    if row.sku != "910b":
        return row.sku
    return "910b3" if re.search(r"\b20 AIC", row.get("sku_note", "")) else "910b2"


def base_target(row: Row) -> str:
    """The target the row is modeled on; a checkout without per-SKU targets falls back to a2/a3."""
    target = sku_target(row)
    if target in BUILTIN_TARGETS:
        return target
    return "a3" if target == "910c" else "a2"


@functools.cache
def _builtin(target: str) -> Mapping[str, Any]:
    """A built-in target's tables, parsed once (every trial of a fit lays its values over them)."""
    return builtin_data(target)


class Profiles:
    """Profiles per target with a set of overrides laid over the built-in data (the fit's trial values),
    memoised: a fit asks for the same few profiles thousands of times. ``traced`` profiles record what
    a row's evaluation reads of them (:mod:`.trace`)."""

    def __init__(self, overrides: Mapping[str, Mapping[str, Any]] | None = None, traced: bool = False) -> None:
        self.overrides = overrides or {}
        self.traced = traced
        self._cache: dict[str, HardwareProfile] = {}

    def plain(self, target: str) -> HardwareProfile:
        """The target's profile under the overrides, untraced."""
        profile = self._cache.get(target)
        if profile is None:
            table = TargetTable(merge_tables(_builtin(target), self.overrides), "calibration overrides", None)
            profile = self._cache[target] = load_profile(target, {target: table} if self.overrides else None)
        return profile

    def get(self, target: str) -> HardwareProfile:
        return self._traced(self.plain(target))

    def for_row(self, row: Row, **changes: Any) -> HardwareProfile:
        """The row's profile, with ``changes`` (ranks of the row's deployment, tile shapes it names) that
        the profile has (an older model may lack one)."""
        profile = self.plain(base_target(row))
        known = {f.name for f in fields(profile)}
        changes = {key: value for key, value in changes.items() if key in known}
        return self._traced(replace(profile, **changes) if changes else profile)

    def _traced(self, profile: HardwareProfile) -> HardwareProfile:
        return trace.traced(profile) if self.traced else profile
