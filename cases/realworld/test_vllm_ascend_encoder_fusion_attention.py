"""Encoder-only attention (embedding / vision models): one varlen npu_fusion_attention call in TND.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/attention/attention_v1.py @ 182b75ea84ff13ece27b57391331ef8935410aea
(``AscendAttentionBackendImpl._forward_encoder_attention``): the cumulative query lengths get a trailing 0
when the padded token count exceeds the last one, then ``torch_npu.npu_fusion_attention`` runs with keyword
arguments query/key/value, head_num, input_layout "TND", scale, and the same list as ``actual_seq_qlen`` and
``actual_seq_kvlen`` (no mask: sparse_mode 0, full attention); its first output is the result.
Scaffolding: a list of cumulative lengths stands in for ``attn_metadata.actual_seq_lengths_q``.
Shrunk: 4 heads of 64, three sequences and two padding tokens, bfloat16.
"""

import torch
import torch_npu

HEADS, HEAD_DIM = 4, 64
# --- scaffolding: stands in for AscendMetadata.actual_seq_lengths_q (cumulative) ---
ACTUAL_SEQ_LENGTHS_Q = [6, 9, 17]
PADDED_TOKENS = 19


class EncoderAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.num_heads = HEADS
        self.scale = HEAD_DIM ** -0.5

    def forward(self, query, key, value):
        actual_seq_qlen = ACTUAL_SEQ_LENGTHS_Q
        if query.shape[0] > actual_seq_qlen[-1]:
            actual_seq_qlen = actual_seq_qlen + [0]
        return torch_npu.npu_fusion_attention(
            query=query,
            key=key,
            value=value,
            head_num=self.num_heads,
            input_layout="TND",
            scale=self.scale,
            actual_seq_qlen=actual_seq_qlen,
            actual_seq_kvlen=actual_seq_qlen,
        )[0]


def test_encoder_varlen_fusion_attention(npufuse):
    gen = torch.Generator().manual_seed(7)
    query, key, value = (
        torch.randn(PADDED_TOKENS, HEADS, HEAD_DIM, generator=gen).bfloat16().npu() for _ in range(3))
    npufuse.check(EncoderAttention(), query, key, value)
