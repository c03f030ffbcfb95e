"""Mixture-of-experts ops: expert gating (``npu_moe_gating_top_k``) and grouped (per-expert) matmuls.

Token routing around the experts is in :mod:`.moe_routing`, expert-parallel communication in
:mod:`.moe_distribute`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_addmm, cube_matmul, int_matmul, wrap_to_int32
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    kernel_checks_apply,
    require_choice,
    require_dtype,
    require_shape,
    require_tensor,
    require_tensor_list,
    require_unused,
    type_check,
)
from .fixedorder import pairwise_sum, round_to_int8, sigmoid, softmax, top_indices
from .quant import A8W4_ACTIVATION_SHIFT as A8W4_SHIFT, INT4_PER_INT32, antiquant_weight, unpack_int4
from .quant_param import decode_quant_param
from .registry import Arguments, Derivative, Out, SampleCall, npu_op


def _check_gating_groups(experts: int, k: int, k_group: int, group_count: int, group_select_mode: int) -> None:
    """Group arguments: group_count divides the experts, 1 <= k_group <= group_count, k fits the kept groups."""
    if group_count < 1 or experts % group_count != 0:
        raise OpArgumentError(
            f"group_count={group_count} must be >= 1 and divide the expert count {experts}", argument="group_count"
        )
    if not 1 <= k_group <= group_count:
        raise OpArgumentError(f"k_group={k_group} must be between 1 and group_count={group_count}", argument="k_group")
    per_group = experts // group_count
    if not 1 <= k <= per_group * k_group:
        raise OpArgumentError(
            f"k={k} must be between 1 and experts / group_count * k_group = {per_group * k_group} "
            "(the experts left after group selection)", argument="k"
        )
    if group_count > 1 and group_select_mode == 1 and per_group < 2:
        raise OpArgumentError(
            "group_select_mode=1 scores a group by its two best experts; each group needs >= 2 experts",
            argument="group_select_mode"
        )


def _moe_gating_top_k_meta(call: Arguments) -> tuple[Out, Out, Out]:
    """Validate the npu_moe_gating_top_k tensors: y [T, k] in x's dtype, expert_idx int32 [T, k], out float32 [T, E]."""
    x, k, bias = call.x, call.k, call.bias
    require_dtype("x", x, FLOAT_DTYPES)
    if x.dim() != 2:
        raise OpArgumentError(f"x has shape {list(x.shape)}; expected 2-D [tokens, experts]", argument="x")
    tokens, experts = x.shape
    if bias is not None:
        require_dtype("bias", bias, (x.dtype,), "(bias must have x's dtype)")
        require_shape("bias", bias, ((experts,),))
    _check_gating_groups(experts, k, call.k_group, call.group_count, call.group_select_mode)
    return Out([tokens, k], x.dtype), Out([tokens, k], torch.int32), Out([tokens, experts], torch.float32)


def _keep_best_groups(values: torch.Tensor, k_group: int, group_count: int, group_select_mode: int) -> torch.Tensor:
    """Set the experts of all but the ``k_group`` best-scoring groups to -inf."""
    tokens, experts = values.shape
    grouped = values.reshape(tokens, group_count, experts // group_count)
    if group_select_mode == 0:
        score = grouped.amax(dim=-1)
    else:
        best_two = torch.sort(grouped, dim=-1, descending=True, stable=True).values
        score = best_two[..., 0] + best_two[..., 1]
    keep = torch.zeros(tokens, group_count, dtype=torch.bool)
    keep.scatter_(1, top_indices(score, k_group), True)
    return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).reshape(tokens, experts)


def _moe_gating_top_k_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    values = call.x.to(torch.float32)
    norm_out = softmax(values) if call.norm_type == 0 else sigmoid(values)
    select = norm_out if call.bias is None else norm_out + call.bias.to(torch.float32)
    if call.group_count > 1:
        select = _keep_best_groups(select, call.k_group, call.group_count, call.group_select_mode)
    expert_idx = top_indices(select, call.k)
    weights = norm_out.gather(1, expert_idx)
    if call.norm_type == 1 or call.renorm == 1:
        weights = weights / (pairwise_sum(weights, dim=-1, keepdim=True) + call.eps)
    y = weights * call.routed_scaling_factor
    out = norm_out if call.out_flag else torch.zeros_like(norm_out)
    return y.to(call.x.dtype), expert_idx.to(torch.int32), out



def _moe_gating_top_k_samples() -> list[SampleCall]:
    """DeepSeek's grouped sigmoid routing with a bias, and plain sigmoid top-k, both with the scores output
    the backward reads (the op is differentiable in sigmoid mode only)."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(6, 32, generator=gen) * 2).bfloat16()
    bias = (torch.randn(32, generator=gen) * 0.5).bfloat16()
    return [
        SampleCall((logits, 4), {"bias": bias, "k_group": 2, "group_count": 4, "group_select_mode": 1,
                                 "norm_type": 1, "out_flag": True, "routed_scaling_factor": 2.5}),
        SampleCall((logits.float(), 2), {"norm_type": 1, "out_flag": True}),
    ]


def _moe_gating_top_k_backward_meta(call: Arguments) -> Out:
    """x's gradient: x_norm's shape [M, N] in grad_y's dtype (the API page)."""
    x_norm, grad_y, expert_idx = call.x_norm, call.grad_y, call.expertIdx
    require_dtype("x_norm", x_norm, (torch.float32,))
    require_dtype("grad_y", grad_y, FLOAT_DTYPES)
    require_dtype("expertIdx", expert_idx, (torch.int32,))
    if x_norm.dim() != 2 or grad_y.dim() != 2 or grad_y.shape[0] != x_norm.shape[0]:
        raise OpArgumentError(
            f"x_norm {list(x_norm.shape)} and grad_y {list(grad_y.shape)} must be [M, N] and [M, K]", argument="x_norm"
        )
    require_shape("expertIdx", expert_idx, (tuple(grad_y.shape),))
    return Out(list(x_norm.shape), grad_y.dtype)


def _moe_gating_top_k_backward_kernel(call: Arguments) -> torch.Tensor:
    """Sigmoid mode: with ``s`` the selected scores, ``S = sum(s) + eps`` and ``f`` the scaling factor, the
    forward's ``y_k = f s_k / S`` gives ``ds_j = f (g_j / S - sum_k g_k s_k / S**2)`` and, through the
    sigmoid, ``dx_j = ds_j s_j (1 - s_j)`` on the selected experts, 0 elsewhere (the bias only selects).
    float32, rounded once to grad_y's dtype."""
    scores, idx = call.x_norm, call.expertIdx.to(torch.int64)
    selected = scores.gather(1, idx)
    grads = call.grad_y.to(torch.float32)
    total = pairwise_sum(selected, dim=-1, keepdim=True) + call.eps
    weighted = pairwise_sum(grads * selected, dim=-1, keepdim=True)
    d_selected = call.routed_scaling_factor * (grads / total - weighted / (total * total))
    dx = torch.zeros_like(scores).scatter(1, idx, d_selected * selected * (1.0 - selected))
    return dx.to(call.grad_y.dtype)


def _moe_gating_top_k_backward_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(1)
    calls = []
    for sample in _moe_gating_top_k_samples():
        y, idx, x_norm = torch.ops.npu.npu_moe_gating_top_k(*sample.args, **sample.kwargs)
        kwargs = {name: sample.kwargs[name] for name in ("routed_scaling_factor",) if name in sample.kwargs}
        calls.append(SampleCall((x_norm, torch.randn(y.shape, generator=gen).to(y.dtype), idx),
                                {"norm_type": 1, **kwargs}))
    return calls


@npu_op(meta=_moe_gating_top_k_backward_meta, kernel=_moe_gating_top_k_backward_kernel,
        samples=_moe_gating_top_k_backward_samples)
def npu_moe_gating_top_k_backward(call: Arguments) -> None:
    """The gradient of :func:`npu_moe_gating_top_k`'s ``x`` from ``y``'s gradient ``grad_y``, the forward's
    normalised scores ``x_norm`` (its third output, so the forward needs ``out_flag=True``) and expert
    indices ``expertIdx``.

    Sources: op-plugin derivatives.yaml (``npu_moe_gating_top_k -> npu_moe_gating_top_k_backward(result2, grad,
    result1, renorm, norm_type, routed_scaling_factor, eps)``) and its API page (sigmoid mode only, renorm
    reserved) with test_npu_moe_gating_top_k_backward.py (the top-k weights renormalised by their sum).
    """
    if call.norm_type != 1:
        raise OpArgumentError(
            f"norm_type={call.norm_type} has no backward in torch_npu: only 1 (sigmoid) is supported",
            argument="norm_type",
        )
    if call.renorm != 0:
        raise OpArgumentError(
            f"renorm={call.renorm} is reserved; torch_npu's backward supports only 0", argument="renorm"
        )


