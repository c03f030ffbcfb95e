"""Attention ops: fused inference attention (prefill and decode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from .checks import (
    require_bool, require_choice, require_dtype, require_float, require_int, require_int_list, require_ints,
    require_optional_tensor, require_shape, require_tensor, require_unused,
)
from ..exact import cube_matmul
from .fixedorder import pairwise_sum
from .registry import Out, npu_op

FUSED_INFER_ATTENTION_SCORE_DOC = (
    "https://www.hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000837.html"
)
FIA_LAYOUTS = ("BSH", "BSND", "BNSD")
FIA_DTYPES = (torch.float16, torch.bfloat16)
FIA_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
FIA_NO_BAND = 2147483647  # pre_tokens/next_tokens default: no band limit
CAUSAL_MASK_SIZE = 2048  # sparse_mode 2/3 take this fixed upper-triangular mask


@dataclass(frozen=True)
class _AttentionDims:
    """Sizes of one attention call, read from the layouts."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    value_dim: int


def _layout_sizes(name: str, tensor: torch.Tensor, layout: str, heads: int) -> tuple[int, int, int]:
    """(batch, sequence, head dim) of a BSH / BSND / BNSD tensor with ``heads`` heads."""
    if layout == "BSH":
        if tensor.dim() != 3 or tensor.shape[2] % heads != 0:
            raise ValueError(f"{name} has shape {list(tensor.shape)}; BSH needs [B, S, {heads} x D]")
        return tensor.shape[0], tensor.shape[1], tensor.shape[2] // heads
    heads_dim = 2 if layout == "BSND" else 1
    if tensor.dim() != 4 or tensor.shape[heads_dim] != heads:
        raise ValueError(
            f"{name} has shape {list(tensor.shape)}; {layout} needs 4 dims with {heads} heads at dim {heads_dim}"
        )
    seq = tensor.shape[1] if layout == "BSND" else tensor.shape[2]
    return tensor.shape[0], seq, tensor.shape[3]


def _attention_dims(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: str, heads: int, kv_heads: int
) -> _AttentionDims:
    batch, q_len, head_dim = _layout_sizes("query", query, layout, heads)
    key_batch, kv_len, key_dim = _layout_sizes("key", key, layout, kv_heads)
    value_batch, value_len, value_dim = _layout_sizes("value", value, layout, kv_heads)
    if (key_batch, value_batch) != (batch, batch) or value_len != kv_len or key_dim != head_dim:
        raise ValueError(
            f"query {list(query.shape)}, key {list(key.shape)} and value {list(value.shape)} do not match in "
            f"{layout}: batch, KV sequence and query/key head dim must agree"
        )
    return _AttentionDims(batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim)


