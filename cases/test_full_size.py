"""The bundled full-size models (cases/full_size): DeepSeek-V3, Qwen3-235B-A22B and Llama-3-70B built from
their public config values at their real size, on the meta device, each step priced layer by layer in the
layout of its public Ascend recipe, with no weight allocated and no numerics computed."""

import pytest

from full_size.bundled import BUNDLED, DEEPSEEK_V3_CASE, QWEN3_235B_CASE
from pytest_npufuse.frontend import repeat
from pytest_npufuse.vocabulary import NumericsStatus

ATTENTION = "npu::npu_fused_infer_attention_score_v2"
DISPATCH = "npu::npu_moe_distribute_dispatch_v2"


def _count(report, op_type):
    return sum(1 for kernel in report.variant.kernels if kernel.op_type == op_type)


@pytest.mark.parametrize("case", BUNDLED, ids=lambda case: case.name)
def test_a_full_size_decode_step_is_priced_in_every_layer_without_weights(npufuse, case, monkeypatch):
    extrapolated = []
    real = repeat.extrapolate
    monkeypatch.setattr(repeat, "extrapolate", lambda *args: extrapolated.append(real(*args)) or extrapolated[-1])
    model, inputs = case.build()
    report = npufuse.check(model, *inputs)
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED and report.kernels_executed == 0
    assert extrapolated and extrapolated[-1] is not None  # captured from 2 and 3 layers, not traced whole
    assert _count(report, ATTENTION) == case.layers  # every layer priced
    scope = report.superkernels["decode_layer"]
    if npufuse.target.superkernel_supported:
        assert report.variant.time_us < report.baseline.time_us
    else:  # an A2 runs the scope's kernels one by one; only a side stream (DeepSeek's shared expert) can gain
        assert str(scope.outcome) == "unsupported" and report.variant.time_us <= report.baseline.time_us
    moe_layers = {DEEPSEEK_V3_CASE.name: case.layers - case.config.get("first_k_dense_replace", 0),
                  QWEN3_235B_CASE.name: case.layers}.get(case.name, 0)
    assert _count(report, DISPATCH) == moe_layers


def test_deepseek_runs_its_shared_expert_on_the_recipes_side_stream(npufuse):
    model, inputs = DEEPSEEK_V3_CASE.resized("deepseek-v3-5", num_hidden_layers=5).build()
    report = npufuse.check(model, *inputs)
    assert len(report.streams) == 2 and report.races == ()
    assert any(stand_in.startswith("routing: uniform") for stand_in in report.numerics.stand_ins)


def test_the_fixture_models_the_ranks_and_records_each_ranks_time(npufuse, request):
    one_layer = DEEPSEEK_V3_CASE.resized("deepseek-v3-1", num_hidden_layers=1, first_k_dense_replace=0)
    model, inputs = one_layer.build()
    report = npufuse.check(model, *inputs, ranks=8, routing="zipf:1.2")
    assert report.ranks.count == 8 and report.ranks.imbalance_us > 0
    row = [value for name, value in request.node.user_properties if name == "npufuse"][-1]
    assert row["ranks"]["count"] == 8 and len(row["ranks"]["ranks"]) == 8
