"""W8A8 all-gather EP MoE: quantise first, route int8 rows with their scales, int32 GMM, dequant-swiglu, GMM + finalize routing.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/quantization/torchair_w8a8_dynamic.py
@ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1 (``torchair_fused_experts_with_allgather``): per-token
``npu_dynamic_quant``, ``npu_moe_init_routing_v2(x, topk_ids, scale=..., offset=None, active_num=tokens*k,
expert_num=E, expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[rank*local,
(rank+1)*local], quant_mode=-1, row_idx_type=1)``, the routed weights picked with ``index_select``,
``npu_grouped_matmul`` (split_item=3, group_list_type=1, output_dtype int32) and
``npu_dequant_swiglu_quant`` with float32 weight scale and group_index, then
``npu_grouped_matmul_finalize_routing`` (float32 w2 scale, per-token scales ``view(-1)``, a zero bfloat16
shared input, the routed top-k weights as ``logit``, ``row_index = expanded_x_idx // top_k`` as int64,
``output_bs`` = tokens) cast to bfloat16. Scaffolding: EP rank 0 of 2 replaces vLLM's EP group. Shrunk:
16 experts, top 4, hidden 128.
"""

import pytest
import torch
import torch_npu

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 16, 4, 128, 64, 6
# --- scaffolding: stands in for vLLM's EP group ---
EP_RANK, EP_SIZE = 0, 2
LOCAL = EXPERTS // EP_SIZE


class AllGatherEpExperts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(111)
        self.w1 = torch.nn.Parameter(torch.randint(-127, 128, (LOCAL, HIDDEN, 2 * INTER), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w1_scale = torch.nn.Parameter((torch.rand(LOCAL, 2 * INTER, generator=gen) / 3000).bfloat16(),
                                           requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randint(-127, 128, (LOCAL, INTER, HIDDEN), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w2_scale = torch.nn.Parameter((torch.rand(LOCAL, HIDDEN, generator=gen) / 3000).bfloat16(),
                                           requires_grad=False)

    def forward(self, hidden_states, topk_weights, topk_ids):
        num_tokens = hidden_states.shape[0]
        batch_size, hidden_size = hidden_states.shape
        topk_weights = topk_weights.to(hidden_states.dtype)
        hidden_states, pertoken_scale = torch_npu.npu_dynamic_quant(hidden_states)
        hidden_states, expanded_x_idx, expert_tokens, pertoken_scale = torch_npu.npu_moe_init_routing_v2(
            hidden_states, topk_ids, scale=pertoken_scale, offset=None, active_num=num_tokens * TOP_K,
            expert_num=EXPERTS, expert_tokens_num_type=1, expert_tokens_num_flag=True,
            active_expert_range=[EP_RANK * LOCAL, (EP_RANK + 1) * LOCAL], quant_mode=-1, row_idx_type=1)
        sorted_topk_weight = torch.index_select(topk_weights.view(-1), 0, expanded_x_idx)
        row_index = expanded_x_idx // topk_ids.shape[-1]
        row_index = row_index.to(torch.int64)
        share_input = torch.zeros((batch_size, hidden_size), dtype=torch.bfloat16, device="npu")
        hidden_states = torch_npu.npu_grouped_matmul(
            x=[hidden_states], weight=[self.w1], split_item=3, group_list_type=1, group_type=0,
            group_list=expert_tokens, output_dtype=torch.int32)[0]
        hidden_states, pertoken_scale = torch_npu.npu_dequant_swiglu_quant(
            x=hidden_states, weight_scale=self.w1_scale.to(torch.float32), activation_scale=pertoken_scale,
            bias=None, quant_scale=None, quant_offset=None, group_index=expert_tokens, activate_left=True,
            quant_mode=1)
        final_hidden_states = torch_npu.npu_grouped_matmul_finalize_routing(
            hidden_states, self.w2, scale=self.w2_scale.to(torch.float32), bias=None,
            pertoken_scale=pertoken_scale.view(-1), group_list=expert_tokens, shared_input=share_input,
            logit=sorted_topk_weight.to(torch.float32), row_index=row_index,
            output_bs=batch_size).to(torch.bfloat16)
        return final_hidden_states


def test_allgather_ep_quantised_routing(npufuse):
    gen = torch.Generator().manual_seed(16)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    topk_weights = torch.rand(TOKENS, TOP_K, generator=gen).npu()
    topk_ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(TOKENS)]).int().npu()
    npufuse.check(AllGatherEpExperts(), hidden, topk_weights, topk_ids)
