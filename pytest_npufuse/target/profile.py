"""Hardware profiles: the facts about one Ascend target, read from TOML data.

Numbers live in ``data/<target>.toml`` with a source comment each; this module only knows their shape.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import ProfileError
from ..files.toml import read_toml, typed_value
from ..vocabulary import Engine

DATA_DIR = Path(__file__).parent / "data"
# What every A2/A3 die shares (the dav-c220 AI Core, CANN's runtime and host path); each SKU file is laid over it.
ARCHITECTURE_FILE = "dav_c220.toml"
# The Atlas A2 bins and one Atlas A3 die, each a TOML file over the architecture file.
SKU_TARGETS = ("910b1", "910b2", "910b3", "910b4", "910c")
# Names kept from the first profiles: a2 is the 910B2 bin (the 24-core 1.8 GHz part whose peaks Huawei's own
# performance model uses for Atlas A2, and the part the a2 profile always described), a3 one 910C die.
TARGET_ALIASES = MappingProxyType({"a2": "910b2", "a3": "910c"})
BUILTIN_TARGETS = (*SKU_TARGETS, *TARGET_ALIASES)
# The target of every entry point when none is named: the Atlas A3 the seed documents target.
DEFAULT_TARGET = "a3"
# How command lines name a target (the CLI's and the plugin's --npu-target help).
TARGET_HELP = (
    f"a built-in target ({', '.join(SKU_TARGETS)}; "
    + ", ".join(f"{alias} = {sku}" for alias, sku in TARGET_ALIASES.items())
    + f") or a profile .toml file (default {DEFAULT_TARGET})"
)
# Set by ``python -m pytest_npufuse run`` for the processes a script starts: the target they model.
CHILD_TARGET_VARIABLE = "NPUFUSE_CHILD_TARGET"
# The pyproject.toml whose [tool.npufuse.targets] such a child reads, so a project's own (e.g. calibrated)
# target resolves there by name as it does in the process that started it.
CHILD_PYPROJECT_VARIABLE = "NPUFUSE_CHILD_PYPROJECT"
ENGINES = tuple(Engine)


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
    hbm_gib: float
    """Device memory of one die (CANN's ``memory_size``): what a case's resident tensors must fit in."""
    l2_mib: float
    misaligned_read_share: float
    core_ddr_bytes_per_cycle: float
    core_l2_bytes_per_cycle: float
    core_l0a_bytes_per_cycle: float
    core_l0b_bytes_per_cycle: float
    core_indexed_access_cycles: float
    core_row_copy_cycles: float
    compute_efficiency: float
    cube_tile_efficiency: float
    compute_int8_efficiency: float
    memory_efficiency: float
    pipeline_overlap: float
    l2_activation_share: float
    cube_tile_m: int
    cube_tile_n: int
    vector_block_bytes: int
    cube_fractal: int
    cube_k_block: int
    decode_tile_n: int
    decode_tile_k: int
    cube_swizzle_offset: int
    cube_swizzle_direction: str
    slice_k_tile_m: int
    slice_k_tile_n: int
    slice_k_depth_bytes: int
    overhead_us: Mapping[str, float]
    aicpu: int
    comm_gbps: float
    comm_latency_us: float
    comm_efficiency: float
    comm_ranks: int
    comm_node_ranks: int
    comm_node_devices: int
    comm_scaleout_gbps: float
    mc2_phase_us: float
    mc2_rank_us: float
    aicpu_gflops_per_core: float
    aicpu_bytes_per_us_per_core: float
    host_us: Mapping[str, float]
    small_shape_max_elements: int
    h2d_gbps: float
    superkernel_supported: bool
    superkernel_max_streams: int
    source: str
    digest: str
    corrections: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """Per-op-type factors on a kernel's modeled body (``[corrections]``, written by ``calibrate``): what
    a team's own profile measured for that op type over what the cost rules predict."""

    def cores(self, engine: str) -> int:
        """How many cores of the kind ``engine`` runs on; collectives, DMA (L2 prefetch) and host ops run
        as one block."""
        if engine == "cube":
            return self.aic
        if engine == "vector":
            return self.aiv
        if engine == "aicpu":
            return self.aicpu
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
    "replay_launch",
    "event_record",
    "event_wait",
    "dispatch_dma",
    "task_gap",
    "icache_miss",
    "task_flush",
    "dcci_flush",
    "fetch_per_core",
    "early_start_overlap",
    "cold_start",
    "replay_task",
    "mpmd_task",
)
# Costs and limits that may be zero; every other number is a count, rate or size the model divides by.
_ZERO_ALLOWED = {
    ("comm", "latency_us"), ("host", "small_shape_max_elements"), ("mc2", "rank_us"), ("core_memory", "indexed_access_cycles"),
    ("core_memory", "row_copy_cycles"),
}
_ZERO_ALLOWED_SECTIONS = {"overhead_us", "host_us"}
# Shares of a peak that a kernel reaches: above 1 would model a chip faster than its own peak.
_FRACTIONS = {
    ("efficiency", "compute"), ("efficiency", "cube_tile"), ("efficiency", "compute_int8"), ("efficiency", "memory"),
    ("efficiency", "pipeline_overlap"), ("efficiency", "l2_activation_share"), ("comm", "efficiency"),
    ("memory", "misaligned_read_share"),
}
_ZERO_FRACTIONS = {("efficiency", "pipeline_overlap")}
_HOST_KEYS = (
    "infer_shape", "tiling", "tiling_complex", "tiling_cache_hit", "alloc", "free", "launch", "launch_collective",
    "h2d_copy", "host_op",
    "stream_sync", "eager_dispatch",
)


