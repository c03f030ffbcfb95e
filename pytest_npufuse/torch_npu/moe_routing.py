"""MoE token routing around the experts: gate top-k softmax, init routing (v1, v2), expert token counts,
finalize routing.

The kernels are permutations, histograms and short float32 sums in a fixed order (stable sorts, ties to
the lower flat position), so every output is a function of the inputs alone. Semantics: the torch_npu API
pages in op-plugin, ``docs/zh/custom_APIs/torch_npu/torch_npu-<op>.md`` (formula and numpy "equivalent
computation"), and op-plugin's meta functions (``op_plugin/python/meta/_meta_registrations.py``) for the
output shapes.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError
from .checks import (
    FLOAT_DTYPES,
    dtype_of_code,
    kernel_checks_apply,
    require_choice,
    require_dtype,
    require_shape,
)
from .dtypes import DTYPE_CODES
from .fixedorder import round_to_int8, softmax
from .registry import Arguments, Out, SampleCall, bind, npu_op

NO_QUANT, STATIC_QUANT, DYNAMIC_QUANT = -1, 0, 1
DROPLESS, DROP_PAD = 0, 1
TOKENS_CUMSUM, TOKENS_COUNT, TOKENS_KEY_VALUE = 0, 1, 2
GATHER_INDEX, SCATTER_INDEX = 0, 1
DYNAMIC_QUANT_MAX = 127.0
TOP_K_LIMIT = 1024  # gating_top_k_softmax: k <= 1024 (API page)


# ---------------------------------------------------------------------------------------------
# npu_moe_gating_top_k_softmax
# ---------------------------------------------------------------------------------------------


def _gating_top_k_softmax_meta(call: Arguments) -> tuple[Out, ...]:
    x, k = call.x, call.k
    require_dtype("x", x, FLOAT_DTYPES)
    if x.dim() not in (2, 3):
        raise OpArgumentError(
            f"x has shape {list(x.shape)}; expected 2-D [tokens, experts] or 3-D [B, S, experts]", argument="x"
        )
    if not 0 < k <= min(x.shape[-1], TOP_K_LIMIT):
        raise OpArgumentError(
            f"k={k} must satisfy 0 < k <= experts ({x.shape[-1]}) and k <= {TOP_K_LIMIT}", argument="k"
        )
    shape = [*x.shape[:-1], k]
    return Out(shape, x.dtype), Out(shape, torch.int32), Out(shape, torch.int32)


def _gating_top_k_softmax_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, k = call.x, call.k
    probs = softmax(x.to(torch.float32))
    best = torch.sort(probs, dim=-1, descending=True, stable=True)
    rows = math.prod(x.shape[:-1])
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t().reshape(*x.shape[:-1], k)
    return best.values[..., :k].to(x.dtype), best.indices[..., :k].to(torch.int32), row_idx.contiguous()


_SAMPLE_TOKENS, _SAMPLE_K, _SAMPLE_EXPERTS, _SAMPLE_HIDDEN = 5, 2, 4, 8


def _sample_routing() -> tuple[torch.Tensor, torch.Tensor]:
    """5 bfloat16 tokens and their top-2 of 4 experts (int32, distinct per token): the routing the
    samples of this module's ops share."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(_SAMPLE_TOKENS, _SAMPLE_HIDDEN, generator=gen).bfloat16()
    scores = torch.rand(_SAMPLE_TOKENS, _SAMPLE_EXPERTS, generator=gen)
    return x, scores.topk(_SAMPLE_K, dim=-1).indices.to(torch.int32)


def _gating_top_k_softmax_samples() -> list[SampleCall]:
    logits = torch.randn(_SAMPLE_TOKENS, _SAMPLE_EXPERTS, generator=torch.Generator().manual_seed(0))
    return [SampleCall((logits, None, _SAMPLE_K)), SampleCall((logits.bfloat16(), None, 1))]


@npu_op(meta=_gating_top_k_softmax_meta, kernel=_gating_top_k_softmax_kernel, samples=_gating_top_k_softmax_samples)
def npu_moe_gating_top_k_softmax(call: Arguments) -> None:
    """Softmax over the experts, then the top ``k``: returns ``(y, expert_idx, row_idx)``.

    Source: torch_npu.npu_moe_gating_top_k_softmax (op-plugin API page; aclnnMoeGatingTopKSoftmax).
    ``x`` is ``[T, E]`` or ``[B, S, E]`` (float16, bfloat16, float32).

    * ``softmax`` over the last dim in float32 (fixed-order sum), ``y`` its k largest values cast to
      x's dtype, largest first; ties go to the lower expert (stable sort).
    * ``expert_idx`` (int32): their expert numbers.
    * ``row_idx`` (int32): ``arange(T * k).reshape(k, T).T`` -- the row of each (token, slot) pair in
      the k-major order that ``npu_moe_init_routing`` expects.

    ``finished`` (rows that skip the computation) is refused: the page does not say what such a row
    outputs, and the public MoE code passes None.
    """
    if call.finished is not None:
        raise OpArgumentError(
            "finished is not implemented by the CPU model of npu_moe_gating_top_k_softmax (the API page does "
            "not define a finished row's outputs); pass None", argument="finished"
        )


# ---------------------------------------------------------------------------------------------
# npu_moe_init_routing (v1)
# ---------------------------------------------------------------------------------------------


def _init_routing_meta(call: Arguments) -> tuple[
    Out, ...
]:
    x, expert_idx, active_num = call.x, call.expert_idx, call.active_num
    require_dtype("x", x, FLOAT_DTYPES)
    require_dtype("row_idx", call.row_idx, (torch.int32,))
    require_dtype("expert_idx", expert_idx, (torch.int32,))
    if x.dim() != 2 or expert_idx.dim() != 2 or expert_idx.shape[0] != x.shape[0]:
        raise OpArgumentError(
            f"x {list(x.shape)} and expert_idx {list(expert_idx.shape)} must be [NUM_ROWS, H] and [NUM_ROWS, K]",
            argument="x"
        )
    require_shape("row_idx", call.row_idx, (tuple(expert_idx.shape),))
    if active_num < 0:
        raise OpArgumentError(f"active_num={active_num} must be >= 0 (the rows of x to route)", argument="active_num")
    rows, k = expert_idx.shape
    return Out([min(rows, active_num) * k, x.shape[1]], x.dtype), Out([rows * k], torch.int32), Out(
        [rows * k], torch.int32
    )


