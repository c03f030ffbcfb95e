"""What Inductor with torchair's AscendC backend (inductor_npu_ext) makes of a captured graph: its
pointwise and reduction kernels fused into one generated Vector kernel per connected run.

inductor_npu_ext generates one AscendC kernel per group of Inductor scheduler nodes and supports
pointwise/reduction fusion (Ascend/torchair ``experimental/_inductor_npu_ext/README.md``
@0e70f6a15f17667d8960ca97fbd29a49c0a8c75c); the kernel's outputs are the group's buffers that a node
outside the group or the graph's output reads (``_get_nodes_outputs`` in
``experimental/_inductor_npu_ext/python/inductor_npu_ext/npu.py`` @1144d56d33acb348547e0d69a69419b755a3ef0c).
So an intermediate between two fused ops stays in the core's Unified Buffer and never reaches HBM.

The group is the simplest one Inductor's scheduler forms: consecutive Vector kernels, each elementwise
or a reduction, each after the first reading what an earlier one wrote. Horizontal fusion of
independent ops, and fusion into matmuls, are not modeled (the backend's README lists both as not yet
supported).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

from .. import cost
from ..ir.program import Buffer, Kernel, Program, compute_dtype_of
from ..target.catalog import OpCatalog, load_catalog
from ..vocabulary import Engine

# The catalog entry of a kernel Inductor generated (target/data/ops.toml).
FUSED_OP = "inductor::fused"
# Cost rules of the ops Inductor's pointwise/reduction codegen lowers into a fused kernel.
_FUSED_RULES = frozenset({"elementwise", "reduction", "copy", "fill"})


def fusable(kernel: Kernel) -> bool:
    """Whether Inductor lowers the op into a generated kernel: an AI Core Vector op priced as elementwise,
    reduction, copy or fill (an op on a dtype only AI CPU runs stays its own kernel)."""
    return kernel.info.engine == Engine.VECTOR and kernel.info.cost in _FUSED_RULES


def fusion_groups(program: Program) -> tuple[tuple[Kernel, ...], ...]:
    """The program's kernels in groups Inductor fuses, in an order that runs each after what it reads: a
    fusable kernel joins the groups of the fusable kernels it reads from, unless one of those groups
    reaches it (or another of them) through a kernel outside them, which one kernel could not run; any
    other kernel is a group of its own."""
    groups = _Groups()
    for kernel in program.kernels:
        storages = [program.storage(name) for name in kernel.inputs]
        producers = [program.buffers[name].producer for name in storages]
        direct = {groups.of(name) for name in producers if name is not None and fusable(program.kernel(name))}
        through = groups.upstream_of(
            name for name, producer in zip(storages, producers)
            if producer is not None and not fusable(program.kernel(producer))
        )
        if fusable(kernel) and direct and not any((groups.outside(g) | through) & direct for g in direct):
            group = groups.merge(direct, through)
        else:
            group = groups.new(groups.upstream_of(storages))
        groups.add(kernel, group, groups.upstream_of(storages) | {group})
    return _in_order(program, groups.members())


class _Groups:
    """Groups being formed, merged by union-find: each group's kernels, the groups every buffer depends
    on, and the groups each group depends on through a kernel outside it."""

    def __init__(self) -> None:
        self._parent: dict[int, int] = {}
        self._kernels: dict[int, list[Kernel]] = {}
        self._group_of: dict[str, int] = {}
        self._upstream: dict[str, frozenset[int]] = {}
        self._outside: dict[int, frozenset[int]] = {}

    def find(self, group: int) -> int:
        while self._parent[group] != group:
            group = self._parent[group]
        return group

    def of(self, kernel: str) -> int:
        return self.find(self._group_of[kernel])

    def upstream_of(self, buffers: Iterable[str]) -> frozenset[int]:
        """The groups the buffers depend on."""
        return frozenset(self.find(g) for name in buffers for g in self._upstream.get(name, ()))

    def outside(self, group: int) -> frozenset[int]:
        return frozenset(self.find(g) for g in self._outside[group])

    def new(self, outside: frozenset[int]) -> int:
        group = len(self._parent)
        self._parent[group], self._kernels[group], self._outside[group] = group, [], outside
        return group

    def merge(self, groups: set[int], through: frozenset[int]) -> int:
        """One group of ``groups``, which also depends on ``through`` through outside kernels."""
        keep, *others = sorted(groups)
        for other in others:
            self._parent[other] = keep
            self._kernels[keep].extend(self._kernels.pop(other))
            self._outside[keep] |= self._outside.pop(other)
        self._outside[keep] |= through
        return keep

    def add(self, kernel: Kernel, group: int, depends: frozenset[int]) -> None:
        self._group_of[kernel.name] = group
        self._kernels[group].append(kernel)
        for name in kernel.outputs:
            self._upstream[name] = depends

    def members(self) -> list[tuple[Kernel, ...]]:
        return [tuple(kernels) for kernels in self._kernels.values()]


def _in_order(program: Program, groups: list[tuple[Kernel, ...]]) -> tuple[tuple[Kernel, ...], ...]:
    """``groups`` ordered so each follows the groups it reads from, earliest first kernel first."""
    position = {kernel.name: index for index, group in enumerate(groups) for kernel in group}
    needs = [
        {position[producer] for kernel in group for name in kernel.inputs
         if (producer := program.buffers[program.storage(name)].producer) is not None} - {index}
        for index, group in enumerate(groups)
    ]
    done: list[int] = []
    waiting = sorted(range(len(groups)), key=lambda index: groups[index][0].index)
    while waiting:
        ready = next(index for index in waiting if needs[index] <= set(done))
        waiting.remove(ready)
        done.append(ready)
    return tuple(groups[index] for index in done)


def fuse_pointwise(program: Program, catalog: OpCatalog | None = None) -> Program:
    """The program as Inductor compiles it: each run of :func:`fusion_groups` of more than one kernel is
    one ``inductor::fused`` kernel reading the run's inputs from outside it and writing only what is read
    after it (or is a graph output); its arithmetic is the sum of its ops'."""
    catalog = catalog or load_catalog()
    groups = fusion_groups(program)
    later_reads = _reads_after(program, groups)
    graph_outputs = {program.storage(name) for name in program.outputs if name is not None}
    kernels: list[Kernel] = []
    buffers = dict(program.buffers)
    for position, group in enumerate(groups):
        if len(group) == 1:
            kernels.append(group[0].with_index(len(kernels)))
            continue
        fused = _fused(program, group, later_reads[position] | graph_outputs, catalog, len(kernels))
        dropped = {name for kernel in group for name in kernel.outputs} - set(fused.outputs)
        for name in [name for name in buffers if program.storage(name) in dropped]:
            del buffers[name]  # an intermediate the kernel keeps on chip, and its views
        for name in fused.outputs:
            buffers[name] = Buffer(name, buffers[name].spec, fused.name)
        kernels.append(fused)
    return Program(tuple(kernels), MappingProxyType(buffers), program.inputs, program.outputs, program.syncs,
                   program.stream_scopes, program.phase)


