"""MoE token permutation (``npu_moe_token_permute`` / ``npu_moe_token_unpermute``): the sort of each token's
top-K copies by expert before the experts' grouped matmul, and its inverse with the routing weights after it,
as MindSpeed's and Megatron's MoE token dispatchers call them.

Sources: CANN's aclnnMoeTokenPermute and aclnnMoeTokenUnpermute pages (the formulas below), op-plugin's
op_plugin_functions.yaml (the schemas), op_plugin/utils/KernelNpuOutputSize.cpp (the output sizes:
``npu_moe_token_permute_out_size``, ``npu_moe_token_unpermute_out_size`` and the ``_grad_v2`` ones),
MoeTokenUnpermuteKernelNpuOpApi.cpp (the output dtype) and derivatives.yaml (both ops differentiate
through ``npu_moe_token_permute_grad_v2`` / ``npu_moe_token_unpermute_grad_v2``, declared here too).
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .checks import FLOAT_DTYPES, require_dtype, require_shape
from .registry import Arguments, Derivative, Out, SampleCall, npu_op

INDEX_DTYPES = (torch.int64, torch.int32)


def _sample_routing(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Six tokens of width 8, each routed to two of four experts, with their routing weights."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randn(6, 8, generator=gen)
    return tokens, torch.randint(0, 4, (6, 2), generator=gen), torch.rand(6, 2, generator=gen)


def _sorted_positions(seed: int) -> torch.Tensor:
    """Where each of the twelve copies lands after the sort: a permutation, as permute returns it."""
    return torch.randperm(12, generator=torch.Generator().manual_seed(seed)).to(torch.int32)


def _permute_samples() -> list[SampleCall]:
    tokens, indices, _ = _sample_routing(0)
    return [SampleCall((tokens, indices)), SampleCall((tokens.bfloat16(), indices[:, 0], 5))]


def _permute_grad_samples() -> list[SampleCall]:
    grad = torch.randn(12, 8, generator=torch.Generator().manual_seed(1))
    return [SampleCall((grad, _sorted_positions(2), 6, torch.float32, 2))]


def _unpermute_samples() -> list[SampleCall]:
    permuted = torch.randn(12, 8, generator=torch.Generator().manual_seed(3))
    _, _, probs = _sample_routing(4)
    return [SampleCall((permuted, _sorted_positions(5)), {"probs": probs})]


def _unpermute_grad_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(6)
    grad, permuted, probs = torch.randn(6, 8, generator=gen), torch.randn(12, 8, generator=gen), torch.rand(6, 2, generator=gen)
    return [SampleCall((grad, _sorted_positions(7), 12, torch.float32), {"probs": probs, "permuted_tokens": permuted})]


def _permuted_rows(num_out_tokens: object, flat: int) -> int:
    """op-plugin's output row count: ``min(n, flat)`` for n > 0, else ``flat + n`` (None and 0: every copy;
    a negative n drops the last -n)."""
    n = 0 if num_out_tokens is None else num_out_tokens
    rows = min(n, flat) if n > 0 else flat + n
    if rows < 0:
        raise OpArgumentError(
            f"num_out_tokens={n} drops more than the {flat} token copies indices holds", argument="num_out_tokens"
        )
    return rows


def _check_permute_inputs(call: Arguments) -> None:
    if call.padded_mode:
        raise OpArgumentError(
            "padded_mode=True is not supported (the aclnnMoeTokenPermute page); pass False", argument="padded_mode"
        )
    require_dtype("tokens", call.tokens, FLOAT_DTYPES)
    require_dtype("indices", call.indices, INDEX_DTYPES)
    if call.tokens.dim() != 2 or call.indices.dim() not in (1, 2) or call.indices.shape[0] != call.tokens.shape[0]:
        raise OpArgumentError(
            f"tokens {list(call.tokens.shape)} and indices {list(call.indices.shape)} must be [num_tokens, hidden] "
            "and [num_tokens, topK] (or [num_tokens] for topK 1)", argument="tokens"
        )


def _permute_meta(call: Arguments) -> tuple[Out, Out]:
    """permuted_tokens [rows, hidden] in tokens' dtype; sorted_indices int32 [num_tokens * topK]."""
    _check_permute_inputs(call)
    flat = call.indices.numel()
    rows = _permuted_rows(call.num_out_tokens, flat)
    return Out([rows, call.tokens.shape[1]], call.tokens.dtype), Out([flat], torch.int32)


