"""Decoder steps of the published model families, built per die from a row's model, batch and deployment.

One builder covers the families the rows name: attention is MLA (DeepSeek-V3/R1, Kimi-K2, GLM-5, with
the DeepSeek sparse-attention indexer where the model has one) or GQA (Qwen3, LLaMA, Step); the FFN is
dense or MoE (routed experts plus shared ones). A deployment splits attention heads over ``attn_tp``
dies (an AllReduce after the output projection), experts over ``ep`` dies (MC2 dispatch/combine), and
runs ``tokens`` per die per step. What a row does not give is an assumption named here, never tuned.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from pytest_npufuse.ir.events import Event
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import HardwareProfile

from . import trace
from .fused import FusedLayers, Stack, stack_of
from .qwen import QwenLayers
from .rows import Row
from .vllm_mla import VllmMlaLayers

# Public configs of models whose rows do not restate them (the row's config_source names the model).
# GLM-5 and GLM-5.2 share one architecture: radixark/miles scripts/models/glm5-744B-A40B.sh
# @600ac7452977407ebd1eff4ca9c3dc5543de1713 (hidden 6144, 3 dense + 75 MoE layers, 64 heads, q_lora 2048,
# kv_lora 512, qk 128+64, v 256, 256 experts top-8 of 2048, one shared, dense FFN 12288, vocab 154880);
# its DSA indexer is assumed to be DeepSeek-V3.2-Exp's (64 heads of 128, top-2048).
_GLM5 = {
    "family": "deepseek_v3",
    "hidden": 6144,
    "layers": 78,
    "dense_layers": 3,
    "heads": 64,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "ffn": 12288,
    "moe_ffn": 2048,
    "experts": 256,
    "shared_experts": 1,
    "top_k": 8,
    "vocab": 154880,
    "index_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "mtp_layers": 1,
}
# DeepSeek-V4-Flash: the defaults of cann-recipes-infer's DeepSeek-V4 configuration class
# (hicann/cann-recipes-infer models/deepseek_v4/models/configuration_deepseek.py
# @ba83ab4aecb8969c831d28abd02de159d279917b:
# hidden 4096, 43 layers, 64 heads, 256 experts top-6 of 2048, one shared, q_lora 1536, kv_lora 512, 64-head
# top-2048 indexer). Its compressed sparse attention (CSA/HCA) and mHC are approximated by that indexer over
# an MLA cache: an assumption, named in the table.
_V4_FLASH = {
    "family": "deepseek_v4",
    "hidden": 4096,
    "layers": 43,
    "dense_layers": 0,
    "heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "ffn": 18432,
    "moe_ffn": 2048,
    "experts": 256,
    "shared_experts": 1,
    "top_k": 6,
    "vocab": 129280,
    "index_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "mtp_layers": 1,
}
KNOWN_CONFIGS: Mapping[str, Mapping[str, Any]] = {"GLM-5": _GLM5, "GLM-5.2": _GLM5, "DeepSeek-V4-Flash": _V4_FLASH}
# The executor's default prompt (models/qwen configs: dataset "default", truncated at 4096) is not given
# by any source read: a 1024-token prompt is assumed for prefill, and decode reads a 4096-token cache.
ASSUMED_PROMPT = 1024
ASSUMED_DECODE_CONTEXT = 4096
# A row whose batch is not given (Step-3.7 decode, omni-infer's vendor figures) decodes this many
# sequences per die: an assumption, stated in the table's notes.
ASSUMED_SEQUENCES_PER_DIE = 16


@dataclass(frozen=True)
class Deployment:
    """One die's share of a step: ``tokens`` through the layers (``sequences`` x (1 + drafts) in decode,
    the prompt in prefill), a KV ``context`` per sequence, attention heads over ``attn_tp`` dies and
    experts over ``ep`` dies; ``quant`` is bf16 or w8a8 (int8 weights and activations), ``moe_bits`` the
    expert weights' bits, ``kv_bytes`` a cached token's bytes per KV head (MLA: latent plus rope part).
    ``microbatches`` > 1 splits the tokens into that many micro-batches whose layers interleave, each
    micro-batch's expert all-to-alls on a communication stream, so one computes while another talks.
    ``stack`` names the inference stack whose own kernels a layer launches: an MLA layer's fused decode
    kernels (:mod:`.fused`), cann-recipes-infer's Qwen dense layer (:mod:`.qwen`), vLLM-Ascend's
    DeepSeek-V3 layer (:mod:`.vllm_mla`).
    ``tp_moe``: vLLM-Ascend's MoE beside attention TP (vllm_ascend/ops/fused_moe/prepare_finalize.py
    PrepareAndFinalizeWithMC2/All2All @182b75ea): each TP rank routes its 1/attn_tp slice of the tokens,
    ``finalize`` all-gathers the routed output over the TP group, and the shared expert is split over the
    TP group like a dense FFN and all-reduced (fused_moe.py ``_reduce_shared_output_if_needed``)."""

    tokens: int
    sequences: int
    context: int
    attn_tp: int = 1
    ep: int = 1
    prefill: bool = False
    quant: str = "bf16"
    moe_bits: int = 16
    kv_bytes: int = 2
    drafts: int = 0
    superkernel: str = ""
    shared_stream: bool = False
    microbatches: int = 1
    stack: Stack = Stack.GENERIC
    tp_moe: bool = False


@dataclass
class _Weights:
    """Weights of one layer, created once per layer so each layer streams its own."""

    builder: ProgramBuilder
    layer: int
    made: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, shape: tuple[int, ...], dtype: str) -> str:
        key = f"l{self.layer}.{name}"
        if key not in self.made:
            self.made[key] = self.builder.input(key, shape, dtype)
        return self.made[key]


class Decoder(FusedLayers, QwenLayers, VllmMlaLayers):
    """The program of one decoder step of ``config`` under ``deployment``."""

    def __init__(self, config: Mapping[str, Any], deployment: Deployment) -> None:
        self.c = config
        self.d = deployment
        self.b = ProgramBuilder(catalog())
        self.syncs: list[Event] = []
        self._events = 0

    # ------------------------------------------------------------------ building blocks

    def linear(
        self,
        x: str,
        w: _Weights,
        name: str,
        k: int,
        n: int,
        scope: str | None,
        stream: str | None = None,
        bits: int | None = None,
    ) -> str:
        """``x [tokens, k] @ W [k, n]``: MatMul in bf16, or DynamicQuant then QuantMatmul in w8a8."""
        t = self.d.tokens
        if self.d.quant == "bf16" and bits is None:
            return self.b.op("aten::mm", [x, w.get(name, (k, n), "bfloat16")], (t, n), scope=scope, stream=stream)
        q = self.b.op("npu::npu_dynamic_quant", [x], (t, k), "int8", scope=scope, stream=stream)
        return self.b.op("npu::npu_quant_matmul", [q, w.get(name, (k, n), "int8")], (t, n), scope=scope, stream=stream)

    def norm(self, x: str, cols: int, scope: str | None, stream: str | None = None) -> str:
        return self.b.op("npu::npu_rms_norm", [x], (self.d.tokens, cols), scope=scope, stream=stream)

    def all_reduce(self, x: str, cols: int, group: int) -> str:
        if group <= 1:
            return x
        return self.b.op("_c10d_functional::all_reduce", [x], (self.d.tokens, cols))

    def all_gather(self, x: str, cols: int, group: int) -> str:
        """Each of ``group`` dies' slice of the tokens, gathered into all of them on every die."""
        if group <= 1:
            return x
        return self.b.op("_c10d_functional::all_gather_into_tensor", [x], (self.d.tokens, cols))

    # ------------------------------------------------------------------ attention

    def mla(self, x: str, w: _Weights, scope: str | None) -> str:
        c, d, t = self.c, self.d, self.d.tokens
        hidden, heads = c["hidden"], max(1, c["heads"] // d.attn_tp)
        nope, rope, latent, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"], c["v_head_dim"]
        h = self.norm(x, hidden, scope)
        qa = self.norm(self.linear(h, w, "q_a", hidden, c["q_lora_rank"], scope), c["q_lora_rank"], scope)
        q = self.linear(qa, w, "q_b", c["q_lora_rank"], heads * (nope + rope), scope)
        kv = self.norm(self.linear(h, w, "kv_a", hidden, latent + rope, scope), latent + rope, scope)
        q = self.b.op("aten::mul", [q], (t, heads * rope), scope=scope)  # RoPE on the rope part
        cache = w.get("kv_cache", (d.sequences, d.context, latent + rope), "int8" if d.kv_bytes == 1 else "bfloat16")
        self.b.op("npu::npu_scatter_nd_update", [cache, kv], (t, latent + rope), scope=scope)
        read = d.context
        if c.get("index_topk"):
            read = min(d.context, c["index_topk"])
            self.indexer(qa, h, w, scope)
        qn = self.b.op(
            "aten::bmm",
            [q, w.get("uk", (heads, nope, latent), "bfloat16")],
            (heads, t, latent),
            flops=2.0 * heads * t * nope * latent,
            scope=scope,
        )
        attended = self.attention(qn, heads, read, latent + rope, latent + rope, latent, scope)
        o = self.b.op(
            "aten::bmm",
            [attended, w.get("uv", (heads, latent, v_dim), "bfloat16")],
            (heads, t, v_dim),
            flops=2.0 * heads * t * latent * v_dim,
            scope=scope,
        )
        o = self.all_reduce(self.linear(o, w, "o", heads * v_dim, hidden, scope), hidden, d.attn_tp)
        return self.b.op("aten::add", [x, o], (t, hidden), scope=scope)

    def indexer(self, qa: str, h: str, w: _Weights, scope: str | None) -> None:
        """DeepSeek sparse attention's lightning indexer: index queries against every cached index key
        (int8, one head of ``index_head_dim``), then the top ``index_topk`` per query."""
        c, d, t = self.c, self.d, self.d.tokens
        heads, dim = c["index_heads"], c["index_head_dim"]
        iq = self.linear(qa, w, "index_q", c["q_lora_rank"], heads * dim, scope)
        self.linear(h, w, "index_k", c["hidden"], dim, scope)
        keys = w.get("index_cache", (d.sequences, d.context, dim), "int8")
        scores = self.b.op(
            "aten::bmm", [iq, keys], (t, d.context), "float32", flops=2.0 * t * heads * dim * d.context, scope=scope
        )
        self.b.op("aten::topk", [scores], (t, c["index_topk"]), "int32", scope=scope)

    def attention(
        self, q: str, heads: int, read: int, width: int, key_dim: int, value_dim: int, scope: str | None
    ) -> str:
        """Fused attention: each of ``tokens`` queries of ``heads`` heads against ``read`` cached tokens of
        its sequence (``width`` cached values each: K and V, or MLA's shared latent); prefill is causal
        over the prompt (half of its L x L products per sequence)."""
        d, t = self.d, self.d.tokens
        if d.prefill:
            flops, read = self.causal_flops(heads, key_dim, value_dim), t // d.sequences
        else:
            flops = 2.0 * heads * t * read * (key_dim + value_dim)
        cached = self.b.input(
            f"kv_read{len(self.b.kernels)}", (d.sequences, read, width), "int8" if d.kv_bytes == 1 else "bfloat16"
        )
        return self.b.op(
            "npu::npu_fused_infer_attention_score", [q, cached], (t, heads, value_dim), flops=flops, scope=scope
        )

    def causal_flops(self, heads: int, key_dim: int, value_dim: int) -> float:
        """A prompt's causal attention over itself: half of its L x L products per sequence."""
        d = self.d
        length = d.tokens // d.sequences
        return 2.0 * heads * d.sequences * length * length * (key_dim + value_dim) / 2

    def gqa(self, x: str, w: _Weights, layer: int, scope: str | None) -> str:
        c, d, t = self.c, self.d, self.d.tokens
        hidden, dim = c["hidden"], c["head_dim"]
        heads = c["heads"] if "heads" in c else c["global_heads"] if self.global_layer(layer) else c["sliding_heads"]
        heads, kv_heads = max(1, heads // d.attn_tp), max(1, c.get("kv_heads", heads) // d.attn_tp)
        h = self.norm(x, hidden, scope)
        qkv = self.linear(h, w, "qkv", hidden, (heads + 2 * kv_heads) * dim, scope)
        if c.get("qk_norm"):
            qkv = self.b.op("npu::npu_rms_norm", [qkv], (t, (heads + kv_heads) * dim), scope=scope)
        qkv = self.b.op("npu::npu_apply_rotary_pos_emb", [qkv], (t, (heads + kv_heads) * dim), scope=scope)
        cache = w.get("kv_cache", (d.sequences, d.context, 2 * kv_heads * dim), "bfloat16")
        self.b.op("npu::npu_scatter_nd_update", [cache, qkv], (t, 2 * kv_heads * dim), scope=scope)
        read = d.context if self.global_layer(layer) else min(d.context, c.get("window") or d.context)
        attended = self.attention(qkv, heads, read, 2 * kv_heads * dim, dim, dim, scope)
        if c.get("attn_output_gate"):  # a sigmoid gate per head (Step-3.7): its projection, then a multiply
            gate = self.linear(h, w, "gate", hidden, heads, scope)
            attended = self.b.op("aten::mul", [attended, gate], (t, heads * dim), scope=scope)
        o = self.all_reduce(self.linear(attended, w, "o", heads * dim, hidden, scope), hidden, d.attn_tp)
        return self.b.op("aten::add", [x, o], (t, hidden), scope=scope)

    def global_layer(self, layer: int) -> bool:
        """Whether a layer attends over the whole context: every layer of a model without sliding
        windows; with ``global_attn_layers`` of them, spread evenly (every Nth layer: the source gives the
        count, not the positions)."""
        count = self.c.get("global_attn_layers")
        if not count:
            return True
        return layer % max(1, round(self.c["layers"] / count)) == 0

    # ------------------------------------------------------------------ feed-forward

    def dense_ffn(self, x: str, w: _Weights, ffn: int, scope: str | None, tp: int) -> str:
        t, hidden = self.d.tokens, self.c["hidden"]
        part = max(1, ffn // tp)
        h = self.norm(x, hidden, scope)
        gu = self.linear(h, w, "gate_up", hidden, 2 * part, scope)
        act = self.b.op("npu::npu_swiglu", [gu], (t, part), scope=scope)
        down = self.all_reduce(self.linear(act, w, "down", part, hidden, scope), hidden, tp)
        return self.b.op("aten::add", [x, down], (t, hidden), scope=scope)

    def moe(self, x: str, w: _Weights, layer: int, scope: str | None) -> str:
        c, d, t = self.c, self.d, self.d.tokens
        hidden, experts, top_k, ffn = c["hidden"], c["experts"], c["top_k"], c["moe_ffn"]
        scope = f"moe{layer}" if d.superkernel == "moe" else scope
        side = "shared" if d.shared_stream else None
        h = self.norm(x, hidden, scope)
        logits = self.b.op(
            "aten::mm", [h, w.get("router", (hidden, experts), "float32")], (t, experts), "float32", scope=scope
        )
        topk = self.b.op("npu::npu_moe_gating_top_k", [logits], (t, top_k), "int32", scope=scope)
        shared = None
        shared_ffn = c.get("shared_expert_ffn") or c.get("shared_experts", 0) * ffn
        if shared_ffn and d.tp_moe:
            shared_ffn = max(1, shared_ffn // d.attn_tp)
        if shared_ffn:
            su = self.linear(h, w, "shared_gu", hidden, 2 * shared_ffn, scope, side)
            sa = self.b.op("npu::npu_swiglu", [su], (t, shared_ffn), scope=scope, stream=side)
            shared = self.linear(sa, w, "shared_down", shared_ffn, hidden, scope, side)
            if d.tp_moe:
                shared = self.all_reduce(shared, hidden, d.attn_tp)
            if side:
                names = {kernel.node: kernel.name for kernel in self.b.kernels}
                self.syncs.append(Event(f"h{layer}", names[h], names[su]))
        local = max(1, experts // d.ep)
        # each token's top_k copies land on the dies holding those experts: a die receives its tokens' worth
        # under data-parallel attention, its 1/attn_tp share when attn_tp dies hold the same tokens
        routed = max(1, t * top_k // d.attn_tp) if d.ep > 1 else t * top_k
        weight_dtype, k_scale = ("int8", 1) if d.quant != "bf16" else ("bfloat16", 1)
        if d.moe_bits == 4:
            weight_dtype, k_scale = "int8", 2  # two int4 weights per byte
        xq = self.b.op("npu::npu_dynamic_quant", [h], (t, hidden), "int8", scope=scope) if d.quant != "bf16" else h
        if d.ep > 1:
            xq = self.exchange(xq, topk, routed, "int8" if d.quant != "bf16" else "bfloat16", scope, back=False)
        w1 = w.get("experts_up", (local, hidden // k_scale, 2 * ffn), weight_dtype)
        g1 = self.b.op(
            "npu::npu_grouped_matmul", [xq, w1], (routed, 2 * ffn), scope=scope, flops=2.0 * routed * hidden * 2 * ffn
        )
        if d.prefill and d.ep > 1 and d.microbatches > 1:
            self.after(xq, g1)
        a1 = self.b.op("npu::npu_swiglu", [g1], (routed, ffn), scope=scope)
        w2 = w.get("experts_down", (local, ffn // k_scale, hidden), weight_dtype)
        g2 = self.b.op(
            "npu::npu_grouped_matmul", [a1, w2], (routed, hidden), scope=scope, flops=2.0 * routed * ffn * hidden
        )
        if d.ep > 1 and d.tp_moe:
            out = self.exchange(g2, topk, max(1, t // d.attn_tp), "bfloat16", scope, back=True)
            out = self.all_gather(out, hidden, d.attn_tp)
        elif d.ep > 1:
            out = self.exchange(g2, topk, t, "bfloat16", scope, back=True)
        else:
            out = self.b.op("npu::npu_moe_finalize_routing", [g2, topk], (t, hidden), scope=scope)
        if shared is not None:
            combined = out
            out = self.b.op("aten::add", [out, shared], (t, hidden), scope=scope)
            if d.prefill and d.ep > 1 and d.microbatches > 1:
                self.after(combined, out)
            if side:
                names = {kernel.node: kernel.name for kernel in self.b.kernels}
                self.syncs.append(Event(f"s{layer}", names[shared], names[out]))
        return self.b.op("aten::add", [x, out], (t, hidden))

    def after(self, producer: str, consumer: str) -> None:
        """An event: ``consumer``'s kernel waits for ``producer``'s (buffers of two streams)."""
        names = {kernel.node: kernel.name for kernel in self.b.kernels}
        self._events += 1
        self.syncs.append(Event(f"e{self._events}", names[producer], names[consumer]))

    def exchange(self, x: str, topk: str, rows: int, dtype: str, scope: str | None, back: bool) -> str:
        """Tokens to their experts (or back): MC2 dispatch/combine in decode; in prefill, HCCL's
        all-to-all (SDMA), on the communication stream when micro-batches overlap."""
        hidden = self.c["hidden"]
        if not self.d.prefill:
            op = "npu::npu_moe_distribute_combine" if back else "npu::npu_moe_distribute_dispatch"
            return self.b.op(op, [x, topk], (rows, hidden), dtype, scope=scope)
        stream = "comm" if self.d.microbatches > 1 else None
        moved = self.b.op("_c10d_functional::all_to_all_single", [x], (rows, hidden), dtype, stream=stream)
        if stream:
            self.after(x, moved)
        return moved

    # ------------------------------------------------------------------ the step

    def layer(self, xs: list[str], layer: int) -> list[str]:
        """One layer for each micro-batch: every attention first, then every FFN, so one micro-batch's
        all-to-all overlaps the next one's compute."""
        c, d = self.c, self.d
        w = _Weights(self.b, layer)
        scope = "decode_layer" if d.superkernel == "layer" else None
        if self.d.stack == Stack.QWEN_DENSE:
            return self.qwen_layer(xs, w, scope)
        if self.d.stack == Stack.VLLM_MLA:
            return self.vllm_layer(xs, w, layer, scope)
        if self.fused:
            return self.fused_layer(xs, w, layer, scope)
        xs = [self.mla(x, w, scope) if "kv_lora_rank" in c else self.gqa(x, w, layer, scope) for x in xs]
        if "experts" in c and layer >= c.get("dense_layers", 0):
            return [self.moe(x, w, layer, scope) for x in xs]
        return [self.dense_ffn(x, w, c["ffn"], scope, d.attn_tp) for x in xs]

    @property
    def fused(self) -> bool:
        """Whether the layers are a stack's own kernels: an MLA model's fused decode kernels (:mod:`.fused`)
        or a layer read for prefill and decode alike (:mod:`.qwen`, :mod:`.vllm_mla`)."""
        if self.d.stack in (Stack.QWEN_DENSE, Stack.VLLM_MLA):
            return True
        return self.d.stack != Stack.GENERIC and not self.d.prefill and "kv_lora_rank" in self.c

    def build(self):
        c, d = self.c, self.d
        self.d = replace(d, tokens=d.tokens // d.microbatches, sequences=max(1, d.sequences // d.microbatches))
        if d.stack == Stack.QWEN_DENSE:
            ids = [self.b.input(f"ids{batch}", (self.d.tokens,), "int64") for batch in range(d.microbatches)]
            xs = [self.qwen_embed(batch) for batch in ids]
        else:
            xs = [self.b.input(f"x{batch}", (self.d.tokens, c["hidden"])) for batch in range(d.microbatches)]
        if self.fused:
            xs = [(x, None) for x in xs]
        for layer in range(c["layers"]):
            xs = self.layer(xs, layer)
        for draft in range(d.drafts):
            xs = self.layer(xs, c["layers"] + draft)
        self.d = d
        if d.stack == Stack.QWEN_DENSE:
            self.qwen_head(*xs[-1])
            return self.b.build(), self.syncs
        rows = d.sequences * (1 + d.drafts) if not d.prefill else d.sequences
        if self.fused:
            head = self.residual_norm(*xs[-1], None)
        else:
            head = self.b.op("npu::npu_rms_norm", [xs[-1]], (rows, c["hidden"]))
        self.b.op(
            "aten::mm",
            [head, self.b.input("lm_head", (c["hidden"], c["vocab"] // max(1, d.attn_tp)))],
            (rows, c["vocab"] // max(1, d.attn_tp)),
        )
        return self.b.build(), self.syncs


def model_config(row: Row) -> Mapping[str, Any] | None:
    """The row's model config, or the public config of the model it names (None: not known). A MoE
    config that gives the shared expert's width but not the routed experts' (Step-3.7-Flash) takes it for
    both, and its dense layers the active width of a MoE layer (top_k experts): assumptions."""
    model = dict(row.model)
    if "hidden" in model:
        if "experts" in model and "moe_ffn" not in model and "shared_expert_ffn" in model:
            model["moe_ffn"] = model["shared_expert_ffn"]
        if "ffn" not in model and "moe_ffn" in model:
            model["ffn"] = model["moe_ffn"] * model["top_k"]
        return model
    known = KNOWN_CONFIGS.get(model.get("name", ""))
    return {**known, **model} if known else None


def drafts_of(row: Row) -> int:
    """Draft tokens verified per step: the N of "MTPN" the row states (MTP1 when it gives tokens_per_step
    without naming N)."""
    text = " ".join(str(row.get(key, "")) for key in ("what", "note", "where"))
    match = re.search(r"MTP(\d)", text)
    if match:
        return int(match.group(1))
    return 1 if row.get("tokens_per_step") else 0


def deployment_of(row: Row, config: Mapping[str, Any], prefill: bool = False, **changes: Any) -> Deployment:
    """The per-die work of the row's deployment: sequences per data-parallel group, tokens per die,
    attention TP, expert parallelism, quantisation and KV cache format."""
    dies = row.get("dies") or 2 * row.get("chips", 0) or max(row.get("tp", 1), row.get("ep", 1), 1)
    tp = row.get("tp", 1)
    dp = row.get("dp") or max(1, dies // tp)
    ep = row.get("ep") or (dies if "experts" in config and dies > 1 else 1)
    batch = row.get("batch")
    sequences = max(1, round(batch / dp)) if batch else ASSUMED_SEQUENCES_PER_DIE
    drafts = 0 if prefill else drafts_of(row)
    quant = str(row.get("quant", "bf16")).lower()
    context = row.get("kv_len") or row.get("seq") or ASSUMED_DECODE_CONTEXT
    tokens = sequences * (row.get("seq") or ASSUMED_PROMPT) if prefill else sequences * (1 + drafts)
    return replace(
        Deployment(
            tokens=tokens,
            sequences=sequences,
            context=context,
            attn_tp=tp,
            ep=ep,
            prefill=prefill,
            quant="bf16" if quant.startswith("bf16") or "bfloat16" in quant else "w8a8",
            moe_bits=4 if "w4a8" in quant or "int4" in quant else 8 if quant != "bf16" else 16,
            kv_bytes=1 if re.search(r"c8\b", quant) else 2,
            drafts=drafts,
            stack=stack_of(row, config, prefill),
            tp_moe=row.on_vllm_ascend and tp > 1 and ep > 1,
        ),
        **changes,
    )


@functools.cache
def catalog():
    """The op catalog, read once (every decoder build needs it)."""
    return load_catalog()


_PROGRAMS: dict[tuple[str, Deployment], tuple] = {}


def program_of(row: Row, deployment: Deployment):
    """The row's decoder program under ``deployment``, built once: a program is target-free, so a fit
    that tries many profiles reuses it."""
    key = (row.id, deployment)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = Decoder(model_config(row), deployment).build()
    return _PROGRAMS[key]


_PLANS = trace.Memo()
_MODES = {"ge_graph": "max-autotune", "aclgraph": "npugraph_ex", "npugraph_ex": "npugraph_ex", "eager": "eager",
          "inductor": "npugraph_ex"}


def plan_of(key: Any, program, profile: HardwareProfile, **options: Any):
    """``plan_program(program, profile, **options)``, made once per ``key`` (what names the program and
    the options) and per value of what the planner read of the profile (core counts, tile shapes,
    SuperKernel support: none of them fitted, so a fit's trials share the plan)."""
    return _PLANS.get(key, lambda: plan_program(program, trace.traced(profile), **options), lambda _: profile)


def step_report(
    row: Row,
    profile: HardwareProfile,
    deployment: Deployment,
    mode: str,
    variant: str = Variant.VARIANT,
    rebound: frozenset[str] = frozenset(),
):
    """Simulate one step of the row's model under ``deployment`` in ``mode`` (ge_graph, aclgraph,
    npugraph_ex or eager); a row whose graph was compiled with dynamic shapes (``shapes = "dynamic"``)
    runs GE's dynamic-shape graph, scheduled op by op on the host. A replayed graph's tasks of the
    ``rebound`` op types are updated by the host after each replay (:class:`HostConfig`)."""
    program, syncs = program_of(row, deployment)
    run_mode = _MODES[mode]
    plan = plan_of(
        (row.id, deployment, run_mode, variant), program, profile, variant=variant, mode=run_mode,
        syncs=syncs if variant != Variant.BASELINE else (),
    )
    host = HostConfig(threads=1, rebound_ops=rebound)
    return simulate(program, plan, profile, dynamic=row.get("shapes") == "dynamic", host=host)