def _moe_gating_top_k_setup(ctx: object, call: Arguments, output: tuple) -> None:
    _, expert_idx, x_norm = output
    ctx.save_for_backward(x_norm, expert_idx)
    ctx.call = call


def _moe_gating_top_k_grad(ctx: object, grad_y: torch.Tensor, *_unused: torch.Tensor) -> tuple:
    """op-plugin's formula: only y's gradient flows back, to x (expert_idx and the scores are intermediates,
    the keyword-only bias only selects). The scores are the third output, so train with ``out_flag=True``."""
    x_norm, expert_idx = ctx.saved_tensors
    call = ctx.call
    dx = torch.ops.npu.npu_moe_gating_top_k_backward(
        x_norm, grad_y, expert_idx, renorm=call.renorm, norm_type=call.norm_type,
        routed_scaling_factor=call.routed_scaling_factor, eps=call.eps,
    )
    return dx, None


@npu_op(
    meta=_moe_gating_top_k_meta,
    kernel=_moe_gating_top_k_kernel,
    derivative=Derivative(_moe_gating_top_k_setup, _moe_gating_top_k_grad),
    samples=_moe_gating_top_k_samples,
)
def npu_moe_gating_top_k(call: Arguments) -> None:
    """MoE routing: score experts, keep the best groups, pick the top ``k``: returns ``(y, expert_idx, out)``.

    Sources: torch_npu.npu_moe_gating_top_k (API reference 7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_002365.html),
    aclnnMoeGatingTopK (CANN 8.3/8.5 and the newer ops-transformer doc, which spells the steps
    out), op-plugin's MoeGatingTopKKernelNpuOpApi.cpp and its meta function (output shapes).
    The schema default ``norm_type=0`` is op-plugin's and GE's; the 7.0 API page prints 1.

    ``x`` is ``[T, E]`` (float16, bfloat16, float32); all math is float32.

    1. ``norm = softmax(x)`` over experts for ``norm_type=0``, ``sigmoid(x)`` for 1.
    2. Selection scores: ``norm + bias`` (bias ``[E]`` in x's dtype), else ``norm``.
    3. If ``group_count > 1``: the E experts form ``group_count`` equal groups.  A group's score
       is its best expert (``group_select_mode=0``) or its two best summed (1).  Only the
       ``k_group`` best groups stay; the others are set to -inf.
    4. ``expert_idx`` (int32 ``[T, k]``): the k best selection scores, best first.
    5. Weights are taken from ``norm`` (without bias) at those experts.  They are divided by
       ``(their sum + eps)`` for sigmoid scoring, and for softmax only when ``renorm=1``.  Then
       they are multiplied by ``routed_scaling_factor`` and cast to x's dtype to give ``y``.
       This is DeepSeek-V3's routing (sigmoid, correction bias, group-limited, normalised
       top-k).  The newest aclnn page writes the divisor as a sum over all of ``norm``.  Its
       older pages, the 7.0 page and DeepSeek all divide by the sum of the k chosen weights,
       which is what is done here.
    6. ``out`` (float32 ``[T, E]``) is ``norm`` when ``out_flag`` is True.  Otherwise it is
       zeros; the device leaves it unspecified.

    Ties are broken towards the lower group/expert index (stable sorts), so the result is a
    function of the inputs alone.  Not implemented, rejected with ValueError: ``norm_type=2``
    (sqrt-softplus, Ascend 950 only) and the hash-routing inputs of newer releases.  The
    device limits of A2/A3 (E = 256, k_group = 4, k <= 32) are not imposed, so small test
    shapes work.
    """
    require_choice("norm_type", call.norm_type, (0, 1), "0 softmax, 1 sigmoid")
    require_choice("group_select_mode", call.group_select_mode, (0, 1), "0 group max, 1 sum of the group's top two")
    require_choice("renorm", call.renorm, (0, 1), "1 renormalises softmax weights after top-k")


# ---------------------------------------------------------------------------------------------
# npu_grouped_matmul


GROUP_PAIRS = 2  # group_list_type: [E, 2] (group index, group size) rows
SPLIT_OUTPUT_ITEMS = (2, 3)  # split_item values whose output is one tensor (rows of all groups)
GMM_BIAS_DTYPES = {torch.float16: torch.float16, torch.bfloat16: torch.float32, torch.float32: torch.float32}
QUANT_BIAS_DTYPES = (torch.int32, torch.bfloat16, torch.float16, torch.float32)
QUANT_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.int64)
QUANT_OUTPUT_DTYPES = (torch.int8, torch.int32, torch.bfloat16, torch.float16, torch.float32)
GMM_X_DTYPES = (*FLOAT_DTYPES, torch.int8)


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and len(value) == 0)


def _gmm_weights(weight: object, dtypes: Sequence[torch.dtype], why: str) -> list[torch.Tensor]:
    """One [K, N] matrix per group, from a list of 2-D tensors or a single [E, K, N] tensor."""
    tensors = require_tensor_list("weight", weight)
    if len(tensors) == 1 and tensors[0].dim() == 3:
        tensors = list(tensors[0].unbind(0))
    for i, w in enumerate(tensors):
        require_dtype(f"weight[{i}]", w, dtypes, why)
        if w.dim() != 2:
            raise OpArgumentError(
                f"weight[{i}] has shape {list(w.shape)}; expected [K, N] (or one [E, K, N] tensor)", argument="weight"
            )
    return tensors


def _group_tensors(name: str, value: object, groups: int) -> list[torch.Tensor]:
    """One tensor per group: a list, or a single tensor whose first dim is the group."""
    tensors = require_tensor_list(name, value)
    if len(tensors) == 1 and (groups > 1 or tensors[0].dim() == 3):
        tensors = list(tensors[0].unbind(0))
    if len(tensors) != groups:
        raise OpArgumentError(
            f"{name} has {len(tensors)} tensors for {groups} weight groups; give one per group", argument=name
        )
    return tensors


