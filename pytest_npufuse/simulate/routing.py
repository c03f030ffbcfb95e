"""How tokens are routed to experts, and the rows each rank of an EP deployment receives.

An MC2 dispatch (``npu_moe_distribute_dispatch``) returns ``expand_x`` with room for every token the rank
could receive: ``global_bs x min(local experts, K)`` rows (op-plugin's meta function), the capacity a
device reserves. The rows the rank's grouped matmuls, activations and combine really process are the
(token, expert) pairs routed to its experts, which depend on values: the gating of every rank's tokens.
A timing prices them by a :class:`Routing`, a documented stand-in stated in the report:

- ``uniform``: every expert gets the same share, so rank ``r`` receives ``global_bs x K x L / E`` rows
  (``L`` local experts of ``E``): each rank's own ``BS x K`` on average;
- ``zipf:S``: expert ``e`` gets a share proportional to ``(e + 1) ** -S``, in expert order, so the hottest
  experts sit together on rank 0 (a worst case: expert-placement balancing would spread them);
- a sequence of ``E`` non-negative weights: each expert's share of the (token, expert) pairs;
- ``computed``: the shares the model's own gating produced where its numerics were computed.

A rank receives at most ``global_bs`` rows per local expert (a token picks an expert once) and never more
than the capacity. With one EP rank every expert is local and the rows are ``BS x K`` whatever the routing.
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from .. import cost
from ..errors import ArgumentError
from ..ir.program import Kernel, Program, TensorSpec

DISPATCH, COMBINE = "mc2_dispatch", "mc2_combine"
ROUTINGS = ("uniform", "zipf:S", "computed", "a sequence of per-expert weights")
MAX_WEIGHTS = 1 << 16
"""The most expert weights ``routing=`` is read for: a bound on reading the argument (an endless iterator
would fill memory), far above any MoE's expert count (DeepSeek-V3 has 256)."""


@dataclass(frozen=True)
class Routing:
    """Expert shares of the (token, expert) pairs: uniform, Zipf with exponent ``zipf``, or ``weights`` (one
    per expert, from the user or from computed gating values)."""

    name: str = "uniform"
    zipf: float = 0.0
    weights: tuple[float, ...] = ()

    def shares(self, experts: int) -> tuple[float, ...]:
        """Each of ``experts`` experts' share (they sum to 1)."""
        if self.weights:
            if len(self.weights) != experts:
                raise ArgumentError(
                    f"routing {self.name} gives {len(self.weights)} expert weights, but the model's MoE has "
                    f"{experts} experts (moe_expert_num); give one weight per expert.",
                argument="routing",
                )
            top = max(self.weights)
            raw = tuple(w / top for w in self.weights)  # scaled first: the sum of weights near 1e308 overflows
        elif self.zipf:
            raw = tuple((e + 1) ** -self.zipf for e in range(experts))
        else:
            raw = (1.0,) * experts
        total = math.fsum(raw)
        return tuple(w / total for w in raw)

    def describe(self) -> str:
        if self.name == "uniform":
            return "uniform over the experts (every rank receives its own BS x K rows on average)"
        if self.zipf:
            return f"Zipf, exponent {self.zipf:g}, hottest experts on rank 0"
        return self.name


def routing_of(spec: "str | Sequence[float] | Routing | None", computed: Sequence[float] | None = None) -> Routing:
    """The routing a ``routing=`` argument names; ``computed`` are the expert counts the numerics saw."""
    if spec is None or spec == "uniform":
        return Routing()
    if isinstance(spec, Routing):
        return spec
    if isinstance(spec, str):
        if spec == "computed":
            if not computed:
                raise ArgumentError(
                    "routing='computed' takes the expert choices of the model's own gating, but no MoE dispatch was "
                    "computed; compute them (numerics='sample' or 'all') or name a routing: "
                    f"{', '.join(ROUTINGS)}.",
                    argument="routing",
                )
            return Routing("computed from the gating values of the computed layers", weights=tuple(map(float, computed)))
        name, _, exponent = spec.partition(":")
        if name == "zipf":
            try:
                value = float(exponent)
            except ValueError:
                value = -1.0
            if 0 < value < math.inf:
                return Routing(spec, zipf=value)
        raise _not_a_routing(spec)
    weights = _weights(spec)
    if not weights or any(w < 0 or not math.isfinite(w) for w in weights) or not max(weights) > 0:
        raise ArgumentError(
            "routing weights must be finite, non-negative and not all zero: one weight per expert.", argument="routing"
        )
    return Routing(f"given weights over {len(weights)} experts", weights=weights)


def _not_a_routing(spec: object) -> ArgumentError:
    return ArgumentError(
        f"routing={spec!r} is not a routing; use one of: {', '.join(ROUTINGS)} (e.g. 'zipf:1.2').", argument="routing"
    )


def _weights(spec: object) -> tuple[float, ...]:
    """The per-expert weights of a sequence ``routing=``: each a real number (a Python or NumPy number, a
    0-d tensor). A mapping, bytes or a non-iterable are not a weight list, and are refused like a bad name."""
    if not isinstance(spec, Iterable) or isinstance(spec, bytes | Mapping):
        raise _not_a_routing(spec)
    items = list(itertools.islice(spec, MAX_WEIGHTS + 1))  # an endless generator is read this far, no further
    if len(items) > MAX_WEIGHTS:
        raise ArgumentError(
            f"routing= gives more than {MAX_WEIGHTS} expert weights; give one weight per expert of the model's MoE "
            "(a list or tuple, not an endless iterator).", argument="routing", bound=MAX_WEIGHTS,
        )
    for index, weight in enumerate(items):
        number = isinstance(weight, numbers.Real) or getattr(weight, "ndim", None) == 0  # a 0-d tensor or array
        if not number or isinstance(weight, bool):
            raise ArgumentError(
                f"routing weight {index} is {weight!r}, not a number; give one finite, non-negative number per expert.",
                argument="routing",
            )
    return tuple(float(w) for w in items)


