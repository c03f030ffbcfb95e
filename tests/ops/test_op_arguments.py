"""Argument modes real code passes to torch_npu ops of the matmul/quant/MoE/memory family (docs/reference/op-survey.md):
npu_grouped_matmul's group_type 2 (K split) and Python group_list (the ``.List`` overload), numpy scalars for
schema ints/floats, torch dtypes for op-plugin's ``int`` dtype arguments, npu_format_cast's ``customize_dtype``,
npu_add_layer_norm with mixed dtypes, npu_anti_quant's src_dtype read from x, npu_prefetch's refusal as torch_npu's
RuntimeError. References are plain torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from pytest_npufuse import compare, torch_npu
from pytest_npufuse.errors import OpArgumentError, OpTypeError
from pytest_npufuse.torch_npu.quant import _pack_int4 as pack_int4


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


def _close(out: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(out.double(), ref.to(out.dtype).double(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("list_type", [0, 1])
def test_k_split_stacks_one_weight_gradient_per_group(list_type: int) -> None:
    """group_type 2 as a grouped-matmul backward calls it: dW_g = x[:, K_g] @ dy[K_g]; an empty group is zeros."""
    gen = _gen()
    tokens, hidden, n = 12, 5, 7
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    dy = torch.randn(tokens, n, generator=gen).to(torch.bfloat16)
    counts = [4, 0, 6]  # two tokens belong to no group
    group_list = torch.tensor(counts if list_type else np.cumsum(counts).tolist(), dtype=torch.int64)
    (out,) = torch_npu.npu_grouped_matmul([x.t()], [dy], group_list=group_list, group_type=2, split_item=3,
                                          group_list_type=list_type)
    assert out.shape == (3, hidden, n) and out.dtype == torch.bfloat16
    start = 0
    for g, count in enumerate(counts):
        _close(out[g], x[start : start + count].double().t() @ dy[start : start + count].double())
        start += count
    assert out[1].abs().sum() == 0


def test_k_split_with_one_weight_per_group_returns_one_output_each() -> None:
    gen = _gen()
    x = torch.randn(3, 9, generator=gen, dtype=torch.float16)
    weights = [torch.randn(k, n, generator=gen, dtype=torch.float16) for k, n in ((4, 2), (5, 6))]
    outs = torch_npu.npu_grouped_matmul([x], weights, group_list=torch.tensor([4, 9]), group_type=2, split_item=0)
    assert [tuple(o.shape) for o in outs] == [(3, 2), (3, 6)]
    _close(outs[1], x[:, 4:].double() @ weights[1].double())


def test_k_split_refuses_quantised_operands_and_per_group_outputs_of_one_weight() -> None:
    x, w = torch.randn(3, 8, dtype=torch.float16), torch.randn(8, 2, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([4, 8]), group_type=2, split_item=0)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_type")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [w[:4], w[4:]], group_list=torch.tensor([4, 8]), group_type=2, split_item=3)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_type")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [w], bias=[torch.zeros(2, dtype=torch.float16)],
                                     group_list=torch.tensor([4, 8]), group_type=2, split_item=3)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "bias")


@pytest.mark.parametrize("split_item", [0, 1, 2, 3])
def test_python_group_list_takes_the_list_overload(split_item: int) -> None:
    """A Python list of cumulative row ends goes to ``npu_grouped_matmul.List``, whose output shapes follow the
    list's values (so split_item 0/1 give per-group outputs of their row counts)."""
    gen = _gen()
    x = torch.randn(6, 8, generator=gen, dtype=torch.float16)
    weights = [torch.randn(8, 4, generator=gen, dtype=torch.float16) for _ in range(3)]
    outs = torch_npu.npu_grouped_matmul([x], weights, group_list=[1, 1, 6], split_item=split_item)
    refs = [x[0:1].double() @ weights[0].double(), x[1:1].double() @ weights[1].double(),
            x[1:6].double() @ weights[2].double()]
    if split_item in (2, 3):
        assert len(outs) == 1
        _close(outs[0], torch.cat(refs))
    else:
        assert [tuple(o.shape) for o in outs] == [(1, 4), (0, 4), (5, 4)]
        for out, ref in zip(outs, refs):
            _close(out, ref)