def _antiquant_weights(weight: object, antiquant_scale: object, antiquant_offset: object,
                       dtype: torch.dtype) -> list[torch.Tensor]:
    """Weight-only quantisation (the doc's formula 4): each int8 [K, N] or int4 (eight per int32, [K, N / 8])
    weight becomes ``(w + antiquant_offset) * antiquant_scale`` in x's dtype; scales per channel [N] or,
    for int4, per group [G, N] over K / G consecutive rows (:func:`.quant.antiquant_weight`)."""
    if dtype not in HALF_DTYPES:
        raise OpArgumentError(
            "antiquant_scale (weight-only quantisation) needs float16 or bfloat16 x", argument="antiquant_scale"
        )
    raw = _gmm_weights(weight, (torch.int8, torch.int32), "(weight-only quantisation: int8, or int4 packed in int32)")
    scales = _group_tensors("antiquant_scale", antiquant_scale, len(raw))
    offsets = None if _empty(antiquant_offset) else _group_tensors("antiquant_offset", antiquant_offset, len(raw))
    weights = []
    for g, w in enumerate(raw):
        levels = unpack_int4(w) if w.dtype == torch.int32 else w
        k, n = levels.shape
        groups = scales[g].shape[0] if w.dtype == torch.int32 and scales[g].dim() == 2 else 1
        shapes = ((n,), (1, n)) if groups == 1 or k % groups else ((groups, n),)
        for name, params in (("antiquant_scale", scales), ("antiquant_offset", offsets)):
            if params is not None:
                require_dtype(f"{name}[{g}]", params[g], (dtype,), "(x's dtype)")
                require_shape(f"{name}[{g}]", params[g], shapes)
        offset = None if offsets is None else offsets[g]
        weights.append(antiquant_weight(levels, scales[g], offset, k // groups if groups > 1 else 0, dtype))
    return weights


def _per_group(name: str, value: object, weights: Sequence[torch.Tensor],
               dtypes: Sequence[torch.dtype]) -> Optional[list[torch.Tensor]]:
    """One [N] vector per group (a list, or one [E, N] tensor) for bias and scale; None when absent."""
    if _empty(value):
        return None
    tensors = require_tensor_list(name, value)
    if len(tensors) == 1 and tensors[0].dim() == 2 and tensors[0].shape[0] == len(weights):
        tensors = list(tensors[0].unbind(0))
    if len(tensors) != len(weights):
        raise OpArgumentError(
            f"{name} has {len(tensors)} tensors for {len(weights)} weight groups; give one [N] per group", argument=name
        )
    for i, (t, w) in enumerate(zip(tensors, weights, strict=True)):
        require_dtype(f"{name}[{i}]", t, dtypes)
        require_shape(f"{name}[{i}]", t, ((w.shape[1],),))
    return tensors


def _per_token(value: object, xs: Sequence[torch.Tensor]) -> Optional[list[torch.Tensor]]:
    """per_token_scale: one float32 [M_i] per x."""
    if _empty(value):
        return None
    tensors = require_tensor_list("per_token_scale", value)
    if len(tensors) != len(xs):
        raise OpArgumentError(
            f"per_token_scale has {len(tensors)} tensors for {len(xs)} x; give one [M] per x",
            argument="per_token_scale",
        )
    for i, (t, xi) in enumerate(zip(tensors, xs, strict=True)):
        require_dtype(f"per_token_scale[{i}]", t, (torch.float32,))
        require_shape(f"per_token_scale[{i}]", t, ((xi.shape[0],), (xi.shape[0], 1)))
    return tensors


@dataclass(frozen=True)
class _GmmParams:
    """The per-group operands of one call after validation."""

    weights: list[torch.Tensor]
    biases: Optional[list[torch.Tensor]]
    scales: Optional[list[torch.Tensor]]
    per_token: Optional[list[torch.Tensor]]
    out_dtype: torch.dtype
    a8w4: bool = False  # int8 x by int4 weights: ``weights`` unpacked to int8 levels, ``scales`` float32 [G, N]


def _gmm_output_dtype(x_dtype: torch.dtype, output_dtype: Optional[torch.dtype], has_scale: bool) -> torch.dtype:
    """Float x: x's dtype. int8 x: output_dtype (None means int8); the others need a scale (the doc's
    data-type table). int32 is the raw accumulator, with or without a scale: op-plugin's
    test_fake_tensor.py (test_npu_grouped_matmul_meta_9) passes an int64 scale with output_dtype=int32,
    and the int32 golden of its test_npu_quant_matmul.py applies no scale to the accumulator, so a given
    scale is checked (dtype, shape) and not applied."""
    if x_dtype != torch.int8:
        if output_dtype is not None and output_dtype != x_dtype:
            raise OpArgumentError(
                f"output_dtype={output_dtype} is only for int8 x; use None (x's dtype {x_dtype})",
                argument="output_dtype",
            )
        return x_dtype
    out = torch.int8 if output_dtype is None else output_dtype
    require_choice("output_dtype", out, QUANT_OUTPUT_DTYPES, "int8 x: int8, int32 (raw accumulator), bf16, fp16, fp32")
    if out != torch.int32 and not has_scale:
        raise OpArgumentError(f"int8 x: output_dtype={out} needs scale (one [N] per group, or one [E, N]); only "
                              "output_dtype=torch.int32, the raw int32 accumulator, does without", argument="scale")
    return out


A8W4_OUTPUT_DTYPES = (torch.float16, torch.bfloat16)


def _a8w4_params(xs: Sequence[torch.Tensor], weight: object, bias: object, scale: object, per_token_scale: object,
                 output_dtype: Optional[torch.dtype]) -> _GmmParams:
    """A8W4 (int8 x, int4 weights as int32 words of eight along N, [K, N / 8] per group or one [E, K, N / 8]):
    an int64 scale per group [G, N] (the float32 in each low word, G k-groups; one [E, G, N] tensor), an
    optional float32 bias [N] per group, a float32 per_token_scale, a float16 or bfloat16 output, as
    op-plugin's test_npu_grouped_matmul_A8W4 and vLLM-Ascend's / sglang's W4A8 MoE pass them."""
    packed = _gmm_weights(weight, (torch.int32,), "(A8W4: int8 x by int4 weights packed eight per int32 word)")
    weights = [unpack_int4(w) for w in packed]
    if _empty(scale):
        raise OpArgumentError("A8W4 (int8 x, int4 weights) needs scale: int64 [G, N] per group (the float32 in "
                              "each low word) or one [E, G, N]", argument="scale")
    scales = _group_tensors("scale", scale, len(weights))
    for g, (w, group_scale) in enumerate(zip(weights, scales)):
        require_dtype(f"scale[{g}]", group_scale, (torch.int64,), "(A8W4: the float32 in each int64's low word)")
        if group_scale.dim() != 2 or group_scale.shape[1] != w.shape[1] or w.shape[0] % max(group_scale.shape[0], 1):
            raise OpArgumentError(f"scale[{g}] has shape {list(group_scale.shape)}; A8W4 takes [G, {w.shape[1]}] "
                                  f"with G k-groups dividing K={w.shape[0]}", argument=f"scale[{g}]")
    out = torch.float16 if output_dtype is None else output_dtype
    require_choice("output_dtype", out, A8W4_OUTPUT_DTYPES, "A8W4 outputs float16 or bfloat16")
    return _GmmParams(weights, _per_group("bias", bias, weights, (torch.float32,)),
                      [_low_word_scale(group_scale) for group_scale in scales], _per_token(per_token_scale, xs), out,
                      a8w4=True)


def _gmm_params(xs: Sequence[torch.Tensor], weight: object, bias: object, scale: object, per_token_scale: object,
                output_dtype: Optional[torch.dtype], antiquant_scale: object = None,
                antiquant_offset: object = None) -> _GmmParams:
    dtype = xs[0].dtype
    if dtype == torch.int8 and _empty(antiquant_scale) and any(
            w.dtype == torch.int32 for w in require_tensor_list("weight", weight)):
        return _a8w4_params(xs, weight, bias, scale, per_token_scale, output_dtype)
    if _empty(antiquant_scale):
        if not _empty(antiquant_offset):
            raise OpArgumentError(
                "antiquant_offset needs antiquant_scale (weight-only quantisation)", argument="antiquant_offset"
            )
        weights = _gmm_weights(weight, (dtype,), "(the weights must have x's dtype; int8 x needs int8 weights)")
    else:
        weights = _antiquant_weights(weight, antiquant_scale, antiquant_offset, dtype)
    quantised = dtype == torch.int8
    biases = _per_group("bias", bias, weights, QUANT_BIAS_DTYPES if quantised else (GMM_BIAS_DTYPES[dtype],))
    if not quantised and not (_empty(scale) and _empty(per_token_scale)):
        raise OpArgumentError(
            "scale and per_token_scale dequantise int8 products; float x takes neither", argument="scale"
        )
    scales = _per_group("scale", scale, weights, QUANT_SCALE_DTYPES) if quantised else None
    per_token = _per_token(per_token_scale, xs) if quantised else None
    out_dtype = _gmm_output_dtype(dtype, output_dtype, scales is not None)
    if out_dtype == torch.int32 and (per_token is not None or (biases and biases[0].dtype != torch.int32)):
        raise OpArgumentError(
            "output_dtype=torch.int32 takes no per_token_scale and only an int32 bias", argument="output_dtype"
        )
    return _GmmParams(weights, biases, scales, per_token, out_dtype)


GROUP_ROWS, GROUP_K = 0, 2  # group_type: 0 groups x's rows (M), 2 groups the K axis (weight gradients)
GROUP_TYPES = (-1, GROUP_ROWS, GROUP_K)  # -1: one x per weight, no group_list


@dataclass(frozen=True)
class _GmmModes:
    """How one call groups its matmuls, torch_npu's defaults filled in."""

    split: int  # split_item: 0/1 one output per group, 2/3 one output
    group_type: int  # GROUP_TYPES; a Python group_list groups rows
    list_type: int  # group_list_type: 0 cumulative ends, 1 counts, 2 [E, 2] (group, count) pairs
    listed: bool  # group_list is a Python list of cumulative row ends (the ``.List`` overload)


def _check_gmm_modes(call: Arguments) -> _GmmModes:
    """The modes of a call, refused where the API page does not allow them.

    A Python ``group_list`` (op-plugin's ``npu_grouped_matmul.List``) holds cumulative row ends and takes
    group_type and group_list_type only at their defaults (None; 0 is taken as the same row split, and
    group_list_type's schema default is 0; on fake tensors split_item 2/3 take any group_list_type, as
    op-plugin's meta function does); a tensor group_list needs group_type -1, 0 or 2 (torch_npu
    refuses None there too)."""
    split = 0 if call.split_item is None else call.split_item
    require_choice("split_item", split, (0, 1, 2, 3), "0/1 one output per group, 2/3 one output")
    activation = 0 if call.act_type is None else call.act_type
    require_choice("act_type", activation, (0,), "fused activations are not implemented")
    list_type = 0 if call.group_list_type is None else call.group_list_type
    listed = isinstance(call.group_list, (list, tuple))
    if call.group_type is None and not listed:
        raise OpArgumentError(
            "group_type is required (torch_npu refuses None too): pass 0 to split x by rows with "
            "group_list, 2 to split K (weight gradients), or -1 for one x per weight", argument="group_type"
        )
    if call.group_type not in (None, *GROUP_TYPES):
        # op-plugin's meta function's check, in its words
        raise OpArgumentError(f"group_type only supports -1, 0 and 2, but got {call.group_type}", argument="group_type")
    if listed:
        require_choice("group_type", call.group_type, (None, -1, GROUP_ROWS),
                       "a Python group_list splits x's rows: op-plugin's List kernel reads no group_type")
        # split_item 2/3 give one [M, N] however the list reads, which op-plugin's meta function gives
        if kernel_checks_apply(call.x[0]) or split not in SPLIT_OUTPUT_ITEMS:
            require_choice("group_list_type", list_type, (0,), "a Python group_list holds cumulative row ends")
        return _GmmModes(split, GROUP_ROWS, 0, True)
    require_choice("group_list_type", list_type, (0, 1, GROUP_PAIRS), "0 cumulative ends, 1 counts, 2 [E, 2] pairs")
    return _GmmModes(split, call.group_type, list_type, False)


def _same_width(weights: Sequence[torch.Tensor]) -> int:
    if any(w.shape[1] != weights[0].shape[1] for w in weights[1:]):  # no set: a traced N is an unhashable SymInt
        raise OpArgumentError(
            f"all weights must have the same N for a single output, got N values {[w.shape[1] for w in weights]}"
        )
    return weights[0].shape[1]


def _listed_counts(ends: Sequence[int], rows: Sequence[int]) -> list[int]:
    """The row counts of a Python group_list of cumulative row ends: non-negative, non-decreasing, not of
    length 1 (the API page); ``rows`` are the row counts it must reproduce (one x: its total)."""
    values = [int(end) for end in ends]
    counts = [end - start for start, end in zip([0, *values[:-1]], values)]
    if len(values) == 1 or any(count < 0 for count in counts):
        raise OpArgumentError(
            f"group_list {values} must be cumulative row ends: non-negative, non-decreasing, more than one value",
            argument="group_list"
        )
    if len(rows) == 1 and values[-1] != rows[0] or len(rows) > 1 and counts != list(rows):
        raise OpArgumentError(
            f"group_list {values} must end at x's rows ({list(rows)}), one group per x or weight", argument="group_list"
        )
    return counts


def _gmm_row_shapes(x: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], call: Arguments,
                    modes: _GmmModes) -> list[list[int]]:
    """group_type 0 with a group_list: one 2-D x split by it (one weight per group), or one x per weight
    whose rows it restates. With one x, split_item 2/3 give one [M, N] output and 0/1 one per group, whose
    rows a traced graph knows only at run time for a tensor group_list (:func:`_tensor_group_rows`) and
    from its values for a Python list."""
    if any(xi.dim() != 2 for xi in x):
        raise OpArgumentError("group_list needs 2-D [M, K] x", argument="group_list")
    if len(x) > 1:
        if modes.listed:
            _listed_counts(call.group_list, [xi.shape[0] for xi in x])
        return _gmm_multi_x_shapes(x, weights, modes.split)
    if len(x) != 1:
        raise OpArgumentError(
            "group_list needs x to be a list of one 2-D [M, K] tensor, or one per weight", argument="group_list"
        )
    if modes.listed:
        counts = _listed_counts(call.group_list, [x[0].shape[0]])
        if len(counts) != len(weights):
            raise OpArgumentError(
                f"group_list has {len(counts)} groups for {len(weights)} weights", argument="group_list"
            )
        if modes.split not in SPLIT_OUTPUT_ITEMS:
            return [[count, w.shape[1]] for count, w in zip(counts, weights)]
        return [[x[0].shape[0], _same_width(weights)]]
    _require_group_list_tensor(call.group_list, len(weights), modes.list_type, x[0].dtype)
    if modes.split not in SPLIT_OUTPUT_ITEMS:
        return [[rows, w.shape[1]] for rows, w in zip(_tensor_group_rows(call.group_list, modes, x[0]), weights)]
    return [[x[0].shape[0], _same_width(weights)]]


def _tensor_group_rows(group_list: torch.Tensor, modes: _GmmModes, x: torch.Tensor) -> list[object]:
    """The row count of each per-group output of split_item 0/1 with a tensor group_list: op-plugin's kernel
    reads the tensor's values as cumulative row ends (whatever group_list_type says, so only 0 is taken).
    Those are values, so a fake kernel gives each a size of its own, unknown until run (unbacked), and the
    CPU kernel the values."""
    if modes.list_type != 0:
        raise OpArgumentError(
            f"split_item={modes.split} with a tensor group_list reads it as cumulative row ends (op-plugin's "
            f"kernel); pass group_list_type=0, not {modes.list_type}, or split_item 2/3", argument="split_item"
        )
    ctx = torch.library.get_ctx()
    if ctx is not None:  # tracing: the values are unknown
        return [ctx.new_dynamic_size() for _ in range(group_list.shape[0])]
    return [count for _, count in _group_row_counts(group_list, 0, x.shape[0])]


def _require_group_list_tensor(group_list: torch.Tensor, groups: int, list_type: int, dtype: torch.dtype) -> None:
    require_dtype("group_list", group_list, (torch.int64,))
    if list_type == GROUP_PAIRS:
        if dtype != torch.int8:
            raise OpArgumentError(
                "group_list_type=2 ([E, 2] (group, size) pairs) is for int8 x only (the API page)",
                argument="group_list_type",
            )
        require_shape("group_list", group_list, ((groups, 2),))
    else:
        require_shape("group_list", group_list, ((groups,),))


def _gmm_k_split_layout(
    call: Arguments, xs: Sequence[torch.Tensor], modes: _GmmModes
) -> tuple[list[list[int]], _GmmParams]:
    """group_type 2, the weight-gradient form ``dW_g = X_g^T @ dY_g``: x is one [M, K] (usually a transposed
    [K, M] activation) whose K columns group_list splits; group g gives ``x[:, K_g] @ w[K_g]``. split_item
    2/3 take one [K, N] weight whose rows group_list splits the same way and stack the products into
    [E, M, N]; 0/1 take one [K_g, N_g] weight per group and return each [M, N_g] (op-plugin's
    GroupedMatmulKernelNpuOpApi.cpp). The API page allows no quantisation with it, and no bias is defined
    for it."""
    if len(xs) != 1 or xs[0].dim() != 2:
        raise OpArgumentError(
            "group_type=2 (split K) needs x to be a list of one 2-D [M, K] tensor", argument="group_type"
        )
    x = xs[0]
    require_dtype("x[0]", x, FLOAT_DTYPES, "(group_type=2 takes no quantised operands: the API page)")
    require_unused("npu_grouped_matmul with group_type=2 (split K)", bias=call.bias, scale=call.scale,
                   per_token_scale=call.per_token_scale, antiquant_scale=call.antiquant_scale,
                   antiquant_offset=call.antiquant_offset)
    if call.group_list is None:
        raise OpArgumentError(
            "group_type=2 (split K) needs group_list, the K boundaries of each group", argument="group_type"
        )
    weights = require_tensor_list("weight", call.weight)
    for i, w in enumerate(weights):
        require_dtype(f"weight[{i}]", w, (x.dtype,), "(x's dtype)")
        if w.dim() != 2:
            raise OpArgumentError(
                f"weight[{i}] has shape {list(w.shape)}; group_type=2 needs [K, N] weights", argument="weight"
            )
    groups = call.group_list.shape[0] if call.group_list.dim() else 0
    _require_group_list_tensor(call.group_list, groups, modes.list_type, x.dtype)
    out_dtype = _gmm_output_dtype(x.dtype, call.output_dtype, False)
    if modes.split in SPLIT_OUTPUT_ITEMS:
        # op-plugin's meta function gives [E, M, N] from x and weight[0] alone; its kernel checks the rest
        if kernel_checks_apply(x) and (len(weights) != 1 or weights[0].shape[0] != x.shape[1]):
            raise OpArgumentError(
                f"group_type=2 with split_item {modes.split} takes one [K={x.shape[1]}, N] weight whose rows "
                f"group_list splits (op-plugin's kernel); got {[list(w.shape) for w in weights]}", argument="group_type"
            )
        shapes = [[groups, x.shape[0], weights[0].shape[1]]]
    elif len(weights) != groups:
        raise OpArgumentError(
            f"group_type=2 with split_item {modes.split} takes one [K_g, N_g] weight per group: got "
            f"{len(weights)} weights for {groups} groups (or use split_item 2/3 with one [K, N] weight)",
            argument="group_type"
        )
    else:
        shapes = [[x.shape[0], w.shape[1]] for w in weights]
    return shapes, _GmmParams(list(weights), None, None, None, out_dtype)


def _gmm_multi_x_shapes(x: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], split: int) -> list[list[int]]:
    """One x per weight: per-group outputs (split_item 0/1) or their rows concatenated (2/3)."""
    if len(x) != len(weights):
        raise OpArgumentError(
            f"without group_list, x needs one tensor per weight: got {len(x)} x and {len(weights)} weights"
        )
    shapes = [[*xi.shape[:-1], w.shape[1]] for xi, w in zip(x, weights, strict=True)]
    if split not in SPLIT_OUTPUT_ITEMS:
        return shapes
    if any(xi.dim() != 2 for xi in x) or len({s[-1] for s in shapes}) != 1:
        raise OpArgumentError(
            "split_item 2/3 concatenates rows: every x must be 2-D and every weight must have the same N",
            argument="split_item"
        )
    return [[sum(s[0] for s in shapes), shapes[0][1]]]


