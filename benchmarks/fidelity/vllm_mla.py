"""The kernels a DeepSeek-V3-architecture layer (Kimi-K2) launches on vLLM-Ascend under attention TP with EP.

Read from vllm-project/vllm-ascend @182b75ea84ff13ece27b57391331ef8935410aea, the Kimi-K2-Thinking rows'
source commit (TP16, ``--enable-expert-parallel``, compressed-tensors int4 experts, bf16 elsewhere):

- **attention** (``vllm_ascend/attention/mla_v1.py`` ``AscendMLAImpl``; no MLAPO: ``enabling_mlapo`` in
  ``attention/utils.py`` needs ``enable_mlapo`` and a KV-consumer instance): ``fused_qkv_a_proj`` (one
  MatMul for q_a and kv_a), the q_a norm, ``kv_no_split.contiguous()`` (a copy), ``q_proj``; decode then
  runs ``bmm`` of the query's nope part with W_UK, ``npu_interleave_rope`` of its rope part,
  ``npu_kv_rmsnorm_rope_cache`` (norm, RoPE and cache write of the latent), a ``.contiguous()`` of the
  transposed absorbed query, ``npu_fused_infer_attention_score_v2`` and ``npu_transpose_batchmatmul``
  (W_UV); prefill runs ``npu_interleave_rope``, ``npu_kv_rmsnorm_rope_cache`` (``is_output_kv``),
  ``kv_b_proj``, ``.contiguous()`` copies of the expanded k_pe, the key and the value, and
  ``npu_fused_infer_attention_score`` over the prompt. Both write into a zeroed ``o_proj_input`` slice,
  run ``o_proj`` (and its all-reduce) and copy it into the layer's output. 4 heads a die at TP16: a power
  of two, so no head padding.
- **MoE** (``ops/fused_moe``): the router casts the normed tokens to float32 for its float32 MatMul
  (``gate_linear.py``), ``npu_moe_gating_top_k`` selects (``router/router_factory.py``: sigmoid with
  renormalisation and one group is supported), and ``w4a16.py`` casts the weights to bf16.
  ``PrepareAndFinalizeWithMC2``/``All2All`` (``prepare_finalize.py``) pad the tokens (MC2: to a multiple
  of TP; all-to-all: only below TP) and route this rank's 1/TP slice, ``finalize`` all-gathers the
  routed output over TP into a list of the ranks' slices, which torch_npu does as one all-gather and a
  copy per rank (:meth:`VllmMlaLayers.vllm_list_all_gather`). ``ascend_forward_context.py`` picks MC2
  (``npu_moe_distribute_dispatch_v2`` / ``combine_v2``) up to the MC2 capacity (the largest capture size rounded up to TP: 16 tokens here)
  and all-to-all above it: ``token_dispatcher.py`` ``TokenDispatcherWithAll2AllV`` counts tokens per
  expert (``histc``, sums), all-gathers the counts over EP, builds the local experts' indices with
  ``repeat_interleave`` over device repeats (its size read back to the host: a stream synchronisation),
  permutes (``npu_moe_token_permute``), all-to-alls, permutes to local experts, and on the way back
  unpermutes, all-to-alls and unpermutes with the routing weights. The experts (``moe_mlp.py``, the
  antiquant branch): ``npu_grouped_matmul`` with int4 weights, ``npu_swiglu``, ``npu_grouped_matmul``.
  The shared expert (``shared_experts.py``, bf16, split over TP) is MatMul, SwiGlu, MatMul and an
  all-reduce; its output is added to the routed one.
- the first, dense layer: norm, gate-up MatMul, SwiGlu, down MatMul, all-reduce.

Every norm after the first adds the previous block's output in the same kernel (``npu_add_rms_norm``).
Not read, so left as the decoder writes them: the step's embedding, final norm, lm_head and sampling.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import Decoder, _Weights


class VllmMlaLayers:
    """vLLM-Ascend's DeepSeek-V3 layer, mixed into the decoder; a layer's state is ``(residual, delta)``
    as in :class:`.fused.FusedLayers`."""

    def vllm_layer(self: Decoder, states: list, w: _Weights, layer: int, scope: str | None) -> list:
        c = self.c
        states = [self.vllm_attention(residual, delta, w, scope) for residual, delta in states]
        if "experts" in c and layer >= c.get("dense_layers", 0):
            return [self.vllm_moe(residual, delta, w, scope) for residual, delta in states]
        return [self.vllm_dense(residual, delta, w, scope) for residual, delta in states]

    def vllm_attention(self: Decoder, residual: str, delta: str | None, w: _Weights, scope: str | None):
        """Norm, fused q_a/kv_a, q_a norm, the latent's copy, q_proj, the decode or prefill preprocess
        and attention, the zeroed o_proj input and its slice copy, o_proj (all-reduced), the output copy.
        Returns the new residual and the block's output."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, q_lora, heads = c["hidden"], c["q_lora_rank"], max(1, c["heads"] // d.attn_tp)
        nope, rope, latent, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"], c["v_head_dim"]
        h = self.residual_norm(residual, delta, scope)
        qkv = self.product(h, w, "qkv_a", hidden, q_lora + latent + rope, scope)
        qc = self.b.op("npu::npu_rms_norm", [qkv], (t, q_lora), scope=scope)
        kv = self.b.op("aten::clone", [qkv], (t, latent + rope), scope=scope)
        q = self.product(qc, w, "q_b", q_lora, heads * (nope + rope), scope)
        cache = w.get("kv_cache", (d.sequences, d.context, latent + rope), "bfloat16")
        if d.prefill:
            attended = self.vllm_prefill_attention(q, kv, cache, w, heads)
        else:
            attended = self.vllm_decode_attention(q, kv, cache, w, heads)
        zeroed = self.b.op("aten::zeros", [], (t, heads * v_dim), scope=scope)
        o_in = self.b.op("aten::copy_", [zeroed, attended], (t, heads * v_dim), scope=scope)
        o = self.all_reduce(self.product(o_in, w, "o", heads * v_dim, hidden, scope), hidden, d.attn_tp)
        return h, self.b.op("aten::copy_", [o], (t, hidden), scope=scope)

    def vllm_decode_attention(self: Decoder, q: str, kv: str, cache: str, w: _Weights, heads: int) -> str:
        """W_UK on the query, its RoPE, the latent's norm/RoPE/cache write, the absorbed query's copy, the
        attention over the cache and W_UV."""
        c, d, t = self.c, self.d, self.d.tokens
        nope, rope, latent, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"], c["v_head_dim"]
        ql = self.b.op(
            "aten::bmm", [q, w.get("uk", (heads, nope, latent), "bfloat16")], (heads, t, latent),
            flops=2.0 * heads * t * nope * latent,
        )
        pe = self.b.op("npu::npu_interleave_rope", [q], (t, heads * rope))
        self.b.op("npu::npu_kv_rmsnorm_rope_cache", [kv, cache], (t, latent + rope))
        ql = self.b.op("aten::clone", [ql, pe], (t, heads * latent))
        attended = self.attention(ql, heads, d.context, latent + rope, latent + rope, latent, None)
        return self.b.op(
            "npu::npu_transpose_batchmatmul", [attended, w.get("uv", (heads, latent, v_dim), "bfloat16")],
            (t, heads * v_dim), flops=2.0 * heads * t * latent * v_dim,
        )

    def vllm_prefill_attention(self: Decoder, q: str, kv: str, cache: str, w: _Weights, heads: int) -> str:
        """The query's RoPE, the latent's norm/RoPE/cache write (returning it), kv_b_proj to per-head keys
        and values, the three contiguous copies and the causal attention over the prompt."""
        c, t = self.c, self.d.tokens
        nope, rope, latent, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"], c["v_head_dim"]
        pe = self.b.op("npu::npu_interleave_rope", [q], (t, heads * rope))
        latent_out = self.b.op("npu::npu_kv_rmsnorm_rope_cache", [kv, cache], (t, latent + rope))
        kv_b = self.product(latent_out, w, "kv_b", latent, heads * (nope + v_dim), None)
        k_pe = self.b.op("aten::clone", [latent_out], (t, heads * rope))
        key = self.b.op("aten::clone", [kv_b], (t, heads * nope))
        value = self.b.op("aten::clone", [kv_b], (t, heads * v_dim))
        return self.attention_over(q, pe, k_pe, key, value, heads)

    def attention_over(self: Decoder, q: str, pe: str, k_pe: str, key: str, value: str, heads: int) -> str:
        """A prompt's causal attention over its own keys and values (no cache read)."""
        c = self.c
        qk, v_dim = c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"]
        return self.b.op(
            "npu::npu_fused_infer_attention_score", [q, pe, k_pe, key, value], (self.d.tokens, heads * v_dim),
            flops=self.causal_flops(heads, qk, v_dim),
        )

    def vllm_moe(self: Decoder, residual: str, delta: str, w: _Weights, scope: str | None):
        """Norm, the float32 router and its cast, padding, top-k and the weights' cast on this rank's
        slice, the routed experts between MC2 or all-to-all exchanges, the TP all-gather, the shared
        expert (all-reduced), their sum."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, experts, top_k = c["hidden"], c["experts"], c["top_k"]
        h = self.residual_norm(residual, delta, scope)
        h32 = self.b.op("aten::_to_copy", [h], (t, hidden), "float32", scope=scope)
        logits = self.b.op(
            "aten::mm", [h32, w.get("router", (hidden, experts), "float32")], (t, experts), "float32", scope=scope
        )
        padded = self.vllm_padded_tokens()
        if padded > t:
            self.b.op("aten::constant_pad_nd", [h], (padded, hidden), scope=scope)
            logits = self.b.op("aten::constant_pad_nd", [logits], (padded, experts), "float32", scope=scope)
        rows = max(1, padded // d.attn_tp)
        topk = self.b.op("npu::npu_moe_gating_top_k", [logits], (rows, top_k), "int32", scope=scope)
        weights = self.b.op("aten::_to_copy", [topk], (rows, top_k), scope=scope)
        routed = max(1, t * top_k // d.attn_tp)
        if d.prefill:
            out = self.vllm_all_to_all_experts(h, topk, weights, rows, routed, w, scope)
        else:
            xs = self.b.op("npu::npu_moe_distribute_dispatch_v2", [h, topk], (routed, hidden), scope=scope)
            down = self.vllm_experts(xs, w, routed, scope)
            out = self.b.op("npu::npu_moe_distribute_combine_v2", [down, topk, weights], (rows, hidden), scope=scope)
        gathered = self.vllm_list_all_gather(out, rows, padded)
        shared_ffn = max(1, c.get("shared_experts", 0) * c["moe_ffn"] // d.attn_tp)
        up = self.product(h, w, "shared_gu", hidden, 2 * shared_ffn, scope)
        act = self.b.op("npu::npu_swiglu", [up], (t, shared_ffn), scope=scope)
        shared = self.all_reduce(self.product(act, w, "shared_down", shared_ffn, hidden, scope), hidden, d.attn_tp)
        return h, self.b.op("aten::add", [*gathered, shared], (t, hidden), scope=scope)

    def vllm_list_all_gather(self: Decoder, x: str, rows: int, padded: int) -> list[str]:
        """``finalize``'s ``dist.all_gather`` into a list of the TP ranks' slices: torch_npu's
        ``ProcessGroupHCCL::allgather`` (Ascend/pytorch torch_npu/csrc/distributed/ProcessGroupHCCL.cpp
        @0017cdfc8d6d713bc46d308f65c184a87afd47af) gathers into a flattened buffer, then copies each rank's
        part into its list entry (``outputTensors[i][j].copy_``): one HcclAllGather and TP copies, whose
        outputs together are the gathered tokens."""
        hidden = self.c["hidden"]
        flat = self.b.op("_c10d_functional::all_gather_into_tensor", [x], (padded, hidden))
        return [self.b.op("aten::copy_", [flat], (rows, hidden)) for _ in range(self.d.attn_tp)]

    def vllm_padded_tokens(self: Decoder) -> int:
        """The tokens the MoE pads to: a multiple of TP for MC2 (``padded_num_tokens``), at least TP for
        all-to-all (``PrepareAndFinalizeWithAll2All.prepare``)."""
        t, tp = self.d.tokens, self.d.attn_tp
        if self.d.prefill:
            return max(t, tp)
        return math.ceil(t / tp) * tp

    def vllm_all_to_all_experts(
        self: Decoder, h: str, topk: str, weights: str, rows: int, routed: int, w: _Weights, scope: str | None
    ) -> str:
        """TokenDispatcherWithAll2AllV: counts per expert and their sums, the counts' EP all-gather, the
        local experts' index (a host read of its size, then RepeatInterleave), permute, all-to-all,
        permute to the local experts, the experts, and back: unpermute, all-to-all, unpermute."""
        c, d = self.c, self.d
        hidden, experts = c["hidden"], c["experts"]
        local = max(1, experts // d.ep)
        counts = self.b.op("aten::histc", [topk], (experts,), "int32", scope=scope)
        self.b.op("aten::sum", [counts], (d.ep,), "int32", scope=scope)
        gathered = self.b.op("_c10d_functional::all_gather_into_tensor", [counts], (d.ep, experts), "int32")
        per_rank = self.b.op("aten::sum", [gathered], (d.ep,), "int32", scope=scope)
        per_expert = self.b.op("aten::sum", [gathered], (local,), "int32", scope=scope)
        self.b.op("aten::_local_scalar_dense", [per_expert, per_rank], (1,), "int64")
        index = self.b.op("aten::repeat_interleave", [per_expert], (routed,), "int32", scope=scope)
        permuted = self.b.op("npu::npu_moe_token_permute", [h, topk], (routed, hidden), scope=scope)
        moved = self.b.op("_c10d_functional::all_to_all_single", [permuted], (routed, hidden))
        local_tokens = self.b.op("npu::npu_moe_token_permute", [moved, index], (routed, hidden), scope=scope)
        down = self.vllm_experts(local_tokens, w, routed, scope)
        back = self.b.op("npu::npu_moe_token_unpermute", [down, index], (routed, hidden), scope=scope)
        returned = self.b.op("_c10d_functional::all_to_all_single", [back], (routed, hidden))
        return self.b.op("npu::npu_moe_token_unpermute", [returned, weights], (rows, hidden), scope=scope)

    def vllm_experts(self: Decoder, xs: str, w: _Weights, routed: int, scope: str | None) -> str:
        """GroupedMatmul with int4 (antiquant) or bf16 weights, SwiGlu, GroupedMatmul."""
        c, d = self.c, self.d
        hidden, ffn, local = c["hidden"], c["moe_ffn"], max(1, c["experts"] // d.ep)
        weight, k_scale = ("int8", 2) if d.moe_bits == 4 else ("bfloat16", 1)
        up = self.b.op(
            "npu::npu_grouped_matmul", [xs, w.get("experts_up", (local, hidden // k_scale, 2 * ffn), weight)],
            (routed, 2 * ffn), scope=scope, flops=2.0 * routed * hidden * 2 * ffn,
        )
        act = self.b.op("npu::npu_swiglu", [up], (routed, ffn), scope=scope)
        return self.b.op(
            "npu::npu_grouped_matmul", [act, w.get("experts_down", (local, ffn // k_scale, hidden), weight)],
            (routed, hidden), scope=scope, flops=2.0 * routed * ffn * hidden,
        )

    def vllm_dense(self: Decoder, residual: str, delta: str, w: _Weights, scope: str | None):
        """A dense FFN block: norm, gate-up, SwiGlu, down (all-reduced)."""
        c, d = self.c, self.d
        hidden, part = c["hidden"], max(1, c["ffn"] // d.attn_tp)
        h = self.residual_norm(residual, delta, scope)
        up = self.product(h, w, "gate_up", hidden, 2 * part, scope)
        act = self.b.op("npu::npu_swiglu", [up], (d.tokens, part), scope=scope)
        return h, self.all_reduce(self.product(act, w, "down", part, hidden, scope), hidden, d.attn_tp)
