"""SuperKernel options and outcomes through the library: strict-scope-check, SyncAll, debug cores, dcci."""

import re
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from pytest_npufuse import compare, torchair
from pytest_npufuse.errors import OptionsError, OptionsWarning
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

SYNC_ALL_CATALOG = {
    "aten::mul": {"engine": "vector", "fusable": True, "sync_all": True, "block_dim": 4, "flops": "elementwise"},
}


@pytest.fixture(autouse=True)
def plog_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(tmp_path / "plog"))
    return tmp_path / "plog"


def make(options: str, *, middle=lambda y: y + 1):
    class Model(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.super_kernel("sp1", options):
                y = a @ b
                y = middle(y)
                return y @ b

    return Model()


def data(n: int = 256):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)


def test_strict_bypass_warns_in_plog_and_generates_no_superkernel(plog_dir):
    report = compare(make("strict-scope-check=bypass"), *data())
    sp1 = report.superkernels["sp1"]
    assert (sp1.outcome, sp1.segments, sp1.breaks) == ("bypassed", 0, ("aten::add",))
    assert report.variant.tasks == report.baseline.tasks == 3
    (log,) = plog_dir.glob("plog-*_*.log")
    assert re.fullmatch(r"plog-\d+_\d{17}\.log", log.name)
    line = log.read_text().splitlines()[-1]
    assert line.startswith("[WARNING] GE(") and "[super_kernel_scope]" in line and "aten::add (Add" in line
    assert report.plog_path == str(log)


def test_strict_abort_errors_in_plog_and_fails_the_variant(plog_dir):
    report = compare(make("strict-scope-check=abort"), *data())
    assert report.superkernels["sp1"].outcome == "aborted"
    assert report.variant.failure.startswith("sp1: scope sp1 is split by unfusable op(s) aten::add")
    assert report.speedup == 0.0
    assert "[ERROR]" in next(plog_dir.glob("plog-*.log")).read_text()


def test_strict_check_passes_an_intact_scope_silently(plog_dir):
    report = compare(make("strict-scope-check=abort", middle=lambda y: y), *data())
    assert report.superkernels["sp1"].outcome == "fused" and report.plog_path is None
    assert not plog_dir.exists()


