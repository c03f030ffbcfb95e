"""The calibration's DeepSeek decode layers launch the fused torch_npu kernels of the stack each row ran
(benchmarks/fidelity/fused.py): cann-recipes-infer's MlaProlog layer, omni-infer's A3 layer, and the
generic textbook layer for stacks whose code was not read."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def fidelity(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import fused, models, pairs, rows

    return fused, models, pairs, {row.id: row for row in rows.load_rows()}


def _layer_kernels(models, pairs, row, **changes):
    """Kernel types of the row's decode step without draft layers, their counts, the layer count and the
    deployment."""
    config = pairs._config(row)
    deployment = pairs._deployment(row, config, **changes)
    program, _ = models.Decoder(config, replace(deployment, drafts=0)).build()
    kernels = [kernel.info.kernel_type for kernel in program.kernels]
    return kernels, Counter(kernels), config["layers"], deployment


def test_cann_recipes_r1_decode_runs_twenty_fused_kernels_a_moe_layer(fidelity):
    fused, models, pairs, rows = fidelity
    kernels, counts, layers, deployment = _layer_kernels(models, pairs, rows["dsr1-a3-w8a8c8-gbs6144-decode"])
    assert deployment.stack == fused.Stack.MLA_PROLOG
    assert counts["MlaPrologV3"] == layers
    assert counts["AddRmsNorm"] == 2 * layers  # every norm after the first adds the residual; the head's too
    assert counts["MoeDistributeDispatchV2"] == layers - 3
    assert counts["DequantSwigluQuant"] == 2 * (layers - 3) + 3
    assert "Add" not in kernels[: kernels.index("MoeDistributeDispatchV2")]
    start = [i for i, kind in enumerate(kernels) if kind == "MlaPrologV3"]
    fourth = kernels[start[3] - 2: start[4] - 2]  # from the fourth layer's AddRmsNorm and DynamicQuant
    assert len(fourth) == 20, fourth
    dispatch = fourth.index("MoeDistributeDispatchV2")
    assert fourth[dispatch - 1] != "DynamicQuant"  # the dispatch quantises the tokens it sends


def test_omni_infer_on_a3_runs_its_rope_cache_layer_and_a2_stays_generic(fidelity):
    fused, models, pairs, rows = fidelity
    _, counts, layers, deployment = _layer_kernels(models, pairs, rows["omni-dsv3-a3-superkernel-delta"])
    assert deployment.stack == fused.Stack.OMNI_A3
    assert counts["KvRmsNormRopeCache"] == counts["InterleaveRope"] == layers
    assert counts["MlaPrologV3"] == 0 and counts["MoeDistributeDispatch"] == layers - 3
    a2 = rows["dsr1-a2-int8-pdhybrid-in128-out1024"]
    assert pairs._deployment(a2, pairs._config(a2)).stack == fused.Stack.GENERIC


def test_unread_stacks_and_prefill_keep_the_generic_kernels(fidelity):
    fused, _, pairs, rows = fidelity
    r1 = rows["dsr1-a3-w8a8c8-gbs6144-decode"]
    assert pairs._deployment(r1, pairs._config(r1), prefill=True).stack == fused.Stack.GENERIC


def test_fewer_kernels_make_the_same_step_shorter(fidelity):
    """The same work in 20 kernels a layer instead of 33: the step loses their launch gaps and heads."""
    fused, _, pairs, rows = fidelity
    from fidelity.rows import Profiles

    row = rows["dsr1-a3-w8a8c8-gbs6144-decode"]
    deployment = pairs._deployment(row, pairs._config(row))
    profiles = Profiles()
    fused_us = pairs._run(row, profiles, deployment, "ge_graph").time_us
    generic_us = pairs._run(row, profiles, replace(deployment, stack=fused.Stack.GENERIC), "ge_graph").time_us
    assert fused_us < generic_us


def test_vllm_ascend_moe_beside_attention_tp_gathers_its_routed_output_and_reduces_a_split_shared_expert(fidelity):
    """vLLM-Ascend's MC2 MoE with TP16 attention (the Kimi-K2 served rows): each TP rank routes its slice
    of the tokens, so the combine returns that slice and an all-gather over the TP group rebuilds the
    tokens; the shared expert is TP-split and all-reduced. A stack without attention TP has neither."""
    _, models, pairs, rows = fidelity
    row = rows["kimi-k2-thinking-a3-tp16-in1024-out1024"]
    config = pairs._config(row)
    deployment = replace(pairs._deployment(row, config), sequences=16, tokens=16)
    assert deployment.tp_moe and deployment.attn_tp == 16
    program, _ = models.Decoder(config, deployment).build()
    kinds = Counter(kernel.info.kernel_type for kernel in program.kernels)
    moe_layers = config["layers"] - config["dense_layers"]
    assert kinds["HcomAllGather"] == moe_layers
    # every layer's o_proj, the dense layers' FFN and the MoE layers' shared expert
    assert kinds["HcomAllReduce"] == config["layers"] + config["dense_layers"] + moe_layers
    combines = [k for k in program.kernels if k.op_type == "npu::npu_moe_distribute_combine_v2"]
    assert {k.output_specs[0].shape[0] for k in combines} == {1}
    shared = next(program.buffers[n].spec.shape for n in program.inputs if n.endswith(".shared_gu"))
    assert shared == (config["hidden"], 2 * config["moe_ffn"] // 16)
    other = rows["dsr1-a3-w8a8c8-gbs6144-decode"]
    assert not pairs._deployment(other, pairs._config(other)).tp_moe


def test_a_prompt_longer_than_the_largest_captured_graph_prefills_eager(fidelity):
    """vLLM captures graphs for 1, 2, 4 and 8 tokens here: a 512-token prompt has none and runs eager, a
    stack that captures every shape (no sizes) prefills in the row's mode."""
    _, _, pairs, rows = fidelity
    row = rows["kimi-k2-thinking-a3-tp16-in512-out512"]
    assert pairs.prefill_mode(row, (1, 2, 4, 8)) == "eager"
    assert pairs.prefill_mode(row, (1, 2, 4, 8, 512)) == row.get("mode") == "aclgraph"
    assert pairs.prefill_mode(row, ()) == "aclgraph"