def _same(*names: str) -> dict[str, str]:
    return {name: name for name in names}


# Where each scalar field of HardwareProfile is read from: [section] -> {field: key in that section}; a field's
# type is its annotation. The rate tables and overhead_us / host_us are read as tables.
_SCALAR_KEYS: Mapping[str, Mapping[str, str]] = {
    "target": _same("name", "product", "soc"),
    "cores": _same("aic", "aiv", "aicpu"),
    "clock": _same("cube_mhz", "vector_mhz"),
    "memory": _same("hbm_gbps", "hbm_gib", "l2_mib", "misaligned_read_share"),
    "core_memory": {"core_ddr_bytes_per_cycle": "ddr_bytes_per_cycle", "core_l2_bytes_per_cycle": "l2_bytes_per_cycle",
                    "core_l0a_bytes_per_cycle": "l0a_bytes_per_cycle", "core_l0b_bytes_per_cycle": "l0b_bytes_per_cycle",
                    "core_indexed_access_cycles": "indexed_access_cycles",
                    "core_row_copy_cycles": "row_copy_cycles"},
    "efficiency": {"compute_efficiency": "compute", "cube_tile_efficiency": "cube_tile",
                   "compute_int8_efficiency": "compute_int8",
                   "memory_efficiency": "memory", **_same("pipeline_overlap", "l2_activation_share")},
    "tiling": _same("cube_tile_m", "cube_tile_n", "vector_block_bytes", "cube_fractal", "cube_k_block",
                    "decode_tile_n", "decode_tile_k", "cube_swizzle_offset", "cube_swizzle_direction",
                    "slice_k_tile_m", "slice_k_tile_n", "slice_k_depth_bytes"),
    "comm": {"comm_gbps": "link_gbps", "comm_latency_us": "latency_us", "comm_efficiency": "efficiency",
             "comm_ranks": "ranks", "comm_node_ranks": "node_ranks", "comm_node_devices": "node_devices",
             "comm_scaleout_gbps": "scaleout_gbps"},
    "mc2": {"mc2_phase_us": "phase_us", "mc2_rank_us": "rank_us"},
    "aicpu": {"aicpu_gflops_per_core": "gflops_per_core", "aicpu_bytes_per_us_per_core": "bytes_per_us_per_core"},
    "host": _same("small_shape_max_elements", "h2d_gbps"),
    "superkernel": {"superkernel_supported": "supported", "superkernel_max_streams": "max_streams"},
}
_KINDS = {"str": str, "int": int, "float": float, "bool": bool}
_FIELD_KINDS = {item.name: item.type for item in fields(HardwareProfile)}
# field -> (section, key, annotation), in the order of the dataclass (the order errors are found in)
_SCALARS = dict(sorted(
    (
        (name, (section, key, _FIELD_KINDS[name]))
        for section, keys in _SCALAR_KEYS.items()
        for name, key in keys.items()
    ),
    key=lambda item: list(_FIELD_KINDS).index(item[0]),
))


