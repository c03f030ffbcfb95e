"""Memory and layout ops: format casts, scatter updates (the KV-cache write), L2 prefetch, the sampling
filter and the confusion transpose."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import OpArgumentError
from .checks import (
    FLOAT_DTYPES,
    dtype_of_code,
    require_choice,
    require_dtype,
    require_int,
    require_shape,
    require_unused,
)
from .fixedorder import softmax
from .formats import cast_format, cast_in_place, empty_in_format, get_npu_format, record_format
from .registry import Arguments, Derivative, Out, SampleCall, bind, no_outputs, npu_op




def _format_cast_meta(call: Arguments) -> Out:
    return Out(list(call.input.shape), call.input.dtype)


def _target_format(acl_format: int | torch.Tensor) -> int:
    """The format asked for: ``acl_format``, or in the ``.Tensor`` overload the format of ``dst``."""
    return int(get_npu_format(acl_format)) if isinstance(acl_format, torch.Tensor) else acl_format


def _format_cast_kernel(call: Arguments) -> torch.Tensor:
    """A dense copy, as the fake promises, made here so that the format is recorded on the storage the
    caller gets (the registry would otherwise densify a copy of a view into a storage with no record),
    in a storage as large as the device's in that format (a FRACTAL_NZ one padded to whole tiles)."""
    desc = cast_format(call.input, _target_format(call.acl_format))
    dense = empty_in_format(call.input.shape, call.input.dtype, desc, dtype_of_code(call.customize_dtype))
    return record_format(dense.copy_(call.input), desc)


def _format_cast_returns_input(call: Arguments) -> bool:
    """torch_npu returns ``input`` itself when its storage has the format asked for or both are base
    formats (:func:`.formats.cast_in_place`)."""
    return cast_in_place(call.input, _target_format(call.acl_format))


def _format_cast_samples() -> list[SampleCall]:
    """A weight cast to FRACTAL_NZ (29), as model loaders do, and back to ND (2)."""
    weight = torch.randn(16, 32, generator=torch.Generator().manual_seed(0)).bfloat16()
    return [SampleCall((weight, 29)), SampleCall((weight, 2))]


def _require_format(name: str, value: object) -> object:
    """``acl_format``: an int, or (the ``.Tensor`` overload) the tensor whose format the result takes."""
    return value if isinstance(value, torch.Tensor) else require_int(name, value)


@npu_op(meta=_format_cast_meta, kernel=_format_cast_kernel, argument_checks={"acl_format": _require_format},
        samples=_format_cast_samples, returns_input=_format_cast_returns_input)
def npu_format_cast(call: Arguments) -> None:
    """Change the device memory format of ``input``; on CPU this returns a copy equal to ``input``.

    Source: torch_npu.npu_format_cast (op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_format_cast.md;
    schema from Ascend/pytorch's npu_native_functions.yaml) and the feature example, which casts the
    [k, n] int8 weight to format 29 (FRACTAL_NZ) before npu_quant_matmul.

    An ACL format such as 29 = FRACTAL_NZ (or 2 = ND) only changes how the NPU lays the
    tensor out in device memory, for example in fractal tiles for the Cube unit.  The logical
    shape, dtype and values stay the same, and every op in this module reads logical values.
    So the CPU model keeps the layout and returns a copy, noting the copy's format for
    ``torch_npu.get_npu_format`` (:mod:`.formats`), in a storage as large as the device's (a FRACTAL_NZ
    one padded to whole tiles, so ``untyped_storage().size()`` reads as on the NPU). The ``.Tensor``
    overload, ``npu_format_cast(input, dst)``, casts to the format ``dst`` has.  As torch_npu's, an eager
    call returns ``input`` itself when its storage already has the format, or relabels it when both
    formats are base formats (ND, NCHW, ...); ``torch.ops.npu.npu_format_cast`` and a compiled graph
    copy there too, since an op without alias annotations may not return its input.  ``acl_format``
    must be an int, as in the real schema.
    ``customize_dtype`` (a torch.dtype or its int code) picks the dtype whose tile width (C0) the device
    layout uses, e.g. torch.int32 for C0 = 8, and ``input_dtype`` the dtype the data stands for (an int4
    weight in int32 words): both shape only the device layout, so they change no value here.
    """


# ---------------------------------------------------------------------------------------------
# npu_scatter_nd_update / npu_scatter_nd_update_
# ---------------------------------------------------------------------------------------------

