"""Public model configurations and the decode deployments of their public Ascend recipes.

The model dicts are Hugging Face ``config.json`` values (the keys as there, only those the models read),
so "your model at its real size" is ``with init_empty_weights(): model = build(config)``. Each value is
restated from the file named in the dict's comment; nothing is derived.

A :class:`Deployment` is one rank of a decode instance as a public recipe runs it (batch per rank, KV
length, EP world, SuperKernel scope and options, side stream), each field's source in its comment.
"""

from __future__ import annotations

from dataclasses import dataclass

# HF deepseek-ai/DeepSeek-V3 config.json (the same values as benchmarks/data/published.toml rows with
# config_source "HF deepseek-ai/DeepSeek-V3 config.json"); MTP (num_nextn_predict_layers = 1) is left off.
DEEPSEEK_V3 = {
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "first_k_dense_replace": 3, "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
    "vocab_size": 129280, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
}

# HF Qwen/Qwen3-235B-A22B config.json (as the published.toml row qwen3-235b-a3-w8a8-sglang-gbs256 restates it).
QWEN3_235B_A22B = {
    "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4,
    "head_dim": 128, "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
    "norm_topk_prob": True, "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
}

# HF meta-llama/Meta-Llama-3-70B config.json: a dense 70B-class model (GQA, 80 layers).
LLAMA_3_70B = {
    "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
}


@dataclass(frozen=True)
class Deployment:
    """One rank of a decode deployment: ``batch`` sequences of ``context`` KV tokens each; MoE experts over
    an EP world of ``ep`` ranks (MC2 dispatch/combine), attention and dense layers over ``tp`` ranks; the
    decoder loop in SuperKernel scope ``superkernel`` with ``sk_options``; the shared expert on stream
    ``shared_stream``; KV cache blocks of ``block_size`` tokens."""

    batch: int
    context: int
    ep: int = 1
    tp: int = 1
    superkernel: str | None = "decode_layer"
    sk_options: str = "stream-fusion=1"
    shared_stream: str | None = None
    block_size: int = 128

    @property
    def blocks_per_sequence(self) -> int:
        return -(-self.context // self.block_size)


# hicann/cann-recipes-infer models/deepseek_r1: decode_r1_rank_128_128ep_a8w8c8_mtp_benchmark.yaml (ge_graph,
# world 128 = EP 128, attention DP, W8A8 with int8 KV cache, global batch 6144 = 48 per rank, 4096 prompt
# tokens, enable_superkernel + enable_multi_streams) and modeling_deepseek.py (one "decode_layer" scope
# around the decoder loop with "stream-fusion=1", the shared expert on GE stream "22", MC2
# dispatch_v2/combine_v2 for decode, MLA prolog v3 with the PA_NZ cache). MTP off (next_n 0).
DEEPSEEK_V3_DECODE = Deployment(batch=48, context=4096, ep=128, shared_stream="22")

# hicann/cann-recipes-infer integration/sglang/qwen3-moe/README.md (the published.toml row
# qwen3-235b-a3-w8a8-sglang-gbs256): W8A8, EP 64 on 64 dies, global batch 256 (4 sequences per die),
# SuperKernel on; max prompt 5120. Attention is data-parallel per die here (the README runs TP 4 inside
# DP 16 on 64 dies; one die's attention is modeled). The MoE path is models/qwen3_moe/models/modeling_qwen3_moe.py's decode
# path: npu_moe_gating_top_k_softmax, MC2 dispatch_v2/combine_v2.
QWEN3_235B_DECODE = Deployment(batch=4, context=5120, ep=64)

# A dense 70B model on one Atlas A3 die per TP rank: TP 8 over the 8 dies of one node's half is the
# common vllm-ascend serving layout for Llama-3-70B-class models; batch 32 of 4K. The decoder loop in one
# "decode_layer" scope as cann-recipes does for every model (no stream: a dense model has no side work).
LLAMA_3_70B_DECODE = Deployment(batch=32, context=4096, tp=8, sk_options="")
