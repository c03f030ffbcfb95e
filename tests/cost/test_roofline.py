"""Roofline checks for every cost rule: every op of the catalog, over shapes, dtypes and modes (Hypothesis).

For each op its documented work (:mod:`pytest_npufuse.cost.semantics`: Cube and Vector flops, HBM and link
bytes from its layout, lengths and causal or sparse mode) gives its floor, ``max(Cube flops / Cube peak,
Vector flops / Vector peak, HBM bytes / HBM bandwidth, link bytes / link bandwidth)`` at the peaks of the
kernel's dtype. The modeled body (the cost rule's ``body_us`` on the block dim it launches on) is:

- **never below the floor**: no kernel runs faster than its hardware's peaks;
- **at most ``FACTOR`` (4x) above it for a large call** (a floor of ``LARGE_US`` or more, where fixed costs
  such as a SyncAll or a tile's first K block are amortised). 4x is the product of what the mechanisms
  may cost on a large call over the peaks: the shipped efficiencies (``[efficiency] compute`` 0.7 for a
  roofline body, ``memory`` 0.8 for HBM: 1.43x and 1.25x), a last round of tiles that fills few cores (up
  to 2x for a GEMM of a little more than one round of output tiles per core) and the tile padding to the
  16x16x16 fractal of a thin dimension (~1.1x). A modeled time beyond it prices work the op does not do.
  Exempt from the upper bound: AI CPU kernels (their floor is the AI Core's, but they run on the scalar
  AI CPU cores: that is the mechanism, not an error), ops with no device work (host ops) and ops the catalog
  pins to one core (``block_dim = 1`` or ``"one"``: IndexPutV2 serialising its indices, GE's size
  arithmetic, which only ever sees a few elements), whose floor is that of the one core they launch on.

Examples are bounded (``max_examples`` per op) so the whole file runs in CI in well under a minute.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_npufuse import cost
from pytest_npufuse.cost import semantics
from pytest_npufuse.cost.registry import Work
from pytest_npufuse.ir.program import Annotations, Kernel, TensorSpec, compute_dtype_of
from pytest_npufuse.ir.op import OpInfo
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

FACTOR = 4.0
LARGE_US = 50.0
PROFILES = (load_profile("910c"), load_profile("910b4"))
CATALOG = load_catalog()
OPS = sorted([*CATALOG.entries.values(), *CATALOG.forms.values()], key=lambda info: (info.op_type, info.cost))
_ITEM = {"int8": 1, "bool": 1, "uint8": 1, "float16": 2, "bfloat16": 2, "float32": 4, "int32": 4, "int64": 8}
_MASK = 2048  # the FIA / FlashAttentionScore compressed causal mask is [2048, 2048]


class Call(NamedTuple):
    """One call of an op: its tensors and its scalar arguments."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    attrs: tuple[tuple[str, object], ...] = ()


def spec(dtype: str, *shape: int) -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, math.prod(shape) * _ITEM[dtype])


# ---------------------------------------------------------------- calls by rule, and attention calls by op

SIZES = st.sampled_from([1, 7, 16, 100, 128, 1000, 1024, 4096, 5000, 8192, 16384])
FLOATS = st.sampled_from(["bfloat16", "float16", "float32"])


@st.composite
def vector_calls(draw: st.DrawFn, rule: str) -> Call:
    rows, cols, dtype = draw(SIZES), draw(SIZES), draw(FLOATS)
    x = spec(dtype, rows, cols)
    if rule == "reduction":
        return Call((x,), (spec(dtype, rows, 1),))
    if rule == "fill":
        return Call((), (x,))
    if rule in ("copy", "aicpu", "prefetch"):
        return Call((x,), (x,) if rule != "prefetch" else ())
    if rule == "gather_rows":
        picked = draw(SIZES)
        return Call((x, spec("int64", picked)), (spec(dtype, picked, cols),))
    if rule == "gather_elements":
        return Call((x, spec("int64", rows, cols)), (x,))
    if rule in ("scatter", "cache_update", "index_put"):
        picked = draw(SIZES)
        return Call((x, spec("int64", picked), spec(dtype, picked, cols)), (x,))
    return Call((x, x if draw(st.booleans()) else spec(dtype, 1, cols)), (x,))  # elementwise: same or broadcast