SCATTER_ND_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.bool, torch.int64, torch.int8)
SCATTER_ND_MAX_DIMS = 8


def _scatter_nd_meta(call: Arguments) -> Out:
    self, indices = call.input, call.indices
    require_dtype("input", self, SCATTER_ND_DTYPES)
    require_dtype("indices", indices, (torch.int32, torch.int64))
    require_dtype("updates", call.updates, (self.dtype,), "(input's dtype)")
    if not 1 <= self.dim() <= SCATTER_ND_MAX_DIMS:
        raise OpArgumentError(f"input has {self.dim()} dims; expected 1 to {SCATTER_ND_MAX_DIMS}", argument="input")
    depth = indices.shape[-1] if indices.dim() else 0
    if indices.dim() < 2 or not 1 <= depth <= self.dim():
        raise OpArgumentError(f"indices has shape {list(indices.shape)}; it needs >= 2 dims and a last dim in "
                              f"[1, {self.dim()}] (the number of leading input dims it addresses)", argument="indices")
    expected = (*indices.shape[:-1], *self.shape[depth:])
    require_shape("updates", call.updates, (expected,))
    return Out(list(self.shape), self.dtype)


def _scatter_nd_rows(self: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Flat row numbers (over the addressed leading dims) of each index tuple, bounds-checked."""
    depth = indices.shape[-1]
    lead = torch.tensor(self.shape[:depth])
    idx = indices.reshape(-1, depth).to(torch.int64)
    if bool(((idx < 0) | (idx >= lead)).any()):
        raise OpArgumentError(f"indices hold values outside input's leading dims {list(self.shape[:depth])} "
                              "(the doc: out-of-range indices are not supported)", argument="indices")
    strides = torch.tensor([math.prod(self.shape[d + 1 : depth]) for d in range(depth)], dtype=torch.int64)
    return (idx * strides).sum(dim=-1)


def _scatter_nd_into(target: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> None:
    """Write ``updates`` rows at ``indices``; for a repeated index the last update wins (in index order)."""
    depth = indices.shape[-1]
    rows = _scatter_nd_rows(target, indices)
    flat_target = target.view(math.prod(target.shape[:depth]), -1)
    keep = _last_writes(rows, flat_target.shape[0])
    flat_target[rows[keep]] = updates.reshape(rows.numel(), -1)[keep]


def _last_writes(rows: torch.Tensor, count: int) -> torch.Tensor:
    """Which of the writes to ``rows`` (of ``count``) stay: the last one to each row, in order."""
    order = torch.arange(rows.numel())
    last = torch.full((count,), -1, dtype=torch.int64).scatter_reduce(0, rows, order, "amax")
    return last[rows] == order


def write_slots(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """A copy of a paged ``cache`` [blocks, block_size, ...] with ``rows`` in the flat (block x block_size)
    slots; a repeated slot keeps its last row (the scatter above, bounds-checked). The copy is dense, as the
    scatter views it flat, whatever the strides of the caller's cache."""
    flat = cache.reshape(-1, *cache.shape[2:]).clone(memory_format=torch.contiguous_format)
    _scatter_nd_into(flat, slots.reshape(-1, 1), rows)
    return flat.reshape(cache.shape)


NZ_RUN_BYTES = 32  # FRACTAL_NZ stores 32-byte runs of a row: 16 float16/bfloat16 or 32 int8 values


def nz_run(cache: torch.Tensor) -> int:
    """Values per FRACTAL_NZ run of a cache row."""
    return NZ_RUN_BYTES // cache.element_size()


def write_nz_slots(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, block_size: int) -> torch.Tensor:
    """:func:`write_slots` for a paged cache whose blocks are stored FRACTAL_NZ: whatever shape the caller
    gives the cache, block b's memory is [row width / c, block_size, c] (c = :func:`nz_run` values), so a
    token's row [width] is cut into runs of c values and run r lands at [b, r, offset]. One copy of the
    cache is made (op-plugin's reshape-and-cache tests write into multi-GB caches)."""
    run = nz_run(cache)
    written = cache.clone(memory_format=torch.contiguous_format)
    blocks = written.view(cache.shape[0], -1, block_size, run)  # [blocks, runs, block_size, c]
    flat = slots.reshape(-1).to(torch.int64)
    if bool(((flat < 0) | (flat >= cache.shape[0] * block_size)).any()):
        raise OpArgumentError(f"slots hold values outside the cache's {cache.shape[0]} x {block_size} slots")
    keep = _last_writes(flat, cache.shape[0] * block_size)
    kept = flat[keep]
    blocks[kept // block_size, :, kept % block_size] = rows.reshape(flat.numel(), -1, run)[keep]
    return written


def _scatter_nd_update_kernel(call: Arguments) -> torch.Tensor:
    out = call.input.clone(memory_format=torch.contiguous_format)
    _scatter_nd_into(out, call.indices, call.updates)
    return out


def _scatter_nd_samples() -> list[SampleCall]:
    """Rows of a [4, 5, 6] tensor addressed by (i, j) pairs."""
    gen = torch.Generator().manual_seed(0)
    indices = torch.tensor([[0, 1], [3, 4], [2, 0]])
    return [SampleCall((torch.randn(4, 5, 6, generator=gen), indices, torch.randn(3, 6, generator=gen)))]


@npu_op(meta=_scatter_nd_meta, kernel=_scatter_nd_update_kernel, samples=_scatter_nd_samples)
def npu_scatter_nd_update(call: Arguments) -> None:
    """A copy of ``input`` with the slices at ``indices`` replaced by ``updates`` (input unchanged).

    Source: torch_npu.npu_scatter_nd_update (op-plugin API page). ``indices`` (int32/int64, >= 2-D) ends in
    a dim of size ``a <= input.dim()``: each index tuple addresses the slice ``input[i0, ..., i(a-1)]``, and
    ``updates`` has shape ``indices.shape[:-1] + input.shape[a:]``. Index values must be in range (checked).
    A repeated index is written by its last update (the page leaves the order open; this keeps the result a
    function of the inputs). dtypes float32/float16/bfloat16/bool/int64/int8.
    """


@npu_op(meta=_scatter_nd_meta, kernel=_scatter_nd_update_kernel, writes_back={"input": 0}, samples=_scatter_nd_samples)
def npu_scatter_nd_update_(call: Arguments) -> None:
    """In-place :func:`npu_scatter_nd_update`: writes into ``input`` and returns it (the KV-cache write of
    the public decode code, e.g. ``npu_scatter_nd_update_(kv_cache, slots, key)``).

    Source: torch_npu.npu_scatter_nd_update_ (op-plugin API page). The registered op
    ``npu::npu_scatter_nd_update_`` is functional (the registry's ``writes_back``); this wrapper copies its
    result into ``input`` and returns ``input``, as torch_npu does.
    """


# ---------------------------------------------------------------------------------------------
# npu_prefetch
# ---------------------------------------------------------------------------------------------


def _prefetch_samples() -> list[SampleCall]:
    """A weight prefetched behind an activation, and one without a dependency."""
    weight, x = torch.ones(64, 64), torch.ones(4, 64)
    return [SampleCall((weight, x, 256)), SampleCall((weight, None, 64, 128))]


def _prefetch_meta(call: Arguments) -> tuple:
    """torch_npu's checks of ``max_size`` and ``offset``, in the wording of the path that runs them: its meta
    function (op-plugin ``_meta_registrations.py`` ``npu_prefetch_meta``) on fake tensors, as a compiled graph
    or ``FakeTensorMode`` meets them, and its device kernel (``PrefetchKernelNpuOpApi.cpp``, ``TORCH_CHECK``)
    on real ones. Only the kernel knows the weight's bytes, so only it bounds ``offset`` by them."""
    max_size, offset, weight = call.max_size, call.offset, call.input
    fake = is_fake(weight)
    if max_size <= 0:
        raise OpArgumentError(f"The max_size should be greater than zero, but got {max_size}." if fake
                              else f"max_size should be greater than zero, but got {max_size}", argument="max_size")
    if offset < 0:
        raise OpArgumentError(f"The offset should be nonnegative, but got {offset}." if fake
                              else f"offset should not be smaller than zero, but got {offset}", argument="offset")
    size = weight.numel() * weight.element_size()
    if not fake and size <= offset:
        raise OpArgumentError(f"offset out of range of tensor size, tensor size: {size}, offset: {offset}",
                              argument="offset")
    return ()


@npu_op(meta=_prefetch_meta, kernel=no_outputs, side_effect=True, samples=_prefetch_samples)
def npu_prefetch(call: Arguments) -> None:
    """Prefetch up to ``max_size`` bytes of the weight ``input`` (from ``offset``) into L2 once ``dependency``
    is computed. Returns None and changes no value: on CPU the op exists only as a task for the cost model.

    Source: torch_npu.npu_prefetch (op-plugin API page: "load the weight into L2 Cache before it is used";
    ``max_size > 0``, larger values are cut to the weight's size; ``offset >= 0`` within the weight). The op is
    side-effecting (op-plugin marks it ``has_side_effect``), so a traced graph keeps it although nothing
    reads its result. The op catalog prices it (``npu::npu_prefetch``). Its argument errors carry
    torch_npu's own messages (:func:`_prefetch_meta`), which scripts and tests match.
    """


# ---------------------------------------------------------------------------------------------
# npu_top_k_top_p
# ---------------------------------------------------------------------------------------------

TOP_K_MAX = 1024  # k in [1, 1024] (API page)


def _top_k_top_p_meta(call: Arguments) -> Out:
    logits, p, k = call.logits, call.p, call.k
    require_dtype("logits", logits, FLOAT_DTYPES)
    if logits.dim() != 2:
        raise OpArgumentError(f"logits has shape {list(logits.shape)}; expected 2-D [batch, vocab]", argument="logits")
    if p is not None:
        require_dtype("p", p, (logits.dtype,), "(logits' dtype)")
        require_shape("p", p, ((logits.shape[0],),))
    if k is not None:
        require_dtype("k", k, (torch.int32,))
        require_shape("k", k, ((logits.shape[0],),))
    return Out(list(logits.shape), logits.dtype)


def _top_k_top_p_kernel(call: Arguments) -> torch.Tensor:
    ordered = torch.sort(call.logits, dim=-1, stable=True)  # ascending
    values = ordered.values
    vocab = call.logits.shape[-1]
    if call.k is not None:
        kk = call.k.to(torch.int64)
        if bool(((kk < 1) | (kk > min(TOP_K_MAX, vocab))).any()):
            raise OpArgumentError(f"k values must be in [1, min(1024, vocab={vocab})]", argument="k")
        threshold = values.gather(-1, (vocab - kk).unsqueeze(-1))
        values = values.masked_fill(values < threshold, float("-inf"))
    if call.p is not None:
        probs = softmax(values.to(torch.float32))
        cumulative = torch.cumsum(probs, dim=-1)
        drop = cumulative <= (1.0 - call.p.to(torch.float32)).unsqueeze(-1)
        drop[:, -1] = False
        values = values.masked_fill(drop, float("-inf"))
    return torch.empty_like(values).scatter_(-1, ordered.indices, values)


def _top_k_top_p_samples() -> list[SampleCall]:
    logits = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))
    k = torch.tensor([4, 10, 32], dtype=torch.int32)
    return [SampleCall((logits, torch.tensor([0.5, 0.9, 1.0]), k)), SampleCall((logits, None, k))]


