"""The calibration's Kimi-K2 steps launch vLLM-Ascend's DeepSeek-V3 layer (benchmarks/fidelity/vllm_mla.py):
MC2 dispatch/combine in decode, the all-to-all token dispatcher in prefill, bf16 attention without MLAPO."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
LAYERS, MOE_LAYERS, TP = 61, 60, 16
KIMI = "kimi-k2-thinking-a3-tp16-in512-out512"


@pytest.fixture()
def fidelity(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import fused, models, pairs, rows

    return fused, models, pairs, {row.id: row for row in rows.load_rows()}


def _program(models, pairs, row, prefill, tokens):
    config = pairs._config(row)
    deployment = pairs._deployment(row, config, prefill)
    sequences = 1 if prefill else tokens
    deployment = replace(deployment, tokens=tokens, sequences=sequences)
    program, _ = models.Decoder(config, deployment).build()
    return program, deployment


def _counts(program):
    return Counter(kernel.op_type for kernel in program.kernels)


@pytest.mark.parametrize("prefill", [False, True])
def test_kimi_rows_take_the_vllm_ascend_layer_in_prefill_and_decode(fidelity, prefill):
    fused, models, pairs, rows = fidelity
    program, deployment = _program(models, pairs, rows[KIMI], prefill, 512 if prefill else 8)
    counts = _counts(program)
    assert deployment.stack == fused.Stack.VLLM_MLA and deployment.moe_bits == 4 and deployment.quant == "bf16"
    assert counts["npu::npu_add_rms_norm"] == 2 * LAYERS  # all but the first norm, plus the head's
    assert counts["npu::npu_rms_norm"] == LAYERS + 1  # each q_a norm and the first norm
    assert counts["npu::npu_kv_rmsnorm_rope_cache"] == counts["npu::npu_interleave_rope"] == LAYERS
    assert counts["aten::zeros"] == LAYERS
    # o_proj's input and output, and torch_npu's copy of each TP rank's slice after the list all-gather
    assert counts["aten::copy_"] == 2 * LAYERS + TP * MOE_LAYERS
    assert counts["_c10d_functional::all_gather_into_tensor"] == MOE_LAYERS * (2 if prefill else 1)
    assert counts["npu::npu_grouped_matmul"] == 2 * MOE_LAYERS and counts["npu::npu_dynamic_quant"] == 0
    assert counts["aten::_to_copy"] == 2 * MOE_LAYERS  # the router's float32 input and the weights' bf16
    assert counts["npu::npu_mla_prolog_v3_functional"] == 0


def test_a_decode_step_exchanges_tokens_by_mc2_and_pads_them_to_tp(fidelity):
    _, models, pairs, rows = fidelity
    counts = _counts(_program(models, pairs, rows[KIMI], False, 10)[0])
    assert counts["npu::npu_moe_distribute_dispatch_v2"] == counts["npu::npu_moe_distribute_combine_v2"] == MOE_LAYERS
    assert counts["_c10d_functional::all_to_all_single"] == 0 and counts["aten::_local_scalar_dense"] == 0
    assert counts["aten::constant_pad_nd"] == 2 * MOE_LAYERS  # 10 tokens padded to 16: tokens and logits
    assert counts["aten::bmm"] == counts["npu::npu_transpose_batchmatmul"] == LAYERS  # W_UK and W_UV
    assert counts["aten::clone"] == 2 * LAYERS  # the latent's and the absorbed query's contiguous copies
    full = _counts(_program(models, pairs, rows[KIMI], False, 16)[0])
    assert full["aten::constant_pad_nd"] == 0


def test_the_routed_output_is_the_tp_ranks_copies_after_the_all_gather(fidelity):
    """torch_npu's list all-gather copies each rank's slice out of its flat buffer: the MoE's sum reads
    all TP copies, each of which reads the all-gather."""
    _, models, pairs, rows = fidelity
    program, _ = _program(models, pairs, rows[KIMI], False, 8)
    kernels = {output: kernel for kernel in program.kernels for output in kernel.outputs}
    add = next(kernel for kernel in program.kernels if kernel.op_type == "aten::add")
    copies = [kernels[name] for name in add.inputs if kernels[name].op_type == "aten::copy_"]
    assert len(copies) == TP
    assert {kernels[copy.inputs[0]].op_type for copy in copies} == {"_c10d_functional::all_gather_into_tensor"}


def test_a_prefill_goes_through_the_all_to_all_dispatcher_with_one_host_read_a_layer(fidelity):
    _, models, pairs, rows = fidelity
    program, _ = _program(models, pairs, rows[KIMI], True, 512)
    counts = _counts(program)
    assert counts["npu::npu_moe_distribute_dispatch_v2"] == 0
    assert counts["_c10d_functional::all_to_all_single"] == 2 * MOE_LAYERS
    assert counts["npu::npu_moe_token_permute"] == counts["npu::npu_moe_token_unpermute"] == 2 * MOE_LAYERS
    assert counts["aten::histc"] == counts["aten::repeat_interleave"] == MOE_LAYERS
    assert counts["aten::_local_scalar_dense"] == MOE_LAYERS
    assert counts["aten::clone"] == 4 * LAYERS  # the latent, and k_pe, key and value before the attention
    assert counts["aten::constant_pad_nd"] == 0  # 512 tokens: no padding below TP
    kernels = program.kernels
    producer = {output: kernel.index for kernel in kernels for output in kernel.outputs}
    read = next(kernel for kernel in kernels if kernel.op_type == "aten::_local_scalar_dense")
    gather = next(kernel for kernel in kernels if kernel.op_type == "_c10d_functional::all_gather_into_tensor")
    assert all(producer[name] > gather.index for name in read.inputs)  # the splits come after the counts' gather


def test_other_deepseek_stacks_are_unchanged(fidelity):
    fused, _, pairs, rows = fidelity
    r1 = rows["dsr1-a3-w8a8c8-gbs6144-decode"]
    assert pairs._deployment(r1, pairs._config(r1)).stack == fused.Stack.MLA_PROLOG
    assert pairs._deployment(r1, pairs._config(r1), True).stack == fused.Stack.GENERIC
    qwen = rows["qwen3-8b-a3-bf16-tp1-decode"]
    assert pairs._deployment(qwen, pairs._config(qwen)).stack == fused.Stack.QWEN_DENSE