def _grouped_matmul_layout(call: Arguments) -> tuple[list[list[int]], _GmmParams, _GmmModes]:
    """Validate the npu_grouped_matmul tensors from metadata; return (output shapes, operands, modes).

    The wrapper has already refused the unmodeled inputs (offset, activation, the dtype hints);
    ``tuning_config`` does not change values.
    """
    modes = _check_gmm_modes(call)
    xs = list(call.x)
    dtype = xs[0].dtype
    for i, xi in enumerate(xs):
        require_dtype(f"x[{i}]", xi, GMM_X_DTYPES, "(int4 x is not implemented)")
        if xi.dtype != dtype or xi.dim() < 2:
            raise OpArgumentError(
                f"x[{i}] is {xi.dtype} {list(xi.shape)}; every x must be >= 2-D with x[0]'s dtype", argument="x"
            )
    if modes.group_type == GROUP_K:
        return (*_gmm_k_split_layout(call, xs, modes), modes)
    if modes.listed and not _empty(call.per_token_scale):
        raise OpArgumentError(
            "per_token_scale must be None with a Python group_list (the API page)", argument="per_token_scale"
        )
    params = _gmm_params(xs, call.weight, call.bias, call.scale, call.per_token_scale, call.output_dtype,
                         call.antiquant_scale, call.antiquant_offset)
    pairs = zip(xs, params.weights) if len(xs) == len(params.weights) else ((xs[0], w) for w in params.weights)
    for i, (xi, w) in enumerate(pairs):
        if xi.shape[-1] != w.shape[0]:
            raise OpArgumentError(
                f"x has K={xi.shape[-1]} but weight[{i}] has K={w.shape[0]}; weights are [K, N]", argument="x"
            )
    if call.group_list is None:
        shapes = _gmm_multi_x_shapes(xs, params.weights, modes.split)
    elif modes.group_type != GROUP_ROWS:
        raise OpArgumentError(
            f"group_list needs group_type 0 (split rows) or 2 (split K), got {modes.group_type}", argument="group_list"
        )
    else:
        shapes = _gmm_row_shapes(xs, params.weights, call, modes)
    return shapes, params, modes


