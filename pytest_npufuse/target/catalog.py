"""The op catalog: which engine each op type runs on, whether a SuperKernel may fuse it, and its cost rules.

The facts are data (``data/ops.toml``); users add their own custom ops under
``[tool.npufuse.ops."ns::op"]``. Op types are named ``namespace::name`` everywhere.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..errors import ProfileError, UnknownOpWarning
from ..files.toml import read_toml, typed_value
from ..ir.op import OpInfo
from ..vocabulary import Engine, Unfusable
from .profile import DATA_DIR, ENGINES

# "auto": the cost rule decides; "cube_tiles" and "vector_bytes" are the older names for the same.
BLOCK_DIM_RULES = ("auto", "cube_tiles", "vector_bytes", "one")
FLOPS_RULES = ("matmul", "elementwise", "reduction", "none")
BYTES_RULES = ("io", "output", "none")
# An entry without a ``cost`` key gets the rule its older keys describe: its engine's for host, AI CPU,
# communication and DMA ops, else its bytes rule's (fills, nothing), else its flops rule's.
_ENGINE_COST = {"host": "host", "aicpu": "aicpu", "comm": "collective", "dma": "prefetch"}
_BYTES_COST = {"output": "fill", "none": "host"}
_FLOPS_COST = {"matmul": "matmul", "elementwise": "elementwise", "reduction": "reduction", "none": "copy"}


def legacy_cost(engine: str, flops: str, bytes_rule: str) -> str:
    """The cost rule an entry written with only ``flops``/``bytes`` keys means."""
    return _ENGINE_COST.get(engine) or _BYTES_COST.get(bytes_rule) or _FLOPS_COST[flops]


def default_unfusable(engine: str, fusable: bool) -> Unfusable | None:
    """The reason an unfusable entry without an ``unfusable`` key gets: its engine's, and for an AI
    Core (Cube or Vector) kernel, TBE (an Ascend C one would be fusable)."""
    if fusable:
        return None
    return {"aicpu": Unfusable.AICPU, "host": Unfusable.HOST, "comm": Unfusable.COMM}.get(engine, Unfusable.TBE)


def default_op(op_type: str) -> OpInfo:
    """The documented default for an op the catalog lacks: an unfusable Vector kernel.

    Unfusable is the safe guess: a SuperKernel that silently fused an op the real compiler rejects
    would overstate the gain, while a visible break tells the user to add a catalog entry.
    """
    name = op_type.split("::")[-1]
    kernel_type = "".join(part.capitalize() for part in name.strip("_").split("_")) or "Op"
    return OpInfo(
        op_type, Engine.VECTOR, False, False, "auto", "elementwise", 1.0, kernel_type, known=False, unfusable=Unfusable.UNKNOWN
    )


def _entry(op_type: str, table: Any, where: str) -> OpInfo:
    if "::" not in op_type:
        raise ProfileError(
            f"{where}: op type '{op_type}' must be written 'namespace::name', e.g. 'acc::my_op'.",
            entry=f"{where} {op_type}",
        )
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: '{op_type}' must be a table of keys (engine, fusable, sync_all, block_dim).")
    entry_where = f'{where} ["{op_type}"]'
    engine = _one_of(typed_value(table, "engine", str, entry_where), ENGINES, "engine", entry_where)
    block_dim = typed_value(table, "block_dim", (int, str), entry_where)
    if isinstance(block_dim, str) and block_dim not in BLOCK_DIM_RULES:
        raise ProfileError(
            f"{entry_where}: block_dim '{block_dim}' is not an integer or one of {', '.join(BLOCK_DIM_RULES)}."
        )
    if isinstance(block_dim, int) and block_dim < 1:
        raise ProfileError(f"{entry_where}: block_dim {block_dim} must be at least 1 (a kernel runs on one core or more).")
    flops = _one_of(_optional(table, "flops", str, "none", entry_where), FLOPS_RULES, "flops", entry_where)
    per_element = _optional(table, "flops_per_element", float, 1.0, entry_where)
    if not math.isfinite(per_element) or per_element < 0:
        raise ProfileError(f"{entry_where}: flops_per_element {per_element!r} must be a finite number >= 0.")
    kernel_type = _optional(table, "kernel_type", str, default_op(op_type).kernel_type, entry_where)
    bytes_rule = _one_of(_optional(table, "bytes", str, "io", entry_where), BYTES_RULES, "bytes", entry_where)
    rule = _optional(table, "cost", str, legacy_cost(engine, flops, bytes_rule), entry_where)
    fusable = typed_value(table, "fusable", bool, entry_where)
    unfusable = _unfusable(table, engine, fusable, entry_where)
    mpmd_tasks = _optional(table, "mpmd_tasks", int, 0, entry_where)
    if mpmd_tasks < 0:
        raise ProfileError(
            f"{entry_where}: mpmd_tasks {mpmd_tasks} must be 0 (an ordinary kernel) or the kernel's task count.",
            entry=f"{entry_where} mpmd_tasks", bound=0,
        )
    unknown = sorted(set(table) - _ENTRY_KEYS)
    if unknown:
        raise ProfileError(f"{entry_where}: unknown key '{unknown[0]}'; the keys are {', '.join(sorted(_ENTRY_KEYS))}.")
    return OpInfo(
        op_type=op_type,
        engine=Engine(engine),
        fusable=fusable,
        sync_all=typed_value(table, "sync_all", bool, entry_where),
        block_dim=block_dim,
        flops=flops,
        flops_per_element=per_element,
        kernel_type=kernel_type,
        bytes=bytes_rule,
        host_small=_optional(table, "host_small", bool, False, entry_where),
        value_dependent=_optional(table, "value_dependent", bool, False, entry_where),
        aicpu_dtypes=tuple(_optional(table, "aicpu_dtypes", list, [], entry_where)),
        cost=rule,
        access_bytes=_optional(table, "access_bytes", int, 0, entry_where),
        unfusable=unfusable,
        ge_shape=_optional(table, "ge_shape", bool, False, entry_where),
        mpmd_tasks=mpmd_tasks,
    )


def _unfusable(table: dict[str, Any], engine: str, fusable: bool, where: str) -> Unfusable | None:
    """The entry's reason for being unfusable: its ``unfusable`` key, else its engine's default."""
    if "unfusable" not in table:
        return default_unfusable(engine, fusable)
    value = _one_of(typed_value(table, "unfusable", str, where), tuple(Unfusable), "unfusable", where)
    if fusable:
        raise ProfileError(
            f"{where}: unfusable '{value}' says why an op cannot be fused, but fusable = true; drop one.",
            entry=f"{where} unfusable",
        )
    return Unfusable(value)


_ENTRY_KEYS = frozenset(
    {"engine", "fusable", "sync_all", "block_dim", "flops", "flops_per_element", "kernel_type", "bytes",
     "host_small", "value_dependent", "aicpu_dtypes", "cost", "access_bytes", "unfusable", "ge_shape",
     "mpmd_tasks"}
)


def _optional(table: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    return typed_value(table, key, kind, where) if key in table else default


def _one_of(value: str, rules: Sequence[str], key: str, where: str) -> str:
    if value not in rules:
        raise ProfileError(f"{where}: {key} '{value}' is not one of {', '.join(rules)}.", entry=f"{where} {key}")
    return value


class OpCatalog:
    """Look-ups by op type, with one warning per op type the catalog does not know.

    ``origins`` says where each entry was declared (its key, ``op_type`` or ``op_type@form``, to the
    file and table), so that a check made later (the cost rule each entry names,
    :func:`pytest_npufuse.cost.check_catalog`) can point at the line to fix."""

    def __init__(
        self,
        entries: Mapping[str, OpInfo],
        digest: str,
        forms: Mapping[tuple[str, str], OpInfo] | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        self.entries = MappingProxyType(dict(entries))
        self.forms = MappingProxyType(dict(forms or {}))
        self.digest = digest
        self.origins = MappingProxyType(dict(origins or {}))
        self._warned: set[str] = set()

    def declared(self) -> list[tuple[str, OpInfo]]:
        """Every entry with where it was declared ('op catalog' for one built without origins)."""
        keyed = [*((op, info) for op, info in self.entries.items()),
                 *((f"{op}@{form}", info) for (op, form), info in self.forms.items())]
        return [(self.origins.get(key, "op catalog"), info) for key, info in keyed]

    def lookup(self, op_type: str, form: str = "") -> OpInfo:
        """How ``op_type`` runs; ``form`` is the torch call the user wrote (``Kernel.call``): where the
        NPU runs one form of the same aten op differently (docs/feature-docs.md#affinity-ops: ``nn.Linear`` vs
        ``torch.addmm``), the catalog has an entry ``"op_type@form"`` for it."""
        info = self.forms.get((op_type, form)) if form else None
        if info is None:
            info = self.entries.get(op_type)
        if info is not None:
            return info
        if op_type not in self._warned:
            self._warned.add(op_type)
            warnings.warn(
                f"op '{op_type}' is not in the npufuse op catalog; modeled as an unfusable Vector kernel. "
                f'Add [tool.npufuse.ops."{op_type}"] to pyproject.toml to describe it.',
                UnknownOpWarning,
                stacklevel=2,
            )
        return default_op(op_type)


def load_catalog(extra: Mapping[str, Any] | None = None, extra_source: str = "[tool.npufuse.ops]") -> OpCatalog:
    """The built-in catalog, overlaid with user entries (which win for the same op type)."""
    path: Path = DATA_DIR / "ops.toml"
    data = read_toml(path)
    entries: dict[str, OpInfo] = {}
    forms: dict[tuple[str, str], OpInfo] = {}
    origins: dict[str, str] = {}
    for tables, where in ((data, str(path)), (extra or {}, extra_source)):
        for key, table in tables.items():
            op, _, form = key.partition("@")
            origins[key] = f'{where} ["{op}"]'
            if form:
                forms[(op, form)] = _entry(op, table, where)
            else:
                entries[op] = _entry(op, table, where)
    digest = hashlib.sha256(repr((sorted(entries.items()), sorted(forms.items()))).encode()).hexdigest()[:16]
    return OpCatalog(entries, digest, forms, origins)
