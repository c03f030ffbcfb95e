"""Run a captured graph on the CPU to get the numbers a device would produce.

The aten graph is interpreted node by node in its own order, which is the program's issue order and
always a legal order for the data; scope and sync markers are no-ops. Each read the sanitizer found
racing sees poisoned memory instead of its value, so a race changes the numbers as it could on a device.

Matmuls on low-precision or int8 inputs run as the modeled Cube computes them (``CUBE_KERNELS``, built on
:mod:`pytest_npufuse.numerics.exact`), never through torch's CPU bf16 kernel or ``torch._int_mm``.

Both variants of a check run the same kernels on the same inputs, so a kernel is computed once: the
BASELINE run keeps the values the VARIANT needs, and the VARIANT recomputes only the *cone* of its racy
reads (the kernels that read poisoned memory and everything downstream of them).

A functionalized optimizer step's ``_foreach_*`` kernels are computed in place where no node can tell,
and the fills they only read as factors are held broadcast (:mod:`.inplace`): the same bits, without
parameter-sized allocations and copies back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch
import torch.fx

from ..errors import KernelError, NpufuseError
from ..frontend.lower import mutated_arguments, op_type_of
from ..frontend.source import source_line
from ..ir.program import Program
from ..numerics.exact import cube_addmm, cube_baddbmm, cube_matmul, int_matmul
from .inplace import broadcast_fill, broadcast_fills, in_place_overloads
from .standin import stand_in_value

_ATEN = torch.ops.aten
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _low_precision(*tensors: torch.Tensor) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype in _LOW_PRECISION for t in tensors)


# fp16 and fp32 operands of one matmul: aclnnMm/Addmm/Bmm promote them to fp32 (CANN's type-promotion
# table, "互推导关系": f16 with f32 gives f32) and compute there; torch's CPU kernels refuse the mix.
_PROMOTED_PAIR = frozenset({torch.float16, torch.float32})


def _mixed(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and {a.dtype, b.dtype} == _PROMOTED_PAIR


def _product(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A two-operand matmul overload: the Cube's semantics for fp16/bf16 inputs, else the aten op. An
    fp16 x fp32 product is computed in fp32 and stored in the first operand's dtype, the dtype the
    captured graph gave its result."""

    def run(a: Any, b: Any) -> torch.Tensor:
        if _mixed(a, b):
            return op(a.float(), b.float()).to(a.dtype)
        return cube_matmul(a, b) if _low_precision(a, b) else op(a, b)

    return run


def _biased(op: Callable[..., torch.Tensor], cube: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``addmm``/``baddbmm``: the bias joins the fp32 accumulator before the one rounding. fp16 and fp32
    operands are computed in fp32 and stored in the bias's dtype, the captured graph's."""

    def run(bias: Any, a: Any, b: Any, *, beta: float = 1, alpha: float = 1) -> torch.Tensor:
        if _mixed(a, b) and isinstance(bias, torch.Tensor) and bias.dtype in _PROMOTED_PAIR:
            return op(bias.float(), a.float(), b.float(), beta=beta, alpha=alpha).to(bias.dtype)
        if _low_precision(a, b) and isinstance(bias, torch.Tensor) and bias.dtype == a.dtype:
            return cube(bias, a, b, beta=beta, alpha=alpha)
        return op(bias, a, b, beta=beta, alpha=alpha)

    return run


CUBE_KERNELS: Mapping[Any, Callable[..., Any]] = {
    _ATEN.mm.default: _product(_ATEN.mm.default),
    _ATEN.bmm.default: _product(_ATEN.bmm.default),
    _ATEN.matmul.default: _product(_ATEN.matmul.default),
    _ATEN.addmm.default: _biased(_ATEN.addmm.default, cube_addmm),
    _ATEN.baddbmm.default: _biased(_ATEN.baddbmm.default, cube_baddbmm),
    _ATEN._int_mm.default: int_matmul,
}
"""The Cube's matmuls by aten overload. ``linear`` reaches the executor decomposed into these (AOT lowers
it to ``t`` + ``mm``/``addmm``); fp32 inputs keep torch's own kernel."""


def poison(value: torch.Tensor) -> torch.Tensor:
    """What fresh device memory may hold: NaN for floats, the byte pattern 0x5A for everything else."""
    if value.is_floating_point() or value.is_complex():
        return torch.full_like(value, float("nan"))
    raw = torch.full((value.numel() * value.element_size(),), 0x5A, dtype=torch.uint8)
    return raw.view(value.dtype).reshape(value.shape) if value.dtype != torch.bool else raw.bool().reshape(value.shape)


@dataclass(frozen=True)
class Execution:
    """One run of a graph: its flat outputs, the node values kept for a later cone run, and how many
    kernels it computed."""

    outputs: list[Any]
    kept: Mapping[str, Any] = field(default_factory=dict)
    kernels_run: int = 0


