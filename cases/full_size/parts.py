"""Pieces the full-size models share: the RMSNorm with a fused residual add, W8A8 linear layers, the routed
experts of an EP MoE layer (MC2 dispatch, W8A8 grouped matmuls, combine) and the paged KV cache inputs of a
decode step, written with the torch_npu calls the Ascend recipes use.

Parameters are created with ``torch.empty``: the models are built under ``init_empty_weights()`` (meta
tensors, nothing allocated) and a sampled layer gets seeded values when its numerics are computed.
"""

from __future__ import annotations

import torch

from pytest_npufuse import torch_npu


def parameter(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class RMSNorm(torch.nn.Module):
    """``npu_rms_norm``, or ``npu_add_rms_norm`` with the residual stream when one is given (the
    recipes' ``DeepseekV3RMSNorm`` / ``Qwen3MoeRMSNorm`` forms); returns (normed, residual)."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = parameter(hidden)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            return torch_npu.npu_rms_norm(x, self.weight, self.eps)[0], x
        normed, _, added = torch_npu.npu_add_rms_norm(residual, x, self.weight, self.eps)
        return normed, added


class W8A8Linear(torch.nn.Module):
    """An int8 weight ``[K, N]`` with per-channel scales: dynamic per-token quantisation of the input, then
    ``npu_quant_matmul`` (the recipes' W8A8 ``ReplicatedLinear``/``RowParallelLinear``). ``int32=True`` keeps
    the raw accumulator for a following ``npu_dequant_swiglu_quant``, as the recipes' gate_up projections do."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.weight = parameter(k, n, dtype=torch.int8)
        self.weight_scale = parameter(n, dtype=torch.float32)

    def forward(self, x: torch.Tensor, int32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        quantized, scale = torch_npu.npu_dynamic_quant(x)
        return self.quantized(quantized, scale, int32), scale

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The bf16 product alone (a projection of :mod:`.gqa`)."""
        return self(x)[0]

    def quantized(self, x: torch.Tensor, scale: torch.Tensor, int32: bool = False) -> torch.Tensor:
        """The product of an input already quantised to int8 with its per-token ``scale``."""
        if int32:
            return torch_npu.npu_quant_matmul(x, self.weight, self.weight_scale, output_dtype=torch.int32)
        return torch_npu.npu_quant_matmul(x, self.weight, self.weight_scale, pertoken_scale=scale,
                                          output_dtype=torch.bfloat16)


class W8A8SwigluMLP(torch.nn.Module):
    """gate_up (int32) -> ``npu_dequant_swiglu_quant`` -> down: the recipes' W8A8 dense MLP and shared expert."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = W8A8Linear(hidden, 2 * intermediate)
        self.down_proj = W8A8Linear(intermediate, hidden)

    def gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gate_up_proj(x, int32=True)

    def act(self, merged: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch_npu.npu_dequant_swiglu_quant(
            merged, weight_scale=self.gate_up_proj.weight_scale, activation_scale=scale, activate_left=True,
            quant_mode=1)

    def down(self, act: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.down_proj.quantized(act, scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(*self.act(*self.gate_up(x)))


class RoutedExperts(torch.nn.Module):
    """This rank's ``experts // ep`` local experts of an EP MoE layer, as the recipes' decode path runs them
    (cann-recipes-infer ``moe_infer_dispatch_combine``): MC2 ``npu_moe_distribute_dispatch_v2`` with dynamic
    int8 quantisation, the W8A8 grouped gate_up matmul, ``npu_dequant_swiglu_quant``, the grouped down
    matmul, ``npu_moe_distribute_combine_v2``. ``dispatch`` and ``combine`` are separate calls so a model can
    interleave other work (a shared expert on a side stream) between them."""

    def __init__(self, hidden: int, intermediate: int, experts: int, ep: int) -> None:
        super().__init__()
        self.experts_total, self.ep = experts, ep
        local = experts // ep
        self.w13 = parameter(local, hidden, 2 * intermediate, dtype=torch.int8)
        self.w13_scale = parameter(local, 2 * intermediate, dtype=torch.float32)
        self.w2 = parameter(local, intermediate, hidden, dtype=torch.int8)
        self.w2_scale = parameter(local, hidden)

    def _mc2(self) -> dict:
        return dict(group_ep="ep", ep_world_size=self.ep, ep_rank_id=0, moe_expert_num=self.experts_total,
                    group_tp="ep", tp_world_size=1, tp_rank_id=0, expert_shard_type=0, shared_expert_rank_num=0,
                    global_bs=0)

    def dispatch(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(expand_x, dynamic_scale, expand_idx, expert token counts, ep_recv_counts, tp_recv_counts)."""
        return torch_npu.npu_moe_distribute_dispatch_v2(x=x, expert_ids=ids, scales=None, quant_mode=2,
                                                        **self._mc2())[:6]

    def compute(self, expand_x: torch.Tensor, dynamic_scale: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The local experts on the rows the dispatch delivered."""
        up = torch_npu.npu_grouped_matmul([expand_x], [self.w13], split_item=3, group_list_type=1, group_type=0,
                                          group_list=counts, output_dtype=torch.int32)[0]
        act, scale = torch_npu.npu_dequant_swiglu_quant(
            up, weight_scale=self.w13_scale, activation_scale=dynamic_scale, group_index=counts, activate_left=True,
            quant_mode=1)
        return torch_npu.npu_grouped_matmul([act], [self.w2], scale=[self.w2_scale], per_token_scale=[scale],
                                            split_item=2, group_list_type=1, group_type=0, group_list=counts,
                                            output_dtype=torch.bfloat16)[0]

    def combine(self, down: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, dispatched: tuple) -> torch.Tensor:
        """Each token's routed experts' outputs, weighted by ``weights``, back on its own rank."""
        _, _, expand_idx, _, ep_recv, tp_recv = dispatched
        return torch_npu.npu_moe_distribute_combine_v2(
            expand_x=down, expert_ids=ids, assist_info_for_combine=expand_idx, ep_send_counts=ep_recv,
            tp_send_counts=tp_recv, expert_scales=weights.to(torch.float32), **self._mc2())

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        dispatched = self.dispatch(x, ids)
        return self.combine(self.compute(*dispatched[:2], dispatched[3]), ids, weights, dispatched)


def decode_tables(batch: int, context: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Block table ``[batch, blocks per sequence]`` (sequence b owns a contiguous run of blocks), the slot of
    each sequence's new token (its last position), and the number of blocks the caches need."""
    per_sequence = -(-context // block_size)
    block_table = torch.arange(batch * per_sequence, dtype=torch.int32, device="cpu").view(batch, per_sequence)
    last = context - 1
    slots = block_table[:, last // block_size].to(torch.int64) * block_size + last % block_size
    return block_table, slots, batch * per_sequence