def _init_routing_kernel(call: Arguments) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor
]:
    rows, k = call.expert_idx.shape
    order = torch.sort(call.expert_idx.reshape(-1), stable=True)
    dst_to_src = call.row_idx.reshape(-1).to(torch.int64)[order.indices]
    if rows * k and not bool(((dst_to_src >= 0) & (dst_to_src < rows * k)).all()):
        raise OpArgumentError(f"row_idx values must lie in [0, NUM_ROWS * K) = [0, {rows * k}); build it as "
                              "npu_moe_gating_top_k_softmax does", argument="row_idx")
    expanded_row_idx = torch.zeros(rows * k, dtype=torch.int32)
    expanded_row_idx[dst_to_src] = torch.arange(rows * k, dtype=torch.int32)
    expanded_x = call.x[dst_to_src[: min(rows, call.active_num) * k] % rows]
    return expanded_x, expanded_row_idx, order.values


def _init_routing_samples() -> list[SampleCall]:
    """The row index npu_moe_gating_top_k_softmax returns (k-major: ``j * tokens + t``)."""
    x, experts = _sample_routing()
    row_idx = torch.arange(_SAMPLE_TOKENS * _SAMPLE_K, dtype=torch.int32).reshape(_SAMPLE_K, -1).t().contiguous()
    return [SampleCall((x, row_idx, experts, _SAMPLE_TOKENS))]


@npu_op(meta=_init_routing_meta, kernel=_init_routing_kernel, samples=_init_routing_samples)
def npu_moe_init_routing(call: Arguments) -> None:
    """Sort the (token, slot) pairs by expert: returns ``(expanded_x, expanded_row_idx, expanded_expert_idx)``.

    Source: torch_npu.npu_moe_init_routing (op-plugin API page, whose numpy "equivalent computation"
    this follows step by step). ``x`` ``[N, H]`` float; ``row_idx`` and ``expert_idx`` int32 ``[N, K]``.

    * Stable sort of ``expert_idx`` flattened row-major (ties keep the flat order):
      ``expanded_expert_idx`` (int32 ``[N*K]``) are the sorted experts.
    * ``dst_to_src = row_idx.flat[sort order]``; ``expanded_row_idx[dst_to_src[i]] = i``.
    * ``expanded_x[i] = x[dst_to_src[i] % N]`` for the first ``min(N, active_num) * K`` rows.
    """


# ---------------------------------------------------------------------------------------------
# npu_moe_init_routing_v2
# ---------------------------------------------------------------------------------------------


def _expert_range(active_expert_range: Sequence[int], expert_num: int) -> tuple[int, int]:
    """[start, end) of the experts this rank routes; empty means [0, expert_num)."""
    if not active_expert_range:
        return 0, expert_num
    if len(active_expert_range) != 2 or not 0 <= active_expert_range[0] < active_expert_range[1]:
        raise OpArgumentError(
            f"active_expert_range={list(active_expert_range)} must be [start, end) with 0 <= start < end",
            argument="active_expert_range"
        )
    return active_expert_range[0], active_expert_range[1]


def _check_init_routing_v2_scale(
    x: torch.Tensor, scale: Optional[torch.Tensor], offset: Optional[torch.Tensor], quant_mode: int, experts: int
) -> None:
    if quant_mode == STATIC_QUANT:
        if scale is None or offset is None:
            raise OpArgumentError(
                "quant_mode=0 (static quantisation) needs scale and offset, float32 of shape [1]", argument="quant_mode"
            )
        require_shape("scale", scale, ((1,),))
        require_shape("offset", offset, ((1,),))
        return
    if offset is not None:
        raise OpArgumentError(
            f"offset is only for quant_mode=0 (static quantisation), got quant_mode={quant_mode}", argument="offset"
        )
    if scale is None or x.shape[0] == 0:
        # op-plugin's kernel returns the empty outputs of zero tokens before the device op checks scale
        # (MoeInitRoutingV2KernelNpuOpApi.cpp: "return when using empty tensor")
        return
    require_dtype("scale", scale, (torch.float32,))
    if quant_mode == NO_QUANT:
        require_shape("scale", scale, ((x.shape[0],),))
    else:
        require_shape("scale", scale, ((experts, x.shape[1]), (1, x.shape[1])))


def _check_init_routing_v2_x(x: torch.Tensor, x_dtype: object, quant_mode: int) -> None:
    """``x`` is float or int8 (the API page), its format named by ``x_dtype`` (op-plugin's schema) where
    torch has no dtype for it: hifloat8 tokens held as uint8 bytes, which routing without quantisation
    moves unchanged; a quant mode would have to decode them, which the CPU model cannot."""
    named = dtype_of_code(x_dtype)
    if named == DTYPE_CODES["hifloat8"]:
        require_dtype("x", x, (torch.uint8,))
        if quant_mode != NO_QUANT:
            raise OpArgumentError(f"x_dtype=torch_npu.hifloat8 with quant_mode={quant_mode} is not implemented by "
                                  "the CPU model; hifloat8 tokens are routed unquantised (quant_mode=-1)",
                                  argument="quant_mode")
        return
    require_dtype("x", x, (*FLOAT_DTYPES, torch.int8))
    if named is not None and named != x.dtype:
        raise OpArgumentError(f"x_dtype={x_dtype} names a format other than x's {x.dtype}; pass None "
                              "(x_dtype is for formats torch has no dtype for, torch_npu.hifloat8)", argument="x_dtype")
    if x.dtype == torch.int8 and quant_mode != NO_QUANT:
        raise OpArgumentError("x is already int8 (quantised before routing): use quant_mode=-1, with its per-row "
                              "scales as scale [NUM_ROWS] to carry them to the expanded rows", argument="x")