@npu_op(meta=_top_k_top_p_meta, kernel=_top_k_top_p_kernel, samples=_top_k_top_p_samples)
def npu_top_k_top_p(call: Arguments) -> None:
    """Sampling filter: logits outside the top-k and the top-p nucleus become -inf; the rest are unchanged.

    Source: torch_npu.npu_top_k_top_p (op-plugin API page formula, followed step by step). ``logits``
    ``[B, V]`` float32/float16/bfloat16; ``p`` ``[B]`` in logits' dtype; ``k`` int32 ``[B]`` in [1, 1024].

    1. Sort each row ascending (stable). 2. top-k: values below the k-th largest become -inf (ties at the
    threshold stay). 3. top-p: ``softmax`` of the kept values (float32, fixed-order sum), cumulative sums
    from the smallest (float32, sequential), and every position whose cumulative probability is
    ``<= 1 - p`` becomes -inf, except the largest. 4. Scatter back to the original order. A None ``p`` or
    ``k`` skips its step.
    """


# ---------------------------------------------------------------------------------------------
# npu_confusion_transpose
# ---------------------------------------------------------------------------------------------


def _confusion_shape(self: torch.Tensor, perm: Sequence[int], shape: Sequence[int], transpose_first: bool) -> list[int]:
    """Output shape of reshape-then-permute or permute-then-reshape, with torch's own checks."""
    probe = torch.empty(self.shape, device="meta")
    if transpose_first:
        return list(probe.permute(*perm).reshape(*shape).shape)
    return list(probe.reshape(*shape).permute(*perm).shape)


