"""Which model produced a modeled number, so a CI gate can tell a slower case from a changed model.

Besides the case itself, a modeled time depends on the simulator code, the op catalog and the
hardware profile. The catalog and the profiles carry content digests; the simulator carries
:data:`SIMULATOR_VERSION`, bumped by hand whenever a change to the simulator (``simulate.py``,
``cost/``, ``device.py``, ``host.py``, ``fusion.py``) changes a modeled time for the same program. A hand-bumped constant
rather than a hash of the source, so that refactoring or a comment never invalidates every baseline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..errors import BaselineError

if TYPE_CHECKING:
    from ..target.catalog import OpCatalog
    from ..target.profile import HardwareProfile

SIMULATOR_VERSION = "9"


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ModelIdentity:
    """The simulator version and the digests of the op catalog and of each target's profile."""

    simulator: str
    catalog: str
    profiles: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, profiles: Iterable[HardwareProfile], catalog: OpCatalog) -> "ModelIdentity":
        """The model a run uses; profiles are named as reports name their target."""
        return cls(SIMULATOR_VERSION, catalog.digest, tuple(sorted({(p.name, p.digest) for p in profiles})))

    @property
    def version(self) -> str:
        """The model version: one short hash of everything a modeled number depends on."""
        return _digest(self.to_json())

    def for_target(self, target: str) -> str:
        """The model version of one target alone, recorded with each entry so entries of different
        targets, measured in different runs, stay comparable on their own."""
        return ModelIdentity(self.simulator, self.catalog, tuple(p for p in self.profiles if p[0] == target)).version

    def merged_over(self, older: "ModelIdentity | None") -> "ModelIdentity":
        """This model, keeping the profiles of targets only ``older`` knows (their entries are kept too)."""
        profiles = dict(older.profiles if older else ()) | dict(self.profiles)
        return ModelIdentity(self.simulator, self.catalog, tuple(sorted(profiles.items())))

    def changes_from(self, older: "ModelIdentity") -> list[str]:
        """What differs from ``older``, in words: the simulator, the catalog, or a shared target's profile."""
        changes = []
        if self.simulator != older.simulator:
            changes.append(f"simulator version {older.simulator} -> {self.simulator}")
        if self.catalog != older.catalog:
            changes.append(f"op catalog {older.catalog} -> {self.catalog}")
        old_profiles = dict(older.profiles)
        for target, digest in self.profiles:
            if target in old_profiles and old_profiles[target] != digest:
                changes.append(f"profile {target} {old_profiles[target]} -> {digest}")
        return changes

    def to_json(self) -> dict[str, Any]:
        return {"simulator": self.simulator, "catalog": self.catalog, "profiles": dict(self.profiles)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "ModelIdentity":
        if (
            not isinstance(data, Mapping)
            or not isinstance(data.get("simulator"), str)
            or not isinstance(data.get("catalog"), str)
            or not isinstance(data.get("profiles"), Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in data["profiles"].items())
        ):
            raise BaselineError(
                f"{where}: 'model' must be an object with string 'simulator' and 'catalog' and a 'profiles' "
                "object of target -> digest."
            )
        return cls(data["simulator"], data["catalog"], tuple(sorted(data["profiles"].items())))
