"""The rank model: MoE rows by routing, ranks joined at their collectives, the imbalance cost."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

from pytest_npufuse import compare, init_empty_weights
from pytest_npufuse.errors import ArgumentError
from pytest_npufuse.frontend.repeat import capture_program
from pytest_npufuse.simulate.routing import MAX_WEIGHTS, Routing, is_dispatch, rank_rows, routed_program, routing_of

sys.path.insert(0, str(Path(__file__).parents[2] / "cases"))
from full_size.configs import DEEPSEEK_V3, Deployment  # noqa: E402
from full_size.deepseek_v3 import DeepseekV3, decode_inputs  # noqa: E402

# One MoE layer of DeepSeek-V3 at its real width (its expert weights dominate a decode step), small vocab.
TINY = dict(DEEPSEEK_V3, num_hidden_layers=1, first_k_dense_replace=0, vocab_size=512, max_position_embeddings=1024)
EP4 = Deployment(batch=8, context=256, ep=4, shared_stream="22")


@pytest.fixture(scope="module")
def moe_layer():
    with init_empty_weights():
        model = DeepseekV3(TINY, EP4)
    return model, decode_inputs(TINY, EP4)


@pytest.fixture(scope="module")
def program(moe_layer):
    return capture_program(*moe_layer[:1], *moe_layer[1])


def _dispatch(program):
    return next(kernel for kernel in program.kernels if is_dispatch(kernel))


def test_uniform_routing_gives_each_rank_its_own_tokens_times_top_k(program):
    dispatch = _dispatch(program)
    assert dispatch.attr("ep_world_size") == 4 and dispatch.output_specs[0].shape[0] == 8 * 4 * 8  # the capacity
    assert [rank_rows(dispatch, Routing(), rank) for rank in range(4)] == [8 * 8] * 4
    routed = routed_program(program, Routing())
    grouped = [k for k in routed.kernels if k.op_type == "npu::npu_grouped_matmul"]
    assert grouped and all(k.output_specs[0].shape[0] == 64 for k in grouped)
    assert sum(k.flops for k in routed.kernels) < sum(k.flops for k in program.kernels)


def test_a_skewed_routing_loads_the_hot_ranks_and_never_exceeds_the_capacity(program):
    dispatch = _dispatch(program)
    rows = [rank_rows(dispatch, routing_of("zipf:1.5"), rank) for rank in range(4)]
    assert rows[0] > rows[1] > rows[3] and max(rows) <= dispatch.output_specs[0].shape[0]
    hot = routing_of([1.0] + [0.0] * 255)
    assert rank_rows(dispatch, hot, 0) == 32 and rank_rows(dispatch, hot, 1) == 0  # each token picks expert 0 once


@pytest.mark.parametrize("spec, message", [
    ("zipf:x", "is not a routing"), ("hot", "is not a routing"), ([1.0, -1.0], "non-negative"),
    ("computed", "no MoE dispatch was computed"),
])
def test_bad_routings_are_refused_with_the_choices(spec, message):
    with pytest.raises(ArgumentError) as exc:
        routing_of(spec)
    assert exc.value.argument == "routing"


@pytest.mark.parametrize("spec", ["zipf:inf", 123, {"a": 1.0}, b"uniform", ["a", "b"], [[1.0]], [None, 1.0], [True]])
def test_malformed_routings_are_argument_errors_not_tracebacks(spec):
    with pytest.raises(ArgumentError) as exc:
        routing_of(spec)
    assert exc.value.argument == "routing"


def test_an_endless_iterator_of_weights_is_refused_after_the_bound_not_read_forever():
    with pytest.raises(ArgumentError) as exc:
        routing_of(itertools.count(1))
    assert (exc.value.argument, exc.value.bound) == ("routing", MAX_WEIGHTS)
    assert len(routing_of([1.0] * MAX_WEIGHTS).weights) == MAX_WEIGHTS


def test_weights_near_the_float_limit_and_iterators_are_read_as_weights():
    assert routing_of([1e308, 1e308]).shares(2) == (0.5, 0.5)  # no overflow summing them
    assert routing_of(iter([1.0, 3.0])).shares(2) == (0.25, 0.75)


def test_weights_for_another_expert_count_name_both_counts(program):
    with pytest.raises(ArgumentError) as exc:
        rank_rows(_dispatch(program), routing_of([1.0] * 8), 0)
    assert exc.value.argument == "routing"


def test_ranks_wait_for_the_most_loaded_one(moe_layer):
    model, inputs = moe_layer
    even = compare(model, *inputs, ranks=4)
    assert even.ranks.count == 4 and even.ranks.imbalance_us == pytest.approx(0.0)
    assert even.ranks.time_us == pytest.approx(even.variant.time_us)
    skewed = compare(model, *inputs, ranks=4, routing="zipf:1.5")
    report = skewed.ranks
    assert report.imbalance_us > 0 and report.balanced_us == pytest.approx(even.ranks.time_us)
    assert report.slowest.rank == 0 and report.ranks[0].wait_us == pytest.approx(0.0)
    assert all(run.wait_us > 0 for run in report.ranks[1:])
    assert "4 ranks (Zipf, exponent 1.5" in skewed.summary()
    assert any("Zipf" in line for line in skewed.numerics.stand_ins)


def test_bad_rank_counts_and_routings_fail_before_capture(moe_layer):
    model, inputs = moe_layer
    with pytest.raises(ArgumentError) as exc:
        compare(model, *inputs, ranks=0)
    assert exc.value.argument == "ranks"
    with pytest.raises(ArgumentError) as exc:
        compare(model, *inputs, routing="skewed")
    assert exc.value.argument == "routing"


# A narrow DeepSeek-V3 MoE layer (32 experts over EP 4) whose numerics are cheap enough to compute.
NARROW = dict(TINY, hidden_size=1024, moe_intermediate_size=256, num_attention_heads=8, n_routed_experts=32,
              q_lora_rank=256)


def test_computed_routing_prices_each_rank_by_the_gating_the_sample_computed():
    with init_empty_weights():
        model = DeepseekV3(NARROW, EP4)
    report = compare(model, *decode_inputs(NARROW, EP4), numerics="sample", routing="computed", ranks=4)
    ranks = report.ranks
    assert ranks.routing.startswith("computed from the gating values")
    assert sum(run.routed_rows for run in ranks.ranks) == 8 * 4 * 8  # every (token, expert) pair of the 4 ranks
    assert len({run.routed_rows for run in ranks.ranks}) > 1 and ranks.imbalance_us >= 0
    assert report.numerics.stand_ins[0].startswith("routing: computed")


def test_a_training_step_is_modeled_on_one_rank():
    with pytest.raises(ArgumentError) as exc:
        compare(torch.nn.Linear(4, 4), torch.randn(2, 4), loss=lambda out: out.sum(), ranks=2)
    assert exc.value.argument == "ranks"
