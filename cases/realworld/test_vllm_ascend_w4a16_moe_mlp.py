"""W4A16 MoE experts: weight-only int4 grouped matmuls with per-group antiquant scale and offset around SwiGLU.

Reconstruction of the call pattern (not a copy) of vllm-project/vllm-ascend
@ 182b75ea84ff13ece27b57391331ef8935410aea: vllm_ascend/ops/fused_moe/moe_mlp.py (``quant_apply_mlp``, the
``w1_offset is not None`` branch): ``npu_grouped_matmul(x=[hidden_states], weight=[w1],
antiquant_scale=[w1_scale], antiquant_offset=[w1_offset], split_item=2, group_list_type=...,
group_type=0, group_list=..., output_dtype=w2_scale.dtype)``, ``npu_swiglu``, then the same call with w2.
The weights, scales and offsets have the layout vllm_ascend/quantization/methods/w4a16.py gives them
after loading: int4 packed eight per int32 along N ([E, K, N / 8]), scales and (all-zero) offsets
[E, K / group_size, N] in bfloat16. Scaffolding: the load-time packing (``npu_convert_weight_to_int4pack``)
is replaced by a few lines packing element 0 into the low nibble, and the routed rows and their
per-expert counts are inputs. Shrunk: 4 experts, hidden 64, intermediate 32, group size 16.
"""

import pytest
import torch
import torch_npu

EXPERTS, HIDDEN, INTER, GROUP_SIZE = 4, 64, 32, 16
COUNTS = [3, 0, 2, 3]


def pack_int4_scaffolding(levels: torch.Tensor) -> torch.Tensor:
    # --- scaffolding: stands in for torch_npu.npu_convert_weight_to_int4pack at weight-load time ---
    nibbles = (levels.long() & 0xF).reshape(*levels.shape[:-1], -1, 8)
    words = (nibbles << (torch.arange(8) * 4)).sum(dim=-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


class W4A16Experts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(81)

        def int4_weight(k: int, n: int) -> torch.nn.Parameter:
            levels = torch.randint(-8, 8, (EXPERTS, k, n), generator=gen, dtype=torch.int8)
            return torch.nn.Parameter(pack_int4_scaffolding(levels), requires_grad=False)

        def group_scale(k: int, n: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.rand(EXPERTS, k // GROUP_SIZE, n, generator=gen) / 40).bfloat16(),
                                      requires_grad=False)

        self.w13_weight_packed, self.w13_weight_scale = int4_weight(HIDDEN, 2 * INTER), group_scale(HIDDEN, 2 * INTER)
        self.w13_weight_offset = torch.nn.Parameter(
            torch.zeros(EXPERTS, HIDDEN // GROUP_SIZE, 2 * INTER, dtype=torch.bfloat16), requires_grad=False)
        self.w2_weight_packed, self.w2_weight_scale = int4_weight(INTER, HIDDEN), group_scale(INTER, HIDDEN)
        self.w2_weight_offset = torch.nn.Parameter(
            torch.zeros(EXPERTS, INTER // GROUP_SIZE, HIDDEN, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, hidden_states, group_list):
        w1, w1_scale, w1_offset = self.w13_weight_packed, self.w13_weight_scale, self.w13_weight_offset
        w2, w2_scale, w2_offset = self.w2_weight_packed, self.w2_weight_scale, self.w2_weight_offset
        group_list_type = 1
        unquantized_hidden_states = hidden_states
        _output_dtype = w2_scale[0].dtype if isinstance(w2_scale, list) else w2_scale.dtype
        hidden_states = torch_npu.npu_grouped_matmul(
            x=[unquantized_hidden_states],
            weight=[w1],
            antiquant_scale=[w1_scale],
            antiquant_offset=[w1_offset],
            split_item=2,
            group_list_type=group_list_type,
            group_type=0,
            group_list=group_list,
            output_dtype=_output_dtype,
        )[0]
        hidden_states = torch_npu.npu_swiglu(hidden_states)
        hidden_states = torch_npu.npu_grouped_matmul(
            x=[hidden_states],
            weight=[w2],
            antiquant_scale=[w2_scale],
            antiquant_offset=[w2_offset],
            split_item=2,
            group_list_type=group_list_type,
            group_type=0,
            group_list=group_list,
            output_dtype=_output_dtype,
        )[0]
        return hidden_states


def routed_rows():
    gen = torch.Generator().manual_seed(19)
    hidden = torch.randn(sum(COUNTS), HIDDEN, generator=gen).bfloat16().npu()
    return hidden, torch.tensor(COUNTS, dtype=torch.int64).npu()


def test_w4a16_moe_mlp(npufuse):
    report = npufuse.check(W4A16Experts(), *routed_rows())
    assert [k.op_type for k in report.variant.kernels].count("npu::npu_grouped_matmul") == 2
