"""MC2 expert-parallel communication: ``npu_moe_distribute_dispatch`` / ``combine`` and their ``_v2``.

On the device these fuse an optional int8 quantisation with an all-to-all-v over the EP group. Here the
**shapes and bytes are those of the configured EP world** (the ``ep_world_size`` argument), and the
**numbers** are those of the real EP world when ``group_ep`` names an ``"hccl"`` process group of several
processes (one per NPU, :mod:`.distributed`), else those of a world of one rank:

* Output shapes follow op-plugin's meta functions, so ``expand_x`` has ``A = global_bs * min(L, K)`` rows
  (``global_bs = BS * ep_world_size`` when 0, ``L = moe_expert_num / ep_world_size`` local experts). The
  op catalog prices these ops on the communication engine by the bytes of their inputs and outputs, so a
  larger configured world moves proportionally more bytes, as the real all-to-all does.
* Values: this rank (``ep_rank_id``) holds experts ``[rank * L, (rank + 1) * L)``. Over an ``"hccl"``
  group it receives every rank's tokens routed to those experts, grouped by local expert, then by source
  rank, then in token order, and ``combine`` returns each token the rows of its experts from their ranks.
  In a world of one rank it receives its own tokens only and ``combine`` adds the weighted outputs of
  the local experts, so a token's contribution from an expert on another rank is 0. With
  ``ep_world_size=1`` (every expert local) both are exactly the documented computation.

The contents of ``expand_idx`` / ``ep_recv_counts`` are, per the API page, implementation-defined ("may
differ across products and versions; pass them to combine unchanged"). This model fills them as below and
combine reads them back; ``expert_token_nums`` and ``expand_x``'s row order are the documented ones.

Sources: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_distribute_{dispatch,combine}{,_v2}.md``
and ``op_plugin/python/meta/_meta_registrations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Optional

import torch

from ..errors import OpArgumentError
from .checks import (
    HALF_DTYPES,
    comm_domain_name,
    dtype_of_code,
    require_choice,
    require_dtype,
    require_shape,
)
from .distributed import CommDomain, all_gather_rows, comm_domain
from .fixedorder import round_to_int8
from .registry import Arguments, Out, SampleCall, npu_op

NO_QUANT, DYNAMIC_QUANT = 0, 2
TOKENS_CUMSUM, TOKENS_COUNT = 0, 1
DYNAMIC_QUANT_MAX = 127.0
ASSIST_ROWS_PER_TOKEN = 128  # dispatch_v2 meta: assist_info_for_combine has max(BS*K, A*128) entries
A3_STEP = 8  # meta: expert_scales adds global_bs * 2 * K * (ep_world_size // 8) ep_recv_counts entries
# Every dispatch and combine interface takes the EP domain by its HCCL name (the API pages' group_ep: str).
EP_GROUP_CHECK = MappingProxyType({"group_ep": comm_domain_name("EP communication domain")})


@dataclass(frozen=True)
class _World:
    """The EP geometry of one call, from its arguments (op-plugin's meta function)."""

    ranks: int
    rank: int
    local_experts: int
    global_bs: int
    recv_rows: int  # A

    @property
    def first_expert(self) -> int:
        return self.rank * self.local_experts


def special_experts(call: Arguments) -> int:
    """How many zero, copy and constant experts a v2 call declares: their ids follow the MoE experts'
    (``[moe_expert_num, moe_expert_num + zero + copy + const)``, the v2 API pages); v1 has none."""
    return sum(getattr(call, f"{kind}_expert_num", 0) for kind in ("zero", "copy", "const"))


def _world(call: Arguments, x: torch.Tensor) -> _World:
    """The EP geometry of a dispatch or combine call; ``x`` is the tokens (``[BS, H]``) the call routes."""
    expert_ids, ep_world_size, ep_rank_id = call.expert_ids, call.ep_world_size, call.ep_rank_id
    moe_expert_num = call.moe_expert_num
    bs, k = expert_ids.shape
    if x.dim() != 2 or expert_ids.dim() != 2 or x.shape[0] != bs:
        raise OpArgumentError(
            f"x {list(x.shape)} and expert_ids {list(expert_ids.shape)} must be [BS, H] and [BS, K]", argument="x"
        )
    if not 0 <= ep_rank_id < ep_world_size:
        raise OpArgumentError(
            f"ep_rank_id={ep_rank_id} must be in [0, ep_world_size={ep_world_size})", argument="ep_rank_id"
        )
    if moe_expert_num % ep_world_size:
        raise OpArgumentError(
            f"moe_expert_num={moe_expert_num} must be a multiple of ep_world_size={ep_world_size}",
            argument="moe_expert_num",
        )
    experts = moe_expert_num + special_experts(call)
    if not 0 < k <= experts:
        raise OpArgumentError(f"K={k} (expert_ids' second dim) must be in (0, {experts}], the MoE and special experts")
    local = moe_expert_num // ep_world_size
    rows = call.global_bs if call.global_bs else bs * ep_world_size
    return _World(ep_world_size, ep_rank_id, local, rows, rows * min(local, k))


def _check_common(call: Arguments) -> None:
    """The scalar arguments both dispatch and combine (v1 and v2) take, beyond their schema types."""
    if call.ep_world_size < 1 or call.moe_expert_num < 1:
        raise OpArgumentError(
            f"ep_world_size={call.ep_world_size} and moe_expert_num={call.moe_expert_num} must be >= 1",
            argument="ep_world_size")
    require_choice("tp_world_size", call.tp_world_size, (0, 1),
                   "TP-domain communication is not modeled; 0 or 1 mean none")
    require_choice("shared_expert_rank_num", call.shared_expert_rank_num, (0,),
                   "ranks dedicated to shared experts are not modeled; compute the shared expert yourself")
    require_choice("expert_shard_type", call.expert_shard_type, (0,),
                   "0: shared-expert ranks first (the only documented value)")


def _active_routes(expert_ids: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """bool [BS, K]: which (token, slot) pairs take part (x_active_mask, 1-D per token or 2-D per pair)."""
    if mask is None:
        return torch.ones(expert_ids.shape, dtype=torch.bool)
    return mask.unsqueeze(-1).expand(expert_ids.shape) if mask.dim() == 1 else mask


def _check_mask(mask: Optional[torch.Tensor], expert_ids: torch.Tensor) -> None:
    if mask is not None:
        require_dtype("x_active_mask", mask, (torch.bool,))
        require_shape("x_active_mask", mask, ((expert_ids.shape[0],), tuple(expert_ids.shape)))


def _send_ranks(expert_ids: torch.Tensor, active: torch.Tensor, experts: int) -> torch.Tensor:
    """expand_idx: for each flat (token, slot), how many earlier active flat pairs go to the same expert
    (inactive pairs are ranked in a group of their own and never read)."""
    flat = torch.where(active, expert_ids, experts).reshape(-1).to(torch.int64)
    order = torch.sort(flat, stable=True)
    first = torch.searchsorted(order.values, order.values, right=False)
    ranks = torch.empty_like(flat)
    ranks[order.indices] = torch.arange(flat.numel()) - first
    return ranks.to(torch.int32)


def _recv_offsets(per_source: torch.Tensor) -> torch.Tensor:
    """ep_recv_counts: inclusive prefix sums of ``per_source`` ([local expert, source rank] row counts),
    expert-major."""
    return torch.cumsum(per_source.reshape(-1), 0).to(torch.int32)


@dataclass(frozen=True)
class _Senders:
    """The tokens every sending rank routes (in rank order): one rank's own in a world of one rank, every
    rank's when ``group_ep`` names an ``"hccl"`` group of several processes."""

    ranks: tuple[int, ...]
    x: tuple[torch.Tensor, ...]
    expert_ids: tuple[torch.Tensor, ...]
    active: tuple[torch.Tensor, ...]
    expert_scales: tuple[Optional[torch.Tensor], ...]


def _ep_domain(call: Arguments, world: _World) -> Optional[CommDomain]:
    """The ``"hccl"`` group ``group_ep`` names, when it has several ranks (None: a world of one rank)."""
    domain = comm_domain(call.group_ep)
    if domain is None or domain.size == 1:
        return None
    if domain.size != world.ranks or domain.rank != world.rank:
        raise OpArgumentError(
            f"ep_world_size={world.ranks} and ep_rank_id={world.rank} must be the size of group_ep "
            f"{call.group_ep!r} ({domain.size}) and this process's rank in it ({domain.rank})"
        )
    return domain


def _senders(call: Arguments, world: _World, what: str) -> _Senders:
    """This rank's tokens, or every rank's gathered over group_ep."""
    active = _active_routes(call.expert_ids, call.x_active_mask)
    domain = _ep_domain(call, world)
    if domain is None:
        return _Senders((world.rank,), (call.x,), (call.expert_ids,), (active,), (call.expert_scales,))
    gathered = [all_gather_rows(domain, value, what) for value in (call.x, call.expert_ids, active)]
    scales = (all_gather_rows(domain, call.expert_scales, what) if call.expert_scales is not None
              else [None] * domain.size)
    return _Senders(tuple(range(domain.size)), *(tuple(values) for values in (*gathered, scales)))


# ---------------------------------------------------------------------------------------------
# dispatch (v1 and v2 share the computation)
# ---------------------------------------------------------------------------------------------


def _dispatch_meta(call: Arguments, idx_entries: Callable[[int, int], int]) -> tuple[Out, ...]:
    """The seven outputs of a dispatch; ``idx_entries`` sizes the third (v1's expand_idx, v2's assist info)."""
    x, expert_ids, scales, expert_scales = call.x, call.expert_ids, call.scales, call.expert_scales
    quant_mode = call.quant_mode
    require_dtype("x", x, HALF_DTYPES)
    require_dtype("expert_ids", expert_ids, (torch.int32,))
    world = _world(call, x)
    _check_mask(call.x_active_mask, expert_ids)
    if scales is not None:
        if quant_mode != DYNAMIC_QUANT:
            raise OpArgumentError(
                "scales (smoothing factors) are only for quant_mode=2 (dynamic int8 quantisation)", argument="scales"
            )
        require_dtype("scales", scales, (torch.float32,))
        require_shape("scales", scales, ((call.moe_expert_num, x.shape[1]),))
    recv_counts = world.ranks * world.local_experts
    expand_scales: list[int] = [0]
    if expert_scales is not None:
        require_dtype("expert_scales", expert_scales, (torch.float32,))
        require_shape("expert_scales", expert_scales, (tuple(expert_ids.shape),))
        recv_counts += world.global_bs * 2 * expert_ids.shape[1] * (world.ranks // A3_STEP)
        expand_scales = [world.recv_rows]
    out_dtype = x.dtype if quant_mode == NO_QUANT else torch.int8
    a, h = world.recv_rows, x.shape[1]
    return (
        Out([a, h], out_dtype),
        Out([a], torch.float32),
        Out([idx_entries(expert_ids.numel(), a)], torch.int32),
        Out([world.local_experts], torch.int64),
        Out([recv_counts], torch.int32),
        Out([call.tp_world_size], torch.int32),
        Out(expand_scales, torch.float32),
    )


def _dispatch_kernel(call: Arguments, outputs: tuple[Out, ...], what: str) -> tuple[torch.Tensor, ...]:
    x, expert_ids, scales, moe_expert_num = call.x, call.expert_ids, call.scales, call.moe_expert_num
    world = _world(call, x)
    all_experts = moe_expert_num + special_experts(call)  # a special expert's tokens stay: combine computes them
    if bool(((expert_ids < 0) | (expert_ids >= all_experts)).any()):
        raise OpArgumentError(
            f"expert_ids values must lie in [0, {all_experts}), the MoE experts then the special ones",
            argument="expert_ids"
        )
    senders = _senders(call, world, what)
    picked: list[tuple[torch.Tensor, ...]] = []
    for source, ids, active, sent_x, sent_scales in zip(senders.ranks, senders.expert_ids, senders.active,
                                                        senders.x, senders.expert_scales):
        local = ids.to(torch.int64) - world.first_expert
        pairs = torch.nonzero(active & (local >= 0) & (local < world.local_experts))  # (token, slot), token-major
        weights = (sent_scales[pairs[:, 0], pairs[:, 1]] if sent_scales is not None
                   else torch.zeros(len(pairs), dtype=torch.float32))
        picked.append((sent_x[pairs[:, 0]], local[pairs[:, 0], pairs[:, 1]], torch.full((len(pairs),), source),
                       weights))
    rows, local_experts, sources, weights = (torch.cat(column) for column in zip(*picked))
    order = torch.sort(local_experts, stable=True)  # by local expert, then source rank, then token
    rows, experts, sources, weights = rows[order.indices], order.values, sources[order.indices], weights[order.indices]
    received = len(rows)
    if received > world.recv_rows:
        raise OpArgumentError(
            f"{received} routed tokens exceed the {world.recv_rows} rows expand_x holds; raise global_bs"
        )
    expand_x, dynamic_scales, expand_idx, _, _, tp_recv, expand_scales = (torch.zeros(o.shape, dtype=o.dtype)
                                                                          for o in outputs)
    if call.quant_mode == DYNAMIC_QUANT:
        values = rows.to(torch.float32)
        if scales is not None:
            values = values * scales[experts + world.first_expert]
        scale = values.abs().amax(dim=-1) / DYNAMIC_QUANT_MAX
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        rows = round_to_int8(values / safe.unsqueeze(-1))
        dynamic_scales[:received] = scale
    expand_x[:received] = rows
    expand_idx[: expert_ids.numel()] = _send_ranks(expert_ids, _active_routes(expert_ids, call.x_active_mask),
                                                   all_experts)
    if call.expert_scales is not None:
        expand_scales[:received] = weights
    counts = torch.bincount(experts, minlength=world.local_experts).to(torch.int64)
    token_nums = counts if call.expert_token_nums_type == TOKENS_COUNT else torch.cumsum(counts, 0)
    per_source = torch.zeros(world.local_experts * world.ranks, dtype=torch.int64)
    per_source.index_add_(0, experts * world.ranks + sources, torch.ones_like(experts))
    recv_counts = torch.zeros(outputs[4].shape, dtype=torch.int32)
    recv_counts[: world.ranks * world.local_experts] = _recv_offsets(per_source)
    return expand_x, dynamic_scales, expand_idx, token_nums, recv_counts, tp_recv, expand_scales


def _check_special_experts(call: Arguments) -> None:
    """The v2 interfaces' zero/copy/constant expert counts: non-negative, as the API pages' ranges say."""
    for kind in ("zero", "copy", "const"):
        if getattr(call, f"{kind}_expert_num") < 0:
            raise OpArgumentError(f"{kind}_expert_num={getattr(call, f'{kind}_expert_num')} must be >= 0")


def _check_dispatch(call: Arguments) -> None:
    """The checks both dispatch interfaces make."""
    _check_common(call)
    require_choice("quant_mode", call.quant_mode, (NO_QUANT, DYNAMIC_QUANT), "0 none, 2 dynamic per-token int8")
    require_choice("expert_token_nums_type", call.expert_token_nums_type, (TOKENS_CUMSUM, TOKENS_COUNT),
                   "0 cumsum, 1 counts")


def _v1_idx_entries(pairs: int, recv_rows: int) -> int:
    return pairs


def _v2_idx_entries(pairs: int, recv_rows: int) -> int:
    return max(pairs, recv_rows * ASSIST_ROWS_PER_TOKEN)




def _dispatch_functions(idx_entries: Callable[[int, int], int], name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The meta function and kernel of one dispatch interface, which differ only in the expand_idx size."""

    def meta(call: Arguments) -> tuple[Out, ...]:
        return _dispatch_meta(call, idx_entries)

    def kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
        return _dispatch_kernel(call, _dispatch_meta(call, idx_entries), f"torch_npu.{name}")

    return meta, kernel


_dispatch_v1_meta, _dispatch_v1_kernel = _dispatch_functions(_v1_idx_entries, "npu_moe_distribute_dispatch")
_dispatch_v2_meta, _dispatch_v2_kernel = _dispatch_functions(_v2_idx_entries, "npu_moe_distribute_dispatch_v2")


def _sample_tokens() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """6 bfloat16 tokens, their top-2 of 8 experts (distinct per token) and routing weights."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=gen).bfloat16()
    expert_ids = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(6)]).to(torch.int32)
    return x, expert_ids, torch.rand(6, 2, generator=gen)


def _dispatch_samples() -> list[SampleCall]:
    """One rank of one, and rank 1 of 4 (its 2 local experts); with dynamic quantisation and smooth scales."""
    x, expert_ids, _ = _sample_tokens()
    smooth = torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) + 0.5
    return [
        SampleCall((x, expert_ids, "ep", 1, 0, 8)),
        SampleCall((x, expert_ids, "ep", 4, 1, 8), {"expert_token_nums_type": 0}),
        SampleCall((x, expert_ids, "ep", 1, 0, 8), {"scales": smooth, "quant_mode": 2}),
    ]


def _combine_samples(dispatch: Callable[..., Any]) -> list[SampleCall]:
    """The combine of what ``dispatch`` (v1 or v2, its registered op) sends for each unquantised dispatch
    sample: the expert rows, the assist index and the counts it returns."""
    _, expert_ids, weights = _sample_tokens()
    calls = []
    for sample in _dispatch_samples()[:2]:
        expand_x, _, assist, _, counts, *_ = dispatch(*sample.args, **sample.kwargs)
        calls.append(SampleCall((expand_x, expert_ids, assist, counts, weights, *sample.args[2:])))
    return calls


@npu_op(meta=_dispatch_v1_meta, kernel=_dispatch_v1_kernel, argument_checks=EP_GROUP_CHECK, samples=_dispatch_samples)
def npu_moe_distribute_dispatch(call: Arguments) -> None:
    """Send each token to the ranks of its top-K experts (MC2): returns ``(expand_x, dynamic_scales,
    expand_idx, expert_token_nums, ep_recv_counts, tp_recv_counts, expand_scales)``.

    Source: torch_npu.npu_moe_distribute_dispatch (op-plugin API page; meta function for the shapes).
    See the module docstring for the one-rank numerics and the configured-world shapes.

    * ``x`` ``[BS, H]`` float16/bfloat16; ``expert_ids`` int32 ``[BS, K]`` in ``[0, moe_expert_num)``.
    * ``expand_x`` ``[A, H]``: the received tokens grouped by local expert, each group in token order,
      then zeros; int8 with ``quant_mode=2``, where each row is ``rint(x * scales[expert] / s)`` with
      ``s = max|x * scales[expert]| / 127`` (``scales`` ``[moe_expert_num, H]`` optional) and
      ``dynamic_scales[row] = s`` (``[A]``, zeros when not quantising).
    * ``expert_token_nums`` int64 ``[L]``: tokens per local expert (``expert_token_nums_type=1``) or their
      cumulative sums (0) -- the ``group_list`` of the grouped matmul that follows.
    * ``expand_idx`` int32 ``[BS*K]``: per (token, slot) its rank among the pairs sent to the same expert;
      ``ep_recv_counts`` int32: inclusive prefix sums of the rows received per (local expert, source rank);
      ``tp_recv_counts`` ``[tp_world_size]`` zeros; ``expand_scales`` ``[A]`` the ``expert_scales`` of each
      received row when given (A2 form), else empty.
    * ``x_active_mask`` (bool ``[BS]`` or ``[BS, K]``): inactive tokens / pairs are not sent.

    Refused: ranks dedicated to shared experts (``shared_expert_rank_num != 0``), TP-domain sends
    (``tp_world_size > 1``) and other quant modes.
    """
    _check_dispatch(call)


@npu_op(
    meta=_dispatch_v2_meta,
    kernel=_dispatch_v2_kernel,
    unmodeled=("elastic_info", "performance_info", "x_dtype", "scales_dtype"),
    argument_checks=EP_GROUP_CHECK,
    samples=_dispatch_samples,
)
def npu_moe_distribute_dispatch_v2(call: Arguments) -> None:
    """:func:`npu_moe_distribute_dispatch` of the v2 interface: the third output is
    ``assist_info_for_combine`` (int32 ``[max(BS*K, A*128)]``, the first ``BS*K`` entries as v1's
    ``expand_idx``) for :func:`npu_moe_distribute_combine_v2`.

    Source: torch_npu.npu_moe_distribute_dispatch_v2 (op-plugin API page; meta function). ``comm_alg``
    (the communication memory layout) does not change values and is accepted. Tokens routed to a zero,
    copy or constant expert (ids from ``moe_expert_num`` on, see :func:`npu_moe_distribute_combine_v2`)
    are not sent: combine_v2 computes them from ``ori_x``. ``y_dtype`` (a torch.dtype or its code) names
    expand_x's dtype, which op-plugin's kernel (MoeDistributeDispatchV2KernelOpApi.cpp) takes over the
    default: the modes here give x's dtype (``quant_mode=0``) or int8 (``quant_mode=2``), and y_dtype
    may name that dtype. Refused: elastic expert placement (``elastic_info``), ``performance_info``, a
    ``y_dtype`` naming another format (FP8 / HiFloat8 / FP4 outputs of the MX quant modes) and the
    ``x_dtype``/``scales_dtype`` overrides.
    """
    _check_dispatch(call)
    _check_special_experts(call)
    _check_y_dtype(call)


def _check_y_dtype(call: Arguments) -> None:
    """y_dtype may only restate the dtype the quant mode gives expand_x (x's, or int8 when quantising)."""
    if call.y_dtype is None:
        return
    given = dtype_of_code(call.y_dtype)
    expected = call.x.dtype if call.quant_mode == NO_QUANT else torch.int8
    if given != expected:
        raise OpArgumentError(
            f"y_dtype={given} is not modeled: with quant_mode={call.quant_mode} expand_x is {expected}, and "
            "other output formats (float8, hifloat8, float4) belong to the MX quant modes; pass y_dtype="
            f"{expected} or None", argument="y_dtype",
        )


# ---------------------------------------------------------------------------------------------
# combine (v1 and v2 share the computation)
# ---------------------------------------------------------------------------------------------


def _combine_meta(call: Arguments, expand_idx: torch.Tensor) -> Out:
    """The combined tokens; ``expand_idx`` is dispatch's third output (v2's assist_info_for_combine)."""
    expand_x, expert_ids, ep_send_counts = call.expand_x, call.expert_ids, call.ep_send_counts
    expert_scales = call.expert_scales
    require_dtype("expand_x", expand_x, HALF_DTYPES, "(int32 expert outputs with dequant scales are not modeled)")
    require_dtype("expert_ids", expert_ids, (torch.int32,))
    require_dtype("expand_idx", expand_idx, (torch.int32,))
    require_dtype("ep_send_counts", ep_send_counts, (torch.int32,))
    require_dtype("expert_scales", expert_scales, (torch.float32,))
    world = _world(call, expert_ids.new_empty(expert_ids.shape[0], 1))
    if expand_x.dim() != 2 or expand_x.shape[0] < world.recv_rows:
        raise OpArgumentError(f"expand_x has shape {list(expand_x.shape)}; expected [A >= {world.recv_rows}, H] "
                              "(dispatch's expand_x after the experts)", argument="expand_x")
    require_shape("expert_scales", expert_scales, (tuple(expert_ids.shape),))
    if expand_idx.dim() != 1 or expand_idx.shape[0] < expert_ids.numel():
        raise OpArgumentError(
            f"expand_idx has shape {list(expand_idx.shape)}; pass dispatch's third output unchanged",
            argument="expand_idx",
        )
    if ep_send_counts.dim() != 1 or ep_send_counts.shape[0] < world.ranks * world.local_experts:
        raise OpArgumentError(
            f"ep_send_counts has shape {list(ep_send_counts.shape)}; pass dispatch's ep_recv_counts",
            argument="ep_send_counts",
        )
    _check_mask(call.x_active_mask, expert_ids)
    tokens, h, shared_expert_x = expert_ids.shape[0], expand_x.shape[1], call.shared_expert_x
    if shared_expert_x is not None:
        require_dtype("shared_expert_x", shared_expert_x, (expand_x.dtype,))
        if shared_expert_x.numel() != tokens * h or shared_expert_x.shape[-1] != h:
            raise OpArgumentError(
                f"shared_expert_x has shape {list(shared_expert_x.shape)}; expected [{tokens}, {h}]",
                argument="shared_expert_x",
            )
    return Out([tokens, h], expand_x.dtype)


def _combine_sum(call: Arguments, expand_idx: torch.Tensor, what: str) -> torch.Tensor:
    """The float32 sum of the weighted rows the experts return (and the shared expert's output). In a world
    of one rank only the local experts return rows; over an ``"hccl"`` group every rank's ``expand_x`` and
    ``ep_send_counts`` are gathered and each token reads its row from its expert's rank."""
    expand_x, expert_ids, expert_scales = call.expand_x, call.expert_ids, call.expert_scales
    world = _world(call, expert_ids.new_empty(expert_ids.shape[0], 1))
    tokens, k = expert_ids.shape
    owner = expert_ids.to(torch.int64).div(world.local_experts, rounding_mode="floor")
    local = expert_ids.to(torch.int64) - owner * world.local_experts
    active = _active_routes(expert_ids, call.x_active_mask)
    domain = _ep_domain(call, world)
    if domain is None:
        buffers, counts = expand_x[None], call.ep_send_counts[None]
        routed, holder = active & (owner == world.rank), torch.zeros_like(owner)
    else:
        buffers = torch.stack(all_gather_rows(domain, expand_x[: world.recv_rows], what))
        counts = torch.stack(all_gather_rows(domain, call.ep_send_counts[: world.ranks * world.local_experts], what))
        routed, holder = active & (owner < world.ranks), owner.clamp(max=world.ranks - 1)
    block = local.clamp(0, world.local_experts - 1) * world.ranks + world.rank
    counts = counts.to(torch.int64)
    starts = torch.where(block > 0, counts[holder, (block - 1).clamp(min=0)], 0)
    rows = starts + expand_idx[: tokens * k].to(torch.int64).reshape(tokens, k)
    if bool(((rows < 0) | (rows >= buffers.shape[1]))[routed].any()):
        raise OpArgumentError(
            "expand_idx / ep_send_counts point outside expand_x; pass dispatch's outputs unchanged",
            argument="expand_idx",
        )
    source = buffers.to(torch.float32)
    out = torch.zeros(tokens, expand_x.shape[1], dtype=torch.float32)
    for slot in range(k):
        picked = source[holder[:, slot], rows[:, slot].clamp(0, buffers.shape[1] - 1)]
        weighted = expert_scales[:, slot].unsqueeze(-1) * picked
        out = out + torch.where(routed[:, slot].unsqueeze(-1), weighted, 0.0)
    if call.shared_expert_x is not None:
        out = out + call.shared_expert_x.reshape(tokens, -1).to(torch.float32)
    return out


def _combine_v1_meta(call: Arguments) -> Out:
    return _combine_meta(call, call.expand_idx)


def _combine_v1_kernel(call: Arguments) -> torch.Tensor:
    return _combine_sum(call, call.expand_idx, "torch_npu.npu_moe_distribute_combine").to(call.expand_x.dtype)


def _special_expert_inputs(call: Arguments, out: Out) -> None:
    """ori_x ([BS, H]) where copy or constant experts need it, and for constant expert j its rows of
    const_expert_alpha_1/_2 and const_expert_v ([const_expert_num, H]), all in expand_x's dtype."""
    tokens, h = out.shape
    needs = {"ori_x": (call.copy_expert_num or call.const_expert_num, (tokens, h))}
    for name in ("const_expert_alpha_1", "const_expert_alpha_2", "const_expert_v"):
        needs[name] = (call.const_expert_num, (call.const_expert_num, h))
    for name, (needed, shape) in needs.items():
        value = getattr(call, name)
        if value is None:
            if needed:
                raise OpArgumentError(f"{name} is required with copy_expert_num={call.copy_expert_num}, "
                                      f"const_expert_num={call.const_expert_num} (the API page)", argument=name)
            continue
        require_dtype(name, value, (out.dtype,), "(expand_x's dtype)")
        require_shape(name, value, (shape,))


def _combine_v2_meta(call: Arguments) -> Out:
    out = _combine_meta(call, call.assist_info_for_combine)
    _special_expert_inputs(call, out)
    return out


def _special_expert_sum(call: Arguments) -> torch.Tensor:
    """float32 ``sum_k expert_scales[b, k] * Moe_k(ori_x[b])`` over the special experts (the v2 API page):
    a zero expert gives 0, a copy expert ``ori_x``, constant expert j ``alpha_1[j] * ori_x + alpha_2[j] * v[j]``.
    No communication is involved: each rank computes its own tokens'."""
    expert_ids, tokens = call.expert_ids.to(torch.int64), call.expert_ids.shape[0]
    out = torch.zeros(tokens, call.expand_x.shape[1], dtype=torch.float32)
    if not call.copy_expert_num and not call.const_expert_num:
        return out
    ori = call.ori_x.to(torch.float32)
    active = _active_routes(call.expert_ids, call.x_active_mask)
    copies = call.moe_expert_num + call.zero_expert_num
    constants = copies + call.copy_expert_num
    for slot in range(expert_ids.shape[1]):
        expert, weight = expert_ids[:, slot], call.expert_scales[:, slot].unsqueeze(-1)
        copied = active[:, slot] & (expert >= copies) & (expert < constants)
        out = out + torch.where(copied.unsqueeze(-1), weight * ori, 0.0)
        if call.const_expert_num:
            j = (expert - constants).clamp(0, call.const_expert_num - 1)
            value = (call.const_expert_alpha_1[j].to(torch.float32) * ori
                     + call.const_expert_alpha_2[j].to(torch.float32) * call.const_expert_v[j].to(torch.float32))
            constant = active[:, slot] & (expert >= constants) & (expert < constants + call.const_expert_num)
            out = out + torch.where(constant.unsqueeze(-1), weight * value, 0.0)
    return out


def _combine_v2_kernel(call: Arguments) -> torch.Tensor:
    combined = _combine_sum(call, call.assist_info_for_combine, "torch_npu.npu_moe_distribute_combine_v2")
    return (combined + _special_expert_sum(call)).to(call.expand_x.dtype)


def _check_combine(call: Arguments) -> None:
    """The checks both combine interfaces make."""
    _check_common(call)
    require_choice("comm_quant_mode", call.comm_quant_mode, (0,), "quantised communication is not modeled")


@npu_op(
    meta=_combine_v1_meta,
    kernel=_combine_v1_kernel,
    unmodeled=("activation_scale", "weight_scale", "group_list"),
    argument_checks=EP_GROUP_CHECK,
    samples=lambda: _combine_samples(torch.ops.npu.npu_moe_distribute_dispatch),
)
def npu_moe_distribute_combine(call: Arguments) -> None:
    """Return the experts' outputs to their tokens and sum them with the routing weights: ``x`` ``[BS, H]``.

    Source: torch_npu.npu_moe_distribute_combine (op-plugin API page:
    ``x = Sum(expert_scales * ata_out)``, shared-expert values added without a weight; meta function).
    See the module docstring for the one-rank numerics.

    ``out[b] = sum_k expert_scales[b, k] * expand_x[row(b, k)] (+ shared_expert_x[b])`` in float32, slot by
    slot, one rounding to expand_x's dtype; ``row(b, k)`` is read from ``ep_send_counts`` and
    ``expand_idx`` as dispatch wrote them. Pairs whose expert is on another rank, or that
    ``x_active_mask`` leaves out, add 0. ``tp_send_counts`` is accepted (no TP domain is modeled), and so is
    ``expand_scales`` (dispatch's copy of ``expert_scales`` per received row, which the A2 algorithm reads;
    on one rank it holds the same weights, so ``expert_scales`` is used).

    Refused: the int32-output dequant path (``activation_scale``, ``weight_scale``, ``group_list``) and
    quantised communication.
    """
    _check_combine(call)


@npu_op(
    meta=_combine_v2_meta,
    kernel=_combine_v2_kernel,
    unmodeled=("elastic_info", "performance_info"),
    argument_checks=EP_GROUP_CHECK,
    samples=lambda: _combine_samples(torch.ops.npu.npu_moe_distribute_dispatch_v2),
)
def npu_moe_distribute_combine_v2(call: Arguments) -> None:
    """:func:`npu_moe_distribute_combine` of the v2 interface, reading dispatch_v2's
    ``assist_info_for_combine``; ``shared_expert_x`` (``[BS, H]`` or ``[B, S, H]``) is added unweighted.

    Source: torch_npu.npu_moe_distribute_combine_v2 (op-plugin API page; meta function). ``expand_scales``
    is accepted as in v1. The special experts (ids after the ``moe_expert_num`` MoE experts: first
    ``zero_expert_num`` zero experts, then ``copy_expert_num`` copy experts, then ``const_expert_num``
    constant experts) add ``expert_scales * Moe(ori_x)`` from ``ori_x`` ([BS, H], the tokens before the
    FFN, required with copy or constant experts): 0, ``ori_x``, or
    ``const_expert_alpha_1[j] * ori_x + const_expert_alpha_2[j] * const_expert_v[j]``; that sum is added
    in float32 after the routed rows, before the one rounding. ``ori_x`` without special experts is
    accepted and unused. Refused: elastic placement and ``performance_info``.
    """
    _check_combine(call)
    _check_special_experts(call)
