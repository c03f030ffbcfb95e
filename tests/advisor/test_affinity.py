"""The affinity-op advisor: every pattern of docs/feature-docs.md#affinity-ops is found in a model that has them all,
with its source line, modeled gain and exactness verdict, and none in the same model rewritten."""

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F

from pytest_npufuse import compare, torch_npu
from pytest_npufuse.advisor import PATTERNS, find_affinity
from pytest_npufuse.advisor.advice import capture_program
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

N, H, C = 16, 64, 8
# A Linear input torch_npu casts to FRACTAL_NZ first: K below 128 and no multiple of 16, M x K > 65535.
ROWS, K = 1024, 100


@pytest.fixture(scope="module")
def world():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


class Slow(torch.nn.Module):
    """Each form docs/feature-docs.md#affinity-ops replaces, once."""

    def __init__(self, group):
        super().__init__()
        self.group = group
        self.proj = torch.nn.Linear(K, H)
        self.gamma = torch.nn.Parameter(torch.randn(H))
        self.w = torch.nn.Parameter(torch.randn(H, 2 * H))
        self.v = torch.nn.Parameter(torch.randn(1, H, 1))

    def forward(self, x, idx, a, b, lens, logit, target, mask, cos, sin, u):
        mask_counts = F.one_hot(idx, num_classes=C).sum(dim=1)
        y = self.proj(u)
        # docs/feature-docs.md#affinity-ops: [b, n] x shared [n, 1] as a BatchMatMul to [b, 1, 1]
        dot = torch.bmm(a, self.v.expand(N, H, 1))
        rep = torch.repeat_interleave(u.flatten(), 4)
        picked = logit.gather(1, target)
        z = x.clone()
        z[mask] = 0.0
        first, second = x.chunk(2, -1)
        rot = x * cos + torch.cat((-second, first), -1) * sin
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gamma
        q = x.view(2, 8, H)
        scores = (q @ q.transpose(1, 2)) * 0.125
        attn = torch.softmax(scores.masked_fill(mask[:8, :8], -1e4), dim=-1) @ q
        h = x @ self.w
        glu = F.silu(h[:, :H]) * h[:, H:]
        reduced = fc.all_reduce(x @ self.w, "sum", self.group)
        kept = x[torch.nonzero(lens > 2, as_tuple=False).squeeze(1)].sum()
        clipped = torch.where(x < cos, cos, x)
        silu = u * torch.sigmoid(u)
        mish = u * torch.tanh(F.softplus(u))
        shuffled = x.view(2, 4, 8, 16).transpose(1, 2).contiguous().view(2, 8, 64)
        return mask_counts, y, dot, rep, picked, z, rot, rms, attn, glu, reduced, kept, clipped, silu, mish, shuffled


def inputs():
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(N, H, generator=gen), torch.rand(N, C, generator=gen).argsort(-1)[:, :2],
        torch.randn(N, 1, H, generator=gen), torch.randn(N, H, 1, generator=gen), torch.randint(1, 5, (N,), generator=gen),
        torch.randn(N, 10, generator=gen), torch.randint(0, 10, (N, 1), generator=gen), torch.rand(N, H, generator=gen) > 0.5,
        torch.randn(N, H, generator=gen), torch.randn(N, H, generator=gen), torch.randn(ROWS, K, generator=gen),
    )


def _line(source):
    path, line = source.rsplit(":", 1)
    return Path(path).read_text().splitlines()[int(line) - 1].strip()


@pytest.fixture(scope="module")
def slow_findings(world):
    program = capture_program(Slow(world), *inputs())
    return {f.pattern: f for f in find_affinity(program, load_profile("a3"), load_catalog())}