def test_python_group_list_is_traced_through_the_list_overload() -> None:
    def f(x: torch.Tensor, w0: torch.Tensor, w1: torch.Tensor) -> list[torch.Tensor]:
        return torch_npu.npu_grouped_matmul([x], [w0, w1], group_list=[2, 6], split_item=0)

    inputs = (torch.randn(6, 8, dtype=torch.float16), *(torch.randn(8, 4, dtype=torch.float16) for _ in range(2)))
    graph = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(*inputs)
    targets = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    assert "npu.npu_grouped_matmul.List" in targets
    assert [tuple(o.shape) for o in torch.compile(f, backend="eager", fullgraph=True)(*inputs)] == [(2, 4), (4, 4)]


def test_python_group_list_must_be_cumulative_row_ends_of_x() -> None:
    x, weights = torch.randn(6, 8, dtype=torch.float16), [torch.randn(8, 4, dtype=torch.float16)] * 2
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], weights, group_list=[4, 2], split_item=3)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_list")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], weights, group_list=[2, 5], split_item=3)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_list")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], weights, group_list=[2, 6], split_item=3, group_type=2)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_type")


def test_multi_x_with_a_tensor_group_list_restating_their_rows() -> None:
    gen = _gen()
    xs = [torch.randn(2, 8, generator=gen, dtype=torch.float16), torch.randn(3, 8, generator=gen, dtype=torch.float16)]
    ws = [torch.randn(8, 4, generator=gen, dtype=torch.float16) for _ in range(2)]
    (out,) = torch_npu.npu_grouped_matmul(xs, ws, group_list=torch.tensor([2, 5]), group_type=0, split_item=2)
    _close(out, torch.cat([xs[0].double() @ ws[0].double(), xs[1].double() @ ws[1].double()]))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul(xs, ws, group_list=torch.tensor([3, 5]), group_type=0, split_item=2)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_list")


def test_dtype_hints_are_accepted_as_none_and_refused_otherwise() -> None:
    x, w = torch.randn(4, 8, dtype=torch.float16), torch.randn(2, 8, 4, dtype=torch.float16)
    (out,) = torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([1, 4]), group_type=0, split_item=3,
                                          per_token_scale_dtype=None, x_dtype=None)
    assert out.shape == (4, 4)
    with pytest.raises(OpArgumentError) as refused:
        torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([1, 4]), group_type=0, split_item=3,
                                     per_token_scale_dtype=torch.float32)
    assert (refused.value.op, refused.value.argument) == ("npu_grouped_matmul", "per_token_scale_dtype")
    assert "per_token_scale_dtype" in str(refused.value)
    with pytest.raises(OpTypeError) as wrong_type:
        torch_npu.npu_format_cast(x, 29, customize_dtype="int4")
    assert (wrong_type.value.op, wrong_type.value.argument) == ("npu_format_cast", "customize_dtype")
    assert "a torch.dtype or its int code" in str(wrong_type.value)


