"""MLA decode KV path on the secondary stream (DeepSeek V2/V3 in vllm-ascend's TorchAir graph mode).

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/torchair_mla.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``AscendMLATorchairImpl.forward`` decode branch, ``exec_kv``, ``rope_single``): the KV latent projection
and ``npu_kv_rmsnorm_rope_cache`` (cache_mode "PA") run on stream "mla_secondary" after an
``npu_wait_tensor`` on the query's latent; the main stream waits on cos, sin and the KV before its query
projection; the query's rope part is rotated with ``npu_interleave_rope`` back on "mla_secondary" after
waiting on the key's rope. Shapes shrunk (8 heads, latent 128, rope 64, hidden 256).
"""

import pytest
import torch
import torch_npu
from torchair.scope import npu_stream_switch, npu_wait_tensor

HIDDEN, HEADS, Q_LORA, KV_LORA, ROPE, NOPE = 256, 8, 96, 128, 64, 32
BLOCKS, BLOCK_SIZE, TOKENS = 4, 16, 4


class MlaDecodeKv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(11)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[0] ** 0.5).bfloat16())

        self.q_a = weight(HIDDEN, Q_LORA)
        self.q_a_norm = torch.nn.Parameter(torch.ones(Q_LORA, dtype=torch.bfloat16))
        self.kv_a = weight(HIDDEN, KV_LORA + ROPE)
        self.kv_a_norm = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16))
        self.q_b = weight(Q_LORA, HEADS * (NOPE + ROPE))

    def exec_kv(self, hidden, cos, sin, nope_cache, rope_cache, slots):
        batch = hidden.shape[0]
        kv = (hidden @ self.kv_a).view(batch, 1, 1, KV_LORA + ROPE)
        k_pe, k_nope, _, _ = torch_npu.npu_kv_rmsnorm_rope_cache(
            kv, self.kv_a_norm, cos, sin, slots.to(torch.int64), rope_cache, nope_cache,
            epsilon=1e-6, cache_mode="PA",
        )
        return k_pe, k_nope, kv

    def forward(self, hidden, cos, sin, nope_cache, rope_cache, slots):
        ckq = hidden @ self.q_a
        q_c = torch_npu.npu_rms_norm(ckq, self.q_a_norm, 1e-6)[0]
        with npu_stream_switch("mla_secondary", 0):
            npu_wait_tensor(hidden, ckq)
            k_pe, k_nope, kv = self.exec_kv(hidden, cos, sin, nope_cache, rope_cache, slots)
        npu_wait_tensor(q_c, cos)
        npu_wait_tensor(q_c, sin)
        npu_wait_tensor(q_c, kv)
        q = (q_c @ self.q_b).view(-1, HEADS, NOPE + ROPE)
        q_nope, q_pe = q.split([NOPE, ROPE], dim=-1)
        with npu_stream_switch("mla_secondary", 0):
            npu_wait_tensor(q_pe, k_pe)
            q_pe = torch_npu.npu_interleave_rope(q_pe.reshape(-1, HEADS, 1, ROPE), cos, sin).view(-1, HEADS, ROPE)
        return q_nope, q_pe, k_pe, k_nope


def decode_batch():
    gen = torch.Generator().manual_seed(5)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, 1, 1, ROPE, generator=gen) * 3
    nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, KV_LORA, dtype=torch.bfloat16).npu()
    rope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, ROPE, dtype=torch.bfloat16).npu()
    slots = torch.tensor([3, 17, 40, 63], dtype=torch.int32).npu()
    return hidden, angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu(), nope_cache, rope_cache, slots


@pytest.mark.multistream(streams=2, race_free=True)
def test_mla_kv_path_on_secondary_stream(npufuse):
    npufuse.check(MlaDecodeKv(), *decode_batch())