def _confusion_transpose_meta(call: Arguments) -> Out:
    self = call.input
    try:
        out_shape = _confusion_shape(self, call.perm, call.shape, call.transpose_first)
    except RuntimeError as err:
        first = "permute by perm, then reshape" if call.transpose_first else "reshape, then permute by perm"
        raise OpArgumentError(
            f"npu_confusion_transpose cannot {first} for self {list(self.shape)}, perm={list(call.perm)}, "
            f"shape={list(call.shape)}: {err}"
        ) from None
    return Out(out_shape, self.dtype)


def _confusion_transpose_kernel(call: Arguments) -> torch.Tensor:
    self, perm, shape, transpose_first = call.input, call.perm, call.shape, call.transpose_first
    moved = self.permute(*perm).reshape(*shape) if transpose_first else self.reshape(*shape).permute(*perm)
    return moved.clone(memory_format=torch.contiguous_format)


def _confusion_transpose_samples() -> list[SampleCall]:
    """Both orders: permute then reshape, and reshape then permute."""
    x = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(0))
    return [SampleCall((x, [0, 2, 1, 3], [2, 4, 18], True)), SampleCall((x, [0, 2, 1], [2, 12, 6], False))]

def _inverse(perm: Sequence[int]) -> list[int]:
    inverse = [0] * len(perm)
    for position, dim in enumerate(perm):
        inverse[dim] = position
    return inverse