def racy_cone(gm: torch.fx.GraphModule, stale_reads: Mapping[str, frozenset[str]], program: Program) -> frozenset[str]:
    """The nodes whose values can differ from a race-free run: each node with a poisoned read and every
    node downstream of one. When the cone is not empty, in-place writes join it as well, because a
    recomputed node must see the memory they leave behind in this run's own tensors."""
    seeds = {kernel.node for kernel in program.kernels if kernel.name in stale_reads}
    if not seeds:
        return frozenset()
    cone: set[str] = set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        upstream = (arg.name for arg in node.all_input_nodes)
        if node.name in seeds or any(name in cone for name in upstream) or mutated_arguments(node):
            cone.add(node.name)
    return frozenset(cone)


def inputs_of(gm: torch.fx.GraphModule, nodes: frozenset[str]) -> frozenset[str]:
    """Values that ``nodes`` read from outside themselves: what a BASELINE run keeps for a cone run."""
    return frozenset(arg.name for node in gm.graph.nodes if node.name in nodes for arg in node.all_input_nodes) - nodes


def cone_run(
    gm: torch.fx.GraphModule, stale_reads: Mapping[str, frozenset[str]], program: Program
) -> tuple[frozenset[str], frozenset[str]]:
    """The racy cone of a VARIANT that shares its BASELINE's numerics, and the values the BASELINE run
    keeps for it (the cone's inputs and the graph's outputs; nothing when the cone is empty)."""
    cone = racy_cone(gm, stale_reads, program)
    if not cone:
        return cone, frozenset()
    return cone, inputs_of(gm, cone) | {arg.name for arg in gm.graph.output_node().all_input_nodes}


def is_weightless(args: Sequence[Any]) -> bool:
    """Whether a call's arguments include a meta tensor: a timing-only model has no values to compute."""
    return any(isinstance(arg, torch.Tensor) and arg.is_meta for arg in args)


def weightless_outputs(gm: torch.fx.GraphModule, program: Program) -> list[Any]:
    """A timing-only call's outputs: meta tensors of the shapes and dtypes the capture recorded (a size a
    value decides at its upper bound, as it is priced), so the code after the call can go on."""
    def empty(arg: torch.fx.Node) -> Any:
        value = arg.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return value
        buffer = program.buffers.get(arg.name)
        shape = buffer.spec.shape if buffer is not None else tuple(value.shape)
        return torch.empty(shape, dtype=value.dtype, device="meta")

    return list(torch.fx.node.map_arg(gm.graph.output_node().args[0], empty))