def profile_from_data(data: dict[str, Any], source: str) -> HardwareProfile:
    """Validate parsed TOML and build the profile; every error names ``source``, the key and the type."""

    def section(name: str) -> dict[str, Any]:
        return typed_value(data, name, dict, source)

    read: set[tuple[str, str]] = set()

    def get(name: str, key: str, kind: type) -> Any:
        read.add((name, key))
        value = typed_value(section(name), key, kind, f"{source} [{name}]")
        if kind in (int, float):
            _check_range(value, name, key, f"{source} [{name}]")
        return value

    def rates(name: str) -> Mapping[str, float]:
        table = section(name)
        if not table:
            raise ProfileError(f"{source} [{name}]: needs at least one dtype = TFLOPS entry.")
        return MappingProxyType({key: get(name, key, float) for key in sorted(table)})


    corrections = _corrections(data.get("corrections", {}), f"{source} [corrections]")
    canonical = repr(sorted(_flatten(data)))
    profile = HardwareProfile(
        **{name: get(section, key, _KINDS[kind]) for name, (section, key, kind) in _SCALARS.items()}
        | {"cube_swizzle_direction": _swizzle_direction(get("tiling", "cube_swizzle_direction", str), source)},
        cube_tflops=rates("cube_tflops"),
        vector_tflops=rates("vector_tflops"),
        overhead_us=MappingProxyType({key: get("overhead_us", key, float) for key in _OVERHEAD_KEYS}),
        host_us=MappingProxyType({key: get("host_us", key, float) for key in _HOST_KEYS}),
        source=source,
        digest=hashlib.sha256(canonical.encode()).hexdigest()[:16],
        corrections=corrections,
    )
    _reject_unknown_keys({key: value for key, value in data.items() if key != "corrections"}, read, source)
    return profile


# A correction is a measured share of a modeled time: outside these bounds it is a unit slip or a profile of
# something else, not a calibration.
CORRECTION_RANGE = (0.05, 20.0)


def _corrections(table: Any, where: str) -> Mapping[str, float]:
    """The ``[corrections]`` table: op type (msprof's OP Type, the catalog's ``kernel_type``) = factor.
    Whether each name is an op type of the catalog is checked where the catalog is known
    (:meth:`pytest_npufuse.target.userconfig.UserConfig.profile`)."""
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: must be a table of OP_TYPE = factor, got {table!r}.", entry=where)
    low, high = CORRECTION_RANGE
    factors: dict[str, float] = {}
    for name in sorted(table):
        value = typed_value(table, name, float, where)
        if not math.isfinite(value) or not low <= value <= high:
            raise ProfileError(
                f"{where}: key '{name}' is {value!r}, expected a factor in [{low:g}, {high:g}] (measured over "
                "modeled time of that op type); fix it in that table or calibrate again.",
                entry=f"{where} {name}", bound=low if value < low else high
            )
        factors[name] = value
    return MappingProxyType(factors)