@pytest.mark.parametrize("split_item, group_list", [(3, [2, 6]), (0, [2, 6])])
def test_grouped_matmul_opcheck(split_item: int, group_list: list[int]) -> None:
    x, weights = torch.randn(6, 8, dtype=torch.float16), [torch.randn(8, 4, dtype=torch.float16)] * 2
    kwargs = {"group_list": group_list, "split_item": split_item}
    torch.library.opcheck(torch.ops.npu.npu_grouped_matmul.List, ([x], weights), kwargs,
                          test_utils=("test_schema", "test_faketensor"))
    xt, dy = torch.randn(5, 6, dtype=torch.float16), torch.randn(6, 3, dtype=torch.float16)
    kwargs = {"group_list": torch.tensor([2, 6]), "group_type": 2, "split_item": 3}
    torch.library.opcheck(torch.ops.npu.npu_grouped_matmul.default, ([xt], [dy]), kwargs,
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("scale", [np.float16(0.125), np.float32(0.125), np.float64(0.125)])
def test_numpy_scalars_are_real_numbers(scale: object) -> None:
    """torch_npu's binding takes any real number for a schema float or int, as torch's dispatcher does in eager
    mode (Dynamo turns a numpy scalar into a tensor, so torch.compile refuses it for any op's float)."""
    x, gamma = torch.randn(2, 8, dtype=torch.float16), torch.ones(8, dtype=torch.float16)
    expected = torch_npu.npu_rms_norm(x, gamma, epsilon=0.125)[0]
    assert torch.equal(torch_npu.npu_rms_norm(x, gamma, epsilon=scale)[0], expected)


def test_numpy_integers_and_bools() -> None:
    w = torch.randn(8, 8, dtype=torch.float16)
    torch_npu.npu_prefetch(w, None, np.int64(64), offset=np.int32(0))
    with pytest.raises(OpTypeError) as exc:
        torch_npu.npu_prefetch(w, None, np.bool_(True))
    assert (exc.value.op, exc.value.argument) == ("npu_prefetch", "max_size")
    with pytest.raises(OpTypeError) as exc:
        torch_npu.npu_prefetch(w, None, np.float32(64))
    assert (exc.value.op, exc.value.argument) == ("npu_prefetch", "max_size")


def test_prefetch_refusal_is_a_runtime_error_as_torch_npus() -> None:
    with pytest.raises(RuntimeError) as refused:
        torch_npu.npu_prefetch(torch.ones(4), None, -1)
    assert isinstance(refused.value, OpArgumentError)
    assert (refused.value.op, refused.value.argument) == ("npu_prefetch", "max_size")
    assert refused.value.problem == "max_size should be greater than zero, but got -1"


def _prefetch_problem(*args: object) -> tuple[str, str | None]:
    with pytest.raises(OpArgumentError) as refused:
        torch_npu.npu_prefetch(*args)
    return refused.value.problem, refused.value.argument


def test_prefetch_refusals_carry_torch_npus_messages_eager_and_fake() -> None:
    """The device kernel's TORCH_CHECK wording on real tensors, the meta function's on fake ones, as
    torch_npu raises them (op-plugin PrefetchKernelNpuOpApi.cpp, _meta_registrations.py)."""
    weight = torch.ones(8, 8, dtype=torch.float16)
    assert _prefetch_problem(weight, None, 1000, -1) == ("offset should not be smaller than zero, but got -1", "offset")
    assert _prefetch_problem(weight, None, 1000, 128) == (
        "offset out of range of tensor size, tensor size: 128, offset: 128", "offset")
    with FakeTensorMode():
        fake = torch.ones(8, 8, dtype=torch.float16)
        assert _prefetch_problem(fake, None, -1) == ("The max_size should be greater than zero, but got -1.", "max_size")
        assert _prefetch_problem(fake, None, 8, -2) == ("The offset should be nonnegative, but got -2.", "offset")


@pytest.mark.parametrize("customize_dtype", [torch.int32, torch.int8, 3, None])
def test_format_cast_takes_customize_dtype(customize_dtype: object) -> None:
    w = torch.randn(16, 32)
    out = torch_npu.npu_format_cast(w, 29, customize_dtype=customize_dtype)
    assert torch.equal(out, w) and out.data_ptr() != w.data_ptr()
    torch.library.opcheck(torch.ops.npu.npu_format_cast.default, (w, 29), {"customize_dtype": customize_dtype},
                          test_utils=("test_schema", "test_faketensor"))
    with pytest.raises(TypeError) as exc:
        torch_npu.npu_format_cast(w, 29, torch.int8)  # customize_dtype is keyword-only
    assert exc.value.op == "npu_format_cast"


@pytest.mark.parametrize("x1_dtype, x2_dtype", [(torch.float16, torch.float32), (torch.float32, torch.bfloat16)])
def test_add_layer_norm_mixed_dtypes_return_float32(x1_dtype: torch.dtype, x2_dtype: torch.dtype) -> None:
    gen = _gen()
    x1 = torch.randn(3, 16, generator=gen).to(x1_dtype)
    x2 = torch.randn(3, 16, generator=gen).to(x2_dtype)
    gamma, beta = torch.rand(16, generator=gen), torch.rand(16, generator=gen)
    y, mean, rstd, x = torch_npu.npu_add_layer_norm(x1, x2, gamma, beta, 1e-5, True)
    assert y.dtype == x.dtype == torch.float32 and mean.shape == (3, 1)
    total = x1.double() + x2.double()
    _close(x, total)
    ref = torch.nn.functional.layer_norm(total, (16,), gamma.double(), beta.double(), eps=1e-5)
    _close(y, ref)
    torch.library.opcheck(torch.ops.npu.npu_add_layer_norm.default, (x1, x2, gamma, beta, 1e-5, True),
                          test_utils=("test_schema", "test_faketensor"))


def test_add_layer_norm_refuses_two_different_half_dtypes() -> None:
    x1, x2 = torch.randn(2, 8, dtype=torch.float16), torch.randn(2, 8, dtype=torch.bfloat16)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_add_layer_norm(x1, x2, torch.ones(8), torch.zeros(8))
    assert (exc.value.op, exc.value.argument) == ("npu_add_layer_norm", "x2")


def test_anti_quant_reads_int4_words_without_src_dtype() -> None:
    levels = torch.randint(-8, 8, (2, 16), dtype=torch.int8, generator=_gen())
    words = pack_int4(levels)
    scale = torch.tensor([0.5])
    out = torch_npu.npu_anti_quant(words, scale, dst_dtype=torch.bfloat16)
    assert torch.equal(out, torch_npu.npu_anti_quant(words, scale, dst_dtype=torch.bfloat16, src_dtype=torch.quint4x2))
    assert torch.equal(out, (levels.float() * 0.5).to(torch.bfloat16))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_anti_quant(words, scale, src_dtype=torch.int8)
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "x")


