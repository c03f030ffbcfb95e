"""Unquantised fused experts without EP: softmax top-k gating, init_routing, grouped matmuls, finalize.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/ops/torchair_fused_moe.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``torchair_fused_experts`` with ``expert_map is None`` and the softmax gating path): ``row_idx`` built as
arange(tokens*top_k).view(top_k, -1).permute(1, 0), ``npu_moe_init_routing(x, row_idx=, expert_idx=,
active_num=)``, ``npu_moe_compute_expert_tokens`` cast to int64, two ``npu_grouped_matmul`` calls with
split_item=2, group_list_type=0, group_type=0 on transposed [E, out, in] weights around ``npu_swiglu``, and
``npu_moe_finalize_routing`` with skip1/skip2/bias None. Experts and hidden shrunk (16 experts, top 4).
"""

import pytest
import torch
import torch_npu

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 16, 4, 128, 64, 6


class FusedExperts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(41)
        self.gate = torch.nn.Parameter((torch.randn(HIDDEN, EXPERTS, generator=gen) / 11).bfloat16())
        self.w13 = torch.nn.Parameter((torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen) / 11).bfloat16())
        self.w2 = torch.nn.Parameter((torch.randn(EXPERTS, HIDDEN, INTER, generator=gen) / 8).bfloat16())

    def forward(self, hidden):
        router_logits = hidden @ self.gate
        topk_weights, topk_ids, _ = torch_npu.npu_moe_gating_top_k_softmax(router_logits, None, k=TOP_K)
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
        num_tokens = hidden.shape[0]
        row_idx = torch.arange(0, num_tokens * TOP_K, dtype=torch.int32,
                               device=topk_weights.device).view(TOP_K, -1).permute(1, 0).contiguous()
        sorted_x, expanded_row_idx, expanded_expert_idx = torch_npu.npu_moe_init_routing(
            hidden, row_idx=row_idx, expert_idx=topk_ids, active_num=num_tokens)
        expert_tokens = torch_npu.npu_moe_compute_expert_tokens(expanded_expert_idx, EXPERTS).to(torch.int64)
        gate_up = torch_npu.npu_grouped_matmul(
            x=[sorted_x], weight=[self.w13.transpose(1, 2)], split_item=2,
            group_list_type=0, group_type=0, group_list=expert_tokens)[0]
        act = torch_npu.npu_swiglu(gate_up)
        down = torch_npu.npu_grouped_matmul(
            x=[act], weight=[self.w2.transpose(1, 2)], split_item=2,
            group_list_type=0, group_type=0, group_list=expert_tokens)[0]
        return torch_npu.npu_moe_finalize_routing(
            down, skip1=None, skip2=None, bias=None, scales=topk_weights.to(down.dtype),
            expanded_src_to_dst_row=expanded_row_idx, export_for_source_row=topk_ids)


def test_fused_experts_with_init_routing(npufuse):
    hidden = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(4)).bfloat16().npu()
    npufuse.check(FusedExperts(), hidden)