def _init_routing_v2_meta(call: Arguments) -> tuple[Out, ...]:
    x, expert_idx, expert_capacity, expert_num = call.x, call.expert_idx, call.expert_capacity, call.expert_num
    quant_mode, active_expert_range = call.quant_mode, call.active_expert_range
    _check_init_routing_v2_x(x, call.x_dtype, quant_mode)
    require_dtype("expert_idx", expert_idx, (torch.int32,))
    if x.dim() != 2 or expert_idx.dim() != 2 or expert_idx.shape[0] != x.shape[0]:
        raise OpArgumentError(
            f"x {list(x.shape)} and expert_idx {list(expert_idx.shape)} must be [NUM_ROWS, H] and [NUM_ROWS, K]",
            argument="x"
        )
    rows, k = expert_idx.shape
    h = x.shape[1]
    start, end = _expert_range(active_expert_range, expert_num)
    needs_experts = call.drop_pad_mode == DROP_PAD or call.expert_tokens_num_flag or quant_mode == DYNAMIC_QUANT
    if needs_experts and expert_num <= 0 and not active_expert_range:
        raise OpArgumentError("expert_num must be > 0 (or active_expert_range given) for drop_pad_mode=1, "
                              "expert_tokens_num_flag=True or quant_mode=1", argument="expert_num")
    _check_init_routing_v2_scale(x, call.scale, call.offset, quant_mode, end - start)
    out_dtype = x.dtype if quant_mode == NO_QUANT else torch.int8
    if call.drop_pad_mode == DROP_PAD:
        if not 0 < expert_capacity <= rows:
            raise OpArgumentError(
                f"expert_capacity={expert_capacity} must be in (0, NUM_ROWS={rows}] for drop_pad_mode=1",
                argument="expert_capacity"
            )
        if active_expert_range and (start, end) != (0, expert_num):
            raise OpArgumentError(
                "drop_pad_mode=1 routes every expert: active_expert_range must be [] or [0, expert_num]",
                argument="drop_pad_mode"
            )
        x_shape, scale_shape = [expert_num, expert_capacity, h], [expert_num * expert_capacity]
    else:
        expanded = rows * k if call.active_num <= 0 else min(call.active_num, rows * k)
        x_shape, scale_shape = [expanded, h], [expanded]
    if quant_mode == STATIC_QUANT:
        scale_shape = []
    if not call.expert_tokens_num_flag:
        tokens_shape: list[int] = []
    elif call.expert_tokens_num_type == TOKENS_KEY_VALUE:
        tokens_shape = [expert_num, 2]
    else:
        tokens_shape = [end - start]
    return (
        Out(x_shape, out_dtype),
        Out([rows * k], torch.int32),
        Out(tokens_shape, torch.int64),
        Out(scale_shape, torch.float32),
    )