def _confusion_transpose_backward_call(call: Arguments) -> Arguments:
    """The backward as the forward op it runs (op-plugin's kernel): the inverse permutation, in the order
    given, over the gradient reshaped to ``shape`` (transpose_first) or to ``shape`` permuted (not)."""
    perm, shape = call.perm, list(call.shape)
    between = shape if call.transpose_first else [shape[dim] for dim in perm]
    return bind(npu_confusion_transpose, call.grad, _inverse(perm), between, call.transpose_first)


def _confusion_transpose_backward_meta(call: Arguments) -> Out:
    if sorted(call.perm) != list(range(len(call.perm))):
        raise OpArgumentError(
            f"perm={list(call.perm)} must be a permutation of the dims 0 to {len(call.perm) - 1}", argument="perm"
        )
    out = _confusion_transpose_meta(_confusion_transpose_backward_call(call))
    if list(out.shape) != list(call.shape):
        raise OpArgumentError(f"grad has shape {list(call.grad.shape)}; it does not give the input shape "
                              f"{list(call.shape)} under perm={list(call.perm)}", argument="grad")
    return out


def _confusion_transpose_backward_kernel(call: Arguments) -> torch.Tensor:
    return _confusion_transpose_kernel(_confusion_transpose_backward_call(call))


def _confusion_transpose_backward_samples() -> list[SampleCall]:
    """The backward of each forward sample, as derivatives.yaml calls it: the input's shape and the
    other order."""
    calls = []
    for sample in _confusion_transpose_samples():
        x, perm, _, transpose_first = sample.args
        grad = torch.ops.npu.npu_confusion_transpose(*sample.args)
        calls.append(SampleCall((grad.neg(), perm, list(x.shape), not transpose_first)))
    return calls


@npu_op(
    meta=_confusion_transpose_backward_meta,
    kernel=_confusion_transpose_backward_kernel,
    samples=_confusion_transpose_backward_samples,
)
def npu_confusion_transpose_backward(call: Arguments) -> None:
    """The gradient of :func:`npu_confusion_transpose`'s input: ``grad`` moved back to the input's
    ``shape`` by the inverse permutation (ConfusionTransposeD again, with the order flipped).

    Sources: op-plugin derivatives.yaml (``npu_confusion_transpose -> npu_confusion_transpose_backward(grad,
    perm, self.sym_sizes(), !transpose_first)``) and its kernel (ConfusionTransposeKernelNpuOpApi.cpp: the
    inverse ``perm``, the reshape target ``shape`` or ``shape`` permuted by ``perm``).
    """


def _confusion_transpose_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.perm, ctx.shape, ctx.transpose_first = list(call.perm), list(call.input.shape), call.transpose_first


