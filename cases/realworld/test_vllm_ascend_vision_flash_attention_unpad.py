"""Vision-encoder attention (multimodal models): _npu_flash_attention_unpad, or npu_fusion_attention for fp32.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/device/device_op.py @ 182b75ea84ff13ece27b57391331ef8935410aea
(``BaseDeviceAdaptor.npu_flash_attention``): a float32 query goes to ``torch_npu.npu_fusion_attention``
(keywords query/key/value, ``actual_seq_qlen`` = ``actual_seq_kvlen`` = the cumulative sequence lengths as a
list, head_num, scale, input_layout "TND") and its first output is returned, because
``_npu_flash_attention_unpad`` does not take float32; otherwise an ``empty_like(query)`` output is filled by
``torch_npu._npu_flash_attention_unpad`` (keywords query, key, value, seq_len = the per-image sequence lengths
on the CPU, scale_value, num_heads, num_kv_heads, out). Scaffolding: a fixed CPU tensor of patch-sequence
lengths stands in for the encoder's ``cu_seqlens``-derived ``seq_lens_cpu``. Shrunk: 4 heads of 64, three
images of 6, 10 and 16 patches.
Finding: the float32 branch turns a tensor into a Python list (``seq_lens_cpu.cumsum(0).tolist()``) inside
the traced forward, so that branch cannot be captured as one static graph; npufuse reports the break at
that line (the second test, through ``pytest_npufuse.capture``). The bfloat16 branch captures and runs.
"""

import pytest
import torch
import torch_npu

import pytest_npufuse
from pytest_npufuse.errors import CaptureError

HEADS, HEAD_DIM = 4, 64
# --- scaffolding: stands in for the vision encoder's per-image sequence lengths (a CPU tensor) ---
SEQ_LENS_CPU = torch.tensor([6, 10, 16], dtype=torch.int32)


class VisionAttention(torch.nn.Module):
    @staticmethod
    def npu_flash_attention(query, key, value, seq_lens_cpu, head_num, scale_value, num_kv_heads):
        if query.dtype == torch.float32:
            cumulative_seq_lens = seq_lens_cpu.cumsum(0).tolist()
            return torch_npu.npu_fusion_attention(
                query=query,
                key=key,
                value=value,
                actual_seq_qlen=cumulative_seq_lens,
                actual_seq_kvlen=cumulative_seq_lens,
                head_num=head_num,
                scale=scale_value,
                input_layout="TND",
            )[0]

        context_layer = torch.empty_like(query)

        torch_npu._npu_flash_attention_unpad(
            query=query,
            key=key,
            value=value,
            seq_len=seq_lens_cpu,
            scale_value=scale_value,
            num_heads=head_num,
            num_kv_heads=num_kv_heads,
            out=context_layer,
        )

        return context_layer

    def forward(self, q, k, v):
        return self.npu_flash_attention(q, k, v, SEQ_LENS_CPU, HEADS, HEAD_DIM ** -0.5, HEADS)


def inputs(dtype):
    gen = torch.Generator().manual_seed(71)
    tokens = int(SEQ_LENS_CPU.sum())
    return [torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).to(dtype).npu() for _ in range(3)]


def test_vision_encoder_attention_unpad(npufuse):
    npufuse.check(VisionAttention(), *inputs(torch.bfloat16))


def test_float32_branch_lists_a_tensor_inside_the_graph():
    with pytest.raises(CaptureError, match=r"graph break in the model at .*unpad.py:\d+"):
        pytest_npufuse.capture(VisionAttention(), *inputs(torch.float32))