def _sorted_routes(expert_idx: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(sorted experts, flat positions in that order, count inside [start, end)); experts below start sort last."""
    flat = expert_idx.reshape(-1).to(torch.int64)
    keys = torch.where(flat < start, torch.iinfo(torch.int32).max, flat)
    order = torch.sort(keys, stable=True)
    inside = int(((flat >= start) & (flat < end)).sum())
    return order.values, order.indices, inside


def _expert_tokens(sorted_inside: torch.Tensor, start: int, end: int, expert_num: int, kind: int) -> torch.Tensor:
    """Per-expert token statistics of the active range: cumsum (0), count (1) or (expert, count) pairs (2)."""
    counts = torch.bincount(sorted_inside - start, minlength=end - start).to(torch.int64)
    if kind == TOKENS_CUMSUM:
        return torch.cumsum(counts, 0)
    if kind == TOKENS_COUNT:
        return counts
    hit = torch.nonzero(counts).reshape(-1)
    pairs = torch.zeros(expert_num, 2, dtype=torch.int64)
    pairs[: hit.numel(), 0] = hit + start
    pairs[: hit.numel(), 1] = counts[hit]
    return pairs


def _drop_pad_slots(sorted_experts: torch.Tensor, inside: int, capacity: int) -> torch.Tensor:
    """Slot ``expert * capacity + rank among the expert's tokens`` of each sorted route, -1 when dropped."""
    experts = sorted_experts[:inside]
    first = torch.searchsorted(experts, experts, right=False)
    rank = torch.arange(inside) - first
    slots = torch.full_like(sorted_experts, -1)
    slots[:inside] = torch.where(rank < capacity, experts * capacity + rank, -1)
    return slots


def _quantize(rows: torch.Tensor, quant_mode: int, scale: Optional[torch.Tensor], offset: Optional[torch.Tensor],
              row_scale: Optional[torch.Tensor]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """int8 rows: static ``rint(x * scale + offset)`` in float16 steps (as the page's numpy model does), or
    dynamic per row: ``s = max|x * row_scale| / 127``, ``rint(x / s)`` (0 for an all-zero row)."""
    if quant_mode == STATIC_QUANT:
        half = rows.to(torch.float16) * scale.to(torch.float16)[0] + offset.to(torch.float16)[0]
        return round_to_int8(half.to(torch.float32)), None
    values = rows.to(torch.float32)
    if row_scale is not None:
        values = values * row_scale
    dynamic = values.abs().amax(dim=-1) / DYNAMIC_QUANT_MAX
    safe = torch.where(dynamic > 0, dynamic, torch.ones_like(dynamic))
    return round_to_int8(values / safe.unsqueeze(-1)), dynamic


def _init_routing_v2_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    x, scale, active_num, expert_capacity = call.x, call.scale, call.active_num, call.expert_capacity
    expert_num, quant_mode = call.expert_num, call.quant_mode
    rows, k = call.expert_idx.shape
    start, end = _expert_range(call.active_expert_range, expert_num)
    end = end if end > 0 else torch.iinfo(torch.int32).max
    sorted_experts, positions, inside = _sorted_routes(call.expert_idx, start, end)
    expanded_row_idx = torch.full((rows * k,), -1, dtype=torch.int32)
    if call.drop_pad_mode == DROP_PAD:
        slots = _drop_pad_slots(sorted_experts, inside, expert_capacity)
        kept = slots >= 0
        target, source, experts = slots[kept], positions[kept], sorted_experts[kept]
        expanded_row_idx[source] = target.to(torch.int32)
        total = expert_num * expert_capacity
    else:
        valid = inside if active_num <= 0 else min(active_num, inside)
        target, source, experts = torch.arange(valid), positions[:valid], sorted_experts[:valid]
        if call.row_idx_type == SCATTER_INDEX:
            expanded_row_idx = positions.to(torch.int32)
        else:
            expanded_row_idx[positions[:inside]] = torch.arange(inside, dtype=torch.int32)
        total = rows * k if active_num <= 0 else min(active_num, rows * k)
    gathered = x[source // k]
    expanded_scale = torch.zeros(total, dtype=torch.float32)
    if quant_mode == NO_QUANT:
        values = gathered
        if scale is not None:
            expanded_scale[target] = scale[source // k]
    else:
        row_scale = None
        if scale is not None and rows:  # zero tokens: the kernel returns before the device op reads scale
            row_scale = scale if scale.shape[0] == 1 else scale[experts - start]
        values, dynamic = _quantize(gathered, quant_mode, scale, call.offset, row_scale)
        if dynamic is not None:
            expanded_scale[target] = dynamic
    expanded_x = torch.zeros(total, x.shape[1], dtype=values.dtype)
    expanded_x[target] = values
    if call.drop_pad_mode == DROP_PAD:
        expanded_x = expanded_x.reshape(expert_num, expert_capacity, x.shape[1])
    tokens = (_expert_tokens(sorted_experts[:inside], start, end, expert_num, call.expert_tokens_num_type)
              if call.expert_tokens_num_flag else torch.zeros((), dtype=torch.int64))
    if quant_mode == STATIC_QUANT:
        expanded_scale = torch.zeros((), dtype=torch.float32)
    return expanded_x, expanded_row_idx, tokens, expanded_scale


def _init_routing_v2_samples() -> list[SampleCall]:
    """Dropless routing with per-expert counts, and with dynamic int8 quantisation of the rows."""
    x, experts = _sample_routing()
    return [
        SampleCall((x, experts), {"active_num": _SAMPLE_TOKENS * _SAMPLE_K, "expert_num": _SAMPLE_EXPERTS,
                                  "expert_tokens_num_type": 1, "expert_tokens_num_flag": True,
                                  "active_expert_range": [0, _SAMPLE_EXPERTS]}),
        SampleCall((x, experts), {"expert_num": _SAMPLE_EXPERTS, "quant_mode": 1}),
    ]


@npu_op(meta=_init_routing_v2_meta, kernel=_init_routing_v2_kernel, samples=_init_routing_v2_samples)
def npu_moe_init_routing_v2(call: Arguments) -> None:
    """Route tokens to experts (optionally quantising them): returns
    ``(expanded_x, expanded_row_idx, expert_token_cumsum_or_count, expanded_scale)``.

    Source: torch_npu.npu_moe_init_routing_v2 (op-plugin API page: formula and numpy model, followed
    here) and its meta function (shapes). ``x`` ``[N, H]`` float or int8, ``expert_idx`` int32 ``[N, K]``.

    1. The flat ``expert_idx`` is stably sorted; experts below ``active_expert_range[0]`` sort last and
       only experts inside ``[start, end)`` (default ``[0, expert_num)``) are routed.
    2. ``expanded_row_idx`` (int32 ``[N*K]``): gather form (``row_idx_type=0``): the expanded row of each
       flat (token, slot), -1 if not routed; scatter form (1): the flat position of each sorted row.
    3. Dropless (``drop_pad_mode=0``): ``expanded_x[i] = x[pos_i // K]`` for the sorted routes, at most
       ``active_num`` rows when ``active_num > 0``; shape ``[N*K or min(active_num, N*K), H]``, rows
       past the routed ones are 0. Drop/pad (1): ``[expert_num, expert_capacity, H]``, each expert's
       first ``expert_capacity`` tokens, the rest dropped (-1 in expanded_row_idx), empty slots 0.
    4. ``quant_mode``: -1 none (``expanded_scale`` = the optional ``scale[N]`` of each row's token);
       0 static int8 ``rint(x * scale + offset)`` (float16 steps, as the page's model; expanded_scale is
       an empty 0-d tensor); 1 dynamic int8 per row: ``s = max|x * scale[expert]| / 127``, output
       ``rint(x / s)`` and ``expanded_scale = s`` (``scale`` optional, ``[end - start, H]`` or ``[1, H]``).
    5. ``expert_token_cumsum_or_count`` (int64, with ``expert_tokens_num_flag``): per active expert the
       cumulative (0) or plain (1) token count, or (2) ``[expert_num, 2]`` (expert, count) pairs of the
       experts that got tokens, then zeros.

    ``x`` may also be int8 (tokens quantised before routing, as the public W8A8 MoE code does); then only
    ``quant_mode=-1`` applies and ``scale`` carries their per-row scales. ``x_dtype=torch_npu.hifloat8``
    (op-plugin's schema) marks uint8 ``x`` as hifloat8 bytes, routed unchanged with ``quant_mode=-1``. Refused: the FP8/HIF8/MX/int4 quant
    modes (2-17), which have no CPU dtype here.
    """
    require_choice("drop_pad_mode", call.drop_pad_mode, (DROPLESS, DROP_PAD),
                   "0 dropless, 1 drop/pad to expert_capacity")
    require_choice("expert_tokens_num_type", call.expert_tokens_num_type, (0, 1, 2), "0 cumsum, 1 count, 2 key-value")
    require_choice("quant_mode", call.quant_mode, (NO_QUANT, STATIC_QUANT, DYNAMIC_QUANT),
                   "-1 none, 0 static, 1 dynamic int8")
    require_choice("row_idx_type", call.row_idx_type, (GATHER_INDEX, SCATTER_INDEX), "0 gather index, 1 scatter index")


# ---------------------------------------------------------------------------------------------
# npu_moe_compute_expert_tokens
# ---------------------------------------------------------------------------------------------

EXPERT_TOKENS_MAX_EXPERTS = 2048  # num_expert in (0, 2048] (API page)


def _compute_expert_tokens_meta(call: Arguments) -> Out:
    sorted_expert_for_source_row = call.sorted_expert_for_source_row
    require_dtype("sorted_expert_for_source_row", sorted_expert_for_source_row, (torch.int32,))
    if sorted_expert_for_source_row.dim() != 1:
        raise OpArgumentError(f"sorted_expert_for_source_row has shape {list(sorted_expert_for_source_row.shape)}; "
                              "expected 1-D (the sorted experts of npu_moe_init_routing)",
                              argument="sorted_expert_for_source_row")
    return Out([call.num_expert], torch.int32)


def _compute_expert_tokens_kernel(call: Arguments) -> torch.Tensor:
    experts = call.sorted_expert_for_source_row
    if experts.numel() and bool((experts[1:] < experts[:-1]).any()):
        raise OpArgumentError(
            "sorted_expert_for_source_row must be non-decreasing (sorted by expert)",
            argument="sorted_expert_for_source_row",
        )
    bounds = torch.arange(call.num_expert, dtype=torch.int32)
    return torch.searchsorted(experts, bounds, right=True).to(torch.int32)


def _compute_expert_tokens_samples() -> list[SampleCall]:
    _, experts = _sample_routing()
    return [SampleCall((experts.reshape(-1).sort().values, _SAMPLE_EXPERTS))]


@npu_op(meta=_compute_expert_tokens_meta, kernel=_compute_expert_tokens_kernel, samples=_compute_expert_tokens_samples)
def npu_moe_compute_expert_tokens(call: Arguments) -> None:
    """Per expert ``i``, the end of its rows in the expert-sorted rows (a binary search): int32 ``[num_expert]``.

    Source: torch_npu.npu_moe_compute_expert_tokens (op-plugin API page:
    ``expertTokens_i = BinarySearch(sortedExpertForSourceRow, i)``, "the position of the last row each
    expert handles"). The result is the count of rows with expert <= i, i.e. the cumulative row ends
    that ``npu_grouped_matmul`` takes with ``group_list_type=0``.
    """
    if not 0 < call.num_expert <= EXPERT_TOKENS_MAX_EXPERTS:
        raise OpArgumentError(
            f"num_expert={call.num_expert} must be in (0, {EXPERT_TOKENS_MAX_EXPERTS}]", argument="num_expert"
        )


# ---------------------------------------------------------------------------------------------
# npu_moe_finalize_routing
# ---------------------------------------------------------------------------------------------

FINALIZE_DROP_MODES = (1, 3)  # expanded rows are [E, C, H]
FINALIZE_ROW_MAJOR = (2, 3)  # expanded_src_to_dst_row indexed token-major (i * K + k)


def _finalize_routing_meta(call: Arguments) -> Out:
    bias, scales, expanded_src_to_dst_row = call.bias, call.scales, call.expanded_src_to_dst_row
    export_for_source_row = call.export_for_source_row
    rows = call.expanded_permuted_rows
    require_dtype("expanded_permuted_rows", rows, FLOAT_DTYPES)
    require_dtype("expanded_src_to_dst_row", expanded_src_to_dst_row, (torch.int32,))
    mode = call.drop_pad_mode or 0
    expected_dims = 3 if mode in FINALIZE_DROP_MODES else 2
    if rows.dim() != expected_dims:
        raise OpArgumentError(f"expanded_permuted_rows has shape {list(rows.shape)}; drop_pad_mode={mode} needs "
                              f"{'[E, C, H]' if expected_dims == 3 else '[NUM_ROWS * K, H]'}",
                              argument="expanded_permuted_rows")
    if expanded_src_to_dst_row.dim() != 1:
        raise OpArgumentError("expanded_src_to_dst_row must be 1-D [NUM_ROWS * K]", argument="expanded_src_to_dst_row")
    routes = expanded_src_to_dst_row.shape[0]
    top_k = scales.shape[1] if scales is not None and scales.dim() == 2 else (call.k or 1)
    if top_k <= 0 or routes % top_k:
        raise OpArgumentError(
            f"expanded_src_to_dst_row has {routes} entries, not a multiple of K={top_k}",
            argument="expanded_src_to_dst_row",
        )
    tokens, h = routes // top_k, rows.shape[-1]
    for name, tensor in (("skip1", call.skip1), ("skip2", call.skip2)):
        if tensor is not None:
            require_dtype(name, tensor, (rows.dtype,), "(expanded_permuted_rows' dtype)")
            require_shape(name, tensor, ((tokens, h),))
    if call.skip1 is None and call.skip2 is not None:
        raise OpArgumentError(
            "skip2 needs skip1 (the API page: when skip1 is None, skip2 must be None too)", argument="skip2"
        )
    if scales is not None:
        require_dtype("scales", scales, (rows.dtype,), "(expanded_permuted_rows' dtype)")
        require_shape("scales", scales, ((tokens, top_k),))
    if bias is not None:
        require_dtype("bias", bias, (rows.dtype,), "(expanded_permuted_rows' dtype)")
        if export_for_source_row is None:
            raise OpArgumentError(
                "bias needs export_for_source_row (the expert of each (token, k)) to pick its row", argument="bias"
            )
    if export_for_source_row is not None:
        require_dtype("export_for_source_row", export_for_source_row, (torch.int32,))
        require_shape("export_for_source_row", export_for_source_row, ((tokens, top_k),))
    if bias is not None and kernel_checks_apply(rows) and (bias.dim() != 2 or bias.shape[1] != h):
        # op-plugin's meta function reads no bias; the kernel picks bias rows by expert
        raise OpArgumentError(f"bias has shape {list(bias.shape)}; expected [E, {h}]", argument="bias")
    return Out([tokens, h], rows.dtype)


def _finalize_routing_kernel(call: Arguments) -> torch.Tensor:
    expanded_permuted_rows, skip1, scales = call.expanded_permuted_rows, call.skip1, call.scales
    mode = call.drop_pad_mode or 0
    h = expanded_permuted_rows.shape[-1]
    source = expanded_permuted_rows.reshape(-1, h).to(torch.float32)
    routes = call.expanded_src_to_dst_row.shape[0]
    top_k = scales.shape[1] if scales is not None else (call.k or 1)
    tokens = routes // top_k
    dst = call.expanded_src_to_dst_row.to(torch.int64)
    dst = dst.reshape(tokens, top_k) if mode in FINALIZE_ROW_MAJOR else dst.reshape(top_k, tokens).t()
    if bool(((dst < -1) | (dst >= source.shape[0])).any()):
        raise OpArgumentError(
            f"expanded_src_to_dst_row values must lie in [-1, {source.shape[0]}) (-1: dropped)",
            argument="expanded_src_to_dst_row",
        )
    out = torch.zeros(tokens, h, dtype=torch.float32)
    if skip1 is not None:
        out = skip1.to(torch.float32) if call.skip2 is None else skip1.to(torch.float32) + call.skip2.to(torch.float32)
    for slot in range(top_k):
        rows = torch.where((dst[:, slot] >= 0).unsqueeze(-1), source[dst[:, slot].clamp(min=0)], 0.0)
        if call.bias is not None:
            rows = rows + call.bias.to(torch.float32)[call.export_for_source_row[:, slot].to(torch.int64)]
        if scales is not None:
            rows = scales[:, slot].to(torch.float32).unsqueeze(-1) * rows
        out = out + rows
    return out.to(expanded_permuted_rows.dtype)


def _finalize_routing_samples() -> list[SampleCall]:
    """Expert rows with both skips and a per-expert bias, and the bare weighted sum."""
    gen = torch.Generator().manual_seed(1)
    _, experts = _sample_routing()
    rows = torch.randn(_SAMPLE_TOKENS * _SAMPLE_K, _SAMPLE_HIDDEN, generator=gen)
    skips = (torch.randn(_SAMPLE_TOKENS, _SAMPLE_HIDDEN, generator=gen) for _ in range(2))
    bias = torch.randn(_SAMPLE_EXPERTS, _SAMPLE_HIDDEN, generator=gen)
    scales = torch.rand(_SAMPLE_TOKENS, _SAMPLE_K, generator=gen)
    dst = torch.randperm(_SAMPLE_TOKENS * _SAMPLE_K, generator=gen).to(torch.int32)
    return [
        SampleCall((rows, *skips, bias, scales, dst, experts)),
        SampleCall((rows, None, None, None, scales, dst, None)),
    ]


@npu_op(meta=_finalize_routing_meta, kernel=_finalize_routing_kernel, samples=_finalize_routing_samples)
def npu_moe_finalize_routing(call: Arguments) -> None:
    """Combine the experts' outputs per token: returns ``out`` ``[NUM_ROWS, H]`` in the rows' dtype.

    Source: torch_npu.npu_moe_finalize_routing (op-plugin API page, formula and numpy model) and its
    meta function (``k`` gives K when ``scales`` is None):
    ``out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[dst(i, k)] + bias[expert[i, k]])``.

    * ``dst(i, k) = expanded_src_to_dst_row[k * NUM_ROWS + i]`` for ``drop_pad_mode`` 0/1 (column
      order, what npu_moe_init_routing returns) and ``[i * K + k]`` for 2/3 (row order, what
      npu_moe_init_routing_v2 returns). Modes 1/3 take rows ``[E, C, H]`` and ``dst = -1`` (a dropped
      token) adds 0.
    * Missing skip/bias/scales terms are left out (scales: weight 1).
    * Float32 arithmetic in this order: ``skip1 + skip2``, then slot by slot ``+ scale * (row + bias)``;
      one rounding to the rows' dtype at the end.
    """
    if call.drop_pad_mode is not None:
        require_choice("drop_pad_mode", call.drop_pad_mode, (0, 1, 2, 3),
                       "0/2 dropless, 1/3 drop-pad; 0/1 column-ordered, 2/3 row-ordered expanded_src_to_dst_row")


# ---------------------------------------------------------------------------------------------
# npu_moe_init_routing_quant
# ---------------------------------------------------------------------------------------------

QUANT_TOKENS_NONE, QUANT_TOKENS_CUMSUM, QUANT_TOKENS_COUNT = 0, 1, 2


def _init_routing_quant_as_v2(call: Arguments) -> Arguments:
    """The npu_moe_init_routing_v2 call computing the same routing (every expert active, gather index)."""
    mode = call.expert_tokens_num_mode
    drop = call.drop_pad_mode == DROP_PAD
    before_capacity = drop and call.expert_tokens_before_capacity_flag
    return bind(
        npu_moe_init_routing_v2, call.x, call.expert_idx, scale=call.scale, offset=call.offset,
        active_num=call.active_num, expert_capacity=call.expert_capacity, expert_num=call.expert_num,
        drop_pad_mode=call.drop_pad_mode,
        expert_tokens_num_type=TOKENS_CUMSUM if mode == QUANT_TOKENS_CUMSUM and not drop else TOKENS_COUNT,
        expert_tokens_num_flag=before_capacity or (mode != QUANT_TOKENS_NONE and not drop),
        quant_mode=call.quant_mode, row_idx_type=GATHER_INDEX,
    )


def _init_routing_quant_wanted(v2: Arguments) -> tuple[bool, bool, bool]:
    """Which optional outputs the call asks for: token counts (dropless), counts before capacity (drop/pad), scales."""
    drop = v2.drop_pad_mode == DROP_PAD
    flag = v2.expert_tokens_num_flag
    return flag and not drop, flag and drop, v2.quant_mode == DYNAMIC_QUANT


def _init_routing_quant_meta(call: Arguments) -> tuple[Out, ...]:
    """expanded_x int8, expanded_row_idx int32 [N*K], token counts and counts before capacity (int32
    [expert_num] when their mode asks for them, else empty), dynamic scales float32 (quant_mode=1)."""
    require_dtype("x", call.x, FLOAT_DTYPES, "(the op quantises float tokens)")
    v2 = _init_routing_quant_as_v2(call)
    expanded_x, row_idx, _, scale = _init_routing_v2_meta(v2)
    counts, before_capacity, scales = _init_routing_quant_wanted(v2)
    experts = v2.expert_num
    return (
        expanded_x,
        row_idx,
        Out([experts] if counts else [0], torch.int32),
        Out([experts] if before_capacity else [0], torch.int32),
        Out(scale.shape if scales else [0], torch.float32),
    )


def _init_routing_quant_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    v2 = _init_routing_quant_as_v2(call)
    expanded_x, row_idx, tokens, scale = _init_routing_v2_kernel(v2)
    counts, before_capacity, scales = _init_routing_quant_wanted(v2)
    empty = torch.zeros(0, dtype=torch.int32)
    return (
        expanded_x,
        row_idx,
        tokens.to(torch.int32) if counts else empty,
        tokens.to(torch.int32) if before_capacity else empty,
        scale if scales else torch.zeros(0, dtype=torch.float32),
    )


def _init_routing_quant_samples() -> list[SampleCall]:
    x, experts = _sample_routing()
    return [SampleCall((x, experts), {"active_num": 0, "expert_capacity": 0, "expert_num": _SAMPLE_EXPERTS,
                                      "expert_tokens_num_mode": 2, "quant_mode": 1})]


@npu_op(meta=_init_routing_quant_meta, kernel=_init_routing_quant_kernel, samples=_init_routing_quant_samples)
def npu_moe_init_routing_quant(call: Arguments) -> None:
    """Route tokens to experts and quantise them to int8: ``(expanded_x, expanded_row_idx,
    expert_token_cumsum_or_count, expert_tokens_before_capacity, expanded_scale)``.

    Sources: CANN aclnnMoeInitRoutingQuantV2 (formula: stable sort of the flat expert ids, gather of the
    token rows, static or dynamic quantisation, histograms), op-plugin's MoeInitRoutingQuantKernelNpuOpApi.cpp
    (output shapes and dtypes) and its numpy reference test.  It is npu_moe_init_routing_v2's routing with
    every expert active and the gather-form ``expanded_row_idx`` (one shared kernel):

    * ``drop_pad_mode=0``: ``expanded_x`` [N*K, H] (``active_num=0``) or [min(N*K, active_num), H];
      1: [expert_num, expert_capacity, H], each expert's first ``expert_capacity`` tokens;
    * ``quant_mode=0`` static ``rint(x * scale + offset)`` (scale, offset [1], float16 steps);
      1 dynamic per row ``s = max|x * scale[expert]| / 127`` (``scale`` optional [expert_num, H] or
      [1, H]), ``expanded_scale`` = s;
    * ``expert_tokens_num_mode``: 0 none, 1 cumulative, 2 plain token count per expert (int32
      [expert_num]); ``expert_tokens_before_capacity_flag`` gives the drop mode's counts before the
      capacity cut.  An output that is not requested is an empty [0] tensor (op-plugin allocates none).

    vllm-ascend's W8A8 all-to-all EP path calls it dropless, dynamic, with counts (mode 2).
    """
    require_choice("drop_pad_mode", call.drop_pad_mode, (DROPLESS, DROP_PAD),
                   "0 dropless, 1 drop/pad to expert_capacity")
    require_choice("expert_tokens_num_mode", call.expert_tokens_num_mode, (0, 1, 2), "0 none, 1 cumsum, 2 count")
    require_choice("quant_mode", call.quant_mode, (STATIC_QUANT, DYNAMIC_QUANT), "0 static, 1 dynamic int8")


# ---------------------------------------------------------------------------------------------
# npu_moe_re_routing
# ---------------------------------------------------------------------------------------------

TOKEN_COUNT_DTYPES = (torch.int32, torch.int64)


def _re_routing_meta(call: Arguments) -> tuple[Out, ...]:
    """permute_tokens [A, H], scales [A] float32, permute_token_idx int32 [A], expert_token_num [E] (op-plugin meta)."""
    tokens, expert_token_num_per_rank = call.tokens, call.expert_token_num_per_rank
    require_dtype("tokens", tokens, (torch.float16, torch.bfloat16, torch.int8))
    require_dtype("expert_token_num_per_rank", expert_token_num_per_rank, TOKEN_COUNT_DTYPES)
    if tokens.dim() != 2 or expert_token_num_per_rank.dim() != 2:
        raise OpArgumentError(f"tokens {list(tokens.shape)} and expert_token_num_per_rank "
                              f"{list(expert_token_num_per_rank.shape)} must be [A, H] and [ranks, experts]",
                              argument="tokens")
    rows = tokens.shape[0]
    scales = call.per_token_scales
    if scales is not None:
        require_dtype("per_token_scales", scales, (torch.float32,))
        require_shape("per_token_scales", scales, ((rows,),))
    return (
        Out(list(tokens.shape), tokens.dtype),
        Out([rows], torch.float32),
        Out([rows], torch.int32),
        Out([expert_token_num_per_rank.shape[1]], expert_token_num_per_rank.dtype),
    )


def _re_routing_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    tokens, expert_token_num_per_rank = call.tokens, call.expert_token_num_per_rank
    counts = expert_token_num_per_rank.to(torch.int64)
    if bool((counts < 0).any()) or int(counts.sum()) != tokens.shape[0]:
        raise OpArgumentError(f"expert_token_num_per_rank {counts.tolist()} must be non-negative counts summing to "
                              f"the {tokens.shape[0]} token rows", argument="expert_token_num_per_rank")
    ranks, experts = counts.shape
    source_start = torch.cumsum(counts.reshape(-1), 0) - counts.reshape(-1)  # rank-major: where (i, j) rows start
    order = torch.cat([torch.arange(int(source_start[i * experts + j]), int(source_start[i * experts + j] + counts[i, j]))
                       for j in range(experts) for i in range(ranks)]) if tokens.shape[0] else torch.zeros(0, dtype=torch.int64)
    scales = call.per_token_scales
    permuted_scales = scales[order] if scales is not None else torch.zeros(tokens.shape[0], dtype=torch.float32)
    return tokens[order], permuted_scales, order.to(torch.int32), counts.sum(0).to(expert_token_num_per_rank.dtype)


def _re_routing_samples() -> list[SampleCall]:
    """int8 tokens received from 3 ranks for 2 local experts, with their per-token scales."""
    gen = torch.Generator().manual_seed(0)
    counts = torch.tensor([[1, 2], [2, 0], [0, 1]], dtype=torch.int32)
    tokens = torch.randint(-100, 100, (6, 8), generator=gen, dtype=torch.int8)
    return [SampleCall((tokens, counts), {"per_token_scales": torch.rand(6, generator=gen)})]


@npu_op(meta=_re_routing_meta, kernel=_re_routing_kernel, samples=_re_routing_samples)
def npu_moe_re_routing(call: Arguments) -> None:
    """Reorder tokens received from the EP ranks from rank-major to expert-major: returns
    ``(permute_tokens, permute_per_token_scales, permute_token_idx, expert_token_num)``.

    Source: torch_npu.npu_moe_re_routing (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_re_routing.md,
    shapes from its meta function).  ``tokens`` [A, H] float16/bfloat16/int8 arrive grouped by source
    rank, and within a rank by local expert; ``expert_token_num_per_rank`` [N, E] (int32/int64) holds
    the count of rank i's tokens for expert j (the counts sum to A).  The output takes, for expert 0..E-1
    and within it rank 0..N-1, that block of rows (the doc's SrcOffset/DstOffset sums):

    * ``permute_tokens[d] = tokens[permute_token_idx[d]]`` (``idx_type=0``, gather index, int32 [A]);
    * ``permute_per_token_scales`` the same reordering of ``per_token_scales`` [A] float32 (zeros
      when not given: the doc calls that output invalid then);
    * ``expert_token_num`` [E] the per-expert totals in the counts' dtype (``expert_token_num_type=1``,
      count mode).

    The doc supports only ``expert_token_num_type=1`` and ``idx_type=0``; other values and the
    ``tokens_dtype`` hint (hifloat8) are refused.
    """
    require_choice("expert_token_num_type", call.expert_token_num_type, (1,),
                   "1 count mode (the only one the doc supports)")
    require_choice("idx_type", call.idx_type, (0,), "0 gather index (the only one the doc supports)")
    require_choice("tokens_dtype", call.tokens_dtype, (None,), "native token dtypes only")


# ---------------------------------------------------------------------------------------------
# _npu_group_topk (ATB GroupTopkOperation)
# ---------------------------------------------------------------------------------------------


MAX_GROUP_TOPK_EXPERTS = 1024  # ATB: 1 <= expert_num <= 1024 (its index input has 1024 entries)


def _group_topk_meta(call: Arguments) -> Out:
    scores = call.input
    require_dtype("input", scores, (torch.float16, torch.bfloat16))
    if scores.dim() != 2:
        raise OpArgumentError(f"input has shape {list(scores.shape)}; expected [tokens, experts]", argument="input")
    experts, groups = scores.shape[1], call.group_num
    if experts > MAX_GROUP_TOPK_EXPERTS or experts % groups != 0:
        raise OpArgumentError(
            f"input has {experts} experts; ATB requires at most "
            f"{MAX_GROUP_TOPK_EXPERTS}, divisible by group_num={groups}",
            argument="input"
        )
    if call.n > experts // groups:
        raise OpArgumentError(f"n={call.n}; ATB requires n <= experts / group_num = {experts // groups}", argument="n")
    return Out(list(scores.shape), scores.dtype)


def _group_topk_kernel(call: Arguments) -> torch.Tensor:
    scores, groups = call.input, call.group_num
    grouped = scores.to(torch.float32).reshape(scores.shape[0], groups, -1)
    if call.n > 1:
        group_score = grouped.topk(call.n, dim=-1).values.sum(dim=-1)
    else:
        group_score = grouped.amax(dim=-1)
    order = group_score.argsort(dim=-1, descending=True, stable=True)
    keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, order[:, : call.k], True)
    return scores.reshape(grouped.shape).masked_fill(~keep[:, :, None], 0).reshape(scores.shape)


def _group_topk_samples() -> list[SampleCall]:
    """Three tokens' scores over 16 experts in 4 groups, the best 2 groups kept."""
    return [SampleCall((torch.rand(3, 16, generator=torch.Generator().manual_seed(0)).half(),), {"k": 2, "group_num": 4})]


@npu_op(meta=_group_topk_meta, kernel=_group_topk_kernel, writes_back={"input": 0}, samples=_group_topk_samples)
def _npu_group_topk(call: Arguments) -> None:
    """Zero every expert outside the ``k`` best of ``group_num`` equal expert groups, per token, in place.

    Source: op-plugin ``op_plugin/ops/atb/GroupTopkAtb.cpp`` (``groupMultiFlag`` SUM_MULTI_MAX when
    ``n > 1``) and the ATB GroupTopkOperation reference (CANN ascendtb API, GroupTopkOperation): ``self``
    [tokens, experts] float16 or bfloat16; a group's score is its largest value, or with ``n > 1`` the sum
    of its ``n`` largest; the ``k`` highest-scoring groups keep their values and the others become 0.
    Constraints: 1 <= experts <= 1024, experts divisible by ``group_num``, ``group_num >= k >= 1``,
    ``1 <= n <= experts / group_num``. Groups of equal score: the lower group index wins (the ATB page does
    not say; a stable descending sort). Returns None, as torch_npu's op does.
    """
    if not 1 <= call.k <= call.group_num or call.n < 1:
        raise OpArgumentError(
            f"k={call.k}, group_num={call.group_num}, n={call.n}; ATB requires 1 <= k <= group_num and n >= 1",
            argument="k"
        )