def _confusion_transpose_grad(ctx: object, grad: torch.Tensor) -> tuple:
    dx = torch.ops.npu.npu_confusion_transpose_backward(grad, ctx.perm, ctx.shape, not ctx.transpose_first)
    return dx, None, None, None


@npu_op(
    meta=_confusion_transpose_meta,
    kernel=_confusion_transpose_kernel,
    derivative=Derivative(_confusion_transpose_setup, _confusion_transpose_grad),
    samples=_confusion_transpose_samples,
)
def npu_confusion_transpose(call: Arguments) -> None:
    """Reshape and transpose in one op: ``x.permute(perm).reshape(shape)`` when ``transpose_first``, else
    ``x.reshape(shape).permute(perm)``; the result is a new contiguous tensor.

    Source: torch_npu.npu_confusion_transpose (op-plugin API page, marked beta and to be replaced by
    ``view`` + ``permute``).
    """


# ---------------------------------------------------------------------------------------------
# scatter_update / scatter_update_ (the per-batch KV-cache write at an offset)
# ---------------------------------------------------------------------------------------------

SCATTER_UPDATE_DTYPES = (torch.int8, torch.float16, torch.float32, torch.bfloat16, torch.int32)
SCATTER_UPDATE_RANKS = (2, 8)


def _scatter_update_axis(data: torch.Tensor, axis: int) -> int:
    """``axis`` as a non-negative dim of data; dim 0 is the batch the indices run over, so it cannot be it."""
    dim = axis + data.dim() if axis < 0 else axis
    if not 1 <= dim < data.dim():
        raise OpArgumentError(
            f"axis={axis} must name a dim of input other than the batch dim 0 (input has {data.dim()} dims)",
            argument="axis"
        )
    return dim


def _scatter_update_meta(call: Arguments) -> Out:
    self, indices, updates = call.input, call.indices, call.updates
    require_dtype("input", self, SCATTER_UPDATE_DTYPES)
    require_dtype("updates", updates, (self.dtype,), "(input's dtype)")
    require_dtype("indices", indices, (torch.int32, torch.int64))
    low, high = SCATTER_UPDATE_RANKS
    if not low <= self.dim() <= high or updates.dim() != self.dim():
        raise OpArgumentError(
            f"input {list(self.shape)} and updates {list(updates.shape)} must have the same rank, 2 to 8",
            argument="input"
        )
    dim = _scatter_update_axis(self, call.axis)
    if indices.dim() != 1:
        raise OpArgumentError(f"indices has shape {list(indices.shape)}; only 1-D indices (one offset per batch) are "
                              "implemented (the documentation does not describe the 2-D form)", argument="indices")
    require_shape("indices", indices, ((self.shape[0],),))
    expected = [*self.shape[:dim], updates.shape[dim], *self.shape[dim + 1:]]
    if list(updates.shape) != expected or updates.shape[dim] > self.shape[dim]:
        raise OpArgumentError(
            f"updates has shape {list(updates.shape)}; it must equal input's {list(self.shape)} except "
            f"along axis {call.axis}, where it holds at most {self.shape[dim]} entries", argument="updates"
        )
    return Out(list(self.shape), self.dtype)


def _scatter_update_kernel(call: Arguments) -> torch.Tensor:
    self, updates, axis = call.input, call.updates, call.axis
    dim = _scatter_update_axis(self, axis)
    count = updates.shape[dim]
    starts = call.indices.to(torch.int64)
    if bool(((starts < 0) | (starts + count > self.shape[dim])).any()):
        raise OpArgumentError(f"indices {starts.tolist()} plus the {count} updated entries leave input's axis {axis} "
                              f"(size {self.shape[dim]}); the op does not check bounds on the device",
                              argument="indices")
    along = [1] * self.dim()
    along[dim] = count
    batch = [1] * self.dim()
    batch[0] = self.shape[0]
    positions = (starts.reshape(batch) + torch.arange(count).reshape(along)).expand(updates.shape)
    return self.clone(memory_format=torch.contiguous_format).scatter_(dim, positions, updates)


def _scatter_update_samples() -> list[SampleCall]:
    """Two new tokens per batch written into a bfloat16 cache from each batch's offset along the sequence."""
    gen = torch.Generator().manual_seed(0)
    data, updates = torch.randn(3, 2, 8, 4, generator=gen).bfloat16(), torch.randn(3, 2, 2, 4, generator=gen).bfloat16()
    return [SampleCall((data, torch.tensor([0, 5, 3], dtype=torch.int32), updates, -2))]