def test_combine_v2_special_experts_use_ori_x() -> None:
    """Experts 0-3 are MoE experts (identity FFN here), 4 a zero, 5 a copy and 6 a constant expert: combine adds
    ``scale * Moe(ori_x)`` for the special ones, dispatch sends only the MoE experts' tokens."""
    gen = _gen()
    tokens, hidden = 4, 8
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    ids = torch.tensor([[0, 4], [5, 1], [6, 2], [3, 5]], dtype=torch.int32)
    weights = torch.rand(tokens, 2, generator=gen)
    special = {"zero_expert_num": 1, "copy_expert_num": 1, "const_expert_num": 1}
    expand_x, _, assist, counts, recv, _, _ = torch_npu.npu_moe_distribute_dispatch_v2(x, ids, "ep", 1, 0, 4, **special)
    assert int(counts.sum()) == 4  # the special experts' tokens stay home
    alpha1, alpha2, v = (torch.randn(1, hidden, generator=gen).to(torch.bfloat16) for _ in range(3))
    out = torch_npu.npu_moe_distribute_combine_v2(
        expand_x, ids, assist, recv, weights, "ep", 1, 0, 4, ori_x=x, const_expert_alpha_1=alpha1,
        const_expert_alpha_2=alpha2, const_expert_v=v, **special)
    moe = {4: torch.zeros(hidden, dtype=torch.float64), 6: None}
    ref = torch.zeros(tokens, hidden, dtype=torch.float64)
    for t in range(tokens):
        for slot in range(2):
            expert, w = int(ids[t, slot]), float(weights[t, slot])
            if expert == 6:
                value = alpha1[0].double() * x[t].double() + alpha2[0].double() * v[0].double()
            else:
                value = moe.get(expert, x[t].double())  # MoE experts and the copy expert return the token
            ref[t] += w * value
    _close(out, ref)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_moe_distribute_combine_v2(expand_x, ids, assist, recv, weights, "ep", 1, 0, 4, **special)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_distribute_combine_v2", "ori_x")


@pytest.mark.parametrize("output_dtype, pertoken", [(torch.float16, False), (torch.bfloat16, True)])
def test_quant_matmul_a4w4_int32_words(output_dtype: torch.dtype, pertoken: bool) -> None:
    """A4W4 as the upstream tests call it: both operands npu_quantize(..., torch.quint4x2) words of int4."""
    gen = _gen()
    a = torch.randint(-8, 8, (4, 32), dtype=torch.int8, generator=gen)
    b = torch.randint(-8, 8, (32, 16), dtype=torch.int8, generator=gen)
    x1 = torch_npu.npu_quantize(a.float(), torch.tensor([1.0]), None, torch.quint4x2, -1, False)
    x2 = torch_npu.npu_quantize(b.float(), torch.tensor([1.0]), None, torch.quint4x2, -1, False)
    assert x1.dtype == x2.dtype == torch.int32 and x2.shape == (32, 2)
    scale = torch.tensor([0.25])
    token = torch.rand(4, generator=gen) if pertoken else None
    out = torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=token, output_dtype=output_dtype)
    ref = (a.double() @ b.double()) * 0.25 * (token.double().unsqueeze(-1) if pertoken else 1)
    assert out.shape == (4, 16) and out.dtype == output_dtype
    _close(out, ref)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_quant_matmul(x1, b, scale, output_dtype=output_dtype)
    assert (exc.value.op, exc.value.argument) == ("npu_quant_matmul", "x1")


def test_grouped_matmul_refuses_empty_lists_as_torch_npu_does() -> None:
    with pytest.raises(RuntimeError) as refused:
        torch_npu.npu_grouped_matmul([], [], group_type=-1)
    assert (refused.value.op, refused.value.argument) == ("npu_grouped_matmul", "x")
    assert isinstance(refused.value, OpArgumentError)