def test_every_seed_003_pattern_is_found_with_its_source_line(slow_findings):
    inference = [p.name for p in PATTERNS if "inference" in p.entry.phases]
    # npu_mm_all_reduce_base takes float16/bfloat16 (the catalogue's condition): a float32 site is not one
    assert [name for name in inference if name not in slow_findings] == ["MatmulAllReduce (unfused)"]
    assert "fused optimizer" not in slow_findings  # a training-only entry: no optimizer graph here
    assert _line(slow_findings["SiLU (unfused)"].source).startswith("silu = u * torch.sigmoid(u)")
    assert _line(slow_findings["Mish (unfused)"].source).startswith("mish = u * torch.tanh(")
    assert _line(slow_findings["transpose + view (confusion_transpose)"].source).startswith("shuffled = ")
    assert _line(slow_findings["one_hot+sum"].source).startswith("mask_counts = F.one_hot(")
    assert _line(slow_findings["SwiGlu (unfused)"].source).startswith("glu = F.silu(")
    assert _line(slow_findings["Nonzero + index + sum"].source).startswith("kept = x[torch.nonzero(")
    assert _line(slow_findings["where(x < y, y, x)"].source).startswith("clipped = torch.where(")


def test_each_finding_is_priced_by_simulating_the_rewritten_program(slow_findings):
    one_hot = slow_findings["one_hot+sum"]
    assert one_hot.gain_us > 0, "zeros+scatter must be cheaper than the decomposed one_hot+sum"
    assert slow_findings["RmsNorm (unfused)"].gain_us > 0
    assert slow_findings["FlashAttentionScore (unfused)"].gain_us > 0
    # forms Dynamo lowers to the same aten kernels as their rewrites, priced by the call the user wrote
    assert slow_findings["nn.Linear"].gain_us > 0, "Linear's TransData to FRACTAL_NZ must cost time"
    assert slow_findings["repeat_interleave(scalar)"].gain_us > 0, "RepeatInterleave's scalar branch must cost time"
    assert slow_findings["bmm [b,n,1] -> [b,1,1]"].gain_us > 0, "one MatMul [b,n]x[n,1] beats a BatchMatMul to [b,1,1]"
    assert set(one_hot.kernels) >= {"Equal", "ReduceSum"}
    nonzero = slow_findings["Nonzero + index + sum"]
    assert nonzero.kernels == ("NonZero", "Index", "ReduceSum_1") and nonzero.gain_us > 0, nonzero


def test_each_rewrite_is_checked_for_bit_exactness(slow_findings):
    assert slow_findings["one_hot+sum"].exactness.startswith("bit-exact for distinct indices")
    # a rewrite that changes the backward is checked on the input's gradient too
    assert slow_findings["gather (GatherElements)"].exactness == "bit-exact (values and gradient)"
    assert slow_findings["index_put (IndexPutV2)"].exactness == "bit-exact (values and gradient)"
    assert slow_findings["repeat_interleave(scalar)"].exactness == "bit-exact"
    assert slow_findings["Nonzero + index + sum"].exactness.endswith("(values and gradient)")
    assert slow_findings["where(x < y, y, x)"].exactness == "bit-exact (values and gradients)"
    assert slow_findings["bmm [b,n,1] -> [b,1,1]"].exactness.startswith(("bit-exact", "not bit-exact: max |diff|"))
    assert slow_findings["RotaryMul (unfused)"].exactness.startswith(("bit-exact", "not bit-exact: max |diff|"))


