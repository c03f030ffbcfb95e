"""A timing-only model's ``F.scaled_dot_product_attention`` is captured as the kernel torch_npu runs (op-plugin's
FlashAttentionScore, GQA read in place), not as Meta's math decomposition with its K/V copies."""

import torch
import torch.nn.functional as F

from pytest_npufuse import capture


class Attention(torch.nn.Module):
    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, enable_gqa=True)


def _kernels(model: torch.nn.Module, *inputs: torch.Tensor) -> list:
    return capture(model, *inputs).kernels


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_gqa_decode_on_meta_is_one_flash_attention_kernel_reading_kv_once() -> None:
    q, kv = _meta(16, 8, 1, 128), _meta(16, 1, 4096, 128)
    kernels = _kernels(Attention(), q, kv, kv)
    assert [k.info.kernel_type for k in kernels] == ["FlashAttentionScore"]
    assert kernels[0].input_specs[1].shape == (16, 1, 4096, 128)  # no K/V expanded to the 8 query heads
    assert kernels[0].bytes < 2.1 * kv.numel() * 2 + q.numel() * 4


def test_meta_and_cpu_capture_the_same_kernels() -> None:
    cpu = [torch.randn(2, 8, 16, 64).bfloat16(), torch.randn(2, 2, 16, 64).bfloat16()]
    meta = [_meta(2, 8, 16, 64), _meta(2, 2, 16, 64)]
    mask_cpu, mask_meta = torch.ones(16, 16, dtype=torch.bool).tril(), _meta(16, 16, dtype=torch.bool)
    for model in (Attention(), Attention(causal=True)):
        assert [k.op_type for k in _kernels(model, cpu[0], cpu[1], cpu[1])] == \
               [k.op_type for k in _kernels(model, meta[0], meta[1], meta[1])]
    on_cpu = _kernels(Attention(), cpu[0], cpu[1], cpu[1], mask_cpu)
    on_meta = _kernels(Attention(), meta[0], meta[1], meta[1], mask_meta)
    assert [k.op_type for k in on_cpu] == [k.op_type for k in on_meta]
    assert on_meta[-1].info.kernel_type == "FlashAttentionScore"


def test_causal_attention_costs_about_half_the_flops() -> None:
    q = _meta(1, 8, 2048, 128)
    full, causal = (_kernels(Attention(flag), q, q, q)[0].flops for flag in (False, True))
    assert 0.49 < causal / full < 0.51


def test_a_float_mask_keeps_the_math_path_as_torch_npu_does() -> None:
    q, kv, mask = _meta(2, 8, 4, 64), _meta(2, 2, 16, 64), _meta(2, 1, 4, 16)
    kinds = {k.info.kernel_type for k in _kernels(Attention(), q, kv, kv, mask)}
    assert "FlashAttentionScore" not in kinds