def test_dtype_codes_are_the_dispatchers() -> None:
    """dtype_of_code's table is the number the dispatcher hands a kernel for each torch.dtype."""
    from pytest_npufuse.torch_npu.checks import _SCALAR_TYPES, dtype_of_code

    seen = {}
    lib = torch.library.Library("opargs_codes", "DEF")
    lib.define("code(Tensor x, int d) -> Tensor")
    lib.impl("code", lambda x, d: (seen.__setitem__("d", d), x.clone())[1], "CPU")
    for code, dtype in _SCALAR_TYPES.items():
        torch.ops.opargs_codes.code(torch.ones(1), dtype)
        assert seen["d"] == code and dtype_of_code(code) == dtype == dtype_of_code(dtype)
    assert dtype_of_code(None) is None
    # torch_npu's own codes: a torch format's names its dtype, int4 the quint4x2 words, the others stay codes
    assert dtype_of_code(torch_npu.bfloat16) == torch.bfloat16 and dtype_of_code(torch_npu.int4) == torch.quint4x2
    assert dtype_of_code(torch_npu.hifloat8) == torch_npu.hifloat8


def test_add_rms_norm_dynamic_quant_takes_torch_npus_int4_code() -> None:
    x = torch.randn(2, 16, dtype=torch.float16)
    gamma = torch.ones(16, dtype=torch.float16)
    by_code = torch_npu.npu_add_rms_norm_dynamic_quant(x, x, gamma, y_dtype=torch_npu.int4)
    by_dtype = torch_npu.npu_add_rms_norm_dynamic_quant(x, x, gamma, y_dtype=torch.quint4x2)
    assert all(torch.equal(a, b) for a, b in zip(by_code, by_dtype)) and by_code[0].shape == (2, 2)


# npu_moe_token_permute / npu_moe_token_unpermute, against Megatron's permute/unpermute in float64


def _megatron_permute(tokens: torch.Tensor, indices: torch.Tensor, num_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    top_k = 1 if indices.dim() == 1 else indices.shape[1]
    order = torch.argsort(indices.reshape(-1), stable=True)[:num_out]
    return tokens[order // top_k], order


@pytest.mark.parametrize("top_k, num_out_tokens", [(1, None), (3, None), (3, 10), (3, -4), (2, 0)])
def test_token_permute_sorts_copies_by_expert(top_k: int, num_out_tokens: object) -> None:
    gen = _gen()
    tokens = torch.randn(6, 8, generator=gen).to(torch.bfloat16)
    indices = torch.randint(0, 4, (6, top_k) if top_k > 1 else (6,), generator=gen)
    permuted, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices, num_out_tokens)
    copies = indices.numel()
    n = num_out_tokens or 0
    rows = min(n, copies) if n > 0 else copies + n
    ref, order = _megatron_permute(tokens, indices, rows)
    assert torch.equal(permuted, ref) and sorted_indices.dtype == torch.int32 and sorted_indices.shape == (copies,)
    assert torch.equal(sorted_indices.long(), torch.argsort(torch.argsort(indices.reshape(-1), stable=True)))
    torch.library.opcheck(torch.ops.npu.npu_moe_token_permute.default, (tokens, indices, num_out_tokens),
                          test_utils=("test_schema", "test_faketensor"))


def test_token_unpermute_weights_and_sums_each_tokens_copies() -> None:
    gen = _gen()
    tokens = torch.randn(5, 8, generator=gen).to(torch.float16)
    indices = torch.randint(0, 3, (5, 2), generator=gen)
    probs = torch.rand(5, 2, generator=gen).to(torch.float16)
    permuted, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices)
    expert_out = permuted * 2  # an expert that doubles its rows
    out = torch_npu.npu_moe_token_unpermute(expert_out, sorted_indices, probs=probs)
    _close(out, tokens.double() * 2 * probs.double().sum(dim=1, keepdim=True))
    torch.library.opcheck(torch.ops.npu.npu_moe_token_unpermute.default, (expert_out, sorted_indices, probs),
                          test_utils=("test_schema", "test_faketensor"))


