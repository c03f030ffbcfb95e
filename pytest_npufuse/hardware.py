"""Hardware profiles: the facts about one Ascend target, read from TOML data.

Numbers live in ``data/<target>.toml`` with a source comment each; this module only knows their shape.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .errors import ProfileError
from .tomlfile import read_toml, typed_value

DATA_DIR = Path(__file__).parent / "data"
BUILTIN_TARGETS = ("a2", "a3")
ENGINES = ("cube", "vector", "aicpu", "host", "comm")


@dataclass(frozen=True)
class HardwareProfile:
    """One die of an Ascend target as the cost model sees it."""

    name: str
    product: str
    soc: str
    aic: int
    aiv: int
    cube_mhz: float
    vector_mhz: float
    cube_tflops: Mapping[str, float]
    vector_tflops: Mapping[str, float]
    hbm_gbps: float
    l2_mib: float
    core_ddr_bytes_per_cycle: float
    compute_efficiency: float
    memory_efficiency: float
    cube_tile_m: int
    cube_tile_n: int
    vector_block_bytes: int
    overhead_us: Mapping[str, float]
    superkernel_supported: bool
    source: str
    digest: str

    def cores(self, engine: str) -> int:
        """How many cores of the kind ``engine`` runs on; AI CPU and host ops run as one block."""
        if engine == "cube":
            return self.aic
        if engine in ("vector", "comm"):
            return self.aiv
        return 1

    def dispatch_us(self, engine: str) -> float:
        """Device task-scheduler cost of one task on ``engine`` (host ops pay nothing on the device)."""
        return 0.0 if engine == "host" else self.overhead_us[f"dispatch_{engine}"]


_OVERHEAD_KEYS = (
    "dispatch_cube",
    "dispatch_vector",
    "dispatch_comm",
    "dispatch_aicpu",
    "kernel_head",
    "sk_subkernel_call",
    "sk_sync",
    "sync_all",
    "model_launch",
)


def profile_from_data(data: dict[str, Any], source: str) -> HardwareProfile:
    """Validate parsed TOML and build the profile; every error names ``source``, the key and the type."""

    def section(name: str) -> dict[str, Any]:
        return typed_value(data, name, dict, source)

    def get(name: str, key: str, kind: type) -> Any:
        return typed_value(section(name), key, kind, f"{source} [{name}]")

    def rates(name: str) -> Mapping[str, float]:
        table = section(name)
        if not table:
            raise ProfileError(f"{source} [{name}]: needs at least one dtype = TFLOPS entry.")
        return MappingProxyType({key: get(name, key, float) for key in sorted(table)})

    canonical = repr(sorted(_flatten(data)))
    return HardwareProfile(
        name=get("target", "name", str),
        product=get("target", "product", str),
        soc=get("target", "soc", str),
        aic=get("cores", "aic", int),
        aiv=get("cores", "aiv", int),
        cube_mhz=get("clock", "cube_mhz", float),
        vector_mhz=get("clock", "vector_mhz", float),
        cube_tflops=rates("cube_tflops"),
        vector_tflops=rates("vector_tflops"),
        hbm_gbps=get("memory", "hbm_gbps", float),
        l2_mib=get("memory", "l2_mib", float),
        core_ddr_bytes_per_cycle=get("memory", "core_ddr_bytes_per_cycle", float),
        compute_efficiency=get("efficiency", "compute", float),
        memory_efficiency=get("efficiency", "memory", float),
        cube_tile_m=get("tiling", "cube_tile_m", int),
        cube_tile_n=get("tiling", "cube_tile_n", int),
        vector_block_bytes=get("tiling", "vector_block_bytes", int),
        overhead_us=MappingProxyType({key: get("overhead_us", key, float) for key in _OVERHEAD_KEYS}),
        superkernel_supported=get("superkernel", "supported", bool),
        source=source,
        digest=hashlib.sha256(canonical.encode()).hexdigest()[:16],
    )


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Key paths and values, so the digest ignores formatting and comments but not numbers."""
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            items.extend(_flatten(value, f"{prefix}{key}."))
        else:
            items.append((f"{prefix}{key}", value))
    return items


def load_profile(target: str) -> HardwareProfile:
    """Load a built-in target (``a2``, ``a3``) or a profile TOML file given by path."""
    if target in BUILTIN_TARGETS:
        path = DATA_DIR / f"{target}.toml"
    elif target.endswith(".toml"):
        path = Path(target)
    else:
        raise ProfileError(
            f"unknown NPU target {target!r}; built-in targets are {', '.join(BUILTIN_TARGETS)}, "
            "or give the path of a profile .toml file."
        )
    return profile_from_data(read_toml(path), str(path))
