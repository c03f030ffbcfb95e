"""Time attribution: per module path (from Dynamo's nn_module_stack), per op type (msprof's
op_statistic.csv) and the computing / communication / free overlap shares."""

import csv
import io
import sys
from pathlib import Path

import pytest
import torch

from pytest_npufuse import compare, torchair
from pytest_npufuse.frontend.source import module_path
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.report.attribution import OP_STATISTIC_COLUMNS, attribute
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

sys.path.insert(0, str(Path(__file__).parents[2] / "cases"))
from decoder_layers import Decoder, decode_inputs  # noqa: E402


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("L['self'].layers.0.attn", "layers.0.attn"),
        ("getattr(getattr(L['self'].layers, '0'), 'attn')", "layers.0.attn"),
        ("L['self'].layers[3].moe", "layers.3.moe"),
        ("L['self']._modules['layers']._modules['3']", "layers.3"),
        ("L['model']", ""),
    ],
)
def test_module_path_normalises_the_keys_dynamo_records(key, path):
    assert module_path(key) == path


@pytest.fixture(scope="module")
def moe_report():
    return compare(Decoder(layers=2, scope="moe"), *decode_inputs())


def test_kernels_carry_the_module_calls_they_were_traced_in(moe_report):
    variant = moe_report.attribution["variant"]
    rows = {row.path: row for row in variant.modules}
    assert rows["layers.0.attn"].type == "Attention" and rows["layers.0.attn"].depth == 2
    assert rows["layers.1.moe.shared"].type == "SharedExpert" and rows["layers.1.moe.shared"].depth == 3
    assert rows["layers.0"].type == "DecoderLayer"


def test_module_times_nest_and_add_up_to_the_device_time(moe_report):
    for run, attribution in ((moe_report.baseline, moe_report.attribution["baseline"]),
                             (moe_report.variant, moe_report.attribution["variant"])):
        model = attribution.module("")
        device_time = sum(k.duration_us for k in run.kernels if k.parent is None)
        assert model.total_us == pytest.approx(device_time)
        layer, attn, moe = (attribution.module(p) for p in ("layers.0", "layers.0.attn", "layers.0.moe"))
        assert layer.total_us == pytest.approx(layer.self_us + attn.total_us + moe.total_us)
        assert sum(row.self_us for row in attribution.modules) == pytest.approx(model.total_us)


def test_superkernel_overhead_goes_to_the_module_its_sub_kernels_share(moe_report):
    """The MoE scope's SuperKernels only hold MoE kernels: the scope's saving shows in the MoE module
    and the attention module's time is the same in both runs."""
    baseline, variant = moe_report.attribution["baseline"], moe_report.attribution["variant"]
    assert variant.module("layers.0.attn").total_us == pytest.approx(baseline.module("layers.0.attn").total_us)
    assert variant.module("layers.0.moe.shared").total_us < baseline.module("layers.0.moe.shared").total_us


def test_op_statistic_has_msprof_columns_and_counts_a_superkernel_as_one_task(moe_report):
    variant = moe_report.attribution["variant"]
    rows = list(csv.DictReader(io.StringIO(variant.op_statistic_csv())))
    assert tuple(rows[0]) == OP_STATISTIC_COLUMNS
    by_type = {row["OP Type"]: row for row in rows}
    assert by_type["SuperKernel"]["Core Type"] == "MIX_AIC"
    assert int(by_type["SuperKernel"]["Count"]) == moe_report.segments
    assert sum(float(row["Ratio(%)"]) for row in rows) == pytest.approx(100, abs=0.05)
    totals = [float(row["Total Time(us)"]) for row in rows]
    assert totals == sorted(totals, reverse=True)
    assert "GroupedMatmul" not in by_type and "GroupedMatmul" in {r.op_type for r in moe_report.attribution["baseline"].op_types}


def test_overlap_shares_split_the_span(moe_report):
    overlap = moe_report.attribution["variant"].overlap
    shares = overlap.shares()
    assert sum(shares.values()) == pytest.approx(100)
    assert shares["Communication(Not Overlapped)"] == 0 and shares["Free"] > 0
    assert overlap.span_us == moe_report.variant.time_us


def test_communication_not_hidden_by_compute_is_its_own_share():
    builder = ProgramBuilder()
    x = builder.input("x", (64, 4096))
    w = builder.input("w", (4096, 4096))
    y = builder.op("aten::mm", [x, w], (64, 4096))
    builder.op("_c10d_functional::all_reduce", [y], (64, 4096))
    program = builder.build()
    profile = load_profile("a3")
    run = simulate(program, plan_program(program, profile), profile)
    overlap = attribute(program, run).overlap
    comm = next(k for k in run.kernels if k.engine == "comm")
    assert overlap.exposed_communication_us == pytest.approx(comm.duration_us)
    assert overlap.computing_us + overlap.exposed_communication_us + overlap.free_us == pytest.approx(run.time_us)


class Scoped(torch.nn.Module):
    def forward(self, a, b):
        with torchair.scope.super_kernel("sp1", ""):
            return (a @ b) @ b


def test_trace_dir_gets_op_statistic_and_module_statistic(tmp_path):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 128, generator=gen), torch.randn(128, 128, generator=gen)
    report = compare(Scoped(), a, b, trace_dir=tmp_path, case="t::scoped")
    for variant in ("baseline", "variant"):
        text = (Path(report.trace_path) / variant / "op_statistic.csv").read_text()
        assert text.splitlines()[0] == ",".join(OP_STATISTIC_COLUMNS)
        assert (Path(report.trace_path) / variant / "module_statistic.csv").read_text().startswith("Module,Type")
    document = report.attribution["variant"].to_json()
    assert document["op_statistic"][0]["OP Type"] == "SuperKernel"
    assert set(document["overlap"]) == {"span_us", "Computing", "Communication(Not Overlapped)", "Free"}
