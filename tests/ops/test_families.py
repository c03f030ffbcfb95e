"""The norm, quant and rope ops added to ``pytest_npufuse.torch_npu``, each against a plain-torch formula.

References are float64 torch written from the torch_npu / CANN formulas, independent of the kernels.  A
float32 pipeline ending in a 16-bit dtype is compared within two output ulps; int8 outputs may differ by
one step where a float64 value sits on a .5 tie that float32 rounds the other way.
"""

from typing import Callable

import pytest
import torch
from test_ops import _compile_recording, _npu_targets

from pytest_npufuse import torch_npu

TOL = {torch.float32: 1e-5, torch.float16: 2 * 2**-10, torch.bfloat16: 2 * 2**-7}


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert actual.dtype == dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.double(), expected, rtol=TOL[dtype], atol=TOL[dtype])


def _int_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    diff = (actual.double() - expected).abs()
    assert diff.max() <= 1 and (diff == 0).double().mean() >= 0.98


def _rnd(*shape: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def _ref_rms(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = 1.0 / torch.sqrt(x.double().pow(2).mean(dim=-1, keepdim=True) + eps)
    return x.double() * rstd * gamma.double(), rstd


# ------------------------------------------------------------------------------------------
# norm
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_add_rms_norm_is_residual_add_then_rms_norm(dtype: torch.dtype) -> None:
    x1, x2, gamma = _rnd(2, 3, 64, dtype=dtype, seed=1), _rnd(2, 3, 64, dtype=dtype, seed=2), _rnd(64, dtype=dtype, seed=3)
    y, rstd, x = torch_npu.npu_add_rms_norm(x1, x2, gamma, 1e-5)
    assert torch.equal(x, (x1.double() + x2.double()).to(dtype))  # one rounding of the exact sum
    ref_y, ref_rstd = _ref_rms(x, gamma, 1e-5)
    assert rstd.shape == (2, 3, 1) and rstd.dtype == torch.float32
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-6, atol=0)
    _close(y, ref_y, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_add_rms_norm_cast_returns_the_norm_in_float32_and_in_x1s_dtype(dtype: torch.dtype) -> None:
    """op-plugin's golden (test_npu_add_rms_norm_cast.py): x = x1 + x2 in x1's dtype, y1 the float32 norm
    of it, y2 = y1 cast to x1's dtype; rstd and x as npu_add_rms_norm's."""
    x1, x2, gamma = _rnd(2, 3, 64, dtype=dtype, seed=4), _rnd(2, 3, 64, dtype=dtype, seed=5), _rnd(64, dtype=dtype, seed=6)
    y1, y2, rstd, x = torch_npu.npu_add_rms_norm_cast(x1, x2, gamma)
    ref_y, ref_rstd = _ref_rms(x, gamma, 1e-6)
    assert y1.dtype == torch.float32 and y2.dtype == dtype and torch.equal(y2, y1.to(dtype))
    torch.testing.assert_close(y1.double(), ref_y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-6, atol=0)
    y, plain_rstd, plain_x = torch_npu.npu_add_rms_norm(x1, x2, gamma)
    assert torch.equal(y2, y) and torch.equal(rstd, plain_rstd) and torch.equal(x, plain_x)


@pytest.mark.parametrize("div_mode", [True, False])
def test_add_rms_norm_quant_quantises_the_norm_with_each_scale(div_mode: bool) -> None:
    x1, x2, gamma = _rnd(4, 32, seed=4, scale=2), _rnd(4, 32, seed=5, scale=2), _rnd(32, seed=6)
    scales1 = torch.rand(32, generator=torch.Generator().manual_seed(7)) * 0.05 + 0.01
    zero_points1 = torch.randint(-5, 5, (32,), dtype=torch.int32)
    scales2 = torch.full((32,), 0.02, dtype=torch.bfloat16)
    y1, y2, x = torch_npu.npu_add_rms_norm_quant(
        x1, x2, gamma, scales1, zero_points1, scales2, epsilon=1e-6, div_mode=div_mode
    )
    ref, _ = _ref_rms((x1.double() + x2.double()).to(torch.bfloat16), gamma, 1e-6)

    def quant(scale: torch.Tensor, zp: torch.Tensor | float) -> torch.Tensor:
        values = ref / scale.double() if div_mode else ref * scale.double()
        return torch.round(values + zp).clamp(-128, 127)

    assert y1.dtype == y2.dtype == torch.int8 and x.dtype == torch.bfloat16
    _int_close(y1, quant(scales1, zero_points1.double()))
    _int_close(y2, quant(scales2, 0.0))
    (no_second,) = torch_npu.npu_add_rms_norm_quant(x1, x2, gamma, scales1)[1:2]
    assert torch.equal(no_second, torch.zeros(4, 32, dtype=torch.int8))
    beta = _rnd(32, seed=8)  # AddRmsNormQuantV2's bias, passed by keyword as vllm-ascend does
    with_beta, _, _ = torch_npu.npu_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1, beta=beta, div_mode=div_mode)
    ref += beta.double()
    _int_close(with_beta, quant(scales1, zero_points1.double()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_layer_norm_eval_matches_functional_layer_norm(dtype: torch.dtype) -> None:
    x, w, b = _rnd(3, 5, 48, dtype=dtype, seed=8, scale=3), _rnd(48, dtype=dtype, seed=9), _rnd(48, dtype=dtype, seed=10)
    out = torch_npu.npu_layer_norm_eval(x, [48], weight=w, bias=b, eps=1e-5)
    _close(out, torch.nn.functional.layer_norm(x.double(), [48], w.double(), b.double(), 1e-5), dtype)
    bare = torch_npu.npu_layer_norm_eval(x, [5, 48])
    _close(bare, torch.nn.functional.layer_norm(x.double(), [5, 48], eps=1e-5), dtype)


# ------------------------------------------------------------------------------------------
# quant
# ------------------------------------------------------------------------------------------


def _ref_dynamic(values: torch.Tensor, level_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    scale = values.abs().amax(dim=-1) / level_max
    return torch.round(values / scale.unsqueeze(-1)).clamp(-level_max - 1, level_max), scale


def _unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    nibbles = (packed.to(torch.int64).unsqueeze(-1) >> (torch.arange(8) * 4)) & 0xF
    return torch.where(nibbles >= 8, nibbles - 16, nibbles).flatten(-2)


def test_dynamic_quant_per_token_with_and_without_smooth_scales() -> None:
    x, smooth = _rnd(2, 5, 64, dtype=torch.float16, seed=11), _rnd(64, dtype=torch.float16, seed=12).abs() + 0.5
    y, scale = torch_npu.npu_dynamic_quant(x)
    ref_y, ref_scale = _ref_dynamic(x.double(), 127)
    assert y.dtype == torch.int8 and scale.shape == (2, 5)
    torch.testing.assert_close(scale.double(), ref_scale, rtol=1e-6, atol=0)
    _int_close(y, ref_y)
    y_s, scale_s = torch_npu.npu_dynamic_quant(x, smooth_scales=smooth)
    ref_y_s, ref_scale_s = _ref_dynamic(x.double() * smooth.double(), 127)
    torch.testing.assert_close(scale_s.double(), ref_scale_s, rtol=1e-6, atol=0)
    _int_close(y_s, ref_y_s)


def test_dynamic_quant_per_group_smooth_scales_follow_group_index() -> None:
    x = _rnd(7, 32, seed=13)
    smooth = _rnd(3, 32, seed=14).abs() + 0.5
    group_index = torch.tensor([2, 2, 7], dtype=torch.int32)  # cumulative row ends: rows 0-1, none, 2-6
    y, scale = torch_npu.npu_dynamic_quant(x, smooth_scales=smooth, group_index=group_index)
    rows = torch.cat([x[:2].double() * smooth[0].double(), x[2:].double() * smooth[2].double()])
    ref_y, ref_scale = _ref_dynamic(rows, 127)
    torch.testing.assert_close(scale.double(), ref_scale, rtol=1e-6, atol=0)
    _int_close(y, ref_y)


def test_dynamic_quant_int4_packs_eight_levels_per_int32() -> None:
    x = _rnd(3, 16, seed=15)
    y, scale = torch_npu.npu_dynamic_quant(x, dst_type=torch.quint4x2)
    ref_y, ref_scale = _ref_dynamic(x.double(), 7)
    assert y.dtype == torch.int32 and y.shape == (3, 2)
    torch.testing.assert_close(scale.double(), ref_scale, rtol=1e-6, atol=0)
    _int_close(_unpack_int4(y), ref_y)


@pytest.mark.parametrize(
    ("dtype", "out_dtype", "low", "high"),
    [(torch.qint8, torch.int8, -128, 127), (torch.quint8, torch.uint8, 0, 255), (torch.int32, torch.int32, -(2**31), 2**31 - 1)],
)
def test_quantize_divides_by_per_channel_scales_on_the_axis(dtype, out_dtype, low, high) -> None:
    x = _rnd(2, 6, 8, dtype=torch.float32, seed=16, scale=4)
    scales = torch.linspace(0.05, 0.3, 6)
    zero_points = torch.arange(6, dtype=torch.int32) - 2
    out = torch_npu.npu_quantize(x, scales, zero_points, dtype, axis=1)
    ref = torch.round(x.double() / scales.double()[:, None] + zero_points.double()[:, None]).clamp(low, high)
    assert out.dtype == out_dtype
    _int_close(out, ref)


def test_quantize_multiply_mode_on_the_last_axis_and_int4_packing() -> None:
    x = _rnd(3, 16, dtype=torch.bfloat16, seed=17)
    scales = torch.full((16,), 3.0, dtype=torch.bfloat16)
    out = torch_npu.npu_quantize(x, scales, None, torch.qint8, -1, False)
    _int_close(out, torch.round(x.double() * 3).clamp(-128, 127))
    packed = torch_npu.npu_quantize(x, scales, None, torch.quint4x2, -1, False)
    assert packed.dtype == torch.int32 and packed.shape == (3, 2)
    _int_close(_unpack_int4(packed), torch.round(x.double() * 3).clamp(-8, 7))


@pytest.mark.parametrize(("dtype", "group"), [(torch.float16, 0), (torch.bfloat16, 0), (torch.bfloat16, 32)])
def test_weight_quant_batchmatmul_dequantises_the_weight_then_multiplies(dtype: torch.dtype, group: int) -> None:
    m, k, n = 5, 96, 24
    x = _rnd(m, k, dtype=dtype, seed=18)
    weight = torch.randint(-8, 8, (k, n), dtype=torch.int8, generator=torch.Generator().manual_seed(19))
    rows = -(-k // group) if group else 1
    scale = (torch.rand(rows, n, generator=torch.Generator().manual_seed(20)) * 0.1).to(dtype)
    offset = torch.randint(-3, 3, (rows, n)).to(dtype)
    bias = torch.randn(n).to(torch.float16 if dtype == torch.float16 else torch.float32)
    out = torch_npu.npu_weight_quant_batchmatmul(
        x, weight, scale, offset, bias=bias, antiquant_group_size=group
    )
    repeat = group if group else k
    w = (weight.double() + offset.double().repeat_interleave(repeat, 0)[:k]) * scale.double().repeat_interleave(repeat, 0)[:k]
    _close(out, x.double() @ w.to(dtype).double() + bias.double(), dtype)


# ------------------------------------------------------------------------------------------
# rope
# ------------------------------------------------------------------------------------------


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate_interleave(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


@pytest.mark.parametrize(("mode", "rotate"), [("half", _rotate_half), ("interleave", _rotate_interleave)])
def test_rotary_mul_is_the_documented_formula(mode: str, rotate: Callable[[torch.Tensor], torch.Tensor]) -> None:
    x, r1, r2 = _rnd(2, 3, 5, 16, seed=21), _rnd(1, 1, 5, 16, seed=22), _rnd(1, 1, 5, 16, seed=23)
    out = torch_npu.npu_rotary_mul(x, r1, r2, rotary_mode=mode)
    _close(out, r1.double() * x.double() + r2.double() * rotate(x.double()), torch.bfloat16)


def test_apply_rotary_pos_emb_rotates_query_and_key_in_place() -> None:
    q, k = _rnd(2, 4, 3, 16, dtype=torch.float16, seed=24), _rnd(2, 4, 1, 16, dtype=torch.float16, seed=25)
    cos, sin = _rnd(2, 4, 1, 16, dtype=torch.float16, seed=26), _rnd(2, 4, 1, 16, dtype=torch.float16, seed=27)
    expected = [t.double() * cos.double() + _rotate_half(t.double()) * sin.double() for t in (q, k)]
    out_q, out_k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)
    assert out_q is q and out_k is k
    _close(q, expected[0], torch.float16)
    _close(k, expected[1], torch.float16)


def test_interleave_rope_deinterleaves_then_rotates_halves() -> None:
    x, cos, sin = _rnd(2, 3, 4, 64, seed=28), _rnd(2, 1, 4, 64, seed=29), _rnd(2, 1, 4, 64, seed=30)
    out = torch_npu.npu_interleave_rope(x, cos, sin)
    q = x.double().reshape(2, 3, 4, 32, 2).transpose(-1, -2).reshape(2, 3, 4, 64)
    _close(out, q * cos.double() + _rotate_half(q) * sin.double(), torch.bfloat16)


# ------------------------------------------------------------------------------------------
# Under torch.compile: one opaque node per op, compiled equals eager, in-place write-back kept
# ------------------------------------------------------------------------------------------


def _layer(x: torch.Tensor, res: torch.Tensor, gamma: torch.Tensor, w: torch.Tensor, ws: torch.Tensor,
           q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y, _, h = torch_npu.npu_add_rms_norm(x, res, gamma)
    yq, scale = torch_npu.npu_dynamic_quant(y)
    out = torch_npu.npu_weight_quant_batchmatmul(y, w, ws)
    torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)
    return h, yq, scale, out, torch_npu.npu_rotary_mul(q, cos, sin) + 0


def test_compiled_family_ops_are_single_nodes_and_match_eager() -> None:
    def inputs() -> list[torch.Tensor]:
        return [_rnd(4, 32, seed=31), _rnd(4, 32, seed=32), _rnd(32, seed=33),
                torch.randint(-8, 8, (32, 16), dtype=torch.int8, generator=torch.Generator().manual_seed(34)),
                _rnd(16, seed=35, scale=0.1), _rnd(1, 4, 2, 16, seed=36), _rnd(1, 4, 1, 16, seed=37),
                _rnd(1, 4, 1, 16, seed=38), _rnd(1, 4, 1, 16, seed=39)]

    graphs: list[torch.fx.GraphModule] = []
    eager_args, compiled_args = inputs(), inputs()
    eager = _layer(*eager_args)
    compiled = _compile_recording(_layer, graphs)(*compiled_args)
    assert _npu_targets(graphs) == [
        "npu.npu_add_rms_norm.default", "npu.npu_dynamic_quant.default", "npu.npu_weight_quant_batchmatmul.default",
        "npu.npu_apply_rotary_pos_emb.default", "npu.npu_rotary_mul.default",
    ]
    for a, b in zip([*eager, *eager_args], [*compiled, *compiled_args], strict=True):
        assert torch.equal(a, b)  # includes q and k, rotated in place in both runs


# ------------------------------------------------------------------------------------------
# Bad inputs
# ------------------------------------------------------------------------------------------

_X = torch.zeros(4, 32, dtype=torch.bfloat16)
_G = torch.ones(32, dtype=torch.bfloat16)
_Q4 = torch.zeros(1, 2, 3, 16)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: torch_npu.npu_add_rms_norm(_X, _X.half(), _G), ValueError, "x2"),
        (lambda: torch_npu.npu_add_rms_norm(_X, _X[:2], _G), ValueError, "x2"),
        (lambda: torch_npu.npu_add_rms_norm(_X, _X, _G, epsilon=None), TypeError, "epsilon"),
        (lambda: torch_npu.npu_add_rms_norm_quant(_X, _X, _G, torch.ones(16)), ValueError, "scales1"),
        (lambda: torch_npu.npu_add_rms_norm_quant(_X, _X, _G, torch.ones(32), axis=0), ValueError, "axis"),
        (lambda: torch_npu.npu_add_rms_norm_quant(_X, _X, _G, torch.ones(32), div_mode=1), TypeError, "div_mode"),
        (lambda: torch_npu.npu_layer_norm_eval(_X, [16]), ValueError, "normalized_shape"),
        (lambda: torch_npu.npu_dynamic_quant(_X.float()), ValueError, "input"),
        (lambda: torch_npu.npu_dynamic_quant(_X, dst_type=torch.int32), ValueError, "dst_type"),
        (lambda: torch_npu.npu_dynamic_quant(_X, group_index=torch.tensor([4])), ValueError, "group_index"),
        (lambda: torch_npu.npu_dynamic_quant(_X, smooth_scales=_G[None].expand(2, 32), group_index=torch.tensor([1, 3], dtype=torch.int32)),
         ValueError, "group_index"),
        (lambda: torch_npu.npu_quantize(_X, torch.ones(5), None, torch.qint8), ValueError, "scales"),
        (lambda: torch_npu.npu_quantize(_X, torch.ones(32), None, torch.float16), ValueError, "dtype"),
        (lambda: torch_npu.npu_quantize(_X, torch.ones(32), None, torch.quint4x2, -1, True), ValueError, "dtype"),
        (lambda: torch_npu.npu_weight_quant_batchmatmul(_X, torch.zeros(32, 8, dtype=torch.int32), _G[:8]),
         ValueError, "weight"),
        (lambda: torch_npu.npu_weight_quant_batchmatmul(_X, torch.zeros(32, 8, dtype=torch.int8), _G[:8],
                                                        quant_scale=torch.ones(8)), ValueError, "quant_scale"),
        (lambda: torch_npu.npu_weight_quant_batchmatmul(_X, torch.zeros(32, 8, dtype=torch.int8), _G[:5]),
         ValueError, "antiquant_scale"),
        (lambda: torch_npu.npu_rotary_mul(_Q4, _Q4, _Q4, rotary_mode="quarter"), ValueError, "rotary_mode"),
        (lambda: torch_npu.npu_rotary_mul(_Q4, torch.zeros(1, 2, 3, 8), _Q4), ValueError, "r1"),
        (lambda: torch_npu.npu_apply_rotary_pos_emb(_Q4, _Q4, _Q4, _Q4, layout="NSD"), ValueError, "layout"),
        (lambda: torch_npu.npu_interleave_rope(*[_Q4[0].bfloat16()] * 3), ValueError, "x"),
    ],
)
def test_family_ops_bad_inputs_raise_clear_errors(call: Callable[[], object], error: type[Exception], match: str) -> None:
    with pytest.raises(error) as exc:
        call()
    assert exc.value.argument == match


@pytest.mark.parametrize("cache_mode", ["Norm", "PA_BNSD"])
def test_kv_rmsnorm_rope_cache_normalises_rotates_and_scatters_in_place(cache_mode: str) -> None:
    batch, seq = 2, 3
    kv = _rnd(batch, 1, seq, 576, seed=40)
    gamma = _rnd(512, seed=41)
    cos, sin = _rnd(batch, 1, seq, 64, seed=42), _rnd(batch, 1, seq, 64, seed=43)
    if cache_mode == "Norm":
        index = torch.tensor([[4, 0, 2], [1, 5, 3]])
        k_cache, ckv_cache = torch.zeros(batch, 1, 6, 64, dtype=torch.bfloat16), torch.zeros(batch, 1, 6, 512, dtype=torch.bfloat16)
    else:
        index = torch.tensor([7, 0, 3, 12, 9, 1])
        k_cache, ckv_cache = torch.zeros(4, 4, 1, 64, dtype=torch.bfloat16), torch.zeros(4, 4, 1, 512, dtype=torch.bfloat16)
    out = torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, cache_mode=cache_mode)
    assert out[0] is k_cache and out[1] is ckv_cache
    ref_y, _ = _ref_rms(kv[..., :512], gamma, 1e-5)
    q = kv[..., 512:].double().reshape(batch, 1, seq, 32, 2).transpose(-1, -2).reshape(batch, 1, seq, 64)
    ref_k = q * cos.double() + _rotate_half(q) * sin.double()
    _close(out[2], ref_k, torch.bfloat16)
    _close(out[3], ref_y, torch.bfloat16)
    flat_k, flat_ckv = k_cache.reshape(-1, 64), ckv_cache.reshape(-1, 512)
    slots = (index + torch.arange(batch)[:, None] * 6).reshape(-1) if cache_mode == "Norm" else index
    assert torch.equal(flat_k[slots], out[2].reshape(-1, 64))
    assert torch.equal(flat_ckv[slots], out[3].reshape(-1, 512))
    untouched = torch.ones(flat_k.shape[0], dtype=torch.bool)
    untouched[slots] = False
    assert not flat_k[untouched].any() and not flat_ckv[untouched].any()


@pytest.mark.parametrize("op", ["npu_mla_prolog", "npu_mla_prolog_v2"])
def test_mla_prolog_follows_the_four_documented_paths(op: str) -> None:
    t, he, hcq, n, d, dr, hckv = 3, 32, 16, 2, 8, 8, 16
    x, w_dq, w_uq_qr = _rnd(t, he, seed=50), _rnd(he, hcq, seed=51, scale=0.3), _rnd(hcq, n * (d + dr), seed=52, scale=0.3)
    w_uk, w_dkv_kr = _rnd(n, d, hckv, seed=53, scale=0.3), _rnd(he, hckv + dr, seed=54, scale=0.3)
    g_cq, g_ckv, sin, cos = _rnd(hcq, seed=55), _rnd(hckv, seed=56), _rnd(t, dr, seed=57), _rnd(t, dr, seed=58)
    index = torch.tensor([0, 5, 2])
    kv_cache, kr_cache = torch.zeros(2, 4, 1, hckv, dtype=torch.bfloat16), torch.zeros(2, 4, 1, dr, dtype=torch.bfloat16)
    query, query_rope, kv_out, kr_out, *scale = getattr(torch_npu, op)(
        x, w_dq, w_uq_qr, w_uk, w_dkv_kr, g_cq, g_ckv, sin, cos, index, kv_cache, kr_cache
    )
    assert kv_out is kv_cache and kr_out is kr_cache
    assert [(s.shape, s.dtype) for s in scale] == ([] if op == "npu_mla_prolog" else [((1,), torch.float32)])

    def bf16(v: torch.Tensor) -> torch.Tensor:  # the op boundaries where the fused kernel stores bfloat16
        return v.to(torch.bfloat16).double()

    def rope64(v: torch.Tensor) -> torch.Tensor:
        q = v.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
        c, s = cos.double().unsqueeze(-2), sin.double().unsqueeze(-2)
        return q * c + _rotate_half(q) * s

    c_q = bf16(_ref_rms(bf16(x.double() @ w_dq.double()), g_cq, 1e-5)[0])
    q = bf16(c_q @ w_uq_qr.double()).reshape(t, n, d + dr)
    ref_query = torch.einsum("tnd,ndh->tnh", q[..., :d], w_uk.double())
    kv = bf16(x.double() @ w_dkv_kr.double())
    c_kv = _ref_rms(kv[:, :hckv], g_ckv, 1e-5)[0]
    k_rope = rope64(kv[:, None, hckv:])[:, 0]
    tol = {"rtol": 2**-6, "atol": 2**-6}
    torch.testing.assert_close(query.double(), ref_query, **tol)
    torch.testing.assert_close(query_rope.double(), rope64(q[..., d:]), **tol)
    torch.testing.assert_close(kv_cache.reshape(-1, hckv)[index].double(), c_kv, **tol)
    torch.testing.assert_close(kr_cache.reshape(-1, dr)[index].double(), k_rope, **tol)
    assert kv_cache.reshape(-1, hckv)[[1, 3, 4, 6, 7]].abs().sum() == 0


def test_compiled_cache_writes_land_in_the_callers_caches() -> None:
    def inputs() -> list[torch.Tensor]:
        return [_rnd(1, 1, 2, 576, seed=60), _rnd(512, seed=61), _rnd(1, 1, 2, 64, seed=62), _rnd(1, 1, 2, 64, seed=63),
                torch.tensor([3, 1]), torch.zeros(2, 2, 1, 64, dtype=torch.bfloat16),
                torch.zeros(2, 2, 1, 512, dtype=torch.bfloat16)]

    def step(kv, gamma, cos, sin, index, k_cache, ckv_cache):
        _, _, k_embed, y = torch_npu.npu_kv_rmsnorm_rope_cache(
            kv, gamma, cos, sin, index, k_cache, ckv_cache, cache_mode="PA_BNSD"
        )
        return k_embed, y

    eager_args, compiled_args = inputs(), inputs()
    graphs: list[torch.fx.GraphModule] = []
    eager = step(*eager_args)
    compiled = _compile_recording(step, graphs)(*compiled_args)
    assert _npu_targets(graphs) == ["npu.npu_kv_rmsnorm_rope_cache.default"]
    for a, b in zip([*eager, *eager_args], [*compiled, *compiled_args], strict=True):
        assert torch.equal(a, b)
    assert compiled_args[5].reshape(-1, 64)[[3, 1]].abs().sum() > 0


def test_kv_rmsnorm_rope_cache_takes_shrunk_mla_sizes_as_vllm_ascend_calls_it() -> None:
    kv, gamma = _rnd(4, 1, 1, 40, seed=70), _rnd(32, seed=71)  # rms 32 + rope 8 instead of 512 + 64
    cos, sin = _rnd(4, 1, 1, 8, seed=72), _rnd(4, 1, 1, 8, seed=73)
    k_cache, ckv_cache = torch.zeros(2, 4, 1, 8, dtype=torch.bfloat16), torch.zeros(2, 4, 1, 32, dtype=torch.bfloat16)
    slots = torch.tensor([6, 1, 4, 3])
    k_pe, k_nope, _, _ = torch_npu.npu_kv_rmsnorm_rope_cache(
        kv, gamma, cos, sin, slots, k_cache, ckv_cache, epsilon=1e-6, cache_mode="PA"
    )
    assert k_pe is k_cache and k_nope is ckv_cache
    ref_y, _ = _ref_rms(kv[..., :32], gamma, 1e-6)
    _close(ckv_cache.reshape(-1, 32)[slots], ref_y.reshape(4, 32), torch.bfloat16)
