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
    "model_launch",
)


def _section(data: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    return typed_value(data, name, dict, where)


def _rates(table: dict[str, Any], where: str) -> Mapping[str, float]:
    rates = {key: typed_value(table, key, float, where) for key in sorted(table)}
    if not rates:
        raise ProfileError(f"{where}: needs at least one dtype = TFLOPS entry.")
    return MappingProxyType(rates)


def profile_from_data(data: dict[str, Any], source: str) -> HardwareProfile:
    """Validate parsed TOML and build the profile; every error names ``source``, the key and the type."""
    target = _section(data, "target", source)
    cores = _section(data, "cores", f"{source} [cores]")
    clock = _section(data, "clock", f"{source} [clock]")
    memory = _section(data, "memory", f"{source} [memory]")
    efficiency = _section(data, "efficiency", f"{source} [efficiency]")
    tiling = _section(data, "tiling", f"{source} [tiling]")
    overhead = _section(data, "overhead_us", f"{source} [overhead_us]")
    superkernel = _section(data, "superkernel", f"{source} [superkernel]")
    canonical = repr(sorted(_flatten(data)))
    return HardwareProfile(
        name=typed_value(target, "name", str, f"{source} [target]"),
        product=typed_value(target, "product", str, f"{source} [target]"),
        soc=typed_value(target, "soc", str, f"{source} [target]"),
        aic=typed_value(cores, "aic", int, f"{source} [cores]"),
        aiv=typed_value(cores, "aiv", int, f"{source} [cores]"),
        cube_mhz=typed_value(clock, "cube_mhz", float, f"{source} [clock]"),
        vector_mhz=typed_value(clock, "vector_mhz", float, f"{source} [clock]"),
        cube_tflops=_rates(_section(data, "cube_tflops", source), f"{source} [cube_tflops]"),
        vector_tflops=_rates(_section(data, "vector_tflops", source), f"{source} [vector_tflops]"),
        hbm_gbps=typed_value(memory, "hbm_gbps", float, f"{source} [memory]"),
        l2_mib=typed_value(memory, "l2_mib", float, f"{source} [memory]"),
        core_ddr_bytes_per_cycle=typed_value(memory, "core_ddr_bytes_per_cycle", float, f"{source} [memory]"),
        compute_efficiency=typed_value(efficiency, "compute", float, f"{source} [efficiency]"),
        memory_efficiency=typed_value(efficiency, "memory", float, f"{source} [efficiency]"),
        cube_tile_m=typed_value(tiling, "cube_tile_m", int, f"{source} [tiling]"),
        cube_tile_n=typed_value(tiling, "cube_tile_n", int, f"{source} [tiling]"),
        vector_block_bytes=typed_value(tiling, "vector_block_bytes", int, f"{source} [tiling]"),
        overhead_us=MappingProxyType(
            {key: typed_value(overhead, key, float, f"{source} [overhead_us]") for key in _OVERHEAD_KEYS}
        ),
        superkernel_supported=typed_value(superkernel, "supported", bool, f"{source} [superkernel]"),
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
