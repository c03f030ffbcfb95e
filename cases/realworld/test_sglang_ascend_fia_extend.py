"""sglang's Ascend backend, prefill (extend) with FIA: one causal attention call per request, BSND.

Reconstruction of the call pattern (not a copy) of
sgl-project/sglang, python/sglang/srt/layers/attention/ascend_backend.py
@ 0351c1fafe4c53c91c331dea205af48b018af559 (``AscendAttnBackend.forward_extend``, non-MLA, ASCEND_USE_FIA):
the causal mask is ``~torch.tril(ones(2048, 2048, bool))``; q is reshaped [tokens, heads, dim], an output
buffer is allocated, and for each request's extend length ``torch.ops.npu.npu_fused_infer_attention_score``
runs on ``q[None, off:off+len]`` (and k, v) with input_layout "BSND", ``atten_mask=mask.unsqueeze(0)``,
sparse_mode=3, next_tokens=0, its first output written into the buffer's slice. Scaffolding: a list of
extend lengths replaces sglang's ForwardBatch. Shrunk: 4 query heads, 2 KV heads of 64, 3 requests.
"""

import pytest
import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
# --- scaffolding: stands in for ForwardBatch.extend_seq_lens_cpu ---
EXTEND_SEQ_LENS = [5, 12, 7]


class AscendExtendAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("fia_mask", ~torch.tril(torch.ones((2048, 2048), dtype=torch.bool)))
        self.scaling = HEAD_DIM ** -0.5

    def forward(self, q, k, v):
        q = q.reshape(-1, HEADS, HEAD_DIM)
        attn_output = torch.empty((q.size(0), HEADS, HEAD_DIM), device=q.device, dtype=q.dtype)
        q_len_offset = 0
        for q_len in EXTEND_SEQ_LENS:
            attn_output[q_len_offset: q_len_offset + q_len] = torch.ops.npu.npu_fused_infer_attention_score(
                q[None, q_len_offset: q_len_offset + q_len],
                k[None, q_len_offset: q_len_offset + q_len],
                v[None, q_len_offset: q_len_offset + q_len],
                num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BSND",
                atten_mask=self.fia_mask.unsqueeze(0), sparse_mode=3, scale=self.scaling, next_tokens=0,
            )[0]
            q_len_offset += q_len
        return attn_output.view(-1, HEADS * HEAD_DIM)


def test_sglang_extend_attention_per_request(npufuse):
    gen = torch.Generator().manual_seed(20)
    tokens = sum(EXTEND_SEQ_LENS)
    q = torch.randn(tokens, HEADS * HEAD_DIM, generator=gen).half().npu()
    k = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    v = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    npufuse.check(AscendExtendAttention(), q, k, v)