def _reject_unknown_keys(data: Mapping[str, Any], read: set[tuple[str, str]], source: str) -> None:
    """A misspelt key in an override would otherwise be ignored silently and the built-in value kept."""
    sections = {name for name, _ in read}
    for name in sorted(data):
        if name not in sections:
            hint = difflib.get_close_matches(name, sorted(sections), n=1)
            raise ProfileError(
                f"{source}: unknown section [{name}]" + (f"; did you mean [{hint[0]}]?" if hint else "."),
                entry=f"{source} [{name}]",
            )
        keys = sorted(key for section, key in read if section == name)
        for key in sorted(data[name]):
            if key not in keys:
                hint = difflib.get_close_matches(key, keys, n=1)
                raise ProfileError(
                    f"{source} [{name}]: unknown key '{key}'" + (f"; did you mean '{hint[0]}'?" if hint else "."),
                    entry=f"{source} [{name}] {key}"
                )


SWIZZLE_DIRECTIONS = ("auto", "zn", "nz")


def _swizzle_direction(value: str, source: str) -> str:
    """``[tiling] cube_swizzle_direction``: ``zn`` walks bands of tile rows, ``nz`` bands of tile columns,
    ``auto`` picks by the output's shape."""
    if value not in SWIZZLE_DIRECTIONS:
        raise ProfileError(
            f"{source} [tiling]: key 'cube_swizzle_direction' is {value!r}, expected one of "
            f"{', '.join(SWIZZLE_DIRECTIONS)}; fix it in that table."
        )
    return value