def test_token_unpermute_drops_the_copies_permute_dropped() -> None:
    tokens = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    indices = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])
    permuted, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices, 6)  # the last two copies dropped
    out = torch_npu.npu_moe_token_unpermute(permuted, sorted_indices, probs=torch.ones(4, 2))
    kept = (sorted_indices < 6).reshape(4, 2).sum(dim=1, keepdim=True).float()
    assert torch.equal(out, tokens * kept)


def test_token_permute_refuses_padded_mode_and_mismatched_rows() -> None:
    tokens = torch.randn(4, 8)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_moe_token_permute(tokens, torch.zeros(4, 2, dtype=torch.int64), padded_mode=True)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_token_permute", "padded_mode")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_moe_token_permute(tokens, torch.zeros(3, 2, dtype=torch.int64))
    assert (exc.value.op, exc.value.argument) == ("npu_moe_token_permute", "tokens")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_moe_token_unpermute(tokens, torch.arange(4, dtype=torch.int32), probs=torch.ones(4, 2))
    assert (exc.value.op, exc.value.argument) == ("npu_moe_token_unpermute", "probs")


# npu_add_rms_norm_dynamic_quant, against float64 RMSNorm and per-row symmetric quantisation


def _rms_reference(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, beta: object) -> torch.Tensor:
    x = (x1.double() + x2.double()).to(x1.dtype).double()
    y = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * gamma.double()
    return y if beta is None else y + beta.double()


@pytest.mark.parametrize("with_beta", [False, True])
def test_add_rms_norm_dynamic_quant_two_smoothed_branches(with_beta: bool) -> None:
    gen = _gen()
    x1, x2 = (torch.randn(2, 3, 32, generator=gen).to(torch.bfloat16) for _ in range(2))
    gamma, s1, s2 = (torch.rand(32, generator=gen).add(0.5).to(torch.bfloat16) for _ in range(3))
    beta = torch.randn(32, generator=gen).to(torch.bfloat16) if with_beta else None
    y1, y2, x, scale1, scale2 = torch_npu.npu_add_rms_norm_dynamic_quant(
        x1, x2, gamma, smooth_scale1=s1, smooth_scale2=s2, beta=beta)
    assert torch.equal(x, (x1.float() + x2.float()).to(torch.bfloat16))
    y = _rms_reference(x1, x2, gamma, beta)
    for levels, scale, smooth in ((y1, scale1, s1), (y2, scale2, s2)):
        values = y * smooth.double()
        ref_scale = values.abs().amax(dim=-1) / 127
        torch.testing.assert_close(scale.double(), ref_scale, rtol=1e-5, atol=0)
        assert levels.dtype == torch.int8
        assert (levels.double() - values / ref_scale.unsqueeze(-1)).abs().max() <= 0.51
    torch.library.opcheck(torch.ops.npu.npu_add_rms_norm_dynamic_quant.default, (x1, x2, gamma),
                          {"smooth_scale1": s1, "smooth_scale2": s2, "beta": beta},
                          test_utils=("test_schema", "test_faketensor"))


def test_add_rms_norm_dynamic_quant_output_mask_and_int4() -> None:
    gen = _gen()
    x1, x2 = (torch.randn(4, 16, generator=gen).to(torch.float16) for _ in range(2))
    gamma = torch.ones(16, dtype=torch.float16)
    y1, y2, _, scale1, scale2 = torch_npu.npu_add_rms_norm_dynamic_quant(x1, x2, gamma)
    assert y1.shape == (4, 16) and y2.shape == (0,) and scale2.shape == (0,)  # no output_mask, no smooth scales
    y1, y2, _, scale1, scale2 = torch_npu.npu_add_rms_norm_dynamic_quant(
        x1, x2, gamma, output_mask=[False, True], y_dtype=torch.quint4x2)
    assert y1.shape == (0,) and y2.shape == (4, 2) and y2.dtype == torch.int32 and scale2.shape == (4,)
    levels = torch_npu.npu_anti_quant(y2, torch.ones(1), dst_dtype=torch.float16).double()
    y = _rms_reference(x1, x2, gamma, None)
    torch.testing.assert_close(scale2.double(), y.abs().amax(dim=-1) / 7, rtol=1e-5, atol=0)
    assert (levels - y / scale2.double().unsqueeze(-1)).abs().max() <= 0.51
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, output_mask=[False, False])
    assert (exc.value.op, exc.value.argument) == ("npu_add_rms_norm_dynamic_quant", "output_mask")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, smooth_scale1=gamma, output_mask=[False, True])
    assert (exc.value.op, exc.value.argument) == ("npu_add_rms_norm_dynamic_quant", "smooth_scale1")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, y_dtype=torch.float16)
    assert (exc.value.op, exc.value.argument) == ("npu_add_rms_norm_dynamic_quant", "y_dtype")