@st.composite
def matmul_calls(draw: st.DrawFn, rule: str) -> Call:
    m, n, k = draw(SIZES), draw(SIZES), draw(SIZES)
    dtype = draw(st.sampled_from(["bfloat16", "float16", "int8"]))
    out = "bfloat16" if dtype == "int8" else dtype
    if rule == "grouped_matmul":
        experts = draw(st.sampled_from([8, 64, 256]))
        return Call((spec(dtype, m, k), spec(dtype, experts, k, n)), (spec(out, m, n),))
    batch = draw(st.sampled_from([1, 1, 4, 32]))
    lead = (batch,) if batch > 1 else ()
    return Call((spec(dtype, *lead, m, k), spec(dtype, *lead, k, n)), (spec(out, *lead, m, n),))


@st.composite
def link_calls(draw: st.DrawFn, rule: str) -> Call:
    tokens, hidden = draw(SIZES), draw(st.sampled_from([1024, 4096, 7168]))
    x = spec("bfloat16", tokens, hidden)
    if rule == "mc2_dispatch":
        return Call((x, spec("int32", tokens, 8)), (spec("bfloat16", tokens * 8, hidden),))
    if rule == "mc2_combine":
        return Call((spec("bfloat16", tokens * 8, hidden), spec("int32", tokens, 8)), (x,))
    return Call((x,), (x,))


LAYOUTS = st.sampled_from(["BNSD", "BSND", "BSH"])
SEQ = st.sampled_from([1, 16, 128, 1000, 4096, 16384])


def _dense(layout: str, batch: int, heads: int, seq: int, dim: int, dtype: str) -> TensorSpec:
    if layout == "BNSD":
        return spec(dtype, batch, heads, seq, dim)
    if layout == "BSND":
        return spec(dtype, batch, seq, heads, dim)
    return spec(dtype, batch, seq, heads * dim)


@st.composite
def packed_fused_calls(draw: st.DrawFn) -> Call:
    """FIA / FlashAttentionScore in TND (varlen: cumulative ends in ``actual_seq_lengths``), or FIA decode over a
    paged KV cache (``block_table [B, blocks]``, ``block_size``, ``actual_seq_lengths_kv``)."""
    heads, dim, batch = draw(st.sampled_from([8, 32])), 128, draw(st.sampled_from([1, 4, 16]))
    if draw(st.booleans()):
        length = draw(st.sampled_from([16, 1024, 8192]))
        query = spec("bfloat16", batch * length, heads, dim)
        ends = tuple(length * (index + 1) for index in range(batch))
        attrs = (("input_layout", "TND"), ("num_heads", heads), ("head_num", heads), ("actual_seq_lengths", ends),
                 ("actual_seq_lengths_kv", ends), ("actual_seq_qlen", ends), ("actual_seq_kvlen", ends))
        return Call((query, query, query), (query,), attrs)
    blocks, kv_len = draw(st.sampled_from([1, 16, 256])), draw(st.sampled_from([1, 100, 2048]))
    # The pool holds every sequence's blocks: four times what this call's table reaches.
    query, cache = spec("bfloat16", batch, 1, heads * dim), spec("bfloat16", 4 * batch * blocks, 128, dim)
    lengths = (min(kv_len, blocks * 128),) * batch
    attrs = (("input_layout", "BSH"), ("num_heads", heads), ("num_key_value_heads", 1), ("block_size", 128),
             ("actual_seq_lengths_kv", lengths))
    return Call((query, cache, cache, spec("int32", batch, blocks)), (query,), attrs)