def _check_fia_mask(mask: Optional[torch.Tensor], sparse_mode: int, dims: _AttentionDims) -> None:
    if mask is None:
        if sparse_mode in (2, 3):
            raise ValueError(
                f"sparse_mode={sparse_mode} needs the compressed causal mask atten_mask="
                f"torch.triu(torch.ones({CAUSAL_MASK_SIZE}, {CAUSAL_MASK_SIZE}, dtype=torch.bool), diagonal=1)"
            )
        return
    require_dtype("atten_mask", mask, FIA_MASK_DTYPES)
    size = CAUSAL_MASK_SIZE
    if sparse_mode in (2, 3):
        require_shape("atten_mask", mask, ((size, size), (1, size, size), (1, 1, size, size)))
        return
    b, sq, skv = dims.batch, dims.q_len, dims.kv_len
    shapes = [(b, sq, skv), (1, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (b, skv) if sq == 1 else (sq, skv)]
    require_shape("atten_mask", mask, shapes)


def _seq_lengths(name: str, values: Optional[Sequence[int]], batch: int, limit: int) -> list[int]:
    """Per-batch valid lengths (one value is broadcast); None means the full length."""
    if values is None:
        return [limit] * batch
    lengths = [require_int(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if len(lengths) not in (1, batch) or any(not 0 <= v <= limit for v in lengths):
        raise ValueError(f"{name}={lengths} must hold 1 or {batch} (batch) values between 0 and {limit}")
    return lengths * batch if len(lengths) == 1 else lengths


def _check_fia_options(
    num_heads: int,
    num_key_value_heads: int,
    input_layout: str,
    sparse_mode: int,
    inner_precise: int,
    pre_tokens: int,
    next_tokens: int,
) -> None:
    """Scalar options: head counts, layout, sparse and precision modes, token bands."""
    if require_int("num_heads", num_heads) < 1:
        raise ValueError(f"num_heads={num_heads} must be >= 1")
    kv_heads = require_int("num_key_value_heads", num_key_value_heads) or num_heads
    if kv_heads < 0 or num_heads % kv_heads != 0:
        raise ValueError(f"num_key_value_heads={num_key_value_heads} must divide num_heads={num_heads} (GQA groups)")
    if input_layout not in FIA_LAYOUTS:
        raise ValueError(f"input_layout={input_layout!r} is not implemented; expected one of {', '.join(FIA_LAYOUTS)}")
    require_choice("sparse_mode", require_int("sparse_mode", sparse_mode), (0, 2, 3), "0 mask as given, 2/3 causal")
    require_choice("inner_precise", require_int("inner_precise", inner_precise), (0, 1), "device precision modes")
    if (require_int("pre_tokens", pre_tokens), require_int("next_tokens", next_tokens)) != (FIA_NO_BAND, FIA_NO_BAND):
        raise ValueError(
            "pre_tokens/next_tokens bands are not implemented; keep the defaults (2147483647) and express "
            "causality with atten_mask or sparse_mode 2/3"
        )


def _check_fia_arguments(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: Optional[torch.Tensor] = None,
    actual_seq_lengths: Optional[Sequence[int]] = None,
    actual_seq_lengths_kv: Optional[Sequence[int]] = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = FIA_NO_BAND,
    next_tokens: int = FIA_NO_BAND,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
    **unsupported: object,
) -> None:
    """The argument checks that need no tensor metadata.

    Every optional tensor of an unimplemented feature (quantisation, paged KV, shared prefix, rope
    split, pse) arrives in ``unsupported`` and must be None.  block_size and the antiquant modes only
    configure those features and are checked as ints only.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_tensor(name, tensor)
    require_optional_tensor("atten_mask", atten_mask)
    require_unused("npu_fused_infer_attention_score", **unsupported)
    require_ints(
        block_size=block_size, antiquant_mode=antiquant_mode, key_antiquant_mode=key_antiquant_mode,
        value_antiquant_mode=value_antiquant_mode,
    )
    require_int_list("actual_seq_lengths", actual_seq_lengths)
    require_int_list("actual_seq_lengths_kv", actual_seq_lengths_kv)
    require_float("scale", scale)
    require_bool("softmax_lse_flag", softmax_lse_flag)
    _check_fia_options(num_heads, num_key_value_heads, input_layout, sparse_mode, inner_precise, pre_tokens, next_tokens)


def _fia_layout(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: Optional[torch.Tensor] = None,
    actual_seq_lengths: Optional[Sequence[int]] = None,
    actual_seq_lengths_kv: Optional[Sequence[int]] = None,
    num_heads: int = 1,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    softmax_lse_flag: bool = False,
    **other_options: object,
) -> tuple[list[int], list[int], _AttentionDims]:
    """Validate the attention tensors from metadata; return (out shape, lse shape, dims)."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_dtype(name, tensor, FIA_DTYPES, "(int8 quantised attention is not implemented)")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise ValueError(f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    dims = _attention_dims(query, key, value, input_layout, num_heads, num_key_value_heads or num_heads)
    _check_fia_mask(atten_mask, sparse_mode, dims)
    _seq_lengths("actual_seq_lengths", actual_seq_lengths, dims.batch, dims.q_len)
    _seq_lengths("actual_seq_lengths_kv", actual_seq_lengths_kv, dims.batch, dims.kv_len)
    out_shape = {
        "BSH": [dims.batch, dims.q_len, num_heads * dims.value_dim],
        "BSND": [dims.batch, dims.q_len, num_heads, dims.value_dim],
        "BNSD": [dims.batch, num_heads, dims.q_len, dims.value_dim],
    }[input_layout]
    lse_shape = [dims.batch, num_heads, dims.q_len, 1] if softmax_lse_flag else [0]
    return out_shape, lse_shape, dims


def _fia_meta(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any) -> tuple[Out, Out]:
    """attention_out in query's layout and dtype, softmax_lse float32."""
    out_shape, lse_shape, _ = _fia_layout(query, key, value, **options)
    return Out(out_shape, query.dtype), Out(lse_shape, torch.float32)


def _to_bnsd(tensor: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """float32 [B, N, S, D] view of a BSH / BSND / BNSD tensor."""
    if layout == "BSH":
        tensor = tensor.reshape(tensor.shape[0], tensor.shape[1], heads, -1)
    if layout != "BNSD":
        tensor = tensor.transpose(1, 2)
    return tensor.to(torch.float32)


def _from_bnsd(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return tensor
    bsnd = tensor.transpose(1, 2)
    return bsnd.reshape(*bsnd.shape[:2], -1) if layout == "BSH" else bsnd.contiguous()


def _masked_out(mask: torch.Tensor, dims: _AttentionDims) -> torch.Tensor:
    """A mode-0 atten_mask as bool [B or 1, 1, Sq, Skv]; True (nonzero) means "do not attend"."""
    masked = mask != 0
    if masked.dim() == 2:
        return masked.reshape(-1, 1, 1, dims.kv_len) if dims.q_len == 1 else masked.reshape(1, 1, dims.q_len, -1)
    return masked.unsqueeze(1) if masked.dim() == 3 else masked


def _visible(
    mask: Optional[torch.Tensor], sparse_mode: int, dims: _AttentionDims, q_lens: list[int], kv_lens: list[int]
) -> torch.Tensor:
    """bool [B, 1, Sq, Skv]: which key each query row may attend to."""
    q_pos = torch.arange(dims.q_len).reshape(1, 1, -1, 1)
    kv_pos = torch.arange(dims.kv_len).reshape(1, 1, 1, -1)
    q_len = torch.tensor(q_lens).reshape(-1, 1, 1, 1)
    kv_len = torch.tensor(kv_lens).reshape(-1, 1, 1, 1)
    visible = (q_pos < q_len) & (kv_pos < kv_len)
    if sparse_mode == 2:
        return visible & (kv_pos <= q_pos)
    if sparse_mode == 3:
        return visible & (kv_pos <= q_pos + (kv_len - q_len))
    return visible if mask is None else visible & ~_masked_out(mask, dims)


def _require_causal_mask(mask: torch.Tensor) -> None:
    """sparse_mode 2/3 read causality from the mode; the mask must still be the documented one."""
    expected = torch.ones(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE, dtype=torch.bool).triu(diagonal=1)
    if not torch.equal(mask.reshape(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE) != 0, expected):
        raise ValueError(
            "sparse_mode 2/3 need atten_mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)"
        )


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float) -> tuple[
    torch.Tensor, torch.Tensor
]:
    """softmax(scale * q k^T, masked) v in float32 [B, N, Sq, *]; returns (out, lse [B, N, Sq, 1])."""
    scores = (cube_matmul(q, k.transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf"))
    any_visible = visible.any(dim=-1, keepdim=True)
    row_max = torch.where(any_visible, scores.amax(dim=-1, keepdim=True), 0.0)
    exps = torch.exp(scores - row_max)
    denom = pairwise_sum(exps, dim=-1, keepdim=True)
    has_mass = denom > 0
    probs = exps / torch.where(has_mass, denom, 1.0)
    lse = torch.where(has_mass, row_max + torch.log(torch.where(has_mass, denom, 1.0)), float("inf"))
    return cube_matmul(probs, v), lse


def _fused_infer_attention_score_kernel(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    _, lse_shape, dims = _fia_layout(query, key, value, **options)
    layout = options.get("input_layout", "BSH")
    sparse_mode = options.get("sparse_mode", 0)
    mask = options.get("atten_mask")
    if sparse_mode in (2, 3):
        _require_causal_mask(mask)
    q_lens = _seq_lengths("actual_seq_lengths", options.get("actual_seq_lengths"), dims.batch, dims.q_len)
    kv_lens = _seq_lengths("actual_seq_lengths_kv", options.get("actual_seq_lengths_kv"), dims.batch, dims.kv_len)
    group = dims.heads // dims.kv_heads
    q = _to_bnsd(query, layout, dims.heads)
    k = _to_bnsd(key, layout, dims.kv_heads).repeat_interleave(group, dim=1)
    v = _to_bnsd(value, layout, dims.kv_heads).repeat_interleave(group, dim=1)
    visible = _visible(mask, sparse_mode, dims, q_lens, kv_lens)
    out, lse = _attention(q, k, v, visible, float(options.get("scale", 1.0)))
    lse_out = lse if options.get("softmax_lse_flag", False) else lse.new_zeros(lse_shape)
    return _from_bnsd(out, layout).to(query.dtype), lse_out



@npu_op(
    "(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, Tensor? atten_mask=None, "
    "SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, Tensor? dequant_scale1=None, "
    "Tensor? quant_scale1=None, Tensor? dequant_scale2=None, Tensor? quant_scale2=None, "
    "Tensor? quant_offset2=None, Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, "
    "Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, Tensor? value_antiquant_scale=None, "
    "Tensor? value_antiquant_offset=None, Tensor? block_table=None, Tensor? query_padding_size=None, "
    "Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, Tensor? value_shared_prefix=None, "
    "SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, Tensor? key_rope=None, "
    "Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, int pre_tokens=2147483647, "
    "int next_tokens=2147483647, str input_layout=\"BSH\", int num_key_value_heads=0, int sparse_mode=0, "
    "int inner_precise=0, int block_size=0, int antiquant_mode=0, int key_antiquant_mode=0, "
    "int value_antiquant_mode=0, bool softmax_lse_flag=False) -> (Tensor, Tensor)",
    source=FUSED_INFER_ATTENTION_SCORE_DOC,
    meta=_fia_meta,
    kernel=_fused_infer_attention_score_kernel,
)
def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    pse_shift: Optional[torch.Tensor] = None,
    atten_mask: Optional[torch.Tensor] = None,
    actual_seq_lengths: Optional[Sequence[int]] = None,
    actual_seq_lengths_kv: Optional[Sequence[int]] = None,
    dequant_scale1: Optional[torch.Tensor] = None,
    quant_scale1: Optional[torch.Tensor] = None,
    dequant_scale2: Optional[torch.Tensor] = None,
    quant_scale2: Optional[torch.Tensor] = None,
    quant_offset2: Optional[torch.Tensor] = None,
    antiquant_scale: Optional[torch.Tensor] = None,
    antiquant_offset: Optional[torch.Tensor] = None,
    key_antiquant_scale: Optional[torch.Tensor] = None,
    key_antiquant_offset: Optional[torch.Tensor] = None,
    value_antiquant_scale: Optional[torch.Tensor] = None,
    value_antiquant_offset: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    query_padding_size: Optional[torch.Tensor] = None,
    kv_padding_size: Optional[torch.Tensor] = None,
    key_shared_prefix: Optional[torch.Tensor] = None,
    value_shared_prefix: Optional[torch.Tensor] = None,
    actual_shared_prefix_len: Optional[Sequence[int]] = None,
    query_rope: Optional[torch.Tensor] = None,
    key_rope: Optional[torch.Tensor] = None,
    key_rope_antiquant_scale: Optional[torch.Tensor] = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = FIA_NO_BAND,
    next_tokens: int = FIA_NO_BAND,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference attention (prefill and decode): returns ``(attention_out, softmax_lse)``.

    Sources: torch_npu.npu_fused_infer_attention_score (API reference 6.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000837.html,
    where the scale argument was still called scale_value), op-plugin's function schema (which
    calls it ``scale``, as here) and op-plugin's meta function for the output shapes.

    Semantics implemented, per batch b and head h, in float32:
    ``out = softmax(scale * q k^T + mask) v``, with key/value head ``h // (N / N_kv)``
    (GQA; ``num_key_value_heads=0`` means N).

    * Layouts: BSH (``[B, S, N*D]``), BSND and BNSD, float16/bfloat16.  key/value use the
      same layout with N_kv heads, and value may have its own head dim.  ``attention_out``
      has query's layout and dtype, with value's head dim.
    * Decode (``S_q = 1``) and prefill are the same computation.
    * ``sparse_mode=0``: ``atten_mask`` (bool/int8/uint8, nonzero = masked out) is
      ``[S_q, S_kv]``, ``[B, S_kv]`` for decode, ``[B|1, S_q, S_kv]`` or
      ``[B|1, 1, S_q, S_kv]``; no mask means full attention.
    * ``sparse_mode=2`` (causal from the top left: key j <= query i) and ``3`` (causal from
      the bottom right: j <= i + S_kv - S_q, the usual prefill-with-cache mask).  Both need
      the documented compressed mask ``triu(ones(2048, 2048), 1)`` and check it.
    * ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` (1 or B ints): only the first L
      query rows / keys of each batch are valid.  Invalid query rows get zeros.  For mode 3
      the causal offset uses the actual lengths.
    * ``softmax_lse`` (``softmax_lse_flag=True``): float32 ``[B, N, S_q, 1]``, the
      log-sum-exp of the scaled, masked scores.  For a row with nothing to attend to, the
      output is 0 and lse is +inf (my choice; the value the device writes there was not
      confirmed).  Without the flag, lse is an empty float32 ``[0]``, as in the meta function.
    * Order of float steps: scores = (q.k) * scale; exp(score - rowmax);
      probs = exp / pairwise-sum; out = probs . v; both products are fp32 Cube products
      (:func:`pytest_npufuse.exact.cube_matmul`, single-threaded BLAS), so bits do not depend
      on torch's thread count.  The device's online-softmax (flash)
      order differs in the last bits; both variants of a case use this same kernel.

    Rejected with ValueError: other layouts (SBH, TND, BSH_NBSD, ...), int8 / quantised
    inputs and every quant/antiquant/paged (block_table)/shared-prefix/rope/pse input,
    sparse modes other than 0/2/3, non-default pre_tokens/next_tokens and inner_precise
    other than 0/1.  block_size and the antiquant modes only configure the rejected
    features; they must be ints and are otherwise ignored.
    """
    _check_fia_arguments(**locals())
