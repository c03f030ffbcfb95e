"""SuperKernel scope layouts of a decoder layer, as the SuperKernel scope analysis guide lists them.

Each layout is one case: the marker states how many SuperKernels form, which ops break the scope and
the modeled gain that a regression must not lose. The layer is DeepSeek-like: RMSNorm, Q projection,
fused attention over a KV cache, O projection, residual add, then MoE routing, grouped-matmul experts
and a shared expert. Fused attention, casts and the routing's aten ops cannot be fused (FIA "waiting for
support", Cast/Add unfusable: docs/sources.md#hw-4-3 and docs/sources.md#hw-4-4), which is why each scope
forms several SuperKernels.
"""

import pytest

from decoder_layers import Decoder, decode_inputs

ATTENTION_BREAKS = ["npu::npu_fused_infer_attention_score", "aten::add"]
ROUTING_BREAKS = [
    "aten::_to_copy", "aten::zeros", "aten::ones_like", "aten::scatter_add", "aten::sort", "aten::clone",
    "aten::index", "aten::empty_like", "aten::index_copy", "aten::mul", "aten::sum", "aten::add", "aten::add",
]


@pytest.mark.superkernel(scope="attention", segments=2, breaks=ATTENTION_BREAKS, min_speedup=1.0)
def test_attention_only(npufuse):
    report = npufuse.check(Decoder(layers=1, scope="attention"), *decode_inputs())
    assert report.superkernels["attention"].names[0] == "sk_attention_start_RmsNorm_end_MatMulV3"


@pytest.mark.superkernel(scope="moe", segments=2, breaks=ROUTING_BREAKS, min_speedup=1.08)
def test_moe_only(npufuse):
    report = npufuse.check(Decoder(layers=1, scope="moe"), *decode_inputs())
    assert report.superkernels["moe"].kernel_type == "MIX_AIC_1_2"


@pytest.mark.superkernel(scope="decoder_layer", segments=4, breaks=ATTENTION_BREAKS + ROUTING_BREAKS, min_speedup=1.08)
def test_whole_decoder_layer(npufuse):
    npufuse.check(Decoder(layers=1, scope="layer"), *decode_inputs())


@pytest.mark.superkernel(scope="all_layers", segments=8, min_speedup=1.09)
def test_all_layers(npufuse):
    report = npufuse.check(Decoder(layers=2, all_layers=True), *decode_inputs())
    assert report.superkernels["all_layers"].breaks == tuple(ATTENTION_BREAKS + ROUTING_BREAKS) * 2


def test_prefill_gated_off(npufuse):
    """``superkernel_scope(enable and not is_prefill, ...)``: prefill compiles without any scope."""
    report = npufuse.check(Decoder(layers=2, all_layers=True, is_prefill=True), *decode_inputs())
    assert report.superkernels == {} and report.variant.time_us == report.baseline.time_us


@pytest.mark.npu_target("a3")  # where SuperKernel exists at all; on a2 the scope is unsupported for that reason
@pytest.mark.superkernel(scope="moe", outcome="unsupported")
def test_dynamic_shapes_leave_the_scope_unfused(npufuse):
    report = npufuse.check(Decoder(layers=1, scope="moe"), *decode_inputs(), dynamic=True)
    assert "static shapes" in report.superkernels["moe"].reason
