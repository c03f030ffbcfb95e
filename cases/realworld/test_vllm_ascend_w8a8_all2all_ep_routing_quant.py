"""W8A8 all-to-all EP MoE: routing with int8 quantisation in one op, re-routing by expert, W8A8 MLP, finalize.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/quantization/torchair_w8a8_dynamic.py
@ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1 (``torchair_fused_experts_with_all2all`` with an expert map,
and ``torchair_apply_mlp``): ``npu_moe_init_routing_quant(hidden_states, expert_idx=topk_ids.to(torch.int32),
active_num=0, expert_capacity=0, expert_num=E, drop_pad_mode=0, expert_tokens_num_mode=2,
expert_tokens_before_capacity_flag=False, quant_mode=1)`` unpacked as ``quantized_tokens, expanded_row_idx,
global_expert_tokens, _, token_scales``; after the all-to-all exchanges, ``npu_moe_re_routing(gathered_tokens,
gather_sizes.view(world_size, -1), per_token_scales=dynamic_scale)``, ``expert_tokens.to(torch.int64)``,
the MLP (``npu_grouped_matmul`` with w1 scale and per-token scale, split_item=2, group_list_type=1,
output_dtype = w2_scale.dtype; ``npu_swiglu``; ``npu_dynamic_quant``; the second ``npu_grouped_matmul``),
``torch.index_select(out, 0, inverse_indices.to(torch.float32).argsort().to(torch.int32))``, the return
all-to-all and ``npu_moe_finalize_routing(..., scales=topk_weights, expanded_src_to_dst_row=expanded_row_idx,
export_for_source_row=None, drop_pad_mode=2)``. Scaffolding: an EP world of one rank (each
``all_to_all_single`` returns its input), the gate's top-k as inputs. Shrunk: 8 experts, top 2,
hidden 64, intermediate 32, 5 tokens.
"""

import pytest
import torch
import torch_npu

EXPERTS, TOP_K, HIDDEN, INTER, TOKENS = 8, 2, 64, 32, 5
# --- scaffolding: stands in for vLLM's EP group ---
EP_WORLD_SIZE = 1


class All2AllEpW8A8Experts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(71)
        self.w1 = torch.nn.Parameter(torch.randint(-127, 128, (EXPERTS, HIDDEN, 2 * INTER), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w1_scale = torch.nn.Parameter((torch.rand(EXPERTS, 2 * INTER, generator=gen) / 3000).bfloat16(),
                                           requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randint(-127, 128, (EXPERTS, INTER, HIDDEN), generator=gen,
                                                   dtype=torch.int8), requires_grad=False)
        self.w2_scale = torch.nn.Parameter((torch.rand(EXPERTS, HIDDEN, generator=gen) / 3000).bfloat16(),
                                           requires_grad=False)

    def apply_mlp(self, hidden_states, group_list, dynamic_scale, group_list_type):
        pertoken_scale = dynamic_scale
        _output_dtype = self.w2_scale.dtype
        hidden_states = torch_npu.npu_grouped_matmul(
            x=[hidden_states], weight=[self.w1], scale=[self.w1_scale], bias=None, per_token_scale=[pertoken_scale],
            split_item=2, group_list_type=group_list_type, group_type=0, group_list=group_list,
            output_dtype=_output_dtype)[0]
        hidden_states = torch_npu.npu_swiglu(hidden_states)
        hidden_states, swiglu_out_scale = torch_npu.npu_dynamic_quant(hidden_states)
        hidden_states = torch_npu.npu_grouped_matmul(
            x=[hidden_states], weight=[self.w2], scale=[self.w2_scale], bias=None, per_token_scale=[swiglu_out_scale],
            split_item=2, group_list_type=group_list_type, group_type=0, group_list=group_list,
            output_dtype=_output_dtype)[0]
        return hidden_states

    def forward(self, hidden_states, topk_weights, topk_ids):
        global_num_experts = EXPERTS
        quantized_tokens, expanded_row_idx, global_expert_tokens, _, token_scales = torch_npu.npu_moe_init_routing_quant(
            hidden_states,
            expert_idx=topk_ids.to(torch.int32),
            active_num=0,
            expert_capacity=0,
            expert_num=global_num_experts,
            drop_pad_mode=0,
            expert_tokens_num_mode=2,
            expert_tokens_before_capacity_flag=False,
            quant_mode=1,
        )
        # --- scaffolding: the all_to_all_single exchanges of a one-rank EP world return their inputs ---
        gather_sizes = global_expert_tokens
        gathered_tokens, dynamic_scale = quantized_tokens, token_scales
        hidden_states, dynamic_scale, inverse_indices, expert_tokens = torch_npu.npu_moe_re_routing(
            gathered_tokens, gather_sizes.view(EP_WORLD_SIZE, -1), per_token_scales=dynamic_scale)
        expert_tokens = expert_tokens.to(torch.int64)
        group_list_type = 1
        hidden_states = self.apply_mlp(hidden_states, expert_tokens, dynamic_scale, group_list_type)
        reordered_outputs = torch.index_select(
            hidden_states, dim=0, index=inverse_indices.to(torch.float32).argsort().to(torch.int32))
        hidden_states = reordered_outputs  # scaffolding: the return all-to-all of a one-rank EP world
        final_hidden_states = torch_npu.npu_moe_finalize_routing(
            hidden_states, skip1=None, skip2=None, bias=None, scales=topk_weights,
            expanded_src_to_dst_row=expanded_row_idx, export_for_source_row=None, drop_pad_mode=2)
        return final_hidden_states


def decode_batch():
    gen = torch.Generator().manual_seed(18)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    topk_weights = torch.softmax(torch.randn(TOKENS, TOP_K, generator=gen), dim=-1).bfloat16().npu()
    topk_ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(TOKENS)]).npu()
    return hidden, topk_weights, topk_ids


def test_all2all_ep_routing_quant(npufuse):
    report = npufuse.check(All2AllEpW8A8Experts(), *decode_batch())
    assert [k.op_type for k in report.variant.kernels].count("npu::npu_moe_init_routing_quant") == 1
