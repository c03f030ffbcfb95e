"""W8A8 expert MLP for decode: int32 grouped matmul, dequant-swiglu-quant, per-token grouped matmul.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/quantization/torchair_w8a8_dynamic.py
@ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1 (``torchair_apply_mlp_decode``): tokens already grouped by
expert are quantised with ``npu_dynamic_quant``, ``npu_grouped_matmul`` (split_item=3, group_type=0,
output_dtype=torch.int32) produces raw int32 gate/up, ``npu_dequant_swiglu_quant`` (weight_scale,
activation_scale, bias/quant_scale/quant_offset None, group_index, activate_left=True, quant_mode=1)
dequantises, activates and requantises, and the down ``npu_grouped_matmul`` takes scale=[w2_scale] and
per_token_scale=[...] with split_item=2 and output_dtype=w2_scale.dtype. group_list_type 1 (counts), as
the MC2 path passes. Shrunk: 8 experts, hidden 256, intermediate 128.
"""

import pytest
import torch
import torch_npu

EXPERTS, HIDDEN, INTER = 8, 256, 128
COUNTS = [3, 0, 5, 1, 2, 0, 4, 1]


class W8A8ExpertMlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(51)
        self.w1 = torch.nn.Parameter(torch.randint(-127, 128, (EXPERTS, HIDDEN, 2 * INTER), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w1_scale = torch.nn.Parameter(torch.rand(EXPERTS, 2 * INTER, generator=gen) / 3000,
                                           requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randint(-127, 128, (EXPERTS, INTER, HIDDEN), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w2_scale = torch.nn.Parameter((torch.rand(EXPERTS, HIDDEN, generator=gen) / 3000).bfloat16(),
                                           requires_grad=False)

    def forward(self, hidden, group_list):
        hidden, pertoken_scale = torch_npu.npu_dynamic_quant(hidden)
        hidden = torch_npu.npu_grouped_matmul(
            x=[hidden], weight=[self.w1], split_item=3, group_list_type=1, group_type=0,
            group_list=group_list, output_dtype=torch.int32)[0]
        hidden, swiglu_out_scale = torch_npu.npu_dequant_swiglu_quant(
            x=hidden, weight_scale=self.w1_scale, activation_scale=pertoken_scale, bias=None,
            quant_scale=None, quant_offset=None, group_index=group_list, activate_left=True, quant_mode=1)
        return torch_npu.npu_grouped_matmul(
            x=[hidden], weight=[self.w2], scale=[self.w2_scale], per_token_scale=[swiglu_out_scale],
            split_item=2, group_list_type=1, group_type=0, group_list=group_list,
            output_dtype=self.w2_scale.dtype)[0]


def test_w8a8_expert_mlp_decode(npufuse):
    hidden = torch.randn(sum(COUNTS), HIDDEN, generator=torch.Generator().manual_seed(6)).bfloat16().npu()
    npufuse.check(W8A8ExpertMlp(), hidden, torch.tensor(COUNTS, dtype=torch.int64).npu())
