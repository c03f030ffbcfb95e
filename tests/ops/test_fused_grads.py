"""The backwards of the torch_npu fused ops used in training (op-plugin's derivatives.yaml: each forward
calls its backward op), against float64 autograd of the unfused formula.

The kernels take float16/bfloat16/float32 (as torch_npu's), so ``torch.autograd.gradcheck``, which
needs float64 inputs, cannot run on them; instead each fused gradient, computed in float32, is compared
with float64 autograd of the documented unfused computation. npu_confusion_transpose moves values of any
dtype, so gradcheck checks it directly.
"""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.torch_npu.registry import OPS

GEN = torch.Generator().manual_seed(0)


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_() for t in tensors]


def reference_grads(fn, inputs: list[torch.Tensor], grad: torch.Tensor) -> list[torch.Tensor]:
    doubles = [t.detach().double().requires_grad_() for t in inputs]
    fn(*doubles).backward(grad.double())
    return [t.grad for t in doubles]


def assert_grads(fused: list[torch.Tensor], reference: list[torch.Tensor], tol: float = 2e-5) -> None:
    for got, want in zip(fused, reference, strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("gamma_shape", [(16,), (4, 16)])
def test_rms_norm_grad(gamma_shape):
    x, gamma = leaves(torch.randn(3, 4, 16, generator=GEN), torch.randn(gamma_shape, generator=GEN))
    y, rstd = torch_npu.npu_rms_norm(x, gamma, 1e-6)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)
    dims = tuple(range(-len(gamma_shape), 0))

    def unfused(x, gamma):
        return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + 1e-6) * gamma

    assert_grads([x.grad, gamma.grad], reference_grads(unfused, [x, gamma], grad))


@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("table", [(1, 1, 8, 16), (1, 8, 1, 16)])
def test_rotary_mul_grad(mode, table):
    shape = (2, 3, 8, 16) if table[2] == 8 else (2, 8, 3, 16)
    x, cos, sin = leaves(torch.randn(shape, generator=GEN), torch.randn(table, generator=GEN),
                         torch.randn(table, generator=GEN))
    y = torch_npu.npu_rotary_mul(x, cos, sin, mode)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)

    def rotate(v):
        if mode == "half":
            first, second = v.chunk(2, -1)
            return torch.cat((-second, first), -1)
        return torch.stack((-v[..., 1::2], v[..., 0::2]), -1).flatten(-2)

    def unfused(x, cos, sin):
        return x * cos + rotate(x) * sin

    assert_grads([x.grad, cos.grad, sin.grad], reference_grads(unfused, [x, cos, sin], grad))


@pytest.mark.parametrize("fixed_triu_mask", [False, True])
def test_scaled_masked_softmax_grad(fixed_triu_mask):
    (x,) = leaves(torch.randn(2, 3, 32, 64, generator=GEN))
    mask = torch.rand(2, 1, 32, 64, generator=GEN) > 0.7
    y = torch_npu.npu_scaled_masked_softmax(x, mask, 0.25, fixed_triu_mask)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)
    used = torch.ones(32, 64, dtype=torch.bool).triu(1).expand(x.shape) if fixed_triu_mask else mask

    def unfused(x):
        return torch.softmax((x * 0.25).masked_fill(used, -10000.0), dim=-1)

    assert_grads([x.grad], reference_grads(unfused, [x], grad))


