"""DeepSeek-R1 EP prefill double routing: init routing with dynamic int8, re-routing by expert, experts, finalize.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_r1/models/modeling_deepseek.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``moe_infer_double_routing`` and ``forward_expert``, "a8"
GMM quant mode): ``npu_moe_init_routing_v2(hidden_states, expert_idx=topk_ids, active_num=T*K,
scale=smooth_scale_1, expert_num=E, expert_tokens_num_type=1, expert_tokens_num_flag=True,
active_expert_range=[0, E], quant_mode=1)``; after the all-to-all dispatch,
``npu_moe_re_routing(gathered_tokens, tokens_per_expert_group.view(moe_ep_size, -1),
per_token_scales=gathered_pertoken_scale)``, the experts with ``group_list_type=1`` and the per-token
scales, ``torch.index_select(out, 0, gathered_ids_unsort.float().argsort().int())`` to undo the re-routing,
the all-to-all combine, then ``npu_moe_finalize_routing(gathered_tokens, skip1=shared, skip2=None,
bias=None, scales=topk_weight.to(dtype), expanded_src_to_dst_row=expanded_row_idx,
export_for_source_row=None, drop_pad_mode=2)``. Scaffolding: an EP world of one rank (the two
``all_to_all_single`` exchanges return their input), the experts module as one W8A8
``npu_grouped_matmul`` with bfloat16 output, the gate's top-k as inputs. Shrunk: 8 experts, top 2,
hidden 64, 6 tokens.
"""

import pytest
import torch
import torch_npu

EXPERTS, TOP_K, HIDDEN, TOKENS = 8, 2, 64, 6
# --- scaffolding: stands in for the EP process group ---
MOE_EP_SIZE = 1


class DoubleRoutingMoe(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(61)
        self.num_experts = EXPERTS
        self.smooth_scale_1 = torch.nn.Parameter(torch.rand(EXPERTS, HIDDEN, generator=gen) + 0.5, requires_grad=False)
        # --- scaffolding: the experts' W8A8 weights and per-channel scales ---
        self.w = torch.nn.Parameter(torch.randint(-127, 128, (EXPERTS, HIDDEN, HIDDEN), generator=gen,
                                                  dtype=torch.int8), requires_grad=False)
        self.w_scale = torch.nn.Parameter(torch.rand(EXPERTS, HIDDEN, generator=gen) / 2000, requires_grad=False)

    def dispatch_double_routing(self, tokens_per_expert, expanded_x, pertoken_scale):
        # --- scaffolding: all_to_all_single over an EP world of one rank returns its input ---
        return tokens_per_expert, expanded_x, pertoken_scale

    def experts(self, x, expert_tokens, group_list_type, pertoken_scale):
        # --- scaffolding: the experts module as one W8A8 grouped matmul ---
        return torch_npu.npu_grouped_matmul(
            x=[x], weight=[self.w], scale=[self.w_scale], per_token_scale=[pertoken_scale], split_item=2,
            group_type=0, group_list=expert_tokens, group_list_type=group_list_type, output_dtype=torch.bfloat16)[0]

    def forward_expert(self, gathered_tokens, tokens_per_expert_group, gathered_pertoken_scale):
        hidden_states_ordered_by_experts, gathered_pertoken_scale, gathered_ids_unsort, tokens_per_local_expert = \
            torch_npu.npu_moe_re_routing(gathered_tokens, tokens_per_expert_group.view(MOE_EP_SIZE, -1),
                                         per_token_scales=gathered_pertoken_scale)
        gmm_args = {
            "x": hidden_states_ordered_by_experts,
            "expert_tokens": tokens_per_local_expert,
            "group_list_type": 1,
        }
        gmm_args.update({"pertoken_scale": gathered_pertoken_scale})
        hidden_states_ordered_by_experts = self.experts(**gmm_args)
        new_x = torch.index_select(hidden_states_ordered_by_experts, 0, gathered_ids_unsort.float().argsort().int())
        return new_x

    def forward(self, hidden_states, topk_ids, topk_weight, hidden_states_share):
        expanded_x, expanded_row_idx, tokens_per_expert, pertoken_scale = torch_npu.npu_moe_init_routing_v2(
            hidden_states,
            expert_idx=topk_ids,
            active_num=topk_ids.shape[0] * topk_ids.shape[1],
            scale=self.smooth_scale_1,
            expert_num=self.num_experts,
            expert_tokens_num_type=1,
            expert_tokens_num_flag=True, active_expert_range=[0, self.num_experts],
            quant_mode=1,
        )
        tokens_per_expert_group, gathered_tokens, gathered_pertoken_scale = \
            self.dispatch_double_routing(tokens_per_expert, expanded_x, pertoken_scale)
        new_x = self.forward_expert(gathered_tokens, tokens_per_expert_group, gathered_pertoken_scale)
        gathered_tokens = new_x  # scaffolding: the combine all-to-all of a one-rank EP world
        hidden_states = torch_npu.npu_moe_finalize_routing(
            gathered_tokens, skip1=hidden_states_share, skip2=None, bias=None,
            scales=topk_weight.to(gathered_tokens.dtype),
            expanded_src_to_dst_row=expanded_row_idx,
            export_for_source_row=None, drop_pad_mode=2,
        )
        return hidden_states


def prefill_chunk():
    gen = torch.Generator().manual_seed(17)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    topk_ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(TOKENS)]).int().npu()
    topk_weight = torch.softmax(torch.randn(TOKENS, TOP_K, generator=gen), dim=-1).npu()
    shared = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    return hidden, topk_ids, topk_weight, shared


def test_ep_prefill_double_routing(npufuse):
    report = npufuse.check(DoubleRoutingMoe(), *prefill_chunk())
    assert [k.op_type for k in report.variant.kernels].count("npu::npu_moe_re_routing") == 1