def test_dynamic_quant_takes_op_plugins_mode_arguments_at_their_defaults() -> None:
    x = torch.randn(4, 16, dtype=torch.float16)
    expected = torch_npu.npu_dynamic_quant(x)
    for got, want in zip(torch_npu.npu_dynamic_quant(x, quant_mode="pertoken", dst_type_max=0.0), expected):
        assert torch.equal(got, want)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_dynamic_quant(x, quant_mode="pertensor")
    assert (exc.value.op, exc.value.argument) == ("npu_dynamic_quant", "quant_mode")


@pytest.mark.parametrize("num_out_tokens", [None, 7])
def test_token_permute_and_unpermute_differentiate_as_derivatives_yaml_says(num_out_tokens: object) -> None:
    """Through npu_moe_token_permute_grad_v2 / npu_moe_token_unpermute_grad_v2, the gradients equal those of
    the same computation in plain torch (index_select, weight, sum), dropped copies included."""
    gen = _gen()
    tokens = torch.randn(5, 4, generator=gen, requires_grad=True)
    indices = torch.randint(0, 3, (5, 2), generator=gen)
    probs = torch.rand(5, 2, generator=gen, requires_grad=True)
    permuted, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices, num_out_tokens)
    out = torch_npu.npu_moe_token_unpermute(permuted * 3, sorted_indices, probs=probs)
    weights = torch.randn(out.shape, generator=gen)
    (out * weights).sum().backward()

    ref_tokens, ref_probs = tokens.detach().clone().requires_grad_(True), probs.detach().clone().requires_grad_(True)
    kept = (sorted_indices < permuted.shape[0]).reshape(5, 2, 1)
    copies = ref_tokens.unsqueeze(1).expand(5, 2, 4) * 3 * kept
    ref = (copies * ref_probs.unsqueeze(-1)).sum(dim=1)
    (ref * weights).sum().backward()
    torch.testing.assert_close(tokens.grad, ref_tokens.grad)
    torch.testing.assert_close(probs.grad, ref_probs.grad)
    def step(t: torch.Tensor, i: torch.Tensor, p: torch.Tensor) -> tuple:
        permuted, order = torch_npu.npu_moe_token_permute(t, i)
        return torch.autograd.grad(torch_npu.npu_moe_token_unpermute(permuted, order, probs=p).sum(), (t, p))

    graph = torch.fx.experimental.proxy_tensor.make_fx(step, tracing_mode="fake")(
        tokens.detach().requires_grad_(True), indices, probs.detach().requires_grad_(True))
    targets = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert {"npu.npu_moe_token_permute_grad_v2.default", "npu.npu_moe_token_unpermute_grad_v2.default"} <= targets


def test_token_permute_grad_ops_opcheck() -> None:
    grad = torch.randn(6, 4)
    sorted_indices = torch.tensor([3, 0, 5, 1, 4, 2], dtype=torch.int32)
    torch.library.opcheck(torch.ops.npu.npu_moe_token_permute_grad_v2.default,
                          (grad, sorted_indices, 3, torch.float32, 2), test_utils=("test_schema", "test_faketensor"))
    probs, permuted = torch.rand(3, 2), torch.randn(6, 4)
    torch.library.opcheck(torch.ops.npu.npu_moe_token_unpermute_grad_v2.default,
                          (torch.randn(3, 4), sorted_indices, 6, torch.float32, probs, False, None, permuted),
                          test_utils=("test_schema", "test_faketensor"))