@npu_op(meta=_scatter_update_meta, kernel=_scatter_update_kernel, samples=_scatter_update_samples)
def scatter_update(call: Arguments) -> None:
    """A copy of ``data`` whose batch b has ``updates[b]`` written from offset ``indices[b]`` along ``axis``.

    Source: torch_npu.scatter_update (op-plugin API page: dtypes, ranks, "data unchanged") and CANN
    ops-nn's Scatter README for 1-D indices: with data ``(a, b, c, d)``, updates ``(a, b, e, d)`` and
    ``axis=-2``, ``out[i, j, indices[i] + k, l] = updates[i, j, k, l]`` (``axis=-1`` likewise on the last
    dim). This is the KV-cache write of decode: the new tokens of batch i land at its current length.

    * data/updates int8, float16, float32, bfloat16, int32, rank 2-8, equal except along ``axis``;
      indices int32/int64 ``[a]``. Indices must keep the write inside data (checked here; the device
      does not check).
    * Refused: 2-D indices (the documentation does not describe them).
    """


@npu_op(
    meta=_scatter_update_meta, kernel=_scatter_update_kernel, writes_back={"input": 0}, samples=_scatter_update_samples,
    inplace_of="scatter_update",
)
def scatter_update_(call: Arguments) -> None:
    """In-place :func:`scatter_update`: writes into ``data`` and returns it (cann-recipes' decode KV-cache
    write ``scatter_update_(past_key, kv_len, key_states, -2)``).

    Source: torch_npu.scatter_update_ (op-plugin API page; schema ``Tensor(a!) self -> Tensor(a!)``). The op
    is :func:`scatter_update` and a copy into ``data`` (the registry's ``inplace_of``), so
    ``torch.ops.npu.scatter_update_`` returns ``data`` itself, under a fake mode too, and a traced graph
    holds ``scatter_update`` and a ``copy_``, as torch_npu's functionalization gives.
    """


# ---------------------------------------------------------------------------------------------
# npu_scatter_pa_kv_cache
# ---------------------------------------------------------------------------------------------

CACHE_MODES = ("Norm", "PA_NZ")


def is_norm_cache(rows: torch.Tensor, cache: torch.Tensor) -> bool:
    """Scenario 2's ND cache [blocks, block_size, heads, head_size], told from scenario 1's by its shape
    (the doc picks the scenario from how the arguments are built)."""
    return cache.dim() == 4 and tuple(cache.shape[2:]) == tuple(rows.shape[1:])


