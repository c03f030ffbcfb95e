"""W8A8 dynamic linear: per-token npu_dynamic_quant, then npu_quant_matmul with per-token scale.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/quantization/torchair_w8a8_dynamic.py
@ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1 (``TorchairAscendW8A8DynamicLinearMethod.apply``): the
activation is quantised per token, the int8 weight [in, out] with a per-channel float scale is applied by
``npu_quant_matmul(x, w, w_scale, pertoken_scale=..., bias=None, output_dtype=x.dtype)``; a second layer
takes the pre-quantised tuple path (output_dtype given explicitly). Shapes shrunk (hidden 512).
"""

import pytest
import torch
import torch_npu

HIDDEN, INTER, TOKENS = 512, 768, 8


class W8A8Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(31)
        self.w_up = torch.nn.Parameter(torch.randint(-127, 128, (HIDDEN, INTER), generator=gen, dtype=torch.int8),
                                       requires_grad=False)
        self.up_scale = torch.nn.Parameter((torch.rand(INTER, generator=gen) / 2000).bfloat16(), requires_grad=False)
        self.w_down = torch.nn.Parameter(torch.randint(-127, 128, (INTER, HIDDEN), generator=gen, dtype=torch.int8),
                                         requires_grad=False)
        self.down_scale = torch.nn.Parameter((torch.rand(HIDDEN, generator=gen) / 2000).bfloat16(),
                                             requires_grad=False)

    @staticmethod
    def quant_linear(x, weight, weight_scale, output_dtype=None):
        if not isinstance(x, tuple):
            output_dtype = x.dtype
            quantized_x, dynamic_scale = torch_npu.npu_dynamic_quant(x)
        else:
            quantized_x, dynamic_scale = x
        return torch_npu.npu_quant_matmul(
            quantized_x, weight, weight_scale,
            pertoken_scale=dynamic_scale, bias=None, output_dtype=output_dtype,
        )

    def forward(self, x):
        up = self.quant_linear(x, self.w_up, self.up_scale)
        act = torch.nn.functional.silu(up)
        return self.quant_linear(torch_npu.npu_dynamic_quant(act), self.w_down, self.down_scale,
                                 output_dtype=torch.bfloat16)


def test_w8a8_dynamic_linears(npufuse):
    x = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(2)).bfloat16().npu()
    npufuse.check(W8A8Mlp(), x)
