"""What a failing check explains: why each breaking op cannot be fused, which is new against the
baseline, the fixes, and where a side stream's kernels went."""

import pytest
import torch

from pytest_npufuse import compare
from pytest_npufuse import torch_npu
from pytest_npufuse import torchair as tng
from pytest_npufuse.errors import ProfileError
from pytest_npufuse.report.verdict import Failure, Verdict, first_cause
from pytest_npufuse.ir.lines import code_at
from pytest_npufuse.plan.tasks import ScopeBreak
from pytest_npufuse.report.explain import break_key, break_lines, failure_text, new_breaks
from pytest_npufuse.target.catalog import load_catalog


def weights(seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(64, 64, generator=gen) / 8 for _ in range(2)]


class Residual(torch.nn.Module):
    """A matmul, a plain residual add, a clone and another matmul in one scope."""

    def __init__(self):
        super().__init__()
        self.a, self.b = (torch.nn.Parameter(w) for w in weights())

    def forward(self, x):
        with tng.scope.super_kernel("proj", ""):
            y = x @ self.a
            y = y + x
            y = y.clone()
            return y @ self.b


class FusedSideStream(torch.nn.Module):
    """A fusable Vector op on stream 1 inside a stream-fusion=1 scope."""

    def __init__(self):
        super().__init__()
        self.a, self.b = (torch.nn.Parameter(w) for w in weights())

    def forward(self, x):
        with tng.scope.super_kernel("both", "stream-fusion=1"):
            h = x @ self.a
            with tng.scope.npu_stream_switch("1"):
                g = torch_npu.npu_fast_gelu(x)
            return h @ self.b, g


@pytest.fixture(scope="module")
def residual():
    return compare(Residual(), torch.ones(8, 64) / 8)


def site(op_type: str, line: int, path: str = "/home/me/models.py") -> ScopeBreak:
    return ScopeBreak(op_type, op_type.split("::")[1], f"{path}:{line}", "vector")


def test_a_plain_add_is_a_tbe_kernel_and_a_clone_a_copy_each_with_its_fix(residual):
    lines = break_lines(residual, None)
    assert lines[0] == "scope 'proj' is split into 2 SuperKernel segment(s) by:"
    add, add_code, clone, clone_code = lines[1:5]
    assert add.startswith("  aten::add (Add at ") and add.endswith(": Add is a TBE kernel, and a SuperKernel calls only Ascend C kernels")
    assert add_code.endswith(" | y = y + x") and clone_code.endswith(" | y = y.clone()"), (add_code, clone_code)
    assert "TensorMove is a data copy, not an Ascend C compute kernel" in clone
    assert not any("NEW" in line for line in lines)  # no baseline entry: nothing is called new
    assert lines[5].startswith("  fix for aten::add: move the op before or after the scope") and "npu_add_rms_norm" in lines[5]
    assert lines[6].startswith("  fix for aten::clone: avoid the copy inside the scope")
    assert lines[7].startswith("  if the split is intended, say so: @pytest.mark.superkernel('proj', segments=2, "
                               "breaks=['aten::add', 'aten::clone'])")


def test_only_the_op_missing_from_the_baseline_is_marked_new(residual):
    (add, clone) = residual.superkernels["proj"].break_points
    lines = break_lines(residual, {"proj": [break_key(add)]})
    assert "[NEW" not in lines[1] and "[NEW: not in the baseline]: TensorMove" in lines[3]


def test_break_keys_carry_no_directory_and_a_moved_line_is_the_same_op():
    assert break_key(site("aten::add", 12)) == "aten::add at models.py:12"
    assert break_key(ScopeBreak("aten::add", "Add", "", "vector")) == "aten::add"
    recorded = ["aten::add at models.py:12", "aten::mul at models.py:14"]
    # Code above moved both lines; a second add is the one new op.
    now = [site("aten::add", 15), site("aten::add", 16), site("aten::mul", 17)]
    assert new_breaks(now, recorded) == [False, True, False]
    # An exact line match wins over the first op of the type.
    assert new_breaks([site("aten::add", 3), site("aten::add", 12)], recorded) == [True, False]


def test_a_side_stream_fused_into_a_superkernel_is_explained():
    report = compare(FusedSideStream(), torch.ones(8, 64) / 8)
    assert report.streams == ("default", "1") and report.variant.streams == ("default",)
    assert "2 streams (1 inside a SuperKernel)" in report.summary()
    (note,) = report.stream_notes()
    (segment,) = [s for s in report.superkernels["both"].names]
    assert note == (
        f"stream '1' has no lane of its own on the timeline: all its 1 kernel(s) run inside SuperKernel {segment} "
        "on stream 'default' (stream-fusion=1 runs them side by side with the other stream's sub-kernels)"
    )


def test_the_first_line_of_a_failure_is_its_verdict_and_first_finding(residual):
    failures = [Failure(Verdict.SCOPE_BREAK, "first problem"), Failure(Verdict.SPEEDUP, "second problem")]
    text = failure_text(residual, failures, {"proj": []}, explain_breaks=True)
    lines = text.splitlines()
    assert lines[:3] == ["npufuse scope break: first problem", "- speedup: second problem", f"case: {residual.summary()}"]
    assert lines[3].startswith("scope 'proj' is split") and "[NEW: not in the baseline]" in lines[4]
    site = residual.superkernels["proj"].break_points[0]
    assert lines[5] == f"    {site.source.rsplit(':', 1)[-1]} | {code_at(site.source)}" and code_at(site.source)
    assert "scope 'proj'" not in failure_text(residual, [Failure(Verdict.RACE, "a race")])


def test_causes_come_before_their_consequences():
    failures = [Failure(Verdict.PRECISION, "p"), Failure(Verdict.REGRESSION, "g"), Failure(Verdict.RACE, "r"),
                Failure(Verdict.LIFETIME, "l"), Failure(Verdict.RACE, "r2")]
    assert [f.text for f in first_cause(failures)] == ["r", "r2", "l", "p", "g"]


def test_unfusable_reasons_come_from_the_catalog_and_its_key_is_checked():
    catalog = load_catalog({"acc::mine": {"engine": "cube", "fusable": False, "sync_all": False, "block_dim": 1,
                                          "unfusable": "atb"}})
    assert catalog.lookup("acc::mine").why_unfusable.endswith("is an ATB operation, launched by the ATB runtime rather than as a GE sub-kernel")
    assert catalog.lookup("npu::npu_quant_matmul").why_unfusable == ""
    assert "no AI Core kernel for int64" in catalog.lookup("aten::_to_copy").for_dtypes(["int64"]).why_unfusable
    assert "a SuperKernel fuses only AllReduce" in catalog.lookup("_c10d_functional::broadcast").why_unfusable
    with pytest.raises(ProfileError) as exc:
        load_catalog({"acc::x": {"engine": "vector", "fusable": False, "sync_all": False, "block_dim": 1, "unfusable": "slow"}})
    assert exc.value.entry == "[tool.npufuse.ops] [\"acc::x\"] unfusable"
    with pytest.raises(ProfileError) as exc:
        load_catalog({"acc::x": {"engine": "vector", "fusable": True, "sync_all": False, "block_dim": 1, "unfusable": "tbe"}})
    assert exc.value.entry == "[tool.npufuse.ops] [\"acc::x\"] unfusable"
