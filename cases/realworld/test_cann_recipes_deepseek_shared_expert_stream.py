"""DeepSeek-R1 MoE: the shared expert's W8A8 gate/up on GE stream "22" after waiting on the routing.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_r1/models/modeling_deepseek.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``DeepseekV3MoE.forward`` with GE graph multi-stream, and the
routed path ``moe_infer_double_routing``-style single rank): gating with ``npu_moe_gating_top_k``, the
indices cast to int32, then under ``npu_stream_switch("22")`` ``npu_wait_tensor(hidden_states, topk_idx)``
and the shared expert's gate_up as a W8A8 projection with int32 output; the routed experts go through
``npu_moe_init_routing_v2`` (counts, quant_mode=-1), grouped matmuls and ``npu_moe_finalize_routing``
while the shared expert's ``npu_dequant_swiglu_quant`` runs on "22". Scaffolding: the recipe's
``npu_stream_switch_gegraph(flag, tag)`` / ``npu_wait_tensor(flag, ...)`` wrappers reduced to the TorchAir
calls they make. Shrunk: 256 experts (the grouped gating needs them), hidden 128.
"""

import pytest
import torch
import torch_npu
import torchair as tng

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 256, 8, 128, 64, 3


class MoeWithSharedStream(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(101)
        self.gate = torch.nn.Parameter(torch.randn(HIDDEN, EXPERTS, generator=gen) / 11)
        self.bias = torch.nn.Parameter(torch.randn(EXPERTS, generator=gen) / 100)
        self.w13 = torch.nn.Parameter((torch.randn(EXPERTS, HIDDEN, 2 * INTER, generator=gen) / 11).bfloat16())
        self.w2 = torch.nn.Parameter((torch.randn(EXPERTS, INTER, HIDDEN, generator=gen) / 8).bfloat16())
        self.shared_w = torch.nn.Parameter(torch.randint(-127, 128, (HIDDEN, 2 * INTER), generator=gen,
                                                         dtype=torch.int8), requires_grad=False)
        self.shared_scale = torch.nn.Parameter(torch.rand(2 * INTER, generator=gen) / 3000, requires_grad=False)

    def forward(self, hidden_states):
        logits = hidden_states.float() @ self.gate
        topk_weight, topk_idx, _ = torch_npu.npu_moe_gating_top_k(
            logits, k=TOP_K, bias=self.bias, k_group=4, group_count=8, group_select_mode=1, renorm=0,
            norm_type=1, routed_scaling_factor=2.5, eps=float(1e-20))
        topk_idx = topk_idx.to(torch.int32)
        with tng.scope.npu_stream_switch("22"):
            hidden_states = tng.scope.npu_wait_tensor(hidden_states, topk_idx)
            x_int8, pertoken_scale = torch_npu.npu_dynamic_quant(hidden_states)
            merged_x = torch_npu.npu_quant_matmul(x_int8, self.shared_w, self.shared_scale,
                                                  output_dtype=torch.int32)
        expanded_x, expanded_row_idx, tokens_per_expert, _ = torch_npu.npu_moe_init_routing_v2(
            hidden_states, expert_idx=topk_idx, active_num=TOKENS * TOP_K, expert_num=EXPERTS,
            expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[0, EXPERTS],
            quant_mode=-1)
        with tng.scope.npu_stream_switch("22"):
            shared, _ = torch_npu.npu_dequant_swiglu_quant(
                merged_x, weight_scale=self.shared_scale, activation_scale=pertoken_scale, activate_left=True,
                quant_mode=1)
        up = torch_npu.npu_grouped_matmul([expanded_x], [self.w13], group_list=tokens_per_expert, group_type=0,
                                          split_item=3, group_list_type=1)[0]
        down = torch_npu.npu_grouped_matmul([torch_npu.npu_swiglu(up)], [self.w2], group_list=tokens_per_expert,
                                            group_type=0, split_item=3, group_list_type=1)[0]
        routed = torch_npu.npu_moe_finalize_routing(
            down, skip1=None, skip2=None, bias=None, scales=topk_weight.to(down.dtype),
            expanded_src_to_dst_row=expanded_row_idx, export_for_source_row=None, drop_pad_mode=2)
        return routed, shared


@pytest.mark.multistream(streams=2, race_free=True)
def test_shared_expert_on_stream_22(npufuse):
    hidden = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(14)).bfloat16().npu()
    npufuse.check(MoeWithSharedStream(), hidden)