def writes_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph writes into one of its inputs (a mutated input kept as an in-place kernel)."""
    placeholders = {node.name for node in gm.graph.nodes if node.op == "placeholder"}
    return any(set(mutated_arguments(node)) & placeholders for node in gm.graph.nodes if node.op == "call_function")


# Handed each input and computed node of a run right after it has its value, with the tensors it read.
Observer = Callable[[torch.fx.Node, Sequence[Any], Any], None]


class Materialize(Protocol):
    """The values of a meta graph input, from its position among the graph's inputs and the meta tensor;
    with ``rows``, only the rows an embedding lookup reads (``values[rows]``)."""

    def __call__(self, position: int, meta: torch.Tensor, *, rows: torch.Tensor | None = None) -> torch.Tensor: ...


_EMBEDDING = torch.ops.aten.embedding.default


def _lookup_tables(gm: torch.fx.GraphModule) -> frozenset[str]:
    """Graph inputs read only as the table of an embedding lookup: a meta one is materialized a lookup's
    rows at a time (a vocabulary table of gigabytes for a few tokens)."""
    return frozenset(
        node.name for node in gm.graph.nodes
        if node.op == "placeholder" and node.users
        and all(user.target is _EMBEDDING and user.args[0] is node and node not in user.args[1:] for user in node.users)
    )


def run_graph(
    gm: torch.fx.GraphModule,
    program: Program,
    args: Sequence[Any],
    stale_reads: Mapping[str, frozenset[str]],
    *,
    keep: frozenset[str] = frozenset(),
    only: frozenset[str] | None = None,
    given: Mapping[str, Any] | None = None,
    observe: Observer | None = None,
    materialize: Materialize | None = None,
    stand_in: frozenset[str] = frozenset(),
) -> Execution:
    """The graph's outputs for ``args``. ``stale_reads`` maps a kernel to the input tensors it reads in
    a race (found by the sanitizer); those reads get poisoned memory.

    ``keep`` names node values to return for a later cone run. ``only`` restricts the run to those nodes;
    every other node's value is taken from ``given`` (an earlier run's kept values). A value is dropped
    once its last reader ran, so a run holds only live tensors. ``observe`` is handed each input and
    computed node right after it has its value, with the tensors it read (a data dump writes them).
    ``materialize`` computes a timing-only model's graph: each meta input gets its values (``materialize(
    input position, meta tensor)``) when it is first read, and is dropped after its last read like any
    value, so a run holds one layer's weights at a time, not the model's; an embedding table gets only
    the rows each lookup reads. The model's own tensors (``torch.zeros(n)`` in its forward), traced on the
    meta device, are created on the CPU. The nodes named in ``stand_in`` (ops timed without a CPU kernel,
    :mod:`.standin`) get zeros of their fake kernel's layout.
    """
    stale_of_node = {kernel.node: stale_reads[kernel.name] for kernel in program.kernels if kernel.name in stale_reads}
    # A run that keeps no value for later, observes nothing and computes every node may compute in place.
    plain = not keep and only is None and observe is None and materialize is None
    in_place = {name: op for name, op in in_place_overloads(gm).items() if name not in stale_of_node} if plain else {}
    fills = broadcast_fills(gm) - stale_of_node.keys() if plain else frozenset()
    kernel_nodes = {kernel.node for kernel in program.kernels}
    last_use = _last_uses(gm)
    tables = _lookup_tables(gm) if materialize is not None else frozenset()
    held = keep | {arg.name for arg in gm.graph.output_node().all_input_nodes}
    inputs = iter(enumerate(args))
    env: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    pending: dict[str, int] = {}
    computed = 0
    for position, node in enumerate(gm.graph.nodes):
        if node.op == "placeholder":
            index, env[node.name] = next(inputs)
            if materialize is not None and isinstance(env[node.name], torch.Tensor) and env[node.name].is_meta:
                pending[node.name] = index
            if observe is not None:
                observe(node, (), env[node.name])
        elif node.op == "get_attr":
            env[node.name] = getattr(gm, str(node.target))
        elif node.op == "output":
            break
        elif only is not None and node.name not in only:
            env[node.name] = given[node.name] if given is not None and node.name in given else None
        elif node.name in stand_in:
            env[node.name] = stand_in_value(node)
        else:
            table = node.args[0].name if node.target is _EMBEDDING and node.args[0].name in tables else None
            lookup = table in pending and node.name not in stale_of_node
            if pending:
                for arg in node.all_input_nodes:
                    if arg.name in pending and not (lookup and arg.name == table):
                        env[arg.name] = materialize(pending.pop(arg.name), env[arg.name])
            if lookup:
                env[node.name] = materialize(pending[table], env[table], rows=env[node.args[1].name])
            elif node.name in in_place:
                env[node.name] = _call_in_place(node, env, in_place[node.name])
            elif node.name in fills:
                env[node.name] = broadcast_fill(node)
            else:
                env[node.name] = _call(node, env, stale_of_node.get(node.name, frozenset()), materialize is not None)
            computed += node.name in kernel_nodes
            if observe is not None:
                read = [env[arg.name] for arg in node.all_input_nodes if isinstance(env.get(arg.name), torch.Tensor)]
                observe(node, read, env[node.name])
        if node.name in keep:
            kept[node.name] = env[node.name]
        for done in last_use.get(position, ()):
            if done not in held:
                env.pop(done, None)
    def output(arg: torch.fx.Node) -> Any:
        return materialize(pending[arg.name], env[arg.name]) if arg.name in pending else env[arg.name]

    outputs = list(torch.fx.node.map_arg(gm.graph.output_node().args[0], output))
    return Execution(outputs, kept, computed)


_META = torch.device("meta")


def _call_in_place(node: torch.fx.Node, env: Mapping[str, Any], op: Any) -> list[torch.Tensor]:
    """A functional ``_foreach_*`` node computed by its in-place overload (:mod:`.inplace` says when
    that is invisible): its value is its first operand's tensors, now holding the results."""
    _call(node, env, frozenset(), kernel=op)
    return [env[arg.name] for arg in node.args[0]]


def _call(
    node: torch.fx.Node, env: Mapping[str, Any], stale: frozenset[str], traced_on_meta: bool = False, *,
    kernel: Any = None,
) -> Any:
    """One node's value: its Cube kernel or aten op (or ``kernel``), with poisoned memory for its racy reads."""

    def read(arg: torch.fx.Node) -> Any:
        value = env[arg.name]
        return poison(value) if arg.name in stale and isinstance(value, torch.Tensor) else value

    kernel = kernel or CUBE_KERNELS.get(node.target, node.target)
    kwargs = torch.fx.node.map_arg(node.kwargs, read)
    if traced_on_meta and kwargs.get("device") == _META:
        kwargs = {**kwargs, "device": torch.device("cpu")}
    try:
        return kernel(*torch.fx.node.map_arg(node.args, read), **kwargs)
    except NpufuseError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the op is reported at the user's line
        raise KernelError(
            f"{op_type_of(node)} at {source_line(node) or 'the model'} failed on the values that reached it: "
            f"{type(exc).__name__}: {exc}. The op computes what the device would from these inputs; check the "
            "values flowing into it (an index out of range, or a NaN or infinity turned into an index).",
            op=op_type_of(node), where=source_line(node) or None
        ) from exc


def _last_uses(gm: torch.fx.GraphModule) -> dict[int, list[str]]:
    """For each node position, the values whose last reader is that node."""
    last: dict[str, int] = {}
    for position, node in enumerate(gm.graph.nodes):
        for arg in node.all_input_nodes:
            last[arg.name] = position
    by_position: dict[int, list[str]] = {}
    for name, position in last.items():
        by_position.setdefault(position, []).append(name)
    return by_position
