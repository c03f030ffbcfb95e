"""The fused-attention cost rule: its flops follow the scores the call computes (S_q x S_kv for non-causal
prefill, about half of it causal, S_kv for decode), read from the layout, lengths and sparse mode the captured
call passes, not from the output's size."""

import math

import torch

from pytest_npufuse import capture, torch_npu
from pytest_npufuse.cost.attention import fused_attention_flops, incre_attention_flops
from pytest_npufuse.cost.registry import Work
from pytest_npufuse.ir.program import TensorSpec

N, D = 8, 64


def _spec(*shape: int, dtype: str = "float16") -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, math.prod(shape) * (1 if dtype in ("int8", "bool") else 2))


def _work(inputs: list[TensorSpec], out: TensorSpec, **attrs: object) -> Work:
    count = len(inputs)
    return Work(inputs, [out], [True] * count, [False] * count, 1.0, 0, tuple(attrs.items()))


def _bnsd(batch: int, q_len: int, kv_len: int, *extra: TensorSpec, **attrs: object) -> Work:
    query, key = _spec(batch, N, q_len, D), _spec(batch, N, kv_len, D)
    return _work([query, key, key, *extra], query, input_layout="BNSD", num_heads=N, **attrs)


def test_non_causal_prefill_grows_as_sq_times_skv() -> None:
    assert fused_attention_flops(_bnsd(1, 1024, 1024)) == 2 * N * 1024 * 1024 * (D + D)
    assert fused_attention_flops(_bnsd(1, 2048, 2048)) == 4 * fused_attention_flops(_bnsd(1, 1024, 1024))
    assert fused_attention_flops(_bnsd(2, 128, 4096)) == 2 * 2 * N * 128 * 4096 * 2 * D


def test_causal_modes_count_the_lower_triangle() -> None:
    mask = _spec(2048, 2048, dtype="bool")
    full = fused_attention_flops(_bnsd(1, 1024, 1024))
    causal = fused_attention_flops(_bnsd(1, 1024, 1024, mask, sparse_mode=3))
    assert causal == 2 * N * (1024 * 1025 // 2) * 2 * D and causal / full > 0.5
    top_left = fused_attention_flops(_bnsd(1, 16, 64, mask, sparse_mode=2))
    assert top_left == 2 * N * (16 * 17 // 2) * 2 * D
    band = fused_attention_flops(_bnsd(1, 100, 100, mask, sparse_mode=4, pre_tokens=9, next_tokens=0))
    assert band == 2 * N * (sum(min(10, i + 1) for i in range(100))) * 2 * D


def test_decode_and_lengths_count_the_valid_keys() -> None:
    assert fused_attention_flops(_bnsd(4, 1, 512)) == 4 * 2 * N * 512 * 2 * D
    assert fused_attention_flops(_bnsd(2, 1, 512, actual_seq_lengths_kv=(100, 300))) == 2 * N * 400 * 2 * D
    query, key = _spec(2, 1, N * D), _spec(2, 512, N * D)
    ifa = _work([query, key, key], query, num_heads=N, actual_seq_lengths=(100, 300))
    assert incre_attention_flops(ifa) == 2 * N * 400 * 2 * D


def test_tnd_and_paged_calls_read_their_lengths() -> None:
    query, key = _spec(30, N, D), _spec(50, N, D)
    tnd = _work([query, key, key], query, input_layout="TND", num_heads=N, actual_seq_lengths=(10, 30),
                actual_seq_lengths_kv=(20, 50))
    assert fused_attention_flops(tnd) == 2 * N * (10 * 20 + 20 * 30) * 2 * D
    cache, table = _spec(64, 128, N * D), _spec(2, 8, dtype="int32")
    decode = _spec(2, 1, N * D)
    paged = _work([decode, cache, cache, table], decode, num_heads=N, block_size=128, actual_seq_lengths_kv=(700, 900))
    assert fused_attention_flops(paged) == 2 * N * 1600 * 2 * D


class _Prefill(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=N, input_layout="BNSD", scale=0.125)[0]


def test_a_captured_call_is_priced_from_its_arguments() -> None:
    q, k = torch.randn(1, N, 256, D).half(), torch.randn(1, N, 512, D).half()
    kernel = next(kernel for kernel in capture(_Prefill(), q, k, k).kernels if "attention" in kernel.op_type)
    assert dict(kernel.attrs)["input_layout"] == "BNSD"
    assert kernel.flops == 2 * N * 256 * 512 * 2 * D


def test_a_paged_call_reads_the_rows_its_lengths_reach_not_the_pool() -> None:
    from pytest_npufuse.cost.attention import fused_attention_bytes
    from pytest_npufuse.cost.rules import io_bytes

    pool, table, decode = _spec(4096, 128, N * D), _spec(2, 8, dtype="int32"), _spec(2, 1, N * D)
    paged = _work([decode, pool, pool, table], decode, num_heads=N, block_size=128, actual_seq_lengths_kv=(700, 900))
    row = N * D * 2
    assert fused_attention_bytes(paged) == 2 * decode.nbytes + table.nbytes + 2 * 1600 * row
    dense = _bnsd(1, 16, 64)
    assert fused_attention_bytes(dense) == io_bytes(dense)  # no paged cache: every operand once
