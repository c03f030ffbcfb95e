"""Qwen3.5 linear-attention prefill: the row-parallel out projection as one fused matmul + all-reduce.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/qwen3_5/models/modeling_qwen3_5_moe.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``qwen3_5_prefill_mm_all_reduce`` and its call in the gated
delta-net layer's prefill branch): the attention output is viewed [tokens, value_dim], given a leading batch
dim with ``unsqueeze(0)``, and ``torch_npu.npu_mm_all_reduce_base(input_, layer.weight.data, hcom,
reduce_op="sum")`` multiplies it by the row-parallel weight, which module/linear.py stored transposed to
[in, out] after loading; the result is squeezed back. Scaffolding: a fixed group name stands in for
``comm_manager.get_group_name("attn_tp_group")``; the weight is created [in, out] directly (the recipe's
load-time transpose and NZ format cast). Shrunk: value_dim 256 per rank, hidden 512, 24 tokens, bfloat16.
The all-reduce is priced on the link of the profile's ``[comm] ranks``; the numbers are one rank's.
"""

import torch
import torch_npu

VALUE_DIM, HIDDEN, TOKENS = 256, 512, 24
# --- scaffolding: stands in for comm_manager.get_group_name("attn_tp_group") ---
HCOM = "attn_tp_group_hccl"


class OutProjection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(35)
        # --- scaffolding: the recipe stores the row-parallel weight transposed to [in, out] after loading ---
        self.weight = torch.nn.Parameter(
            (torch.randn(VALUE_DIM, HIDDEN, generator=gen) / VALUE_DIM ** 0.5).bfloat16(), requires_grad=False)

    def forward(self, core_attn_out):
        core_attn_out = core_attn_out.view(-1, VALUE_DIM)
        input_ = core_attn_out.unsqueeze(0)
        output = torch_npu.npu_mm_all_reduce_base(input_, self.weight.data, HCOM, reduce_op="sum")
        return output.squeeze(0)


def test_prefill_out_projection_mm_all_reduce(npufuse):
    gen = torch.Generator().manual_seed(36)
    core_attn_out = torch.randn(TOKENS, 4, VALUE_DIM // 4, generator=gen).bfloat16().npu()
    npufuse.check(OutProjection().npu(), core_attn_out)