def attention(q, k, v, scale, visible):
    """float64 reference: softmax(scale q k^T, masked) v with GQA heads, in BNSD."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
def test_fusion_attention_grad_layouts_and_gqa(layout):
    b, n, nkv, s, d = 2, 4, 2, 16, 8
    q, k, v = (torch.randn(b, heads, s, d, generator=GEN) for heads in (n, nkv, nkv))
    to_layout = {
        "BNSD": lambda t: t, "BSND": lambda t: t.transpose(1, 2),
        "BSH": lambda t: t.transpose(1, 2).reshape(b, s, -1), "SBH": lambda t: t.permute(2, 0, 1, 3).reshape(s, b, -1),
    }[layout]
    ql, kl, vl = leaves(*(to_layout(t).contiguous() for t in (q, k, v)))
    out = torch_npu.npu_fusion_attention(ql, kl, vl, n, layout, scale=0.35)[0]
    grad = torch.randn(out.shape, generator=GEN)
    out.backward(grad)
    visible = torch.ones(1, 1, s, s, dtype=torch.bool)

    def unfused(q, k, v):
        return to_layout(attention(q, k, v, 0.35, visible))

    want = reference_grads(unfused, [q, k, v], grad)
    assert_grads([ql.grad, kl.grad, vl.grad], [to_layout(w) for w in want])


@pytest.mark.parametrize("sparse_mode", [0, 2])
def test_fusion_attention_grad_masks(sparse_mode):
    b, n, s, d = 1, 2, 16, 8
    q, k, v = leaves(*(torch.randn(b, n, s, d, generator=GEN) for _ in range(3)))
    if sparse_mode == 0:
        mask = torch.rand(b, 1, s, s, generator=GEN) > 0.6
        mask[..., 0] = False  # every row sees at least one key
    else:
        mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out = torch_npu.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=mask, scale=0.35, sparse_mode=sparse_mode)[0]
    grad = torch.randn(out.shape, generator=GEN)
    out.backward(grad)
    visible = ~mask if sparse_mode == 0 else ~torch.ones(s, s, dtype=torch.bool).triu(1)

    def unfused(q, k, v):
        return attention(q, k, v, 0.35, visible)

    assert_grads([q.grad, k.grad, v.grad], reference_grads(unfused, [q, k, v], grad))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_grad(approximate):
    (x,) = leaves(torch.randn(3, 4, 16, generator=GEN) * 3)
    y = torch_npu.npu_gelu(x, approximate=approximate)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)

    def unfused(x):
        return torch.nn.functional.gelu(x, approximate=approximate)

    assert_grads([x.grad], reference_grads(unfused, [x], grad))


@pytest.mark.parametrize("name", ["npu_fast_gelu", "fast_gelu"])
def test_fast_gelu_grad(name):
    (x,) = leaves(torch.randn(5, 16, generator=GEN) * 3)
    y = getattr(torch_npu, name)(x)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)

    def unfused(x):
        return x * torch.sigmoid(1.702 * x)

    assert_grads([x.grad], reference_grads(unfused, [x], grad))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_swiglu_grad(dim):
    (x,) = leaves(torch.randn(4, 6, 8, generator=GEN) * 2)
    y = torch_npu.npu_swiglu(x, dim)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)

    def unfused(x):
        gate, up = x.chunk(2, dim)
        return torch.nn.functional.silu(gate) * up

    assert_grads([x.grad], reference_grads(unfused, [x], grad))


@pytest.mark.parametrize(("perm", "shape", "transpose_first"), [
    ([0, 2, 1, 3], [2, 4, 18], True), ([0, 2, 1], [2, 12, 6], False), ([1, 0], [6, 24], False),
])
def test_confusion_transpose_gradcheck(perm, shape, transpose_first):
    """A permute and a reshape are linear and exact in float64, so gradcheck applies."""
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, generator=GEN, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: torch_npu.npu_confusion_transpose(x, perm, shape, transpose_first), (x,))


@pytest.mark.parametrize("gamma_shape", [(16,), (3, 16)])
def test_add_layer_norm_grad_flows_from_y_and_the_residual_output(gamma_shape):
    x1, x2 = leaves(torch.randn(2, 3, 16, generator=GEN), torch.randn(2, 3, 16, generator=GEN))
    gamma, beta = leaves(torch.rand(gamma_shape, generator=GEN) + 0.5, torch.randn(gamma_shape, generator=GEN))
    y, _, _, x = torch_npu.npu_add_layer_norm(x1, x2, gamma, beta, 1e-5, True)
    dy, dx = torch.randn(y.shape, generator=GEN), torch.randn(x.shape, generator=GEN)
    torch.autograd.backward([y, x], [dy, dx])
    dims = tuple(range(-len(gamma_shape), 0))

    def unfused(x1, x2, gamma, beta):
        x = x1 + x2
        mean = x.mean(dims, keepdim=True)
        rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + 1e-5)
        return (x - mean) * rstd * gamma + beta, x

    doubles = [t.detach().double().requires_grad_() for t in (x1, x2, gamma, beta)]
    torch.autograd.backward(list(unfused(*doubles)), [dy.double(), dx.double()])
    assert_grads([x1.grad, x2.grad, gamma.grad, beta.grad], [t.grad for t in doubles])


@pytest.mark.parametrize(("group_count", "k_group", "scale"), [(1, 1, 1.0), (4, 2, 2.5)])
def test_moe_gating_top_k_grad_in_sigmoid_mode(group_count, k_group, scale):
    """Against float64 autograd of the sigmoid routing: the bias only selects the experts."""
    x, bias = torch.randn(6, 16, generator=GEN) * 2, torch.randn(16, generator=GEN) * 0.5
    (leaf,) = leaves(x)
    y, idx, _ = torch_npu.npu_moe_gating_top_k(leaf, 3, bias=bias, k_group=k_group, group_count=group_count,
                                               norm_type=1, out_flag=True, routed_scaling_factor=scale)
    grad = torch.randn(y.shape, generator=GEN)
    y.backward(grad)

    def unfused(x):
        scores = torch.sigmoid(x).gather(1, idx.long())
        return scores / (scores.sum(-1, keepdim=True) + 1e-20) * scale

    assert_grads([leaf.grad], reference_grads(unfused, [leaf], grad))


def test_moe_gating_top_k_softmax_mode_has_no_backward_as_in_torch_npu():
    from pytest_npufuse.errors import OpArgumentError

    (x,) = leaves(torch.randn(4, 8, generator=GEN))
    y = torch_npu.npu_moe_gating_top_k(x, 2, out_flag=True)[0]
    with pytest.raises(OpArgumentError) as exc:
        y.backward(torch.ones_like(y))
    assert (exc.value.op, exc.value.argument) == ("npu_moe_gating_top_k_backward", "norm_type")


def test_the_backward_ops_are_declared_with_torch_npu_schemas():
    assert OPS["npu_rms_norm_backward"].schema.startswith("npu_rms_norm_backward(Tensor dy, Tensor input, Tensor gamma")
    assert OPS["npu_rotary_mul_backward"].schema == (
        "npu_rotary_mul_backward(Tensor grad, Tensor input, Tensor r1, Tensor r2, str rotary_mode=\"half\") "
        "-> (Tensor, Tensor, Tensor)"
    )
    assert "*, Tensor? pse=None" in OPS["npu_fusion_attention_grad"].schema
    assert OPS["npu_fusion_attention_grad"].schema.endswith("-> (Tensor, Tensor, Tensor, Tensor)")
    for forward, backward in [("npu_gelu", "npu_gelu_backward"), ("npu_fast_gelu", "npu_fast_gelu_backward"),
                              ("fast_gelu", "npu_fast_gelu_backward"), ("npu_swiglu", "npu_swiglu_backward"),
                              ("npu_add_layer_norm", "npu_add_layer_norm_backward"),
                              ("npu_confusion_transpose", "npu_confusion_transpose_backward"),
                              ("npu_moe_gating_top_k", "npu_moe_gating_top_k_backward")]:
        assert OPS[forward].differentiable and not OPS[backward].differentiable


def test_a_compiled_training_step_holds_the_grad_ops():
    from pytest_npufuse import compare

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gamma = torch.nn.Parameter(torch.ones(16))
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, x, cos, sin):
            h = torch_npu.npu_rms_norm(x, self.gamma)[0]
            h = torch_npu.npu_rotary_mul(self.proj(h).view(2, 8, 2, 8), cos, sin)
            return torch_npu.npu_fusion_attention(h, h, h, 2, "BSND", scale=0.35)[0]

    x = torch.randn(2, 8, 16, generator=GEN)
    cos, sin = torch.randn(1, 8, 1, 8, generator=GEN), torch.randn(1, 8, 1, 8, generator=GEN)
    report = compare(Block(), x, cos, sin, loss=lambda out: out.square().mean())
    assert report.bit_exact
    kinds = {k.kernel_type for k in report.variant.kernels if k.name.startswith("backward/")}
    assert {"RmsNormGrad", "RotaryMulGrad", "FlashAttentionScoreGrad"} <= kinds