class _GroupedMatmul(torch.autograd.Function):
    """A hand-written grouped-matmul backward as MoE training code writes one: dx by the row-grouped matmul of
    the transposed experts, dW by the K-split (group_type=2) one."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, weight: torch.Tensor, group_list: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight, group_list)
        return torch_npu.npu_grouped_matmul([x], [weight], group_list=group_list, group_type=0, split_item=3)[0]

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple:
        x, weight, group_list = ctx.saved_tensors
        dx = torch_npu.npu_grouped_matmul([grad], [weight.transpose(1, 2)], group_list=group_list, group_type=0,
                                          split_item=3)[0]
        dw = torch_npu.npu_grouped_matmul([x.t()], [grad], group_list=group_list, group_type=2, split_item=3)[0]
        return dx, dw, None


class _MoeLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 16, 16, generator=_gen()) * 0.1)
        self.gate = torch.nn.Parameter(torch.rand(16, generator=_gen()) + 0.5)

    def forward(self, x: torch.Tensor, indices: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        permuted, order = torch_npu.npu_moe_token_permute(x * self.gate, indices)
        group_list = torch.cumsum((indices.reshape(-1, 1) == torch.arange(4)).sum(dim=0), 0)
        hidden = _GroupedMatmul.apply(permuted, self.weight, group_list)
        return torch_npu.npu_moe_token_unpermute(hidden, order, probs=probs)


def test_a_moe_training_step_with_k_split_weight_gradients_is_captured_and_priced() -> None:
    """permute -> grouped matmul -> unpermute, with the grouped matmul's hand-written backward: the step's
    backward graph holds the K-split grouped matmul and both token grad ops, and the gradients are torch's."""
    x = torch.randn(8, 16, generator=_gen())
    indices = torch.arange(16).reshape(8, 2) % 4
    probs = torch.rand(8, 2, generator=_gen())
    layer = _MoeLayer()
    reference = layer.weight.detach().clone().requires_grad_(True)
    gate = layer.gate.detach().clone().requires_grad_(True)
    copies = (x * gate).unsqueeze(1).expand(8, 2, 16)
    ref_out = (torch.einsum("tkh,tkhn->tkn", copies, reference[indices]) * probs.unsqueeze(-1)).sum(dim=1)
    ref_out.float().pow(2).mean().backward()
    report = compare(layer, x, indices, probs, loss=lambda y: y.float().pow(2).mean(),
                     optimizer=torch.optim.SGD(layer.parameters(), lr=0.0))
    backward = [kernel.op_type for kernel in report.variant.kernels if kernel.name.startswith("backward/")]
    assert {"npu::npu_moe_token_permute_grad_v2", "npu::npu_moe_token_unpermute_grad_v2"} <= set(backward)
    assert backward.count("npu::npu_grouped_matmul") == 2  # dx and the K-split dW
    assert report.bit_exact
    layer(x, indices, probs).float().pow(2).mean().backward()  # eager, through the same kernels
    torch.testing.assert_close(layer.weight.grad, reference.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer.gate.grad, gate.grad, rtol=1e-4, atol=1e-5)


def test_quant_matmul_a4w4_takes_a_transposed_int4_weight() -> None:
    """x2 as the transposed view of an [n, k / 8] quantised weight: its words pack k (op-plugin's meta)."""
    gen = _gen()
    a = torch.randint(-8, 8, (3, 32), dtype=torch.int8, generator=gen)
    b = torch.randint(-8, 8, (16, 32), dtype=torch.int8, generator=gen)  # [n, k]
    x1, w = (torch_npu.npu_quantize(t.float(), torch.tensor([1.0]), None, torch.quint4x2, -1, False) for t in (a, b))
    out = torch_npu.npu_quant_matmul(x1, w.t(), torch.tensor([0.5]), output_dtype=torch.bfloat16)
    assert out.shape == (3, 16)
    _close(out, (a.double() @ b.double().t()) * 0.5)


def test_tensor_group_list_with_per_group_outputs_has_run_time_row_counts() -> None:
    """split_item 0/1 with a tensor group_list: eager outputs take its values' rows; a fake kernel gives each
    output an unbacked row count, as the values are unknown while tracing."""
    gen = _gen()
    x = torch.randn(6, 8, generator=gen, dtype=torch.bfloat16)
    weights = [torch.randn(8, n, generator=gen, dtype=torch.bfloat16) for n in (4, 3)]
    outs = torch_npu.npu_grouped_matmul([x], weights, group_list=torch.tensor([2, 5]), group_type=0, split_item=1)
    assert [tuple(o.shape) for o in outs] == [(2, 4), (3, 3)]
    _close(outs[1], x[2:5].double() @ weights[1].double())
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        fakes = [mode.from_tensor(t) for t in (x, *weights, torch.tensor([2, 5]))]
        traced = torch.ops.npu.npu_grouped_matmul([fakes[0]], fakes[1:3], group_list=fakes[3], group_type=0,
                                                 split_item=1)
    assert all(isinstance(o.shape[0], torch.SymInt) for o in traced) and [o.shape[1] for o in traced] == [4, 3]
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], weights, group_list=torch.tensor([2, 3]), group_type=0, split_item=0,
                                     group_list_type=1)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "split_item")