class Fast(torch.nn.Module):
    """The same model with the rewrites of docs/feature-docs.md#affinity-ops applied."""

    def __init__(self, group):
        super().__init__()
        self.group = group
        self.weight = torch.nn.Parameter(torch.randn(H, K))
        self.bias = torch.nn.Parameter(torch.randn(H))
        self.gamma = torch.nn.Parameter(torch.randn(H))
        self.w = torch.nn.Parameter(torch.randn(H, 2 * H))
        self.v = torch.nn.Parameter(torch.randn(1, H, 1))

    def forward(self, x, idx, a, b, lens, logit, target, mask, kv, cos, sin, u):
        mask_counts = torch.zeros(N, C).scatter_(-1, idx, 1.0)
        y = torch.addmm(self.bias, u, self.weight.t())
        dot = a.squeeze(1) @ self.v[0]
        rep = u.flatten().unsqueeze(-1).expand(-1, 4).reshape(-1)
        picked = logit[torch.arange(N), target.squeeze(1)]
        z = x.masked_fill(mask, 0.0)
        rot = torch_npu.npu_rotary_mul(x.view(1, 1, N, H), cos.view(1, 1, N, H), sin.view(1, 1, N, H))
        rms = torch_npu.npu_rms_norm(x, self.gamma)[0]
        attn, _ = torch_npu.npu_fused_infer_attention_score(
            x.view(N, 1, H).to(torch.bfloat16), kv, kv, num_heads=1, input_layout="BSH", scale=0.125
        )
        glu = torch_npu.npu_swiglu(x @ self.w)
        reduced = torch_npu.npu_mm_all_reduce_base(x.to(torch.bfloat16), self.w.to(torch.bfloat16), "world")
        kept = (x * (lens > 2).float().unsqueeze(-1)).sum()
        clipped = torch.lerp(x, cos, (x < cos).float())
        silu, mish = torch_npu.npu_silu(u), torch_npu.npu_mish(u)
        shuffled = torch_npu.npu_confusion_transpose(x.view(2, 4, 8, 16), (0, 2, 1, 3), (2, 8, 64), True)
        return mask_counts, y, dot, rep, picked, z, rot, rms, attn, glu, reduced, kept, clipped, silu, mish, shuffled


def test_the_rewritten_model_has_no_finding():
    x, idx, a, b, lens, logit, target, mask, cos, sin, u = inputs()
    kv = torch.randn(N, 8, H).to(torch.bfloat16)
    program = capture_program(Fast(None), x, idx, a, b, lens, logit, target, mask, kv, cos, sin, u)
    assert find_affinity(program, load_profile("a3"), load_catalog()) == ()


def test_compare_reports_findings_only_when_asked():
    class OneHot(torch.nn.Module):
        def forward(self, idx):
            return F.one_hot(idx, num_classes=C).sum(dim=1)

    idx = inputs()[1]
    assert compare(OneHot(), idx).findings == ()
    (finding,) = compare(OneHot(), idx, affinity=True).findings
    assert finding.pattern == "one_hot+sum" and finding.occurrences == 1


def test_fused_rewrites_are_checked_against_the_op_library():
    class Scores(torch.nn.Module):
        def forward(self, q, k, mask):
            scores = (q @ k.transpose(-1, -2)) * 0.125
            return torch.softmax(scores.masked_fill(mask, -1e4), dim=-1)

    q, k = torch.randn(1, 2, 32, 16), torch.randn(1, 2, 64, 16)
    program = capture_program(Scores(), q, k, torch.rand(1, 1, 32, 64) > 0.5)
    (softmax,) = [f for f in find_affinity(program, load_profile("a3"), load_catalog())
                  if f.pattern == "ScaledMaskedSoftmax (unfused)"]
    assert softmax.exactness.startswith(("bit-exact", "not bit-exact: max |diff|")), softmax.exactness


def test_fused_rewrites_outside_the_ops_limits_say_why_they_are_not_checked(slow_findings):
    assert "does not take these scores" in slow_findings["ScaledMaskedSoftmax (unfused)"].exactness
    assert slow_findings["FlashAttentionScore (unfused)"].exactness.startswith(("bit-exact", "not bit-exact: max |diff|"))


def test_matmul_all_reduce_rewrite_is_checked_on_one_rank(world):
    class Reduced(torch.nn.Module):
        def forward(self, x, w):
            return fc.all_reduce(x @ w, "sum", world)

    program = capture_program(Reduced(), torch.randn(N, H).to(torch.bfloat16), torch.randn(H, 32).to(torch.bfloat16))
    (finding,) = find_affinity(program, load_profile("a3"), load_catalog())
    assert finding.pattern == "MatmulAllReduce (unfused)" and finding.gain_us > 0
    assert finding.exactness.startswith("bit-exact on one rank"), finding.exactness
