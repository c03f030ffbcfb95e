"""The kernels a Qwen3 dense layer launches in cann-recipes-infer's executor.

Read from hicann/cann-recipes-infer @fbc225d2de3157a093a2e7dfc2b23086d23ed8f9,
``models/qwen/models/modeling_qwen.py`` (the same code runs prefill and decode), with the W8A8 linear of
``module/quantization/compressed_tensors/compressed_tensors_w8a8_int8.py``:

- each block starts with ``npu_add_rms_norm`` of the residual stream and the previous block's output
  (``QwenRMSNorm.forward`` with a residual; plain ``npu_rms_norm`` before the first layer);
- attention: one merged QKV projection; the query and key slices are made contiguous
  (``.view(...).contiguous()``, a copy each) for their own QK-norms (``q_norm``, ``k_norm``); one
  ``npu_apply_rotary_pos_emb`` of both; one ``npu_scatter_nd_update_`` each into the K and the V cache
  (the V slice is read as it is: the op takes non-contiguous tensors, torch_npu's API reference); fused
  attention; ``o_proj``; an all-reduce under attention TP;
- MLP: one merged gate-up projection, then in bf16 ``ACT2FN["silu"]`` of the gate half and a multiply
  by the up half (two kernels on the halves, no SwiGlu kernel); in W8A8 the gate-up matmul writes int32
  and ``npu_dequant_swiglu_quant`` (dynamic, ``quant_mode=1``) hands int8 and its scale to ``down_proj``,
  which therefore runs no DynamicQuant of its own; an all-reduce under TP;
- W8A8 (compressed-tensors, per-channel weights, per-token dynamic activations, README "W8A8 INT8
  量化权重"): every other quantised linear is ``npu_dynamic_quant`` then ``npu_quant_matmul``, three
  DynamicQuant per layer. No AddRmsNormDynamicQuant: the MLP comment says ge_graph does not support it.

Around the layers a step runs the embedding lookup and the two gathers of the cached cos/sin tables
(``QwenRotaryEmbedding.forward``); after them the final norm, in prefill the selection of each
sequence's last token (``index_select``), ``lm_head`` (split over ``lmhead_tp_size`` dies, 2 in both TP2
configs) with the all-gather of the logits, and their cast to float32 (``QwenForCausalLM.forward``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import Decoder, _Weights


class QwenLayers:
    """cann-recipes-infer's Qwen3 dense layer, mixed into the decoder; a layer's state is ``(residual,
    delta)`` as in :class:`.fused.FusedLayers` (the next AddRmsNorm adds ``delta``)."""

    def qwen_layer(self: Decoder, states: list, w: _Weights, scope: str | None) -> list:
        states = [self.qwen_attention(residual, delta, w, scope) for residual, delta in states]
        return [self.qwen_mlp(residual, delta, w, scope) for residual, delta in states]

    def qwen_attention(self: Decoder, residual: str, delta: str | None, w: _Weights, scope: str | None):
        """Norm, merged QKV, the two contiguous copies and QK-norms, RoPE, the two cache writes, the
        attention, o_proj (and its all-reduce). Returns the new residual and the block's output."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, dim = c["hidden"], c["head_dim"]
        heads, kv_heads = max(1, c["heads"] // d.attn_tp), max(1, c["kv_heads"] // d.attn_tp)
        h = self.residual_norm(residual, delta, scope)
        qkv = self.product(self.quantised(h, hidden, scope), w, "qkv", hidden, (heads + 2 * kv_heads) * dim, scope)
        q = self.b.op("aten::clone", [qkv], (t, heads * dim), scope=scope)
        k = self.b.op("aten::clone", [qkv], (t, kv_heads * dim), scope=scope)
        q = self.b.op("npu::npu_rms_norm", [q], (t, heads * dim), scope=scope)
        k = self.b.op("npu::npu_rms_norm", [k], (t, kv_heads * dim), scope=scope)
        qk = self.b.op("npu::npu_apply_rotary_pos_emb", [q, k], (t, (heads + kv_heads) * dim), scope=scope)
        for name, update in (("k_cache", qk), ("v_cache", qkv)):
            cache = w.get(name, (d.sequences, d.context, kv_heads * dim), "bfloat16")
            self.b.op("npu::npu_scatter_nd_update", [cache, update], (t, kv_heads * dim), scope=scope)
        if d.prefill:
            self.qwen_length_reads()
        attended = self.attention(qk, heads, d.context, 2 * kv_heads * dim, dim, dim, scope)
        o = self.product(self.quantised(attended, heads * dim, scope), w, "o", heads * dim, hidden, scope)
        return h, self.all_reduce(o, hidden, d.attn_tp)

    def qwen_mlp(self: Decoder, residual: str, delta: str, w: _Weights, scope: str | None):
        """Norm, merged gate-up, the activation (Silu and Mul in bf16, DequantSwigluQuant in W8A8),
        down_proj (and its all-reduce)."""
        c, d, t = self.c, self.d, self.d.tokens
        hidden, part = c["hidden"], max(1, c["ffn"] // d.attn_tp)
        h = self.residual_norm(residual, delta, scope)
        if d.quant == "bf16":
            up = self.product(h, w, "gate_up", hidden, 2 * part, scope)
            gate = self.b.op("aten::silu", [up], (t, part), scope=scope)
            act = self.b.op("aten::mul", [gate, up], (t, part), scope=scope)
        else:
            up = self.product(self.quantised(h, hidden, scope), w, "gate_up", hidden, 2 * part, scope, dtype="int32")
            act = self.activation(up, t, part, scope)
        return h, self.all_reduce(self.product(act, w, "down", part, hidden, scope), hidden, d.attn_tp)

    def qwen_length_reads(self: Decoder) -> None:
        """Prefill calls torch_npu's ``npu_fused_infer_attention_score_v2``, whose ``actual_seq_qlen`` and
        ``actual_seq_kvlen`` are int lists (``SymInt[]?``; TorchAir's own variant, which decode's graph
        uses, is the one that takes device tensors), with the executor's device tensors of cumulative query
        and KV lengths (executor/core/engine/execution_engine.py ``_build_model_inputs``): each element
        comes back to the host as one ``.item()``, a stream synchronisation, every layer."""
        for name in ("actual_seq_lengths_cu_q", "actual_seq_lengths_kv"):
            lengths = self.b.input(name, (self.d.sequences,), "int64") if name not in self.b.buffers else name
            for _ in range(self.d.sequences):
                self.b.op("aten::_local_scalar_dense", [lengths], (1,), "int64")

    def qwen_embed(self: Decoder, ids: str) -> str:
        """The embedding lookup and the cos/sin gathers before the first layer; returns the tokens."""
        c, t = self.c, self.d.tokens
        table = self.b.input("embed_tokens", (c["vocab"], c["hidden"]))
        x = self.b.op("aten::embedding", [table, ids], (t, c["hidden"]))
        for name in ("cos_cached", "sin_cached"):
            cached = self.b.input(name, (self.d.context, c["head_dim"]))
            self.b.op("aten::index", [cached, ids], (t, c["head_dim"]))
        return x

    def qwen_head(self: Decoder, residual: str, delta: str) -> None:
        """The final norm, each sequence's last token in prefill, lm_head over this die's share of the
        vocabulary, the all-gather of the logits under TP and their cast to float32."""
        c, d = self.c, self.d
        rows, vocab = d.sequences, c["vocab"] // max(1, d.attn_tp)
        h = self.residual_norm(residual, delta, None)
        if d.prefill:
            h = self.b.op("aten::index_select", [h], (rows, c["hidden"]))
        logits = self.b.op("aten::mm", [h, self.b.input("lm_head", (c["hidden"], vocab))], (rows, vocab))
        if d.attn_tp > 1:
            logits = self.b.op("_c10d_functional::all_gather_into_tensor", [logits], (rows, c["vocab"]))
        self.b.op("aten::_to_copy", [logits], (rows, c["vocab"]), "float32")
