"""Qwen3-MoE routed experts: softmax top-k gating with renormalisation, init_routing_v2, finalize.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/qwen3_moe/models/modeling_qwen3_moe.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``_forward_gate`` and the single-rank routed-expert path):
``npu_moe_gating_top_k_softmax(logits, None, k=top_k)`` on float32 gate logits, division by the sum plus
1e-20, ``npu_moe_init_routing_v2`` with expert_tokens_num_type=1 (counts), expert_tokens_num_flag=True,
active_expert_range=[0, E], quant_mode=-1, the experts as grouped matmuls with group_list_type=1, and
``npu_moe_finalize_routing`` with export_for_source_row=None and drop_pad_mode=2. Shrunk: 16 experts,
top 8 (as Qwen3), hidden 128, intermediate 64.
"""

import pytest
import torch
import torch_npu

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 16, 8, 128, 64, 5


class Qwen3MoeBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(61)
        self.gate = torch.nn.Parameter(torch.randn(HIDDEN, EXPERTS, generator=gen) / 11)
        self.gate_up = torch.nn.Parameter((torch.randn(EXPERTS, HIDDEN, 2 * INTER, generator=gen) / 11).bfloat16())
        self.down = torch.nn.Parameter((torch.randn(EXPERTS, INTER, HIDDEN, generator=gen) / 8).bfloat16())

    def forward(self, hidden_states):
        token_count = hidden_states.shape[0]
        logits = hidden_states.float() @ self.gate
        topk_weight, topk_idx, _ = torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=TOP_K)
        topk_weight = topk_weight / (topk_weight.sum(dim=-1, keepdim=True) + 1e-20)
        routing_args = {
            "expert_idx": topk_idx,
            "active_num": token_count * TOP_K,
            "expert_num": EXPERTS,
            "expert_tokens_num_type": 1,
            "expert_tokens_num_flag": True,
            "active_expert_range": [0, EXPERTS],
            "quant_mode": -1,
        }
        expanded_x, expanded_row_idx, tokens_per_expert, _ = torch_npu.npu_moe_init_routing_v2(
            hidden_states, **routing_args)
        merged = torch_npu.npu_grouped_matmul(
            [expanded_x], [self.gate_up], group_list=tokens_per_expert, group_type=0, split_item=3,
            group_list_type=1)[0]
        act = torch_npu.npu_swiglu(merged)
        out = torch_npu.npu_grouped_matmul(
            [act], [self.down], group_list=tokens_per_expert, group_type=0, split_item=3, group_list_type=1)[0]
        return torch_npu.npu_moe_finalize_routing(
            out, skip1=None, skip2=None, bias=None, scales=topk_weight.to(out.dtype),
            expanded_src_to_dst_row=expanded_row_idx, export_for_source_row=None, drop_pad_mode=2)


def test_qwen3_moe_routed_experts(npufuse):
    hidden = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(7)).bfloat16().npu()
    npufuse.check(Qwen3MoeBlock(), hidden)