GMM_FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _transposed_weight(weight: torch.Tensor) -> bool:
    """op-plugin's ``is_transpose_weight``: the last two dims are a transposed view."""
    return weight.stride(-2) == 1 and weight.stride(-1) == weight.shape[-2]


def _gmm_float8_meta(call: Arguments) -> list[Out]:
    """float8 x (the FP8 and MX modes, whose kernels are not modeled) as op-plugin's meta function gives the
    outputs (op_plugin/python/meta/_meta_registrations.py ``npu_grouped_matmul_meta``), for the modes whose
    shapes need no group_list values: split_item 0, one ``[..., N]`` per x; 2/3, one ``[M, N]`` of all
    rows, ``[E, M, N]`` with group_type 2, N times eight for float32 words of FP4 values not transposed;
    in ``output_dtype``, else x's dtype. As there, float8 x and weights with rows and columns need K > 0."""
    xs, weights = list(call.x), require_tensor_list("weight", call.weight)
    single = len(weights) == 1 and weights[0].dim() == 3
    n = weights[0].shape[2] if single else weights[0].shape[1]
    rows, k = sum(x.shape[0] for x in xs), sum(x.shape[1] for x in xs)
    if weights[0].dtype in GMM_FLOAT8_DTYPES and rows > 0 and n > 0 and k <= 0:
        raise OpArgumentError(f"k must be a positive integer when m and n are positive, but it is {k}.", argument="x")
    dtype = call.output_dtype or xs[0].dtype
    if not call.split_item:
        return [Out([*x.shape[:-1], n if single else w.shape[1]], dtype) for x, w in zip(xs, weights)]
    packed = weights[0].dtype == torch.float32 and not _transposed_weight(weights[0])
    shape = [rows, n * INT4_PER_INT32 if packed else n]
    return [Out([call.group_list.shape[0], *shape] if call.group_type == GROUP_K else shape, dtype)]


def _grouped_matmul_meta(call: Arguments) -> list[Out]:
    """The output list from the split mode and the x/weight shapes; on fake tensors a float8 x gets
    op-plugin's meta shapes (:func:`_gmm_float8_meta`), on real ones it is refused."""
    float8 = call.x[0].dtype in GMM_FLOAT8_DTYPES and (call.split_item or 0) in (0, *SPLIT_OUTPUT_ITEMS)
    if float8 and not kernel_checks_apply(call.x[0]):
        return _gmm_float8_meta(call)
    shapes, params, _ = _grouped_matmul_layout(call)
    return [Out(shape, params.out_dtype) for shape in shapes]


def _group_row_counts(group_list: torch.Tensor, list_type: int, rows: int) -> list[tuple[int, int]]:
    """(group, rows) in row order from group_list: cumulative row ends (type 0), counts (type 1), or
    ``[group, size]`` pairs (type 2, e.g. npu_moe_init_routing_v2's key-value token counts)."""
    values = group_list.tolist()
    if list_type == GROUP_PAIRS:
        groups, counts = [int(g) for g, _ in values], [int(c) for _, c in values]
        if any(not 0 <= g < len(values) for g in groups):
            raise OpArgumentError(
                f"group_list pairs {values} name groups outside [0, {len(values)})", argument="group_list"
            )
    else:
        groups = list(range(len(values)))
        counts = values if list_type == 1 else [end - start for start, end in zip([0, *values[:-1]], values)]
    if any(c < 0 for c in counts):
        kind = {0: "cumulative row ends (non-decreasing)", 1: "counts", 2: "(group, size) pairs"}[list_type]
        raise OpArgumentError(
            f"group_list {values} is not valid {kind} for group_list_type={list_type}", argument="group_list"
        )
    if sum(counts) > rows:
        raise OpArgumentError(f"group_list covers {sum(counts)} rows but x has only {rows}", argument="group_list")
    return list(zip(groups, counts))