def _permute_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, indices = call.tokens, call.indices
    top_k = 1 if indices.dim() == 1 else indices.shape[1]
    flat = indices.reshape(-1)
    order = torch.argsort(flat, stable=True)  # sortedIndicesFirst: copies grouped by expert, in copy order
    rows = _permuted_rows(call.num_out_tokens, flat.numel())
    position = torch.empty_like(order)
    position[order] = torch.arange(flat.numel())  # sortedIndicesOut = argSort(sortedIndicesFirst)
    permuted = tokens[order[:rows] // top_k]
    return permuted, position.to(torch.int32)


def _kept_rows(positions: torch.Tensor, rows: int, copies: int) -> torch.Tensor:
    """bool [copies]: which token copies have a row (< ``rows``) of the permuted tensor; a position at or past
    ``rows`` was dropped by num_out_tokens, one outside [0, copies) is no output of npu_moe_token_permute."""
    if bool(((positions < 0) | (positions >= copies)).any()):
        raise OpArgumentError(
            f"sorted_indices values must lie in [0, {copies}); pass npu_moe_token_permute's output",
            argument="sorted_indices",
        )
    return positions < rows


def _permute_grad_meta(call: Arguments) -> Out:
    """grad_tokens [tokens_size_0, hidden] in tokens_dtype (op-plugin's npu_moe_token_permute_grad_v2_out_size)."""
    grad, sorted_indices = call.grad_permuted_tokens, call.sorted_indices
    require_dtype("grad_permuted_tokens", grad, FLOAT_DTYPES)
    require_dtype("sorted_indices", sorted_indices, (torch.int32,))
    if grad.dim() != 2 or sorted_indices.dim() != 1 or sorted_indices.shape[0] != call.tokens_size_0 * call.num_topK:
        raise OpArgumentError(
            f"grad_permuted_tokens {list(grad.shape)} and sorted_indices {list(sorted_indices.shape)} must be "
            f"[rows, hidden] and [tokens_size_0 * num_topK] = [{call.tokens_size_0 * call.num_topK}]",
            argument="grad_permuted_tokens"
        )
    return Out([call.tokens_size_0, grad.shape[1]], call.tokens_dtype)


def _permute_grad_kernel(call: Arguments) -> torch.Tensor:
    grad, positions = call.grad_permuted_tokens, call.sorted_indices.to(torch.int64)
    kept = _kept_rows(positions, grad.shape[0], positions.shape[0])
    rows = grad.to(torch.float32)[positions.clamp(max=max(grad.shape[0] - 1, 0))]
    rows = torch.where(kept.unsqueeze(-1), rows, 0.0).reshape(call.tokens_size_0, call.num_topK, -1)
    total = rows[:, 0]
    for slot in range(1, call.num_topK):
        total = total + rows[:, slot]
    return total.to(call.tokens_dtype)


@npu_op(meta=_permute_grad_meta, kernel=_permute_grad_kernel, samples=_permute_grad_samples)
def npu_moe_token_permute_grad_v2(call: Arguments) -> None:
    """The gradient of :func:`npu_moe_token_permute`'s tokens (aclnnMoeTokenPermuteGrad): each token's
    gradient is the float32 sum, in slot order, of its ``num_topK`` copies' rows of
    ``grad_permuted_tokens`` (``sorted_indices`` says where each copy went; a dropped copy adds 0), rounded
    once to ``tokens_dtype``. ``padded_mode=True`` is refused, as by the forward."""
    if call.padded_mode:
        raise OpArgumentError(
            "padded_mode=True is not supported (the aclnnMoeTokenPermute page); pass False", argument="padded_mode"
        )


def _permute_setup(ctx: object, call: Arguments, output: tuple) -> None:
    tokens, indices = call.tokens, call.indices
    ctx.save_for_backward(output[1])
    ctx.shape = (tokens.shape[0], tokens.dtype, 1 if indices.dim() == 1 else indices.shape[1], call.padded_mode)


def _permute_backward(ctx: object, grad_permuted: torch.Tensor, _grad_sorted: torch.Tensor) -> tuple:
    """derivatives.yaml: ``tokens: npu_moe_token_permute_grad_v2(grad, result1, tokens.size(0), tokens.dtype,
    topK, padded_mode)``; the indices take no gradient."""
    (sorted_indices,) = ctx.saved_tensors
    tokens_size_0, tokens_dtype, top_k, padded_mode = ctx.shape
    grad = torch.ops.npu.npu_moe_token_permute_grad_v2(
        grad_permuted, sorted_indices, tokens_size_0, tokens_dtype, top_k, padded_mode)
    return grad, None, None, None


@npu_op(
    meta=_permute_meta, kernel=_permute_kernel, derivative=Derivative(_permute_setup, _permute_backward),
    samples=_permute_samples,
)
def npu_moe_token_permute(call: Arguments) -> None:
    """Copy each token once per selected expert and sort the copies by expert: ``(permuted_tokens, sorted_indices)``.

    aclnnMoeTokenPermute (paddedMode false): with ``first = argsort(flatten(indices))`` (stable, so copies of
    one expert keep token order) and ``sorted_indices = argsort(first)``,
    ``permuted_tokens[sorted_indices[i]] = tokens[i // topK]``.

    * ``tokens`` [num_tokens, hidden] float16/bfloat16/float32; ``indices`` [num_tokens, topK] (or
      [num_tokens]) int64/int32 expert ids.
    * ``sorted_indices`` int32 [num_tokens * topK]: where each token copy went (the row of permuted_tokens,
      the inverse of the sort), which npu_moe_token_unpermute takes.
    * ``num_out_tokens`` keeps the first rows of the sorted copies (op-plugin: ``min(n, copies)`` for
      n > 0, ``copies + n`` otherwise; None or 0 keep all); a copy whose row is past them is dropped.
    * ``padded_mode=True`` (indices as per-expert token lists) is refused: the current page marks it
      unsupported.
    """


def _check_unpermute_inputs(call: Arguments) -> int:
    """The checks of npu_moe_token_unpermute; returns topK (probs' second dim, 1 without probs)."""
    permuted, sorted_indices, probs = call.permuted_tokens, call.sorted_indices, call.probs
    if call.padded_mode:
        raise OpArgumentError(
            "padded_mode=True is not supported (the aclnnMoeTokenUnpermute page); pass False", argument="padded_mode"
        )
    require_dtype("permuted_tokens", permuted, FLOAT_DTYPES)
    require_dtype("sorted_indices", sorted_indices, (torch.int32,))
    if permuted.dim() != 2 or sorted_indices.dim() != 1:
        raise OpArgumentError(
            f"permuted_tokens {list(permuted.shape)} and sorted_indices {list(sorted_indices.shape)} must be "
            "[rows, hidden] and [num_tokens * topK]", argument="permuted_tokens"
        )
    if probs is None:
        return 1
    require_dtype("probs", probs, FLOAT_DTYPES)
    if probs.dim() != 2 or probs.shape[1] == 0 or probs.numel() != sorted_indices.shape[0]:
        raise OpArgumentError(
            f"probs has shape {list(probs.shape)}; expected [num_tokens, topK] with num_tokens * topK = "
            f"{sorted_indices.shape[0]} (sorted_indices' length)", argument="probs"
        )
    return probs.shape[1]


def _unpermute_meta(call: Arguments) -> Out:
    """unpermuted_tokens [num_tokens, hidden] (num_tokens = sorted_indices' length / topK) in
    permuted_tokens' dtype."""
    top_k = _check_unpermute_inputs(call)
    return Out([call.sorted_indices.shape[0] // top_k, call.permuted_tokens.shape[1]], call.permuted_tokens.dtype)


def _unpermute_kernel(call: Arguments) -> torch.Tensor:
    top_k = _check_unpermute_inputs(call)
    permuted, positions = call.permuted_tokens, call.sorted_indices.to(torch.int64)
    copies = positions.shape[0]
    kept = _kept_rows(positions, permuted.shape[0], copies)
    rows = permuted.to(torch.float32)[positions.clamp(max=max(permuted.shape[0] - 1, 0))]
    rows = torch.where(kept.unsqueeze(-1), rows, 0.0).reshape(copies // top_k, top_k, -1)
    if call.probs is not None:
        rows = rows * call.probs.to(torch.float32).unsqueeze(-1)
    total = rows[:, 0]
    for slot in range(1, top_k):  # the copies of a token in slot order
        total = total + rows[:, slot]
    return total.to(permuted.dtype)


def _unpermute_grad_meta(call: Arguments) -> tuple[Out, Out]:
    """grad_permuted_tokens [permuted_tokens_size_0, hidden] in permuted_tokens_dtype; grad_probs like probs,
    a 0-dim tensor in the gradient's dtype without probs (op-plugin's ``_grad_v2`` sizes and dtypes)."""
    grad, sorted_indices, probs = call.grad_unpermuted_tokens, call.sorted_indices, call.probs
    if call.padded_mode:
        raise OpArgumentError(
            "padded_mode=True is not supported (the aclnnMoeTokenUnpermute page); pass False", argument="padded_mode"
        )
    require_dtype("grad_unpermuted_tokens", grad, FLOAT_DTYPES)
    require_dtype("sorted_indices", sorted_indices, (torch.int32,))
    top_k = 1 if probs is None else probs.shape[-1]
    if grad.dim() != 2 or sorted_indices.dim() != 1 or sorted_indices.shape[0] != grad.shape[0] * top_k:
        raise OpArgumentError(
            f"grad_unpermuted_tokens {list(grad.shape)} and sorted_indices {list(sorted_indices.shape)} must be "
            "[num_tokens, hidden] and [num_tokens * topK]", argument="grad_unpermuted_tokens"
        )
    if probs is not None:
        require_dtype("probs", probs, FLOAT_DTYPES)
        require_shape("probs", probs, ((grad.shape[0], top_k),))
        if call.permuted_tokens is None:
            raise OpArgumentError("probs' gradient needs permuted_tokens, the forward's input", argument="probs")
        require_shape("permuted_tokens", call.permuted_tokens, ((call.permuted_tokens_size_0, grad.shape[1]),))
    grad_probs = Out([], grad.dtype) if probs is None else Out(list(probs.shape), probs.dtype)
    return Out([call.permuted_tokens_size_0, grad.shape[1]], call.permuted_tokens_dtype), grad_probs


def _unpermute_grad_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    grad, positions, probs = call.grad_unpermuted_tokens, call.sorted_indices.to(torch.int64), call.probs
    rows = call.permuted_tokens_size_0
    copies = positions.shape[0]
    kept = _kept_rows(positions, rows, copies)
    top_k = copies // grad.shape[0]
    per_copy = grad.to(torch.float32).repeat_interleave(top_k, dim=0)  # copy k = i * topK + j takes out[i]'s grad
    if probs is not None:
        per_copy = per_copy * probs.to(torch.float32).reshape(-1, 1)
    grad_permuted = torch.zeros(rows, grad.shape[1], dtype=torch.float32)
    grad_permuted[positions[kept]] = per_copy[kept]  # each row is one copy's: sorted_indices has no repeats
    if probs is None:
        return grad_permuted.to(call.permuted_tokens_dtype), torch.zeros([], dtype=grad.dtype)
    values = call.permuted_tokens.to(torch.float32)[positions.clamp(max=max(rows - 1, 0))]
    dots = (grad.to(torch.float32).repeat_interleave(top_k, dim=0) * values).sum(dim=-1)
    grad_probs = torch.where(kept, dots, 0.0).reshape(probs.shape)
    return grad_permuted.to(call.permuted_tokens_dtype), grad_probs.to(probs.dtype)


@npu_op(meta=_unpermute_grad_meta, kernel=_unpermute_grad_kernel, samples=_unpermute_grad_samples)
def npu_moe_token_unpermute_grad_v2(call: Arguments) -> None:
    """The gradients of :func:`npu_moe_token_unpermute` (aclnnMoeTokenUnpermuteGrad): copy ``k = i * topK + j``'s
    row ``sorted_indices[k]`` of ``grad_permuted_tokens`` is ``grad[i] * probs[i][j]`` (``grad[i]`` without
    probs; rows no kept copy names are 0), and ``grad_probs[i][j] = sum_h grad[i][h] *
    permuted_tokens[sorted_indices[k]][h]`` (0 for a dropped copy), float32, each rounded once."""


def _unpermute_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.permuted_tokens, call.sorted_indices, call.probs)
    ctx.modes = (call.padded_mode, call.restore_shape)


def _unpermute_backward(ctx: object, grad: torch.Tensor) -> tuple:
    """derivatives.yaml: ``permuted_tokens, probs: npu_moe_token_unpermute_grad_v2(grad, sorted_indices,
    permuted_tokens.size(0), permuted_tokens.dtype, probs, padded_mode, restore_shape, permuted_tokens)``."""
    permuted_tokens, sorted_indices, probs = ctx.saved_tensors
    padded_mode, restore_shape = ctx.modes
    grad_permuted, grad_probs = torch.ops.npu.npu_moe_token_unpermute_grad_v2(
        grad, sorted_indices, permuted_tokens.shape[0], permuted_tokens.dtype, probs, padded_mode, restore_shape,
        None if probs is None else permuted_tokens)
    return grad_permuted, None, None if probs is None else grad_probs, None, None


@npu_op(
    meta=_unpermute_meta, kernel=_unpermute_kernel, derivative=Derivative(_unpermute_setup, _unpermute_backward),
    samples=_unpermute_samples,
)
def npu_moe_token_unpermute(call: Arguments) -> None:
    """Gather each token's copies back from the expert-sorted rows and sum them, weighted by ``probs``.

    aclnnMoeTokenUnpermute: ``T[k] = permuted_tokens[sorted_indices[k]]``, times ``probs[i][j]`` for copy
    ``k = i * topK + j`` when probs is given, and ``out[i] = sum_j T[i * topK + j]`` (topK = probs' second
    dim, 1 without probs).

    * ``permuted_tokens`` [rows, hidden] float16/bfloat16/float32; ``sorted_indices`` int32
      [num_tokens * topK] as npu_moe_token_permute returns it; ``probs`` [num_tokens, topK].
    * A copy whose row is at or past ``rows`` (dropped by permute's ``num_out_tokens``) adds 0.
    * The products and the sum are float32, the copies added in slot order, one rounding to
      permuted_tokens' dtype.
    * ``restore_shape`` belongs to ``padded_mode``, which is refused as the page marks it unsupported.
    """
