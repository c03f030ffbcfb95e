"""DeepSeek-R1 decode layer under one SuperKernel label with the recipe's option strings.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_r1/models/modeling_deepseek.py and executor/utils/common_utils.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``DeepseekV3Model.forward`` decode and ``superkernel_scope``):
the decode layers run in ``tng.scope.super_kernel("decode_layer", option)`` where option is
"stream-fusion=1" with multi-stream on and the literal "option_xxx2" otherwise, an entry without "=",
which CANN skips with a warning. The body is a shrunk layer tail: ``npu_add_rms_norm``, a W8A8
projection (``npu_dynamic_quant`` + ``npu_quant_matmul`` with pertoken_scale), ``npu_swiglu``.
"""

import pytest
import torch
import torch_npu
import torchair as tng

HIDDEN, INTER, TOKENS = 256, 256, 8


class DecodeLayerTail(torch.nn.Module):
    def __init__(self, option: str) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(91)
        self.option = option
        self.norm = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
        self.w = torch.nn.Parameter(torch.randint(-127, 128, (HIDDEN, 2 * INTER), generator=gen, dtype=torch.int8),
                                    requires_grad=False)
        self.w_scale = torch.nn.Parameter((torch.rand(2 * INTER, generator=gen) / 3000).bfloat16(),
                                          requires_grad=False)

    def forward(self, hidden_states, residual):
        with tng.scope.super_kernel("decode_layer", self.option):
            normed, _, residual = torch_npu.npu_add_rms_norm(residual, hidden_states, self.norm, 1e-6)
            x_int8, pertoken_scale = torch_npu.npu_dynamic_quant(normed)
            merged = torch_npu.npu_quant_matmul(x_int8, self.w, self.w_scale, pertoken_scale=pertoken_scale,
                                                output_dtype=torch.bfloat16)
            out = torch_npu.npu_swiglu(merged)
        return out, residual


def batch():
    gen = torch.Generator().manual_seed(13)
    return (torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu(),
            torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu())


@pytest.mark.superkernel(scope="decode_layer", segments=1)
def test_decode_layer_with_stream_fusion_option(npufuse):
    npufuse.check(DecodeLayerTail("stream-fusion=1"), *batch())


@pytest.mark.superkernel(scope="decode_layer", segments=1)
def test_decode_layer_with_placeholder_option_is_skipped_with_a_warning(npufuse):
    with pytest.warns(Warning, match="option_xxx2"):
        npufuse.check(DecodeLayerTail("option_xxx2"), *batch())