def is_dispatch(kernel: Kernel) -> bool:
    return kernel.info.cost == DISPATCH


def world_of(dispatch: Kernel) -> int:
    """The EP world size of an MC2 dispatch (1 when the call does not say)."""
    return int(dispatch.attr("ep_world_size", 1) or 1)


def rank_rows(dispatch: Kernel, routing: Routing, rank: int) -> int:
    """The rows an MC2 dispatch delivers to ``rank`` under ``routing`` (at most its capacity)."""
    tokens, top_k = dispatch.input_specs[1].shape[0], dispatch.input_specs[1].shape[-1]
    ranks = world_of(dispatch)
    experts = int(dispatch.attr("moe_expert_num", 0) or 0)
    capacity = dispatch.output_specs[0].shape[0]
    if experts <= 0 or ranks <= 0 or experts % ranks:
        return capacity
    global_bs = int(dispatch.attr("global_bs", 0) or 0) or tokens * ranks
    local = experts // ranks
    pairs = expert_pairs(routing.shares(experts), global_bs * min(top_k, experts), global_bs)
    return min(capacity, int(math.fsum(pairs[rank * local:(rank + 1) * local]) + 0.5))


def expert_pairs(shares: Sequence[float], total: float, cap: float) -> list[float]:
    """(token, expert) pairs per expert: ``total`` split by ``shares``, no expert above ``cap`` (a token picks
    an expert once), the excess of a capped expert spread over the others by their shares."""
    pairs = [0.0] * len(shares)
    free = [e for e, share in enumerate(shares) if share > 0]
    remaining = total
    while free and remaining > 1e-9:
        weight = math.fsum(shares[e] for e in free)
        over = [e for e in free if pairs[e] + remaining * shares[e] / weight > cap]
        if not over:
            for e in free:
                pairs[e] += remaining * shares[e] / weight
            break
        for e in over:
            remaining -= cap - pairs[e]
            pairs[e] = cap
        free = [e for e in free if e not in over]
    return pairs


def routed_program(program: Program, routing: Routing, rank: int = 0) -> Program:
    """``program`` as EP rank ``rank`` runs it under ``routing``: every kernel between an MC2 dispatch and
    its combine (by data flow) priced at the rows the rank receives instead of the dispatch's capacity. A
    program without MC2 dispatch, or whose rows equal the capacity (one EP rank), is returned as it is."""
    resized: dict[str, tuple[int, int]] = {}  # buffer storage -> (capacity, rows)
    kernels = list(program.kernels)
    changed = False
    for position, kernel in enumerate(program.kernels):
        if is_dispatch(kernel):
            rows, capacity = rank_rows(kernel, routing, rank), kernel.output_specs[0].shape[0]
            if rows != capacity:
                resized.update({program.storage(name): (capacity, rows) for name in (kernel.node, *kernel.outputs)
                                if name in program.buffers})
                kernels[position] = _resize(kernel, capacity, rows)
                changed = True
            continue
        reads = [resized[storage] for name in kernel.inputs if (storage := program.storage(name)) in resized]
        if not reads:
            continue
        capacity, rows = reads[0]
        kernels[position] = _resize(kernel, capacity, rows)
        if kernel.info.cost != COMBINE:  # the combine's output is the rank's own tokens again
            resized.update({program.storage(name): (capacity, rows) for name in (kernel.node, *kernel.outputs)
                            if name in program.buffers})
    if not changed:
        return program
    return _repriced(program, kernels, resized)


def _resize(kernel: Kernel, capacity: int, rows: int) -> Kernel:
    def spec(tensor: TensorSpec) -> TensorSpec:
        if not tensor.shape or tensor.shape[0] != capacity:
            return tensor
        per_row = tensor.nbytes // capacity if capacity else 0
        return TensorSpec((rows, *tensor.shape[1:]), tensor.dtype, per_row * rows)

    return replace(kernel, input_specs=tuple(map(spec, kernel.input_specs)), output_specs=tuple(map(spec, kernel.output_specs)))


def _repriced(program: Program, kernels: list[Kernel], resized: dict[str, tuple[int, int]]) -> Program:
    """The program with the resized kernels' flops and bytes priced again by their cost rules, and the
    resized buffers' specs."""
    prefetched: set[str] = set()
    priced: list[Kernel] = []
    for old, kernel in zip(program.kernels, kernels):
        storages = [program.storage(name) for name in kernel.inputs]
        if kernel is not old:
            flops, nbytes = cost.kernel_work(kernel.info, kernel.input_specs, kernel.output_specs, storages, prefetched,
                                             kernel.attrs)
            kernel = replace(kernel, flops=flops, bytes=nbytes)
        if kernel.info.cost == "prefetch":
            prefetched.update(storages[:1])
        priced.append(kernel)
    buffers = dict(program.buffers)
    for name, buffer in program.buffers.items():
        sizes = resized.get(program.storage(name))
        if sizes is not None and buffer.spec.shape and buffer.spec.shape[0] == sizes[0]:
            capacity, rows = sizes
            spec = TensorSpec((rows, *buffer.spec.shape[1:]), buffer.spec.dtype, buffer.spec.nbytes // capacity * rows)
            buffers[name] = replace(buffer, spec=spec)
    return replace(program, kernels=tuple(priced), buffers=MappingProxyType(buffers))