def test_plog_defaults_to_home_ascend_log(tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_PROCESS_LOG_PATH")
    monkeypatch.setenv("HOME", str(tmp_path))
    report = compare(make("strict-scope-check=bypass"), *data())
    assert report.plog_path.startswith(str(tmp_path / "ascend" / "log" / "run" / "plog" / "plog-"))


def test_syncall_on_fewer_cores_hangs_without_feed_sync_all():
    catalog = load_catalog(SYNC_ALL_CATALOG)
    report = compare(make("", middle=lambda y: y * 2), *data(2048), catalog=catalog)
    sp1 = report.superkernels["sp1"]
    assert sp1.outcome == "hang" and sp1.segments == 1
    assert "sub-kernel Mul (aten::mul) calls SyncAll on block dim 4" in sp1.reason
    assert "launches 24 cores, so 20 cores never reach the barrier" in sp1.reason
    assert "Fix: add feed-sync-all=1" in sp1.reason
    assert report.variant.time_us == float("inf")


def test_feed_sync_all_prevents_the_hang_at_the_cost_of_a_sync():
    catalog = load_catalog(SYNC_ALL_CATALOG)
    fed = compare(make("feed-sync-all=1", middle=lambda y: y * 2), *data(2048), catalog=catalog)
    assert fed.superkernels["sp1"].outcome == "fused"
    over = load_profile("a3").overhead_us
    mul_fed = next(k for k in fed.variant.kernels if k.op_type == "aten::mul")
    mm_fed = [k for k in fed.variant.kernels if k.op_type == "aten::mm"]
    barrier = over["sk_sync"] - over["early_start_overlap"]
    fetch = over["fetch_per_core"] * mul_fed.block_dim / 4  # split-mode's 4 code copies share the fetch queue
    assert mul_fed.start_us - mm_fed[0].end_us == pytest.approx(over["sk_subkernel_call"] + barrier + over["sync_all"] + fetch)


@pytest.mark.parametrize(
    ("options", "kernel_type", "dim"),
    [
        ("debug-aic-num=12", "MIX_AIC_1_0", 12),
        ("debug-aic-num=12:debug-aiv-num=0", "MIX_AIC_1_0", 12),
        ("debug-aiv-num=12", "MIX_AIV_1_0", 12),
        ("debug-aic-num=0:debug-aiv-num=12", "MIX_AIV_1_0", 12),
        ("debug-aic-num=12:debug-aiv-num=12", "MIX_AIC_1_1", 12),
        ("debug-aic-num=12:debug-aiv-num=24", "MIX_AIC_1_2", 12),
    ],
)
def test_debug_core_ratios_force_kernel_type_and_block_dim(options, kernel_type, dim):
    report = compare(make(options, middle=lambda y: y), *data(2048))
    sp1 = report.superkernels["sp1"]
    assert (sp1.kernel_type, sp1.block_dim) == (kernel_type, dim)
    assert all(k.block_dim <= dim for k in report.variant.kernels if k.parent)


def test_forcing_fewer_cores_slows_the_superkernel():
    natural = compare(make("", middle=lambda y: y), *data(2048))
    forced = compare(make("debug-aic-num=6", middle=lambda y: y), *data(2048))
    assert natural.superkernels["sp1"].block_dim == 24
    assert forced.variant.time_us > natural.variant.time_us


@pytest.mark.parametrize(
    ("options", "option", "limit"),
    [
        ("debug-aic-num=12:debug-aiv-num=36", "debug-aic-num", None),  # not an allowed aic:aiv ratio
        ("debug-aic-num=0", "debug-aic-num", None),
        ("debug-aic-num=30", "debug-aic-num", 24),  # the a3 hardware's AIC count
        ("debug-aiv-num=64", "debug-aiv-num", 48),  # its AIV count
    ],
)
def test_bad_debug_core_counts_name_scope_option_and_limit(options, option, limit):
    with pytest.raises(OptionsError) as info:
        compare(make(options, middle=lambda y: y), *data(2048))
    assert (info.value.op, info.value.argument, info.value.bound) == ("super_kernel", option, limit)
    assert "scope 'sp1'" in str(info.value)


def test_debug_cores_capped_by_original_count_and_limit_core_num():
    # A 256x256 matmul's decode tiling splits N over 8 cores (2 row tiles x 4 column slices of 64).
    with pytest.raises(OptionsError) as exc:
        compare(make("debug-aic-num=12", middle=lambda y: y), *data(256))
    assert (exc.value.op, exc.value.argument) == ("super_kernel", "debug-aic-num")

    class Limited(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.limit_core_num(8, 16), torchair.scope.super_kernel("sp1", "debug-aic-num=12"):
                return (a @ b) @ b

    with pytest.raises(OptionsError) as exc:
        compare(Limited(), *data(2048))
    assert (exc.value.op, exc.value.argument) == ("super_kernel", "debug-aic-num")


def test_dcci_option_naming_an_absent_op_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = compare(make("dcci-before-kernel-start=GroupedMatmul,MatMulV3", middle=lambda y: y), *data())
    messages = [str(w.message) for w in caught if w.category is OptionsWarning]
    assert messages == [
        "super_kernel scope 'sp1': dcci-before-kernel-start names GroupedMatmul, which is not a kernel in the scope "
        "(kernels: MatMulV3); it has no effect."
    ]
    assert report.superkernels["sp1"].outcome == "fused"


def test_marker_options_override_the_code():
    report = compare(make("strict-scope-check=abort"), *data(), options={"sp1": ""})
    assert report.superkernels["sp1"].outcome == "fused" and report.superkernels["sp1"].options == ""


@pytest.fixture(scope="module")
def world():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


def test_fusable_collectives_join_and_broadcast_breaks_unchecked(world):
    class Comm(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.super_kernel("sp1", "strict-scope-check=abort"):
                y = fc.all_reduce(a @ b, "sum", world)
                y = fc.all_gather_tensor(y, 0, world)
                y = fc.broadcast(y, 0, world)
                return y @ b

    report = compare(Comm(), *data())
    sp1 = report.superkernels["sp1"]
    assert sp1.outcome == "fused" and sp1.breaks == ("_c10d_functional::broadcast",)
    assert sp1.names == ("sk_sp1_start_MatMulV3_end_HcomAllGather", "sk_sp1_start_MatMulV3_1_end_MatMulV3_1")


def test_non_contiguous_uses_of_one_name_are_one_scope_in_several_segments():
    class Split(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.super_kernel("sp1", ""):
                y = (a @ b) @ b
            y = y + 1
            with torchair.scope.super_kernel("sp1", ""):
                return (y @ b) @ b

    report = compare(Split(), *data())
    assert list(report.superkernels) == ["sp1"]
    assert (report.superkernels["sp1"].segments, report.superkernels["sp1"].breaks) == (2, ())


def test_empty_option_entries_warn_once_as_cann_skips_them():
    from pytest_npufuse.plan.options import parse_options

    with pytest.warns(OptionsWarning, match=r"scope 'sp1': 4 empty option entries \(a doubled, leading or trailing ':'\)") as caught:
        options = parse_options("sp1", "::feed-sync-all=1::")
    assert len(caught) == 1 and dict(options.values) == {"feed-sync-all": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_options("sp1", "").values == {} and parse_options("sp1", "feed-sync-all=1").notes == ()


def test_options_on_a_scope_that_turns_superkernel_off_warn_at_the_users_line():
    with pytest.warns(OptionsWarning, match=r"super_kernel\(None, 'bogus=1'\): None turns SuperKernel off .* the options are never read") as caught:
        torchair.scope.super_kernel(None, "bogus=1")
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torchair.scope.super_kernel(None)
        torchair.scope.super_kernel(None, "")