def _float_group(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x @ w (+ bias)`` on the Cube: fp32 products and sum, bias in fp32, one rounding to x's dtype."""
    rows = x.reshape(-1, x.shape[-1])
    out = cube_matmul(rows, w) if bias is None else cube_addmm(bias, rows, w, out_dtype=x.dtype)
    return out.reshape(*x.shape[:-1], w.shape[1])


def _quant_group(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], scale: Optional[torch.Tensor],
                 per_token: Optional[torch.Tensor], out_dtype: torch.dtype) -> torch.Tensor:
    """W8A8: ``acc = x @ w`` exact in int32 (+ int32 bias, wrapping); int32 out is ``acc``; otherwise
    ``acc * scale [* per_token] [+ float bias]`` in float32, one rounding (int8: + offset, rint, saturate)."""
    rows = x.reshape(-1, x.shape[-1])
    acc = int_matmul(rows, w)
    if bias is not None and bias.dtype == torch.int32:
        acc = wrap_to_int32(acc.to(torch.int64) + bias.to(torch.int64))
    if out_dtype == torch.int32:
        return acc.reshape(*x.shape[:-1], w.shape[1])
    offset = None
    if scale.dtype == torch.int64:
        scale, offset = decode_quant_param(scale)
    values = acc.to(torch.float32) * scale.to(torch.float32)
    if per_token is not None:
        values = values * per_token.reshape(-1, 1)
    if bias is not None and bias.dtype != torch.int32:
        values = values + bias.to(torch.float32)
    if out_dtype == torch.int8:
        out = round_to_int8(values if offset is None else values + offset)
    else:
        out = values.to(out_dtype)
    return out.reshape(*x.shape[:-1], w.shape[1])


def _group_product(x: torch.Tensor, g: int, params: _GmmParams, per_token: Optional[torch.Tensor]) -> torch.Tensor:
    bias = None if params.biases is None else params.biases[g]
    if params.a8w4:
        rows = a8w4_product(x.reshape(-1, x.shape[-1]), params.weights[g], params.scales[g], bias, None)
        if per_token is not None:
            rows = rows * per_token.reshape(-1, 1)
        return rows.to(params.out_dtype).reshape(*x.shape[:-1], -1)
    if x.dtype != torch.int8:
        return _float_group(x, params.weights[g], bias)
    scale = None if params.scales is None else params.scales[g]
    return _quant_group(x, params.weights[g], bias, scale, per_token, params.out_dtype)


def _k_split_kernel(call: Arguments, shapes: list[list[int]], params: _GmmParams,
                    modes: _GmmModes) -> list[torch.Tensor]:
    """group_type 2: group g multiplies x's K columns of its range by the weight rows of that range (split_item
    2/3) or by its own weight, whose rows must number as many (0/1); K past the last group takes no part, an
    empty group is zeros."""
    x = call.x[0]
    stacked = modes.split in SPLIT_OUTPUT_ITEMS  # one [K, N] weight, its rows split as x's K columns
    outs = []
    start = 0
    for g, count in _group_row_counts(call.group_list, modes.list_type, x.shape[1]):
        stop = start + count
        w = params.weights[0][start:stop] if stacked else params.weights[g]
        if w.shape[0] != count:
            raise OpArgumentError(
                f"weight[{g}] has K={w.shape[0]} but group_list gives group {g} {count} of K", argument="weight"
            )
        if count == 0:  # no K to sum over
            outs.append(torch.zeros(x.shape[0], w.shape[1], dtype=params.out_dtype))
        else:
            outs.append(_float_group(x[:, start:stop], w, None).to(params.out_dtype))
        start = stop
    return [torch.stack(outs)] if stacked else outs


def _grouped_matmul_kernel(call: Arguments) -> list[torch.Tensor]:
    shapes, params, modes = _grouped_matmul_layout(call)
    if modes.group_type == GROUP_K:
        return _k_split_kernel(call, shapes, params, modes)
    x, group_list = call.x, call.group_list
    per_token = params.per_token
    if group_list is not None and len(x) == 1:
        rows = x[0]
        if modes.listed:
            groups = list(enumerate(_listed_counts(group_list, [rows.shape[0]])))
        else:
            groups = _group_row_counts(group_list, modes.list_type, rows.shape[0])
        products = []
        start = 0
        for g, count in groups:
            stop = start + count
            scales = None if per_token is None else per_token[0][start:stop]
            products.append(_group_product(rows[start:stop], g, params, scales))
            start = stop
        if modes.split not in SPLIT_OUTPUT_ITEMS:
            return products
        out = torch.zeros(shapes[0], dtype=params.out_dtype)  # rows past the last group: the device leaves them unset
        if products:
            out[:start] = torch.cat(products)
        return [out]
    if group_list is not None and not modes.listed:
        counts = [count for _, count in _group_row_counts(group_list, modes.list_type, sum(xi.shape[0] for xi in x))]
        if counts != [xi.shape[0] for xi in x]:
            raise OpArgumentError(
                f"group_list gives rows {counts} but the x tensors have {[xi.shape[0] for xi in x]}",
                argument="group_list",
            )
    outs = [_group_product(xg, g, params, None if per_token is None else per_token[g]) for g, xg in enumerate(x)]
    return [torch.cat(outs)] if len(shapes) == 1 and len(outs) > 1 else outs


def _require_group_list(name: str, value: object) -> None:
    """group_list is an int64 tensor (the default schema) or a Python list of ints (``npu_grouped_matmul.List``)."""
    if isinstance(value, (list, tuple)):
        type_check("int[]")(name, value)
        return
    require_tensor(name, value, optional=True)