@st.composite
def fused_attention_calls(draw: st.DrawFn) -> Call:
    """FIA / PFA / FlashAttentionScore: BNSD, BSND or BSH, GQA, non-causal or causal (sparse_mode 2, 3) or a
    band (4), prefill or decode; TND and paged calls too (:func:`packed_fused_calls`)."""
    if draw(st.integers(0, 3)) == 0:
        return draw(packed_fused_calls())
    layout, batch, q_len, kv_len = draw(LAYOUTS), draw(st.sampled_from([1, 4])), draw(SEQ), draw(SEQ)
    heads, group, dim = draw(st.sampled_from([8, 32])), draw(st.sampled_from([1, 8])), draw(st.sampled_from([64, 128]))
    dtype, mode = draw(st.sampled_from(["bfloat16", "float16"])), draw(st.sampled_from([0, 2, 3, 4]))
    query = _dense(layout, batch, heads, q_len, dim, dtype)
    key = _dense(layout, batch, heads // group, kv_len, dim, dtype)
    mask = (spec("bool", _MASK, _MASK),) if mode else ()
    attrs = (("input_layout", layout), ("num_heads", heads), ("head_num", heads), ("num_key_value_heads", heads // group),
             ("sparse_mode", mode), ("pre_tokens", 512), ("next_tokens", 0))
    return Call((query, key, key, *mask), (query,), attrs)


@st.composite
def incre_attention_calls(draw: st.DrawFn) -> Call:
    batch, kv_len, heads, dim = draw(st.sampled_from([1, 16, 64])), draw(SEQ), draw(st.sampled_from([8, 32])), 128
    query, key = spec("bfloat16", batch, 1, heads * dim), spec("bfloat16", batch, kv_len, heads * dim // 8)
    return Call((query, key, key), (query,), (("input_layout", "BSH"), ("num_heads", heads), ("num_key_value_heads", heads // 8)))


@st.composite
def sdpa_calls(draw: st.DrawFn) -> Call:
    batch, q_len, kv_len, heads = draw(st.sampled_from([1, 16])), draw(SEQ), draw(SEQ), draw(st.sampled_from([8, 64]))
    dtype, group = draw(st.sampled_from(["bfloat16", "float16", "float32"])), draw(st.sampled_from([1, 8]))
    query, key = spec(dtype, batch, heads, q_len, 128), spec(dtype, batch, heads // group, kv_len, 128)
    return Call((query, key, key), (query, spec("float32", batch, heads, q_len)), (("is_causal", draw(st.booleans())),))


@st.composite
def grad_calls(draw: st.DrawFn) -> Call:
    batch, seq, heads = draw(st.sampled_from([1, 4])), draw(SEQ), draw(st.sampled_from([8, 32]))
    query = spec("bfloat16", batch, seq, heads, 128)
    attrs = (("input_layout", "BSND"), ("head_num", heads), ("sparse_mode", draw(st.sampled_from([0, 3]))))
    mask = (spec("bool", _MASK, _MASK),) if dict(attrs)["sparse_mode"] else ()
    return Call((query, query, query, query, *mask), (query, query, query), attrs)


@st.composite
def packed_calls(draw: st.DrawFn, masked: bool) -> Call:
    """ATB SelfAttention: ``seq_len [B]`` sequences packed into T tokens, ``out`` written in place."""
    sequences, length = draw(st.sampled_from([1, 4, 16])), draw(st.sampled_from([16, 256, 1024, 4096]))
    heads, kv_heads, dim = draw(st.sampled_from([16, 32])), draw(st.sampled_from([2, 16])), 128
    tokens, dtype = sequences * length, draw(st.sampled_from(["bfloat16", "float16"]))
    query, key = spec(dtype, tokens, heads, dim), spec(dtype, tokens, kv_heads, dim)
    mask = (spec(dtype, length, length),) if masked else ()
    return Call((query, key, key, *mask, spec("int32", sequences), query), (),
                (("num_heads", heads), ("num_kv_heads", kv_heads)))


@st.composite
def paged_calls(draw: st.DrawFn, prefix: bool) -> Call:
    """ATB paged attention over ``[blocks, 128, N_kv, D]`` caches and a ``[B, blocks]`` table."""
    batch, blocks, heads = draw(st.sampled_from([1, 8, 64])), draw(st.sampled_from([1, 8, 64])), draw(st.sampled_from([8, 32]))
    new = draw(st.sampled_from([16, 512])) if prefix else 1
    cache = spec("bfloat16", batch * blocks, 128, 1, 128)
    query, table, lengths = spec("bfloat16", batch * new, heads, 128), spec("int32", batch, blocks), spec("int32", batch)
    extra = (spec("bfloat16", 128, 128), lengths, lengths) if prefix else (lengths,)
    return Call((query, cache, cache, table, *extra, query), (), (("num_kv_heads", 1), ("num_heads", heads)))


@st.composite
def sparse_calls(draw: st.DrawFn) -> Call:
    batch, tokens, top_k, cached = draw(st.sampled_from([1, 16, 64])), draw(st.sampled_from([1, 4])), 2048, 65536
    query, rope = spec("bfloat16", batch, tokens, 128, 512), spec("bfloat16", batch, tokens, 128, 64)
    caches = (spec("bfloat16", cached, 1, 512), spec("bfloat16", cached, 1, 64))
    return Call((query, rope, *caches, spec("int32", batch, tokens, 1, top_k)), (query,))


@st.composite
def indexer_calls(draw: st.DrawFn) -> Call:
    batch, tokens, keys = draw(st.sampled_from([1, 16])), draw(st.sampled_from([1, 4, 1024])), draw(SEQ)
    query, key = spec("bfloat16", batch, tokens, 64, 128), spec("bfloat16", batch, keys, 1, 128)
    return Call((query, key, spec("bfloat16", batch, tokens, 64)), (spec("int32", batch, tokens, 1, 2048),))


_BY_OP = {
    "npu::npu_fused_infer_attention_score": fused_attention_calls(), "npu::npu_fused_infer_attention_score_v2": fused_attention_calls(),
    "npu::npu_prompt_flash_attention": fused_attention_calls(), "npu::npu_fusion_attention": fused_attention_calls(),
    "npu::npu_incre_flash_attention": incre_attention_calls(), "npu::npu_fusion_attention_grad": grad_calls(),
    "aten::_scaled_dot_product_flash_attention_for_cpu": sdpa_calls(),
    "npu::_npu_flash_attention": packed_calls(True), "npu::_npu_flash_attention_v3": packed_calls(True),
    "npu::_npu_flash_attention_unpad": packed_calls(False), "npu::_npu_flash_attention_unpad_v2": packed_calls(False),
    "npu::_npu_flash_attention_qlens": paged_calls(True), "npu::_npu_paged_attention": paged_calls(False),
    "npu::_npu_paged_attention_splitfuse": paged_calls(True),
    "npu::npu_sparse_flash_attention": sparse_calls(), "npu::npu_kv_quant_sparse_flash_attention": sparse_calls(),
    "npu::npu_lightning_indexer": indexer_calls(), "npu::npu_quant_lightning_indexer": indexer_calls(),
}
_MATMUL_RULES = ("matmul", "linear", "grouped_matmul", "matmul_all_reduce") + tuple(
    name for name in cost.rule_names() if name.startswith("matmul_")
)
_LINK_RULES = ("all_reduce", "collective", "mc2_dispatch", "mc2_combine")


def calls_for(info: OpInfo) -> st.SearchStrategy[Call]:
    """The calls an op is checked on: its own (attention ops, whose layouts and modes matter), else its rule's."""
    if info.op_type in _BY_OP:
        return _BY_OP[info.op_type]
    if info.cost in _MATMUL_RULES:
        return matmul_calls(info.cost)
    if info.cost in _LINK_RULES:
        return link_calls(info.cost)
    return vector_calls(info.cost)


# ---------------------------------------------------------------- the check


def kernel_of(info: OpInfo, call: Call) -> Kernel:
    """The kernel capture would build for ``call``: priced by the op's rule, as :func:`cost.kernel_work` does."""
    flops, nbytes = cost.kernel_work(info, call.inputs, call.outputs, attrs=call.attrs)
    return Kernel(
        index=0, name=info.kernel_type, node="k", op_type=info.op_type, info=info,
        inputs=tuple(f"in{i}" for i in range(len(call.inputs))), outputs=("k",), output_specs=call.outputs,
        annotations=Annotations(), flops=flops, bytes=nbytes, compute_dtype=compute_dtype_of(call.inputs, call.outputs),
        source="", input_specs=call.inputs, attrs=call.attrs,
    )


def modeled_and_floor(info: OpInfo, call: Call, profile) -> tuple[float, float]:
    """The modeled body of one call and the floor of the work its semantics demand."""
    info = info.for_dtypes(spec.dtype for spec in (*call.inputs, *call.outputs))
    kernel = kernel_of(info, call)
    body = cost.body_us(kernel, cost.block_dim(kernel, profile), profile)
    count = len(call.inputs)
    work = Work(call.inputs, call.outputs, (True,) * count, (False,) * count, info.flops_per_element,
                info.access_bytes, call.attrs)
    return body, semantics.floor_us(semantics.op_work(info, work), kernel.compute_dtype, profile)


def check_roofline(info: OpInfo, call: Call, profile) -> None:
    body, floor = modeled_and_floor(info, call, profile)
    where = f"{info.op_type} ({info.cost}) on {profile.name}: inputs {[s.shape for s in call.inputs]}, attrs {dict(call.attrs)}"
    assert body >= floor * (1 - 1e-9), f"{where}: modeled {body:.4g} us is below its roofline floor {floor:.4g} us"
    exempt = info.engine in ("aicpu", "host") or info.block_dim in (1, "one")
    if floor >= LARGE_US and not exempt:
        assert body <= FACTOR * floor, f"{where}: modeled {body:.4g} us is {body / floor:.1f}x its roofline floor {floor:.4g} us"


@pytest.mark.parametrize("info", OPS, ids=lambda info: info.op_type + (f"@{info.cost}" if "@" in info.op_type else ""))
def test_every_op_stays_within_its_roofline(info: OpInfo) -> None:
    @settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(call=calls_for(info), profile=st.sampled_from(PROFILES))
    def check(call: Call, profile) -> None:
        check_roofline(info, call, profile)

    check()


def test_every_op_has_a_documented_work_formula() -> None:
    """A new op priced by a rule whose formula is only a proxy must bring its own formula."""
    assert [info.op_type for info in OPS if not semantics.has_work_formula(info)] == []


# ---------------------------------------------------------------- the case that had no check (issue 40)

LONG = Call(
    (spec("bfloat16", 1, 24, 119_000, 128), spec("bfloat16", 1, 24, 119_000, 128), spec("bfloat16", 1, 24, 119_000, 128)),
    (spec("bfloat16", 1, 24, 119_000, 128),), (("input_layout", "BNSD"), ("num_heads", 24)),
)


def test_long_non_causal_attention_is_priced_as_its_flops_demand() -> None:
    """One 119k-token non-causal FIA call (video DiT): its S^2 flops alone need over 0.4 s at the Cube peak."""
    info = CATALOG.lookup("npu::npu_fused_infer_attention_score")
    body, floor = modeled_and_floor(info, LONG, PROFILES[0])
    assert floor > 0.4e6
    assert floor <= body <= FACTOR * floor


def test_the_check_catches_the_old_attention_rule() -> None:
    """Priced by the old rule (``2 x output x head dim`` flops, work that does not grow as S^2), the same call
    came out at a few milliseconds: the roofline check fails it."""
    old = replace(CATALOG.lookup("npu::npu_fused_infer_attention_score"), cost="attention")
    body, floor = modeled_and_floor(old, LONG, PROFILES[0])
    assert body < 0.01 * floor
    with pytest.raises(AssertionError, match="below its roofline floor"):
        check_roofline(old, LONG, PROFILES[0])