def _reads_after(program: Program, groups: Sequence[tuple[Kernel, ...]]) -> list[set[str]]:
    """Per group, the buffers (storage) kernels of later groups read."""
    after: list[set[str]] = [set() for _ in groups]
    seen: set[str] = set()
    for position in range(len(groups) - 1, -1, -1):
        after[position] = set(seen)
        seen.update(program.storage(name) for kernel in groups[position] for name in kernel.inputs)
    return after


def _fused(program: Program, group: Sequence[Kernel], read_later: set[str], catalog: OpCatalog, index: int) -> Kernel:
    """One generated kernel for ``group``: what it reads from outside, what is read after it."""
    produced = {name for kernel in group for name in kernel.outputs}
    inputs = tuple(dict.fromkeys(
        name for kernel in group for name in kernel.inputs if program.storage(name) not in produced
    ))
    outputs = tuple(name for kernel in group for name in kernel.outputs if name in read_later) or group[-1].outputs
    input_specs = tuple(program.buffers[name].spec for name in inputs)
    output_specs = tuple(program.buffers[name].spec for name in outputs)
    info = catalog.lookup(FUSED_OP)
    _, nbytes = cost.kernel_work(info, input_specs, output_specs, [program.storage(name) for name in inputs])
    last = group[-1]
    return Kernel(
        index=index, name=f"{info.kernel_type}_{group[0].name}", node=last.node, op_type=FUSED_OP, info=info,
        inputs=inputs, outputs=outputs, output_specs=output_specs, annotations=group[0].annotations,
        flops=sum(kernel.flops for kernel in group), bytes=nbytes,
        compute_dtype=compute_dtype_of(input_specs, output_specs), source=last.source, input_specs=input_specs,
        modules=last.modules, call="",
    )