def _check_range(value: float, section: str, key: str, where: str) -> None:
    """Every number of a profile is finite (a nan never compares, so the device model would wait for a
    time that never comes) and not negative; a count or rate of zero would divide by zero later, and an
    efficiency is a share of the peak, at most 1."""
    may_be_zero = (
        section in _ZERO_ALLOWED_SECTIONS or (section, key) in _ZERO_ALLOWED or (section, key) in _ZERO_FRACTIONS
    )
    fraction = (section, key) in _FRACTIONS
    bad = not math.isfinite(value) or value < 0 or (value == 0 and not may_be_zero) or (fraction and value > 1)
    if bad:
        expected = ("a number in [0, 1]" if may_be_zero else "a number in (0, 1]") if fraction else (
            "zero or more" if may_be_zero else "more than zero")
        raise ProfileError(
            f"{where}: key '{key}' is {value!r}, expected {expected} (finite); fix it in that table.",
            entry=f"{where} {key}", bound=1 if fraction and value > 1 else 0,
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


def merge_tables(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, table by table, so a user can change one key of a
    built-in profile (``[tool.npufuse.targets.a3.overhead_us] kernel_head = 3.0``) and keep the rest."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_tables(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class TargetTable:
    """A user's profile data for one target name, where it was written, and the built-in it overrides."""

    data: Mapping[str, Any]
    source: str
    base: str | None


def _base_of(data: Mapping[str, Any], implicit: str | None, source: str) -> str | None:
    base = data.get("base", implicit)
    if base is not None and base not in BUILTIN_TARGETS:
        raise ProfileError(
            f"{source}: key 'base' is {base!r}, expected one of {', '.join(BUILTIN_TARGETS)}.",
            entry=f"{source} base",
        )
    return base


def target_tables(table: Mapping[str, Any], source: str) -> dict[str, TargetTable]:
    """The ``[...targets.NAME]`` tables of a pyproject section or profile file. A table named like a
    built-in target (or with ``base = "a3"``) overrides that built-in key by key."""
    tables: dict[str, TargetTable] = {}
    for name in sorted(table):
        where = f"{source} [targets.{name}]"
        if not isinstance(table[name], dict):
            raise ProfileError(f"{where}: must be a table of profile sections, got {table[name]!r}.")
        implicit = name if name in BUILTIN_TARGETS else None
        tables[name] = TargetTable(table[name], where, _base_of(table[name], implicit, where))
    return tables


def profile_file_targets(path: Path) -> dict[str, TargetTable]:
    """The targets a profile file defines: its ``[targets.NAME]`` tables, or the whole file as one
    complete profile named by ``[target] name`` (partial only with a top-level ``base = "a3"``)."""
    data = read_toml(path)
    if "targets" in data:
        return target_tables(typed_value(data, "targets", dict, str(path)), str(path))
    target = data.get("target")
    base = _base_of(data, None, str(path))
    if base is None and not isinstance(target, dict):
        raise ProfileError(
            f"{path}: neither a complete profile (it has no [target] table) nor a partial one; add "
            f'base = "{BUILTIN_TARGETS[-1]}" at the top to lay its keys over a built-in target, or '
            "[targets.NAME] tables."
        )
    name = target.get("name") if isinstance(target, dict) else None
    return {str(name or path.stem): TargetTable(data, str(path), base)}


def _sku_path(target: str) -> Path:
    return DATA_DIR / f"{TARGET_ALIASES.get(target, target)}.toml"


def _builtin_data(target: str) -> dict[str, Any]:
    """A built-in target's data: its SKU file laid over the architecture file; an alias keeps its own
    name, which reports, markers and baselines use."""
    data = merge_tables(read_toml(DATA_DIR / ARCHITECTURE_FILE), read_toml(_sku_path(target)))
    if target in TARGET_ALIASES:
        data["target"] = merge_tables(data["target"], {"name": target})
    return data


def builtin_data(target: str) -> dict[str, Any]:
    """The tables of a built-in target (its SKU file over the architecture file), to read a constant's
    value or lay a fit over it; an unknown name is an error listing the built-in targets."""
    _check_builtin(target)
    return _builtin_data(target)


def _check_builtin(target: str) -> None:
    if target not in BUILTIN_TARGETS:
        raise ProfileError(f"unknown built-in target {target!r}; built-in targets are {', '.join(BUILTIN_TARGETS)}.")


def builtin_profile_text(target: str) -> str:
    """The complete TOML text of a built-in target, with its source comments: the architecture file then
    the SKU's (they share no table). Copy it to start a profile file of your own; an alias's text names
    its SKU."""
    _check_builtin(target)
    return (DATA_DIR / ARCHITECTURE_FILE).read_text() + "\n" + _sku_path(target).read_text()


def _user_profile(name: str, table: TargetTable) -> HardwareProfile:
    """The profile of a user's target, named as the user named the target (a complete profile copied
    from a built-in file keeps that file's ``[target] name`` otherwise)."""
    data = {key: value for key, value in table.data.items() if key != "base"}
    if table.base is not None:
        data = merge_tables(_builtin_data(table.base), data)
    if isinstance(data.get("target"), dict):
        data["target"] = merge_tables(data["target"], {"name": name})
    return profile_from_data(data, table.source)


def load_profile(target: str, user_targets: Mapping[str, TargetTable] | None = None) -> HardwareProfile:
    """Load a target: a user table (``user_targets``, from pyproject.toml or a profile file) wins, then
    a built-in target (:data:`BUILTIN_TARGETS`: a SKU or an alias of one), then a profile TOML file given
    by path."""
    if user_targets and target in user_targets:
        return _user_profile(target, user_targets[target])
    if target in BUILTIN_TARGETS:
        return profile_from_data(_builtin_data(target), str(_sku_path(target)))
    if target.endswith(".toml"):
        tables = profile_file_targets(Path(target))
        if len(tables) != 1:
            raise ProfileError(f"{target}: defines targets {', '.join(tables)}; pass it with --npufuse-profile and name one.")
        ((name, table),) = tables.items()
        return _user_profile(name, table)
    raise ProfileError(f"unknown NPU target {target!r}; {known_targets(user_targets)}.", argument="target")


def known_targets(user_targets: Mapping[str, TargetTable] | None = None) -> str:
    """The names a target may be given by, in words, for an error about a name that is none of them."""
    users = f"; user targets are {', '.join(sorted(user_targets))}" if user_targets else ""
    return f"built-in targets are {', '.join(BUILTIN_TARGETS)}{users}, or give the path of a profile .toml file"