def _grouped_matmul_samples() -> list[SampleCall]:
    """The MoE form (one x split by a cumulative group list over a stacked [E, K, N] weight), the
    per-tensor form with a bias per group, and A8W4 (int8 x, int4 words, low-word int64 scales by k-group)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(11, 40, generator=gen).bfloat16()
    weight = (torch.randn(3, 40, 24, generator=gen) * 0.2).bfloat16()
    bias = [torch.randn(24, generator=gen), torch.randn(24, generator=gen)]
    scale = (torch.rand(2, 2, 16, generator=gen) * 1e-2).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    a8w4 = {"bias": [torch.rand(2, 16, generator=gen)], "scale": [scale],
            "per_token_scale": [torch.rand(6, generator=gen)], "group_list": torch.tensor([2, 4]), "split_item": 3, "group_type": 0, "group_list_type": 1,
            "output_dtype": torch.bfloat16}
    return [
        SampleCall(([x], [weight]), {"group_list": torch.tensor([4, 4, 9]), "split_item": 2, "group_type": 0}),
        SampleCall(([x[:5], x[5:]], [weight[0], weight[1]]), {"bias": bias, "group_type": -1}),
        SampleCall(([torch.randint(-128, 128, (6, 32), generator=gen, dtype=torch.int8)],
                    [torch.randint(-2**31, 2**31, (2, 32, 2), generator=gen, dtype=torch.int32)]), a8w4),
    ]


@npu_op(
    meta=_grouped_matmul_meta,
    kernel=_grouped_matmul_kernel,
    argument_checks={"x": require_tensor_list, "weight": require_tensor_list, "group_list": _require_group_list},
    samples=_grouped_matmul_samples,
    unmodeled=("offset", "activation_input", "activation_quant_scale", "activation_quant_offset", "x_dtype",
               "weight_dtype", "scale_dtype", "per_token_scale_dtype"),
)
def npu_grouped_matmul(call: Arguments) -> None:
    """Grouped matmul: group ``g`` multiplies its part of x by ``weight[g]`` ([K, N]); returns a list.

    Sources: torch_npu.npu_grouped_matmul (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_grouped_matmul.md:
    formulas 1-4, the data-type tables, the single/multi tensor scenarios per group_type), op-plugin's
    op_plugin_functions.yaml (the default schema with a tensor group_list and the ``.List`` overload with a
    Python list) and its meta function in op_plugin/python/meta/_meta_registrations.py (output shapes per
    split_item and group_type).

    * Grouping by rows (``group_type=0``): ``x = [x_all]`` ([M, K]), one weight per group (a list of
      [K, N] or a single [E, K, N] tensor) and ``group_list``. An int64 tensor holds [E] cumulative row
      ends (``group_list_type=0``) or row counts (1), or for int8 x [E, 2] (group, rows) pairs (2, the
      key-value counts of npu_moe_init_routing_v2; zero-size pairs fill its tail); ``split_item`` 2 or 3
      gives one ``[M, N]`` output (rows past the last group are zeros; the device leaves them unset).
      ``split_item`` 0/1 give one ``[rows_g, N_g]`` output per group: with a tensor (cumulative ends,
      ``group_list_type=0``, as op-plugin's kernel reads it) their row counts are values, sizes a traced
      graph learns only when it runs; a Python list of cumulative row ends (the ``.List`` overload;
      group_type None), which must end at M, fixes them. With one x per weight, group_list restates their
      rows.
    * A8W4 (op-plugin's test_npu_grouped_matmul_A8W4; vLLM-Ascend's and sglang's W4A8 MoE): int8 x by int4
      weights packed eight per int32 word along N ([K, N / 8] per group, or one [E, K, N / 8]), an int64
      ``scale`` [G, N] per group (the float32 in each low word; G k-groups), a float32 ``bias`` [N] and
      ``per_token_scale`` [M] or [M, 1], float16 or bfloat16 out: :func:`a8w4_product`.
    * Grouping K (``group_type=2``, the weight-gradient form ``dW_g = X_g^T @ dY_g``): x one [M, K]
      (usually a transposed activation) whose K columns ``group_list`` splits; ``split_item`` 2/3 take
      one [K, N] weight whose rows it splits the same way and give ``[E, M, N]``, 0/1 take one [K_g, N_g]
      weight per group and give one [M, N_g] each. Float only, no bias (the API page).
    * One x per weight (``group_type=-1``, no group_list): ``x[g] @ weight[g]``; ``split_item`` 0/1
      returns one output per group (``x[g]`` may have batch dims), 2/3 the 2-D results concatenated by rows.
    * Float (formula 1): float16/bfloat16/float32 x and weights; ``bias`` one ``[N]`` per group (or one
      ``[E, N]``), float16 for float16 x, float32 otherwise. ``x @ w + bias`` runs as the Cube does: fp32
      products and accumulation, the bias added in fp32, one rounding to x's dtype (single-threaded BLAS,
      so the bits do not depend on torch's thread count).
    * W8A8 (formulas 2-3): int8 x and weights. ``acc = x @ w`` is exact in int32. ``output_dtype=int32``
      returns ``acc`` (+ an int32 bias) -- the form followed by npu_dequant_swiglu_quant -- and takes a
      scale without applying it (op-plugin's meta test passes one; its quant matmul int32 golden applies
      none). Otherwise
      ``scale`` (one ``[N]`` per group or one ``[E, N]``; float32, bfloat16, or int64 from
      npu_trans_quant_param) dequantises per channel and ``per_token_scale`` ([M] float32, one per x) per
      row: ``acc [+ int32 bias] * scale [* per_token_scale] [+ float bias]`` in float32, rounded once to
      ``output_dtype`` (bfloat16, float16, float32, or int8 -- None -- with the int64 scale's offset added
      before rint and saturation).
    * Weight-only quantisation (formula 4, W8A16 / W4A16): float16/bfloat16 x with int8 weights, or
      int4 weights packed eight per int32 (``[K, N / 8]``, element 0 in the low nibble -- an assumption,
      see ``quant._pack_int4``), and ``antiquant_scale`` (+ optional ``antiquant_offset``) in x's dtype:
      per channel (one ``[N]`` per group or one ``[E, N]``) or, for int4, per group of K rows (one
      ``[G, N]`` per group or one ``[E, G, N]``). Each weight becomes ``(w + offset) * scale`` rounded to
      x's dtype, then the float path (vllm-ascend's W4A16 MoE calls it this way).

    Refused with ValueError: ``offset``, activation inputs, the ``x_dtype``/``weight_dtype``/
    ``scale_dtype``/``per_token_scale_dtype`` hints (hifloat8, FP4 and float8_e8m0 operands), int4 x,
    ``act_type != 0``, ``group_type`` None with a tensor group_list (torch_npu also requires it) or other
    than -1/0/2 (group_type 1, N grouping, is not one torch_npu takes), ``split_item`` 0/1 with a tensor
    group_list of counts or pairs.
    ``tuning_config`` is a tiling hint and is ignored.
    """
    _check_gmm_modes(call)


# ---------------------------------------------------------------------------------------------
# npu_grouped_matmul_finalize_routing
# ---------------------------------------------------------------------------------------------



def _finalize_a8w4_meta(call: Arguments, experts: int, k: int, n: int) -> None:
    """A8W4 (the doc's last two table rows): an int64 scale [e, G, n] (G k-groups; the doc's [e, 1, n] is
    one), a float32 bias [e, n], an optional float32 offset [e, G, n]."""
    scale = call.scale
    if scale is None or call.bias is None:
        raise OpArgumentError("A8W4 (int4 w) needs scale, int64 [e, 1, n] (or [e, G, n] for G k-groups), and "
                              "bias, float32 [e, n] (the doc's data-type table)",
                              argument="scale" if scale is None else "bias")
    require_dtype("scale", scale, (torch.int64,), "(A8W4: float32 bits in the low 32 bits of each int64)")
    if scale.dim() != 3 or scale.shape[0] != experts or scale.shape[2] != n or k % max(scale.shape[1], 1):
        raise OpArgumentError(f"scale has shape {list(scale.shape)}; A8W4 takes [e={experts}, G, n={n}] with G "
                              f"k-groups dividing k={k}", argument="scale")
    require_dtype("bias", call.bias, (torch.float32,))
    require_shape("bias", call.bias, ((experts, n),))
    if call.offset is not None:
        require_dtype("offset", call.offset, (torch.float32,))
        require_shape("offset", call.offset, (tuple(scale.shape),))


def _finalize_a8w8_meta(call: Arguments, experts: int, n: int) -> None:
    """A8W8: a float32 scale [e, n]; bias and offset are A8W4's only (the doc)."""
    if call.scale is None:
        raise OpArgumentError("A8W8 needs scale, float32 [e, n] (per channel)", argument="scale")
    require_dtype("scale", call.scale, (torch.float32,))
    require_shape("scale", call.scale, ((experts, n),))
    require_unused("npu_grouped_matmul_finalize_routing with int8 w (bias and offset are A8W4's)", bias=call.bias,
                   offset=call.offset)


def _gmm_finalize_routing_meta(call: Arguments) -> Out:
    """y float32 [output_bs or m, n] (op-plugin meta); the A8W8 or A8W4 inputs of the doc's data-type table."""
    x, w, group_list = call.x, call.w, call.group_list
    require_dtype("x", x, (torch.int8,))
    require_dtype("w", w, (torch.int8, torch.int32), "(int8, or int32 words of eight int4: A8W4)")
    if x.dim() != 2 or w.dim() != 3 or w.shape[1] != x.shape[1]:
        raise OpArgumentError(
            f"x {list(x.shape)} and w {list(w.shape)} must be [m, k] and [e, k, n] (logical shape; int4 w "
            "[e, k, n / 8])", argument="x"
        )
    rows, experts = x.shape[0], w.shape[0]
    n = w.shape[2] * INT4_PER_INT32 if w.dtype == torch.int32 else w.shape[2]
    require_dtype("group_list", group_list, (torch.int64,))
    require_shape("group_list", group_list, ((experts,),))
    if w.dtype == torch.int32:
        _finalize_a8w4_meta(call, experts, x.shape[1], n)
    else:
        _finalize_a8w8_meta(call, experts, n)
    for name, value, shape in (("pertoken_scale", call.pertoken_scale, (rows,)),
                               ("logit", call.logit, (rows,)), ("row_index", call.row_index, (rows,))):
        if value is None:
            continue
        require_dtype(name, value, (torch.int64, torch.int32) if name == "row_index" else (torch.float32,))
        require_shape(name, value, (shape,))
    output_bs = int(call.output_bs or 0)
    out_rows = output_bs if output_bs else rows
    shared = call.shared_input
    if shared is not None:
        require_dtype("shared_input", shared, (torch.bfloat16,))
        offset = int(call.shared_input_offset or 0)
        if shared.dim() != 2 or shared.shape[1] != n or offset + shared.shape[0] > out_rows:
            raise OpArgumentError(f"shared_input has shape {list(shared.shape)}; expected [rows, {n}] fitting in the "
                                  f"{out_rows} output rows from shared_input_offset={offset}", argument="shared_input")
    return Out([out_rows, n], torch.float32)


def _low_word_scale(scale: torch.Tensor) -> torch.Tensor:
    """float32 of an A8W4 int64 scale: the float32 bits in each int64's low 32 bits, the high word 0
    (op-plugin test_npu_grouped_matmul_finalize_routing.py builds it so, without npu_trans_quant_param's flag)."""
    return wrap_to_int32(scale & 0xFFFFFFFF).view(torch.float32)


def a8w4_product(rows: torch.Tensor, levels: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor],
                 offset: Optional[torch.Tensor]) -> torch.Tensor:
    """One expert's A8W4 product of int8 ``rows`` [r, k] and int4 ``levels`` [k, n] (unpacked) before the
    per-token scale, float32 [r, n]. op-plugin's goldens (test_npu_grouped_matmul.py
    test_npu_grouped_matmul_A8W4 and test_npu_grouped_matmul_finalize_routing.py, one kernel's) split each
    int8 into a high nibble ``x // 16`` and a low one ``(x & 15) - 8`` and recombine the two products as
    ``16 * high + low``, which is ``(x - 8) @ w``; per k-group j (``scale`` [G, n] float32) that product
    times ``scale[j]``, summed over the groups, plus ``bias`` [n], plus ``rowsum(x_j) * offset[j]`` (the
    finalize op's offset [G, n]). Here in exact arithmetic (float64 integer sums) where the goldens
    accumulate the groups in float16."""
    weight = levels.to(torch.float64)
    groups = scale.shape[0]
    size = rows.shape[1] // groups
    shifted = rows.to(torch.float64) - A8W4_SHIFT
    total = torch.zeros(rows.shape[0], levels.shape[1], dtype=torch.float32)
    if bias is not None:
        total = total + bias.to(torch.float32)
    for j in range(groups):
        part = slice(j * size, (j + 1) * size)
        total = total + (shifted[:, part] @ weight[part]).to(torch.float32) * scale[j]
        if offset is not None:
            sums = rows[:, part].to(torch.float64).sum(dim=1, keepdim=True).to(torch.float32)
            total = total + sums * offset[j]
    return total


