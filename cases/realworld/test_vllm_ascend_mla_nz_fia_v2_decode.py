"""vllm-ascend MLA decode attention over FRACTAL_NZ paged caches with npu_fused_infer_attention_score_v2.

Reconstruction of the call pattern (not a copy) of vllm-project/vllm-ascend
@ 182b75ea84ff13ece27b57391331ef8935410aea, vllm_ascend/attention/mla_v1.py ``_forward_decode``:

* ``enable_kv_nz``: the bfloat16 caches viewed as NZ blocks ``(-1, num_kv_heads, kv_lora_rank // 16,
  block_size, 16)`` and ``(-1, num_kv_heads, qk_rope_head_dim // 16, block_size, 16)``; the query
  ``[num_tokens, 1, num_heads, D]`` with ``input_layout="BSND_NBSD"``, ``sparse_mode=0`` and no mask;
  ``npu_fused_infer_attention_score_v2(q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe,
  num_query_heads, num_key_value_heads, input_layout, atten_mask, sparse_mode, softmax_scale, block_table,
  block_size, actual_seq_qlen, actual_seq_kvlen)``; the [N, B, 1, D] output goes through ``_v_up_proj``.
* ``fa_quant_layer`` (A2/A3): the int8 k_nope cache viewed with runs of 32 ``(..., kv_lora_rank // 32,
  block_size, 32)``, the bfloat16 k_pe cache with 16; extra keywords ``query_quant_mode=3,
  key_quant_mode=0, value_quant_mode=0, dequant_scale_query=dequant_scale_q_nope.view(num_tokens, 1,
  num_heads), dequant_scale_key=dequant_scale_value=fak_descale_float``, where ``fak_descale_float`` is the
  per-tensor fa_k scale in float32 (quantization/methods/kv_c8.py ``process_weights_after_loading``).

The fragment starts at the prolog's outputs (the int8 query and its per-token-per-head scale come from
npu_mla_prolog_v2; see test_vllm_ascend_mla_nz_cache_decode.py), given here as inputs. Scaffolding: the
caches are filled with random blocks, and ``_v_up_proj`` is a batched matmul with a random W_UV.
Shrunk: 8 heads, kv_lora 64, rope 32, block size 16.
"""

import pytest
import torch
import torch_npu

HEADS, KV_LORA, ROPE, BLOCK_SIZE, BLOCKS, TOKENS, KV_HEADS, V_HEAD = 8, 64, 32, 16, 6, 3, 1, 16
SCALE = (KV_LORA + ROPE) ** -0.5
SEQ_LENS = [17, 40, 3]
BLOCK_TABLE = [[5, 0, 0], [1, 2, 3], [4, 0, 0]]


class MlaNzDecodeAttention(torch.nn.Module):
    def __init__(self, fa_quant: bool) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(61)
        self.fa_quant_layer = fa_quant
        # --- scaffolding: W_UV of _v_up_proj and the C8 per-tensor k scale ---
        self.W_UV = torch.nn.Parameter((torch.randn(HEADS, KV_LORA, V_HEAD, generator=gen) / 8).bfloat16(),
                                       requires_grad=False)
        self.fak_descale_float = torch.nn.Parameter(torch.tensor([0.004]), requires_grad=False)

    def _v_up_proj(self, x):
        return torch.bmm(x.view(HEADS, -1, KV_LORA), self.W_UV).transpose(0, 1).reshape(-1, HEADS * V_HEAD)

    def forward(self, q_nope, q_pe, k_nope, k_pe, block_table, dequant_scale_q_nope=None):
        num_tokens = q_nope.size(0)
        nz_fmt_last_dim = 16
        nope_run = nz_fmt_last_dim * 2 if self.fa_quant_layer else nz_fmt_last_dim
        k_nope = k_nope.view(-1, KV_HEADS, KV_LORA // nope_run, BLOCK_SIZE, nope_run)
        k_pe = k_pe.view(-1, KV_HEADS, ROPE // nz_fmt_last_dim, BLOCK_SIZE, nz_fmt_last_dim)
        input_layout = "BSND_NBSD"
        q_nope = q_nope.view(num_tokens, 1, HEADS, -1).contiguous()
        q_pe = q_pe.view(num_tokens, 1, HEADS, -1).contiguous()
        common_kwargs = {
            "query_rope": q_pe, "key_rope": k_pe, "num_query_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "input_layout": input_layout, "atten_mask": None, "sparse_mode": 0, "softmax_scale": SCALE,
            "block_table": block_table, "block_size": BLOCK_SIZE, "actual_seq_qlen": None,
            "actual_seq_kvlen": SEQ_LENS,
        }
        if self.fa_quant_layer:
            common_kwargs.update({
                "query_quant_mode": 3, "key_quant_mode": 0, "value_quant_mode": 0,
                "dequant_scale_query": dequant_scale_q_nope.view(num_tokens, 1, HEADS),
                "dequant_scale_key": self.fak_descale_float, "dequant_scale_value": self.fak_descale_float,
            })
        attn_output, _ = torch_npu.npu_fused_infer_attention_score_v2(q_nope, k_nope, k_nope, **common_kwargs)
        return self._v_up_proj(attn_output)


def _inputs(fa_quant: bool):
    gen = torch.Generator().manual_seed(7)
    if fa_quant:
        q_nope = torch.randint(-127, 128, (TOKENS, HEADS, KV_LORA), generator=gen, dtype=torch.int8)
        k_nope = torch.randint(-127, 128, (BLOCKS, BLOCK_SIZE, KV_HEADS, KV_LORA), generator=gen, dtype=torch.int8)
        scale = (torch.rand(TOKENS, HEADS, 1, generator=gen) / 500).npu()  # npu_mla_prolog_v2's dequant_scale_q_nope
    else:
        q_nope = torch.randn(TOKENS, HEADS, KV_LORA, generator=gen).bfloat16()
        k_nope = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, KV_LORA, generator=gen).bfloat16()
        scale = None
    q_pe = torch.randn(TOKENS, HEADS, ROPE, generator=gen).bfloat16()
    k_pe = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, ROPE, generator=gen).bfloat16()
    table = torch.tensor(BLOCK_TABLE, dtype=torch.int32)
    return [t.npu() for t in (q_nope, q_pe, k_nope, k_pe, table)] + ([scale] if fa_quant else [])


@pytest.mark.parametrize("fa_quant", [False, True], ids=["enable_kv_nz", "fa_quant_int8"])
def test_mla_decode_attention_reads_nz_paged_caches(npufuse, fa_quant):
    inputs = _inputs(fa_quant)
    report = npufuse.check(MlaNzDecodeAttention(fa_quant), *inputs)
    kernels = [k.op_type for k in report.variant.kernels]
    assert kernels.count("npu::npu_fused_infer_attention_score_v2") == 1
    out = MlaNzDecodeAttention(fa_quant)(*inputs)
    assert out.shape == (TOKENS, HEADS * V_HEAD) and out.dtype == torch.bfloat16 and bool(out.isfinite().all())