def nz_runs(name: str, rows: torch.Tensor, cache: torch.Tensor) -> tuple[int, int]:
    """(runs per token row, values per run) of a PA_NZ cache: [blocks, heads x size / c, block_size, c] or
    [blocks, heads, size / c, block_size, c] with c = 32 bytes of values."""
    run = nz_run(cache)
    features = rows.shape[1] * rows.shape[2]
    expected = {4: (features // run, run), 5: (rows.shape[1], rows.shape[2] // run, run)}
    layout = cache.shape[1:-2] + cache.shape[-1:] if cache.dim() in expected else None
    if rows.shape[2] * rows.element_size() % NZ_RUN_BYTES or layout is None or tuple(layout) != expected[cache.dim()]:
        raise OpArgumentError(
            f"{name}_cache has shape {list(cache.shape)}; for {name} {list(rows.shape)} expected [blocks, block_size, "
            f"{rows.shape[1]}, {rows.shape[2]}] (Norm) or the PA_NZ [blocks, {features // run}, block_size, {run}] "
            f"(head size x dtype size a multiple of {NZ_RUN_BYTES} bytes)", argument=name
        )
    return features // run, run


def _pa_cache_mode(key: torch.Tensor, key_cache: torch.Tensor, cache_mode: Optional[str]) -> str:
    return cache_mode or ("Norm" if is_norm_cache(key, key_cache) else "PA_NZ")


def _scatter_pa_kv_cache_meta(call: Arguments) -> tuple[Out, Out]:
    key, key_cache, value_cache = call.key, call.key_cache, call.value_cache
    require_dtype("slot_mapping", call.slot_mapping, (torch.int32, torch.int64))
    require_shape("slot_mapping", call.slot_mapping, ((key.shape[0],),))
    mode = _pa_cache_mode(key, key_cache, call.cache_mode)
    for name, rows, cache in (("key", key, key_cache), ("value", call.value, value_cache)):
        require_dtype(name, rows, (torch.float16, torch.bfloat16, torch.int8))
        require_dtype(f"{name}_cache", cache, (rows.dtype,), f"({name}'s dtype)")
        if rows.dim() != 3 or rows.shape[0] != key.shape[0]:
            raise OpArgumentError(
                f"{name} has shape {list(rows.shape)}; expected [{key.shape[0]} tokens, heads, head_size]",
                argument=name
            )
        if mode == "Norm" and not is_norm_cache(rows, cache):
            raise OpArgumentError(f"{name}_cache has shape {list(cache.shape)}; Norm needs [blocks, block_size, "
                                  f"{rows.shape[1]}, {rows.shape[2]}]", argument=name)
        if mode == "PA_NZ":
            nz_runs(name, rows, cache)
    return Out(list(key_cache.shape), key_cache.dtype), Out(list(value_cache.shape), value_cache.dtype)


def write_nz_rows(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Scenario 1: token rows [T, heads, size] into a 4-D or 5-D PA_NZ cache (block_size second to last)."""
    return write_nz_slots(cache, rows.reshape(rows.shape[0], -1), slots, cache.shape[-2])


def _scatter_pa_kv_cache_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    write = write_slots if _pa_cache_mode(call.key, call.key_cache, call.cache_mode) == "Norm" else write_nz_rows
    return write(call.key_cache, call.key, call.slot_mapping), write(call.value_cache, call.value, call.slot_mapping)


def _scatter_pa_kv_cache_samples() -> list[SampleCall]:
    """Five tokens of 2 heads written into Norm caches of 3 blocks of 4 slots."""
    gen = torch.Generator().manual_seed(0)
    key, value = torch.randn(5, 2, 32, generator=gen).bfloat16(), torch.randn(5, 2, 16, generator=gen).bfloat16()
    caches = torch.zeros(3, 4, 2, 32, dtype=torch.bfloat16), torch.zeros(3, 4, 2, 16, dtype=torch.bfloat16)
    slots = torch.tensor([0, 5, 6, 11, 3], dtype=torch.int32)
    return [SampleCall((key, value, *caches, slots), {"cache_mode": "Norm"})]


@npu_op(
    meta=_scatter_pa_kv_cache_meta,
    kernel=_scatter_pa_kv_cache_kernel,
    writes_back={"key_cache": 0, "value_cache": 1},
    samples=_scatter_pa_kv_cache_samples,
)
def npu_scatter_pa_kv_cache(call: Arguments) -> None:
    """Write each token's key and value into its paged-cache slot, in place (ScatterPaKvCache); returns None.

    Sources: ScatterPaKvCache's README (hicann/ops-transformer attention/scatter_pa_kv_cache) and
    aclnnScatterPaKvCache, scenarios 1 and 2, the ones Atlas A2/A3 callers use (vllm-ascend's KV write,
    omni-infer's NZ caches):

    * ``key`` [T, heads, k_head_size] and ``value`` [T, heads, v_head_size], float16, bfloat16 or int8
      (their dtypes may differ), each cache in its row's dtype; ``slot_mapping`` int32/int64 [T]: token t
      goes to block ``slot // block_size``, offset ``slot % block_size``.
    * ``cache_mode="Norm"`` (scenario 2): caches [blocks, block_size, heads, head_size].
    * ``cache_mode="PA_NZ"`` (scenario 1): caches [blocks, heads x head_size / c, block_size, c] or
      [blocks, heads, head_size / c, block_size, c], c = 32 bytes of values (16 fp16/bf16, 32 int8); a token's
      row is cut into runs of c values, run r stored at [block, r, offset].
    * Without ``cache_mode`` the scenario follows the caches' shapes, as the doc says it does.
    * Slots must lie in the cache (checked); when two tokens name one slot, the later token's row stays.
      The compression scenarios (``compress_lens``, ``compress_seq_offset``, ``seq_lens``) are not modeled.
    """
    require_unused("npu_scatter_pa_kv_cache (the compression scenarios)", compress_lens=call.compress_lens,
                   compress_seq_offset=call.compress_seq_offset, seq_lens=call.seq_lens)
    if call.cache_mode is not None:
        require_choice("cache_mode", call.cache_mode, CACHE_MODES, "ND or FRACTAL_NZ caches")