def _a8w4_rows(call: Arguments, group: int, rows: torch.Tensor) -> torch.Tensor:
    """Expert ``group``'s A8W4 rows of the finalize op (:func:`a8w4_product`), before the per-token scale."""
    return a8w4_product(rows, unpack_int4(call.w[group]), _low_word_scale(call.scale[group]), call.bias[group],
                        None if call.offset is None else call.offset[group])


def _finalize_rows(call: Arguments, group: int, start: int, stop: int) -> torch.Tensor:
    """Expert ``group``'s output rows ``start:stop`` dequantised, float32 [r, n], before the logits."""
    x, pertoken_scale = call.x, call.pertoken_scale
    if call.w.dtype == torch.int32:
        rows = _a8w4_rows(call, group, x[start:stop])
        return rows if pertoken_scale is None else rows * pertoken_scale[start:stop].reshape(-1, 1)
    return _quant_group(x[start:stop], call.w[group], None, call.scale[group],
                        None if pertoken_scale is None else pertoken_scale[start:stop], torch.float32)


def _gmm_finalize_routing_kernel(call: Arguments) -> torch.Tensor:
    x, logit = call.x, call.logit
    row_index = call.row_index
    out = torch.zeros(_gmm_finalize_routing_meta(call).shape, dtype=torch.float32)
    shared = call.shared_input
    if shared is not None:
        offset = int(call.shared_input_offset or 0)
        weight = float(call.shared_input_weight)
        out[offset:offset + shared.shape[0]] = shared.to(torch.float32) * weight
    start = 0
    for group, count in _group_row_counts(call.group_list, int(call.group_list_type), x.shape[0]):
        stop = start + count
        rows = _finalize_rows(call, group, start, stop)
        if logit is not None:
            rows = rows * logit[start:stop].reshape(-1, 1)
        targets = torch.arange(start, stop) if row_index is None else row_index[start:stop].to(torch.int64)
        if bool(((targets < 0) | (targets >= out.shape[0])).any()):
            raise OpArgumentError(
                f"row_index holds {targets.tolist()}; every value must be an output row in [0, {out.shape[0]})",
                argument="row_index"
            )
        out.index_add_(0, targets, rows)
        start = stop
    return out


def _gmm_finalize_routing_samples() -> list[SampleCall]:
    """int8 expert rows dequantised per channel and per token, weighted by their logits, scatter-added to
    their tokens beside a shared expert's output; and the A8W4 form with bias and offset."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-100, 100, (7, 32), generator=gen, dtype=torch.int8)
    weight = torch.randint(-100, 100, (3, 32, 16), generator=gen, dtype=torch.int8)
    return [SampleCall((x, weight, torch.tensor([2, 3, 1])), {
        "scale": torch.rand(3, 16, generator=gen) * 1e-3, "pertoken_scale": torch.rand(7, generator=gen) * 1e-2,
        "shared_input": torch.randn(2, 16, generator=gen).bfloat16(), "logit": torch.rand(7, generator=gen),
        "row_index": torch.tensor([0, 2, 1, 3, 0, 2, 1]), "shared_input_weight": 0.5, "shared_input_offset": 1,
        "output_bs": 4,
    }), SampleCall((x, torch.randint(-2**31, 2**31, (3, 32, 2), generator=gen, dtype=torch.int32),
                    torch.tensor([2, 3, 1])), {  # A8W4: int4 words, low-word int64 scale, bias, offset
        "scale": (torch.rand(3, 2, 16, generator=gen) * 1e-3).view(torch.int32).to(torch.int64) & 0xFFFFFFFF,
        "bias": torch.rand(3, 16, generator=gen), "offset": torch.rand(3, 2, 16, generator=gen),
        "logit": torch.rand(7, generator=gen), "row_index": torch.tensor([0, 2, 1, 3, 0, 2, 1]), "output_bs": 4,
    })]


@npu_op(meta=_gmm_finalize_routing_meta, kernel=_gmm_finalize_routing_kernel, samples=_gmm_finalize_routing_samples)
def npu_grouped_matmul_finalize_routing(call: Arguments) -> None:
    """W8A8 grouped matmul of the routed rows, then finalize routing: ``y [output_bs, n]`` float32.

    Source: torch_npu.npu_grouped_matmul_finalize_routing (op-plugin docs/zh/custom_APIs/torch_npu/
    torch_npu-npu_grouped_matmul_finalize_routing.md; output shape from its meta function):

    * GroupedMatMul: ``group_list`` (int64 [e]; counts for ``group_list_type=1``, the default, or
      cumulative ends for 0) splits x's rows by expert; expert g's rows give ``x_rows @ w[g]`` exact in
      int32, dequantised per channel by ``scale[g]`` and per token by ``pertoken_scale`` in float32
      (:func:`npu_grouped_matmul`'s W8A8 path).  ``w`` is the logical [e, k, n] weight (the doc's NZ
      5-D form is its device layout after npu_format_cast).
    * MoeFinalizeRouting: each row times its ``logit`` (when given) is scatter-added into output row
      ``row_index[r]``; ``shared_input`` (bfloat16 [rows, n]) times ``shared_input_weight`` fills
      output rows from ``shared_input_offset`` first.  Output rows = ``output_bs`` (0: m).  Rows past
      the sum of group_list take no part (the doc: the sum may be below m).

    Additions run in float32 in a fixed order (shared input, then rows in x's order), so the result
    is deterministic.  ``pertoken_scale`` may be None (op-plugin's ``w8a8_support_none_pertoken_scale``).

    A8W4 (the doc's last two rows): ``w`` int4, as int32 words of eight along n ([e, k, n / 8], what
    ``npu_quantize(..., torch.quint4x2)`` and npu_convert_weight_to_int4pack give), an int64 ``scale``
    [e, G, n] (the float32 in each low word; the doc's [e, 1, n] is G = 1), a float32 ``bias`` [e, n]
    and an optional float32 ``offset`` [e, G, n]: :func:`_a8w4_rows`, op-plugin's golden
    (test_npu_grouped_matmul_finalize_routing.py ``supported_a8w4_op_exec``). ``bias`` and ``offset``
    are A8W4's only, as the doc says. Not implemented (ValueError): ``dtype`` other than float32 (the
    doc allows only float32) and the hifloat8/FP4 dtype hints; ``tuning_config`` is a tiling hint and is
    ignored.
    """
    require_unused("npu_grouped_matmul_finalize_routing (MX / FP4 dtype hints)", x_dtype=call.x_dtype,
                   w_dtype=call.w_dtype, scale_dtype=call.scale_dtype, pertoken_scale_dtype=call.pertoken_scale_dtype)
    require_choice("dtype", torch.float32 if call.dtype is None else call.dtype, (torch.float32,),
                   "the output is float32")
    list_type = 1 if call.group_list_type is None else call.group_list_type
    require_choice("group_list_type", list_type, (0, 1), "0 cumulative row ends, 1 row counts")
