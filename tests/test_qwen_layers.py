"""The calibration's Qwen3-8B steps launch the kernels of cann-recipes-infer's Qwen dense layer
(benchmarks/fidelity/qwen.py), and the executor prefills eager (benchmarks/fidelity/rows.py)."""

from collections import Counter
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
LAYERS = 36


@pytest.fixture()
def fidelity(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import fused, models, pairs, rows

    return fused, models, pairs, {row.id: row for row in rows.load_rows()}


def _kernels(models, pairs, row, prefill):
    config = pairs._config(row)
    deployment = pairs._deployment(row, config, prefill)
    program, _ = models.Decoder(config, deployment).build()
    return Counter(kernel.info.kernel_type for kernel in program.kernels), deployment


@pytest.mark.parametrize("prefill", [False, True])
def test_a_bf16_layer_is_sixteen_kernels_with_silu_and_mul_and_no_swiglu(fidelity, prefill):
    fused, models, pairs, rows = fidelity
    counts, deployment = _kernels(models, pairs, rows["qwen3-8b-a3-bf16-tp1-decode"], prefill)
    assert deployment.stack == fused.Stack.QWEN_DENSE
    assert counts["AddRmsNorm"] == 2 * LAYERS  # the first layer's first norm is a plain RmsNorm; the head adds one
    assert counts["RmsNorm"] == 2 * LAYERS + 1  # q_norm, k_norm and the first norm
    assert counts["TensorMove"] == 2 * LAYERS  # the contiguous query and key before their norms
    assert counts["ScatterNdUpdate"] == 2 * LAYERS  # K and V caches apart
    assert counts["Swish"] == counts["Mul"] == LAYERS and counts["SwiGlu"] == 0
    assert counts["Add"] == 0  # every residual add is inside AddRmsNorm
    assert counts["LocalScalarDense"] == (2 * LAYERS if prefill else 0)


def test_a_w8a8_layer_quantises_three_times_and_hands_int8_from_the_activation_to_down_proj(fidelity):
    _, models, pairs, rows = fidelity
    counts, _ = _kernels(models, pairs, rows["qwen3-8b-a3-w8a8-tp1-prefill"], True)
    assert counts["DynamicQuant"] == 3 * LAYERS
    assert counts["QuantBatchMatmulV3"] == 4 * LAYERS  # qkv, o, gate-up, down; lm_head stays bf16
    assert counts["DequantSwigluQuant"] == LAYERS and counts["Swish"] == 0


def test_tp2_all_reduces_twice_a_layer_and_gathers_the_logits(fidelity):
    _, models, pairs, rows = fidelity
    counts, _ = _kernels(models, pairs, rows["qwen3-8b-a3-bf16-tp2-prefill"], True)
    collectives = {kind: count for kind, count in counts.items() if kind.startswith("Hcom")}
    assert sum(collectives.values()) == 2 * LAYERS + 1, collectives


def test_the_executor_prefills_eager_and_decodes_in_its_graph(fidelity):
    _, _, pairs, rows = fidelity
    prefill, decode = rows["qwen3-8b-a3-bf16-tp1-prefill"], rows["qwen3-8b-a3-bf16-tp1-decode"]
    assert prefill.eager_prefill and pairs.prefill_mode(prefill, ()) == "eager"
    assert decode.get("mode") == "ge_graph"
    kimi = rows["kimi-k2-thinking-a3-tp16-in512-out512"]
    assert not kimi.eager_prefill and pairs.prefill_mode(kimi, ()) == kimi.get("mode")


def test_other_families_on_the_executor_keep_their_stacks(fidelity):
    fused, _, pairs, rows = fidelity
    r1 = rows["dsr1-a3-w8a8c8-gbs6144-decode"]
    assert pairs._deployment(r1, pairs._config(r1)).stack == fused.Stack.MLA_PROLOG
