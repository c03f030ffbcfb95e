"""DeepSeek MoE decode in one SuperKernel: grouped top-k gating, MC2 dispatch/combine, shared expert on
the secondary stream (vllm-ascend TorchAir, multistream_overlap_shared_expert with enable_super_kernel).

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/ops/torchair_fused_moe.py and
vllm_ascend/torchair/quantization/torchair_w8a8_dynamic.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``TorchairAscendFusedMoE.forward``, ``TorchairAscendW8A8DynamicFusedMoEMethod.apply``,
``torchair_fused_experts_with_mc2``): ``super_kernel(prefix, "stream-fusion=1")`` around the gate; on
"moe_secondary" ``npu_dynamic_quant`` of the shared expert's input after ``npu_wait_tensor`` on the router
logits; ``npu_moe_gating_top_k`` (k=8, k_group=4, group_count=8, group_select_mode=1, renorm=0,
norm_type=1, routed_scaling_factor=1, eps=1e-20) on 256 experts; ``npu_moe_distribute_dispatch_v2`` with
quant_mode=2 and the MC2 keyword set; the W8A8 expert MLP; the shared expert's dequant-swiglu-quant on
"moe_secondary" after waiting on the dispatched tokens; ``npu_moe_distribute_combine_v2``.
Scaffolding: a one-rank EP group named "ep" replaces vLLM's MC2 group. Shrunk: hidden 128, 256 experts.
"""

import pytest
import torch
import torch_npu
from torchair.scope import npu_stream_switch, npu_wait_tensor, super_kernel

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 256, 8, 128, 64, 4
# --- scaffolding: stands in for vLLM's MC2 group (one rank) ---
EP_GROUP, EP_WORLD, EP_RANK = "ep", 1, 0


def int8_weight(gen, *shape):
    return torch.nn.Parameter(torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8), requires_grad=False)


class Mc2MoeLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(81)
        self.gate = torch.nn.Parameter(torch.randn(HIDDEN, EXPERTS, generator=gen) / 11)
        self.bias = torch.nn.Parameter(torch.randn(EXPERTS, generator=gen) / 100)
        self.w1 = int8_weight(gen, EXPERTS, HIDDEN, 2 * INTER)
        self.w1_scale = torch.nn.Parameter(torch.rand(EXPERTS, 2 * INTER, generator=gen) / 3000)
        self.w2 = int8_weight(gen, EXPERTS, INTER, HIDDEN)
        self.w2_scale = torch.nn.Parameter((torch.rand(EXPERTS, HIDDEN, generator=gen) / 3000).bfloat16())
        self.shared_w1 = int8_weight(gen, HIDDEN, 2 * INTER)
        self.shared_w1_scale = torch.nn.Parameter(torch.rand(2 * INTER, generator=gen) / 3000)

    def forward(self, hidden_states):
        with super_kernel("model.layers.3.mlp.experts", "stream-fusion=1"):
            router_logits = hidden_states.float() @ self.gate
            with npu_stream_switch("moe_secondary", 0):
                npu_wait_tensor(hidden_states, router_logits)
                quantized_x_for_share, dynamic_scale_for_share = torch_npu.npu_dynamic_quant(hidden_states)
        topk_weights, topk_ids, _ = torch_npu.npu_moe_gating_top_k(
            router_logits, k=TOP_K, bias=self.bias, k_group=4, group_count=8, group_select_mode=1,
            renorm=0, norm_type=1, routed_scaling_factor=1, eps=float(1e-20))
        with npu_stream_switch("moe_secondary", 0):
            shared_gate_up = torch_npu.npu_quant_matmul(
                quantized_x_for_share, self.shared_w1, self.shared_w1_scale, output_dtype=torch.int32)
        output = torch_npu.npu_moe_distribute_dispatch_v2(
            x=hidden_states, expert_ids=topk_ids, expert_shard_type=0, shared_expert_rank_num=0,
            moe_expert_num=EXPERTS, global_bs=0, scales=None, quant_mode=2, group_ep=EP_GROUP,
            ep_world_size=EP_WORLD, ep_rank_id=EP_RANK, group_tp=EP_GROUP, tp_world_size=1, tp_rank_id=0)
        expand_x, dynamic_scale, assist_info, expert_token_nums, ep_recv_counts, _, expand_scales = output[0:7]
        with npu_stream_switch("moe_secondary", 0):
            npu_wait_tensor(shared_gate_up, expand_x)
            shared_act, _ = torch_npu.npu_dequant_swiglu_quant(
                x=shared_gate_up, weight_scale=self.shared_w1_scale, activation_scale=dynamic_scale_for_share,
                activate_left=True, quant_mode=1)
        gate_up = torch_npu.npu_grouped_matmul(
            x=[expand_x], weight=[self.w1], split_item=3, group_list_type=1, group_type=0,
            group_list=expert_token_nums, output_dtype=torch.int32)[0]
        act, act_scale = torch_npu.npu_dequant_swiglu_quant(
            x=gate_up, weight_scale=self.w1_scale, activation_scale=dynamic_scale, bias=None, quant_scale=None,
            quant_offset=None, group_index=expert_token_nums, activate_left=True, quant_mode=1)
        down = torch_npu.npu_grouped_matmul(
            x=[act], weight=[self.w2], scale=[self.w2_scale], per_token_scale=[act_scale], split_item=2,
            group_list_type=1, group_type=0, group_list=expert_token_nums, output_dtype=self.w2_scale.dtype)[0]
        routed = torch_npu.npu_moe_distribute_combine_v2(
            expand_x=down, expert_ids=topk_ids, assist_info_for_combine=assist_info, ep_send_counts=ep_recv_counts,
            expert_scales=topk_weights.to(torch.float32), expert_shard_type=0, shared_expert_rank_num=0,
            moe_expert_num=EXPERTS, global_bs=0, group_ep=EP_GROUP, ep_world_size=EP_WORLD, ep_rank_id=EP_RANK,
            group_tp=EP_GROUP, tp_world_size=1, tp_rank_id=0, expand_scales=expand_scales)
        return routed, shared_act


@pytest.mark.superkernel(scope="model.layers.3.mlp.experts", segments=1)
@pytest.mark.multistream(streams=2, race_free=True)
def test_mc2_moe_with_shared_expert_stream(npufuse):
    hidden = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(12)).bfloat16().npu()
    npufuse.check(Mc2MoeLayer(), hidden)
