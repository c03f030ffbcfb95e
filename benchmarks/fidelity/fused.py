"""The fused torch_npu kernels a DeepSeek-family MLA decode layer launches in the deployments the rows cite.

The generic decoder (:class:`benchmarks.fidelity.models.Decoder`) writes a layer as the model's
textbook ops: each norm, projection, RoPE, cache write and residual add its own kernel, about 33 kernels
per MoE layer. The inference stacks behind the DeepSeek rows launch about 20, because they call torch_npu's
fused ops. Which ones is read from each stack's source:

- **cann-recipes-infer** (hicann/cann-recipes-infer @fbc225d2de3157a093a2e7dfc2b23086d23ed8f9,
  ``models/deepseek_r1/models/modeling_deepseek.py``; ``models/deepseek_v3_2_exp`` and ``models/glm_5``
  call the same ops): the residual add and the RMSNorm are one ``npu_add_rms_norm``
  (``models/deepseek_r1/models/modules.py``, ``DeepseekV3RMSNorm``); the attention's prolog (the
  q_a/q_b/kv_a projections with their norms, the query's absorbed W_UK product, RoPE and the KV-cache
  write) is one ``npu_mla_prolog_v3`` after one ``npu_dynamic_quant`` of the input
  (``forward_page_attention_mla_prolog``, which the decode configs enable and a C8 cache requires); W_UV is
  ``npu_transpose_batchmatmul``; ``npu_moe_distribute_dispatch_v2`` quantises the tokens it sends
  (``quant_mode=2``), so no DynamicQuant precedes it; each SwiGLU between two int8 matmuls is
  ``npu_dequant_swiglu_quant`` (the first matmul writes int32, the second reads the int8 it gives).
- **omni-infer** on A3 (omni-ai-npu/omni-infer @c8bc2bbbaa1084139a8e70405c4873632c0dab79,
  ``omni/models/deepseek/deepseek_v3.py``, ``omni/models/common/layers/attention/deepseek_mla.py``,
  ``omni/models/common/layers/moe/deepseek_moe.py``, ``omni/models/common/layers/layernorm.py``; config
  ``tests/test_config/test_config_decode.json``, whose ``use_mlaprolog`` is false, "not enabled yet" in
  ``docs/add_custom_model.md``): ``npu_add_rms_norm`` then ``npu_dynamic_quant`` shared by the q_a and
  kv_a projections; the q_a norm, a DynamicQuant and q_b; W_UK as a batched matmul; the latent's norm, RoPE
  and cache write as one ``npu_kv_rmsnorm_rope_cache`` and the query's RoPE as ``npu_interleave_rope``
  (those two and kv_a on stream 11 under ``moe_multi_stream_tune``); the MoE block as cann-recipes' but
  with the first ``npu_moe_distribute_dispatch`` (``enable_mc2_v2`` false), quantising too.

Both leave the indexer of DeepSeek sparse attention as the generic decoder writes it, and both gate the
router on a float32 copy of the normed tokens, whose Cast omni-infer says GE fuses into the norm
(AddRmsNormCast) and which is not a kernel here for either stack. AddRmsNorm's second output (the sum,
the next residual) is the same buffer as its normed output here: one write of the layer's width less
than the kernel makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_npufuse.vocabulary import Vocabulary

if TYPE_CHECKING:
    from .models import Decoder, _Weights


class Stack(Vocabulary):
    """Which kernels a decode layer launches: the generic decoder's, or one inference stack's fused ones."""

    GENERIC = "generic"
    MLA_PROLOG = "cann-recipes-infer"
    OMNI_A3 = "omni-infer"
    QWEN_DENSE = "cann-recipes-infer-qwen"
    VLLM_MLA = "vllm-ascend"


# (framework named by the row, model families whose modeling code was read, SKU the config is for or None)
_STACKS = (
    ("cann-recipes-infer executor", ("deepseek_v3", "glm5"), None, Stack.MLA_PROLOG),
    # omni-infer's A2 decode config runs without dispatch/combine (all-gather and reduce-scatter instead):
    # not modeled, so an A2 row keeps the generic kernels
    ("omni-infer", ("deepseek_v3",), "910c", Stack.OMNI_A3),
)


# Stacks whose layer is read for prefill and decode alike: (framework, model families, whether the model
# is MLA with MoE (True) or dense without MLA (False), stack). cann-recipes-infer's Qwen dense models
# (models/qwen, benchmarks/fidelity/qwen.py); vLLM-Ascend's DeepSeek-V3 layer (benchmarks/fidelity/vllm_mla.py)
_BOTH_PHASES = (
    ("cann-recipes-infer executor", ("qwen3",), False, Stack.QWEN_DENSE),
    ("vllm-ascend", ("deepseek_v3",), True, Stack.VLLM_MLA),
)


def stack_of(row: Any, config: Mapping[str, Any], prefill: bool) -> Stack:
    """The stack's own kernels the row's deployment launches: an MLA model's fused ones in decode
    (its prefill keeps the generic kernels), cann-recipes-infer's Qwen dense layer and vLLM-Ascend's
    DeepSeek-V3 layer in both."""
    framework = str(row.get("framework", ""))
    moe_mla = "experts" in config and "kv_lora_rank" in config
    for name, families, mla, stack in _BOTH_PHASES:
        if framework.startswith(name) and config.get("family") in families and moe_mla == mla:
            return stack
    if prefill or "kv_lora_rank" not in config:
        return Stack.GENERIC
    for name, families, sku, stack in _STACKS:
        if framework.startswith(name) and config.get("family") in families and sku in (None, row.sku):
            return stack
    return Stack.GENERIC


class FusedLayers:
    """The fused decode layer of an MLA model, mixed into the decoder. A micro-batch's state between
    blocks is ``(residual, delta)``: the residual stream and the block output not yet added to it, which
    the next AddRmsNorm adds (``delta`` is None before the first layer)."""

    def fused_layer(self: Decoder, states: list, w: _Weights, layer: int, scope: str | None) -> list:
        c = self.c
        states = [self.fused_mla(residual, delta, w, scope) for residual, delta in states]
        if "experts" in c and layer >= c.get("dense_layers", 0):
            return [self.fused_moe(residual, delta, w, layer, scope) for residual, delta in states]
        return [self.fused_dense(residual, delta, w, scope) for residual, delta in states]

    def residual_norm(self: Decoder, residual: str, delta: str | None, scope: str | None) -> str:
        """RMSNorm of the residual stream, with the pending block output added in the same kernel
        (AddRmsNorm); its output is both the normed tokens and the new residual."""
        t, hidden = self.d.tokens, self.c["hidden"]
        if delta is None:
            return self.norm(residual, hidden, scope)
        return self.b.op("npu::npu_add_rms_norm", [delta, residual], (t, hidden), scope=scope)

    def quantised(self: Decoder, x: str, k: int, scope: str | None, stream: str | None = None) -> str:
        """DynamicQuant of ``x [tokens, k]`` in w8a8; ``x`` itself in bf16."""
        if self.d.quant == "bf16":
            return x
        return self.b.op("npu::npu_dynamic_quant", [x], (self.d.tokens, k), "int8", scope=scope, stream=stream)

    def product(self: Decoder, xq: str, w: _Weights, name: str, k: int, n: int, scope: str | None,
                stream: str | None = None, dtype: str = "bfloat16") -> str:
        """``xq [tokens, k] @ W [k, n]`` on an input already quantised (QuantMatmul) or bf16 (MatMul)."""
        op, weight = ("aten::mm", "bfloat16") if self.d.quant == "bf16" else ("npu::npu_quant_matmul", "int8")
        out = dtype if self.d.quant != "bf16" else "bfloat16"
        return self.b.op(op, [xq, w.get(name, (k, n), weight)], (self.d.tokens, n), out, scope=scope, stream=stream)

    def fused_mla(self: Decoder, residual: str, delta: str | None, w: _Weights, scope: str | None):
        """The attention block: its norm (adding the previous block's output), the stack's prolog, the
        attention, W_UV and o_proj. Returns the new residual and the block's output."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, heads = c["hidden"], max(1, c["heads"] // d.attn_tp)
        rope, latent, v_dim = c["qk_rope_head_dim"], c["kv_lora_rank"], c["v_head_dim"]
        h = self.residual_norm(residual, delta, scope)
        hq = self.quantised(h, hidden, scope)
        rope_done = None
        if d.stack == Stack.MLA_PROLOG:
            q = self.mla_prolog(hq, w, heads, scope)
        else:
            q, rope_done = self.omni_prolog(hq, w, heads, scope)
        read = d.context
        if c.get("index_topk"):
            read = min(d.context, c["index_topk"])
            self.indexer(h, h, w, scope)
        attended = self.attention(q, heads, read, latent + rope, latent + rope, latent, scope)
        if rope_done is not None:
            self.after(rope_done, attended)
        uv = "npu::npu_transpose_batchmatmul" if d.stack == Stack.MLA_PROLOG else "aten::bmm"
        o = self.b.op(
            uv, [attended, w.get("uv", (heads, latent, v_dim), "bfloat16")], (heads, t, v_dim),
            flops=2.0 * heads * t * latent * v_dim, scope=scope,
        )
        o = self.all_reduce(self.linear(o, w, "o", heads * v_dim, hidden, scope), hidden, d.attn_tp)
        return h, o

    def mla_prolog(self: Decoder, hq: str, w: _Weights, heads: int, scope: str | None) -> str:
        """MlaPrologV3: the four projections (q_a, q_b, kv_a and the query's W_UK), both norms, RoPE and
        the cache write in one kernel, reading every weight once. The cache is not an input: the kernel
        writes a slot per token, it does not read the cache."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, q_lora = c["hidden"], c["q_lora_rank"]
        nope, rope, latent = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"]
        weight = "bfloat16" if d.quant == "bf16" else "int8"
        weights = [
            w.get("q_a", (hidden, q_lora), weight),
            w.get("q_b", (q_lora, heads * (nope + rope)), weight),
            w.get("kv_a", (hidden, latent + rope), weight),
            w.get("uk", (heads, nope, latent), "bfloat16"),
        ]
        flops = 2.0 * t * (hidden * q_lora + q_lora * heads * (nope + rope) + hidden * (latent + rope))
        flops += 2.0 * heads * t * nope * latent
        return self.b.op(
            "npu::npu_mla_prolog_v3_functional", [hq, *weights], (t, heads * (latent + rope)), flops=flops, scope=scope
        )

    def omni_prolog(self: Decoder, hq: str, w: _Weights, heads: int, scope: str | None) -> tuple[str, str | None]:
        """omni-infer's decode prolog without MlaProlog: the query, and under multi-streaming the side
        stream's last kernel, which the attention waits for (the latent's kv_a, KvRmsNormRopeCache and the
        query's InterleaveRope run there)."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, q_lora = c["hidden"], c["q_lora_rank"]
        nope, rope, latent = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"]
        side = "mla" if d.shared_stream else None
        qa = self.product(hq, w, "q_a", hidden, q_lora, scope)
        kv = self.product(hq, w, "kv_a", hidden, latent + rope, scope, side)
        if side:
            self.after(hq, kv)
        qa = self.b.op("npu::npu_rms_norm", [qa], (t, q_lora), scope=scope)
        q = self.linear(qa, w, "q_b", q_lora, heads * (nope + rope), scope)
        qn = self.b.op(
            "aten::bmm", [q, w.get("uk", (heads, nope, latent), "bfloat16")], (heads, t, latent),
            flops=2.0 * heads * t * nope * latent, scope=scope,
        )
        cached = self.b.op("npu::npu_kv_rmsnorm_rope_cache", [kv], (t, latent + rope), scope=scope, stream=side)
        pe = self.b.op("npu::npu_interleave_rope", [q, cached], (t, heads * rope), scope=scope, stream=side)
        if side:
            self.after(q, pe)
        return qn, pe if side else None

    def fused_moe(self: Decoder, residual: str, delta: str, w: _Weights, layer: int, scope: str | None):
        """The MoE block: norm, router, shared expert, and the routed experts between a dispatch that
        quantises the tokens it sends and the combine; the shared and routed outputs added last."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, experts, top_k, ffn = c["hidden"], c["experts"], c["top_k"], c["moe_ffn"]
        scope = f"moe{layer}" if d.superkernel == "moe" else scope
        h = self.residual_norm(residual, delta, scope)
        logits = self.b.op(
            "aten::mm", [h, w.get("router", (hidden, experts), "float32")], (t, experts), "float32", scope=scope
        )
        topk = self.b.op("npu::npu_moe_gating_top_k", [logits], (t, top_k), "int32", scope=scope)
        shared_ffn = c.get("shared_expert_ffn") or c.get("shared_experts", 0) * ffn
        shared = self.shared_expert(h, w, shared_ffn, scope) if shared_ffn else None
        routed = max(1, t * top_k // d.attn_tp) if d.ep > 1 else t * top_k
        quant = d.quant != "bf16"
        if d.ep > 1:
            dispatch = "npu::npu_moe_distribute_dispatch_v2" if d.stack == Stack.MLA_PROLOG else "npu::npu_moe_distribute_dispatch"
            xq = self.b.op(dispatch, [h, topk], (routed, hidden), "int8" if quant else "bfloat16", scope=scope)
        else:
            xq = self.quantised(h, hidden, scope)
        weight, k_scale = ("int8", 2) if d.moe_bits == 4 else ("int8", 1) if quant else ("bfloat16", 1)
        up = self.b.op(
            "npu::npu_grouped_matmul", [xq, w.get("experts_up", (max(1, experts // d.ep), hidden // k_scale, 2 * ffn), weight)],
            (routed, 2 * ffn), "int32" if quant else "bfloat16", scope=scope, flops=2.0 * routed * hidden * 2 * ffn,
        )
        act = self.activation(up, routed, ffn, scope)
        down = self.b.op(
            "npu::npu_grouped_matmul", [act, w.get("experts_down", (max(1, experts // d.ep), ffn // k_scale, hidden), weight)],
            (routed, hidden), scope=scope, flops=2.0 * routed * ffn * hidden,
        )
        if d.ep > 1:
            combine = "npu::npu_moe_distribute_combine_v2" if d.stack == Stack.MLA_PROLOG else "npu::npu_moe_distribute_combine"
            out = self.b.op(combine, [down, topk], (t, hidden), scope=scope)
        else:
            out = self.b.op("npu::npu_moe_finalize_routing", [down, topk], (t, hidden), scope=scope)
        if shared is None:
            return h, out
        total = self.b.op("aten::add", [out, shared], (t, hidden), scope=scope)
        if d.shared_stream:
            self.after(shared, total)
        return h, total

    def shared_expert(self: Decoder, h: str, w: _Weights, ffn: int, scope: str | None) -> str:
        """The shared expert: DynamicQuant, QuantMatmul to int32, DequantSwigluQuant, QuantMatmul (bf16:
        MatMul, SwiGlu, MatMul), on the shared-expert stream when the deployment runs one."""
        hidden = self.c["hidden"]
        side = "shared" if self.d.shared_stream else None
        hq = self.quantised(h, hidden, scope, side)
        up = self.product(hq, w, "shared_gu", hidden, 2 * ffn, scope, side, dtype="int32")
        if side:
            self.after(h, hq if hq != h else up)
        act = self.activation(up, self.d.tokens, ffn, scope, side)
        return self.product(act, w, "shared_down", ffn, hidden, scope, side)

    def activation(self: Decoder, x: str, rows: int, ffn: int, scope: str | None, stream: str | None = None) -> str:
        """SwiGLU between two matmuls: DequantSwigluQuant (int32 in, int8 out) in w8a8, SwiGlu in bf16."""
        if self.d.quant == "bf16":
            return self.b.op("npu::npu_swiglu", [x], (rows, ffn), scope=scope, stream=stream)
        return self.b.op("npu::npu_dequant_swiglu_quant", [x], (rows, ffn), "int8", scope=scope, stream=stream)

    def fused_dense(self: Decoder, residual: str, delta: str, w: _Weights, scope: str | None):
        """A dense FFN block (the first layers): norm, gate-up to int32, DequantSwigluQuant, down."""
        c, d = self.c, self.d
        hidden, part = c["hidden"], max(1, c["ffn"] // d.attn_tp)
        h = self.residual_norm(residual, delta, scope)
        up = self.product(self.quantised(h, hidden, scope), w, "gate_up", hidden, 2 * part, scope, dtype="int32")
        act = self.activation(up, d.tokens, part, scope)
        return h, self.all_reduce(self.product(act, w, "down", part, hidden, scope), hidden, d.attn_tp)
