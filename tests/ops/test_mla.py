"""MLA preprocessing ops (npu_mla_prolog_v2 quantised modes, npu_mla_prolog_v3, PA_NZ caches, kv_rmsnorm_rope_cache_v2).

References are float64 torch written from the op-plugin docs (four paths, per-token / per-channel
dequantisation, rowmax/127 dynamic quantisation, FRACTAL_NZ block layout), independent of the kernels.
"""

import pytest
import torch
from test_families import _close, _int_close, _ref_rms, _rnd
from test_ops import _compile_recording, _npu_targets

from pytest_npufuse import torch_npu

T, HE, HCQ, N, D, DR, HCKV, BLOCKS, BLOCK_SIZE = 3, 64, 32, 2, 16, 16, 32, 2, 16
INDEX = torch.tensor([0, 21, 2])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _interleave_half_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The v3 doc: x1 = x[..., ::2], x2 = x[..., 1::2]; cat(x1, x2) * cos + cat(-x2, x1) * sin."""
    part1 = torch.cat((x[..., ::2], x[..., 1::2]), dim=-1)
    return part1 * cos + _rotate_half(part1) * sin


def _bf16(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.bfloat16).double()


def _inputs(quantised: bool) -> dict[str, torch.Tensor]:
    ints = {"generator": torch.Generator().manual_seed(9), "dtype": torch.int8}
    weights = {
        "token_x": torch.randint(-100, 100, (T, HE), **ints) if quantised else _rnd(T, HE, seed=1),
        "weight_dq": torch.randint(-100, 100, (HE, HCQ), **ints) if quantised else _rnd(HE, HCQ, seed=2, scale=0.2),
        "weight_uq_qr": torch.randint(-100, 100, (HCQ, N * (D + DR)), **ints) if quantised
        else _rnd(HCQ, N * (D + DR), seed=3, scale=0.2),
        "weight_uk": _rnd(N, D, HCKV, seed=4, scale=0.2),
        "weight_dkv_kr": torch.randint(-100, 100, (HE, HCKV + DR), **ints) if quantised
        else _rnd(HE, HCKV + DR, seed=5, scale=0.2),
    }
    return weights | {
        "rmsnorm_gamma_cq": _rnd(HCQ, seed=6), "rmsnorm_gamma_ckv": _rnd(HCKV, seed=7),
        "rope_sin": _rnd(T, DR, seed=8), "rope_cos": _rnd(T, DR, seed=9),
    }


def _scales() -> dict[str, torch.Tensor]:
    def positive(*shape: int, seed: int) -> torch.Tensor:
        return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 1e-3 + 1e-4

    return {
        "dequant_scale_x": positive(T, 1, seed=20), "dequant_scale_w_dq": positive(1, HCQ, seed=21),
        "dequant_scale_w_uq_qr": positive(1, N * (D + DR), seed=22),
        "dequant_scale_w_dkv_kr": positive(1, HCKV + DR, seed=23),
        "quant_scale_ckv": torch.full((1, HCKV), 40.0),
    }


def _reference(x: dict[str, torch.Tensor], scales: dict[str, torch.Tensor], quantised: bool) -> dict[str, torch.Tensor]:
    """The documented paths in float64, rounding to bfloat16 where the stage outputs are bfloat16."""
    if quantised:
        cq = _bf16(x["token_x"].double() @ x["weight_dq"].double() * scales["dequant_scale_x"].double()
                   * scales["dequant_scale_w_dq"].double())
        kv = _bf16(x["token_x"].double() @ x["weight_dkv_kr"].double() * scales["dequant_scale_x"].double()
                   * scales["dequant_scale_w_dkv_kr"].double())
    else:
        cq, kv = _bf16(x["token_x"].double() @ x["weight_dq"].double()), _bf16(x["token_x"].double() @ x["weight_dkv_kr"].double())
    c_q = _bf16(_ref_rms(cq, x["rmsnorm_gamma_cq"], 1e-5)[0])
    if quantised:
        s = c_q.abs().amax(dim=-1, keepdim=True) / 127
        q = _bf16(torch.round(c_q / s) @ x["weight_uq_qr"].double() * s * scales["dequant_scale_w_uq_qr"].double())
    else:
        q = _bf16(c_q @ x["weight_uq_qr"].double())
    q = q.reshape(T, N, D + DR)
    query = _bf16(torch.einsum("tnd,ndh->tnh", q[..., :D], x["weight_uk"].double()))
    cos, sin = x["rope_cos"].double(), x["rope_sin"].double()
    c_kv = _bf16(_ref_rms(kv[:, :HCKV], x["rmsnorm_gamma_ckv"], 1e-5)[0])
    return {
        "c_q": c_q, "query": query, "query_rope": _interleave_half_rope(q[..., D:], cos[:, None], sin[:, None]),
        "c_kv": c_kv, "k_rope": _interleave_half_rope(kv[:, HCKV:], cos, sin),
    }


def _caches(kv_dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(BLOCKS, BLOCK_SIZE, 1, HCKV, dtype=kv_dtype),
            torch.zeros(BLOCKS, BLOCK_SIZE, 1, DR, dtype=torch.bfloat16))


def _nz_rows(cache: torch.Tensor) -> torch.Tensor:
    """The rows of a PA_NZ cache, read through the documented layout [blocks, D // c, block_size, c]."""
    blocks, block_size, _, width = cache.shape
    fractal = 32 // cache.element_size()
    return cache.reshape(blocks, width // fractal, block_size, fractal).permute(0, 2, 1, 3).reshape(-1, width)


def test_mla_prolog_v3_is_v2s_computation_with_query_norm_and_in_place_caches() -> None:
    x = _inputs(quantised=False)
    ref = _reference(x, {}, quantised=False)
    kv2, kr2 = _caches()
    query2, rope2, kv_out, kr_out, scale2 = torch_npu.npu_mla_prolog_v2(*x.values(), INDEX, kv2, kr2)
    assert kv_out is kv2 and kr_out is kr2 and scale2.shape == (1,)
    kv3, kr3 = _caches()
    outputs = torch_npu.npu_mla_prolog_v3(*x.values(), kv3, kr3, cache_index=INDEX, query_norm_flag=True)
    query3, rope3, scale3, query_norm, norm_scale = outputs
    assert len(outputs) == 5 and torch.equal(query3, query2) and torch.equal(rope3, rope2)
    assert torch.equal(kv3, kv2) and torch.equal(kr3, kr2)
    assert (scale3.shape, norm_scale.shape) == ((1,), (1,))
    _close(query_norm, ref["c_q"], torch.bfloat16)
    _close(query3, ref["query"], torch.bfloat16)
    _close(rope3, ref["query_rope"], torch.bfloat16)
    _close(kv3.reshape(-1, HCKV)[INDEX], ref["c_kv"], torch.bfloat16)
    _close(kr3.reshape(-1, DR)[INDEX], ref["k_rope"], torch.bfloat16)


def test_mla_prolog_v3_scale_corrections_multiply_the_normed_latents() -> None:
    x = _inputs(quantised=False)
    ref = _reference(x, {}, quantised=False)
    kv_cache, kr_cache = _caches()
    *_, query_norm, _ = torch_npu.npu_mla_prolog_v3(*x.values(), kv_cache, kr_cache, cache_index=INDEX,
                                                  query_norm_flag=True, qc_qr_scale=0.5, kc_scale=0.25)
    _close(query_norm, ref["c_q"] * 0.5, torch.bfloat16)
    _close(kv_cache.reshape(-1, HCKV)[INDEX], ref["c_kv"] * 0.25, torch.bfloat16)


def test_mla_prolog_v3_bsnd_caches_hold_the_tokens_rows() -> None:
    x = _inputs(quantised=False)
    x = {name: v.reshape(1, T, *v.shape[1:]) if name in ("token_x", "rope_sin", "rope_cos") else v for name, v in x.items()}
    kv_cache, kr_cache = torch.zeros(1, T, 1, HCKV, dtype=torch.bfloat16), torch.zeros(1, T, 1, DR, dtype=torch.bfloat16)
    query, *_ = torch_npu.npu_mla_prolog_v3(*x.values(), kv_cache, kr_cache, cache_mode="BSND")
    ref = _reference(_inputs(quantised=False), {}, quantised=False)
    assert query.shape == (1, T, N, HCKV)
    _close(kv_cache.reshape(T, HCKV), ref["c_kv"], torch.bfloat16)


@pytest.mark.parametrize("op", ["npu_mla_prolog_v2", "npu_mla_prolog_v3"])
def test_mla_prolog_pa_nz_stores_each_block_as_fractal_nz(op: str) -> None:
    x = _inputs(quantised=False)
    nd, nz = _caches(), _caches()
    if op == "npu_mla_prolog_v2":
        torch_npu.npu_mla_prolog_v2(*x.values(), INDEX, *nd)
        torch_npu.npu_mla_prolog_v2(*x.values(), INDEX, *nz, cache_mode="PA_NZ")
    else:
        torch_npu.npu_mla_prolog_v3(*x.values(), *nd, cache_index=INDEX)
        torch_npu.npu_mla_prolog_v3(*x.values(), *nz, cache_index=INDEX, cache_mode="PA_NZ")
    for nd_cache, nz_cache in zip(nd, nz, strict=True):
        width = nd_cache.shape[-1]
        assert torch.equal(_nz_rows(nz_cache), nd_cache.reshape(-1, width))
    assert not torch.equal(nz[0], nd[0])  # kv_cache rows are two 16-value runs: NZ stores them BlockSize apart


def test_mla_prolog_v2_full_quantisation_with_int8_kv_cache_as_vllm_ascend_calls_it() -> None:
    x, scales = _inputs(quantised=True), _scales()
    ref = _reference(x, scales, quantised=True)
    kv_cache, kr_cache = _caches(torch.int8)
    query, query_rope, _, _, scale_q = torch_npu.npu_mla_prolog_v2(
        *x.values(), INDEX, kv_cache, kr_cache, **scales, cache_mode="PA_NZ"
    )
    assert query.dtype == torch.int8 and scale_q.shape == (T, N, 1)
    ref_scale = ref["query"].abs().amax(dim=-1, keepdim=True) / 127
    torch.testing.assert_close(scale_q.double(), ref_scale.reshape(T, N, 1), rtol=2**-7, atol=0)
    _int_close(query, torch.round(ref["query"] / ref_scale))
    _close(query_rope, ref["query_rope"], torch.bfloat16)
    _int_close(_nz_rows(kv_cache)[INDEX], torch.round(ref["c_kv"] * 40).clamp(-128, 127))
    _close(_nz_rows(kr_cache)[INDEX], ref["k_rope"], torch.bfloat16)


def test_mla_prolog_v3_weight_uq_qr_int8_with_per_channel_int8_caches() -> None:
    x = _inputs(quantised=False)
    w_uq_qr = torch.randint(-100, 100, (HCQ, N * (D + DR)), generator=torch.Generator().manual_seed(30), dtype=torch.int8)
    w_scale = torch.full((1, N * (D + DR)), 2e-3)
    kv_cache, kr_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, HCKV, dtype=torch.int8), torch.zeros(
        BLOCKS, BLOCK_SIZE, 1, DR, dtype=torch.int8)
    ckv, ckr = torch.full((1, HCKV), 30.0), torch.full((1, DR), 20.0)
    x["weight_uq_qr"] = w_uq_qr
    query, _, _, query_norm, norm_scale = torch_npu.npu_mla_prolog_v3(
        *x.values(), kv_cache, kr_cache, cache_index=INDEX, dequant_scale_w_uq_qr=w_scale, quant_scale_ckv=ckv,
        quant_scale_ckr=ckr, weight_quant_mode=1, kv_cache_quant_mode=2, query_norm_flag=True,
    )
    ref = _reference(_inputs(quantised=False), {}, quantised=False)
    s = ref["c_q"].abs().amax(dim=-1, keepdim=True) / 127
    assert query_norm.dtype == torch.int8 and norm_scale.shape == (T, 1)
    _int_close(query_norm, torch.round(ref["c_q"] / s))
    q = _bf16(query_norm.double() @ w_uq_qr.double() * norm_scale.double() * w_scale.double()).reshape(T, N, D + DR)
    _close(query, _bf16(torch.einsum("tnd,ndh->tnh", q[..., :D], x["weight_uk"].double())), torch.bfloat16)
    _int_close(kv_cache.reshape(-1, HCKV)[INDEX], torch.round(ref["c_kv"] * 30).clamp(-128, 127))
    _int_close(kr_cache.reshape(-1, DR)[INDEX], torch.round(_bf16(ref["k_rope"]) * 20).clamp(-128, 127))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weight_quant_mode": 3}, "weight_quant_mode"),
        ({"kv_cache_quant_mode": 3}, "kv_cache_quant_mode"),
        ({"query_quant_mode": 1}, "query_quant_mode"),
        ({"cache_mode": "PA_BLK_NZ"}, "cache_mode"),
        ({"cache_mode": "TND"}, "kv_cache"),
        ({"quant_scale_ckv": torch.ones(1, HCKV)}, "quant_scale_ckv"),
    ],
)
def test_mla_prolog_v3_refuses_modes_it_does_not_model(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mla_prolog_v3(*_inputs(quantised=False).values(), *_caches(), cache_index=INDEX, **kwargs)
    assert exc.value.argument == match


def test_mla_prolog_v3_compiles_to_one_functional_node_and_updates_the_callers_caches() -> None:
    x = _inputs(quantised=False)

    def step(kv_cache: torch.Tensor, kr_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        query, query_rope, _, _, _ = torch_npu.npu_mla_prolog_v3(
            *x.values(), kv_cache, kr_cache, cache_index=INDEX, cache_mode="PA_NZ"
        )
        return query, query_rope

    eager_caches, compiled_caches = _caches(), _caches()
    graphs: list[torch.fx.GraphModule] = []
    eager = step(*eager_caches)
    compiled = _compile_recording(step, graphs)(*compiled_caches)
    assert _npu_targets(graphs) == ["npu.npu_mla_prolog_v3_functional.default"]
    for a, b in zip([*eager, *eager_caches], [*compiled, *compiled_caches], strict=True):
        assert torch.equal(a, b)
    assert compiled_caches[0].abs().sum() > 0


@pytest.mark.parametrize("op", ["npu_kv_rmsnorm_rope_cache", "npu_kv_rmsnorm_rope_cache_v2"])
def test_kv_rmsnorm_rope_cache_pa_nz_writes_the_documented_block_layout(op: str) -> None:
    tokens, rms, rope = 4, 32, 16
    kv, gamma = _rnd(tokens, 1, 1, rms + rope, seed=40), _rnd(rms, seed=41)
    cos, sin = _rnd(tokens, 1, 1, rope, seed=42), _rnd(tokens, 1, 1, rope, seed=43)
    slots = torch.tensor([17, 0, 31, 5])
    nd = torch.zeros(2, 16, 1, rope, dtype=torch.bfloat16), torch.zeros(2, 16, 1, rms, dtype=torch.bfloat16)
    nz = torch.zeros_like(nd[0]), torch.zeros_like(nd[1])
    torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, slots, *nd, cache_mode="PA")
    outputs = getattr(torch_npu, op)(kv, gamma, cos, sin, slots, *nz, cache_mode="PA_NZ", is_output_kv=True)
    for nd_cache, nz_cache in zip(nd, nz, strict=True):
        assert torch.equal(_nz_rows(nz_cache), nd_cache.reshape(-1, nd_cache.shape[-1]))
    k_rope, k_nope = outputs[-2:]
    assert k_rope.shape == (tokens, 1, 1, rope) and k_nope.shape == (tokens, 1, 1, rms)
    if op == "npu_kv_rmsnorm_rope_cache_v2":
        assert len(outputs) == 2
    _close(k_nope, _ref_rms(kv[..., :rms], gamma, 1e-5)[0], torch.bfloat16)
    _close(k_rope, _interleave_half_rope(kv[..., rms:].double(), cos.double(), sin.double()), torch.bfloat16)


def test_kv_rmsnorm_rope_cache_v2_refuses_v() -> None:
    kv = _rnd(1, 1, 1, 48, seed=50)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_kv_rmsnorm_rope_cache_v2(
            kv, _rnd(32, seed=51), _rnd(1, 1, 1, 16), _rnd(1, 1, 1, 16), torch.tensor([0]),
            torch.zeros(1, 16, 1, 16, dtype=torch.bfloat16), torch.zeros(1, 16, 1, 32, dtype=torch.bfloat16), v=kv,
        )
    assert (exc.value.op, exc.value.argument) == ("npu_kv_rmsnorm_rope_cache_v2", "v")


def test_torch_ops_spelling_has_torch_npus_in_place_schema_eager_and_compiled() -> None:
    """cann-recipes' DeepSeek-R1 calls ``torch.ops.npu.npu_mla_prolog_v3`` directly and unpacks five outputs."""
    x = _inputs(quantised=False)

    def step(kv_cache: torch.Tensor, kr_cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q_nope, q_pe, dequant_scale_q_nope, _, _ = torch.ops.npu.npu_mla_prolog_v3(
            token_x=x["token_x"], weight_dq=x["weight_dq"], weight_uq_qr=x["weight_uq_qr"], weight_uk=x["weight_uk"],
            weight_dkv_kr=x["weight_dkv_kr"], rmsnorm_gamma_cq=x["rmsnorm_gamma_cq"],
            rmsnorm_gamma_ckv=x["rmsnorm_gamma_ckv"], rope_sin=x["rope_sin"], rope_cos=x["rope_cos"],
            cache_index=INDEX, kv_cache=kv_cache, kr_cache=kr_cache, cache_mode="PA_NZ",
        )
        return q_nope, q_pe

    reference_caches, eager_caches, compiled_caches = _caches(), _caches(), _caches()
    reference = torch_npu.npu_mla_prolog_v3(*x.values(), *reference_caches, cache_index=INDEX, cache_mode="PA_NZ")
    eager = step(*eager_caches)
    graphs: list[torch.fx.GraphModule] = []
    compiled = _compile_recording(step, graphs)(*compiled_caches)
    assert _npu_targets(graphs) == ["npu.npu_mla_prolog_v3_functional.default"]
    for a, b, c in zip([*reference[:2], *reference_caches], [*eager, *eager_caches], [*compiled, *compiled_caches],
                       strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert reference_caches[0].abs().sum() > 0
