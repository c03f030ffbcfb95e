"""The gated delta rule ops against a per-head loop written from op-plugin's docs, and their refusals."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


def _inputs(tokens: int, k_heads: int, v_heads: int, k_dim: int, v_dim: int, seed: int = 0) -> dict:
    """bfloat16 q, k (L2-normalised, as the doc asks), v, beta and float32 g <= 0."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.rand(tokens, k_heads, k_dim, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.rand(tokens, k_heads, k_dim, generator=gen), dim=-1)
    return {
        "query": q.to(torch.bfloat16),
        "key": k.to(torch.bfloat16),
        "value": torch.rand(tokens, v_heads, v_dim, generator=gen).to(torch.bfloat16),
        "beta": torch.rand(tokens, v_heads, generator=gen).to(torch.bfloat16),
        "g": -torch.rand(tokens, v_heads, generator=gen),
    }


def _reference_sequence(state, q, k, v, g, gk, beta, scale, group):
    """One sequence, head by head, token by token, in float64, from the doc's formula
    S_t = a_t Diag(a_kt) S_{t-1} + b_t (v_t - a_t Diag(a_kt) S_{t-1} k_t) k_t^T, o_t = S_t q_t scale.
    Returns the outputs [L, Nv, Dv] and the states after each token [L, Nv, Dv, Dk]."""
    length, v_heads = v.shape[:2]
    outs = torch.zeros(length, v_heads, v.shape[2], dtype=torch.float64)
    states = torch.zeros(length, *state.shape, dtype=torch.float64)
    for h in range(v_heads):
        s = state[h].double()
        for t in range(length):
            qt, kt = q[t, h // group].double() * scale, k[t, h // group].double()
            decay = torch.exp(g[t, h].double()) * (torch.exp(gk[t, h].double()) if gk is not None else 1.0)
            s = s * decay
            s = s + beta[t, h].double() * torch.outer(v[t, h].double() - s @ kt, kt)
            outs[t, h], states[t, h] = s @ qt, s
    return outs, states


@pytest.mark.parametrize("use_gk", [False, True])
def test_recurrent_rule_follows_the_formula_with_paged_slots_and_accepted_tokens(use_gk):
    lengths, accepted = [3, 2], [2, 1]
    tokens, k_heads, v_heads, k_dim, v_dim = 5, 2, 4, 16, 8
    args = _inputs(tokens, k_heads, v_heads, k_dim, v_dim)
    gk = -torch.rand(tokens, v_heads, k_dim, generator=torch.Generator().manual_seed(1)) if use_gk else None
    blocks = 7
    state = torch.rand(blocks, v_heads, v_dim, k_dim, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    slots = torch.tensor([6, 0, 2, 4, 5], dtype=torch.int32)
    original = state.clone()
    out = torch_npu.npu_recurrent_gated_delta_rule(
        args["query"], args["key"], args["value"], state, beta=args["beta"], scale=0.25,
        actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32), ssm_state_indices=slots,
        num_accepted_tokens=torch.tensor(accepted, dtype=torch.int32), g=args["g"], gk=gk,
    )
    assert out.dtype == torch.bfloat16 and out.shape == (tokens, v_heads, v_dim)
    expected_state = original.double()
    start = 0
    for length, count in zip(lengths, accepted):
        span = slice(start, start + length)
        o, states = _reference_sequence(
            original[slots[start + count - 1]], args["query"][span], args["key"][span], args["value"][span],
            args["g"][span], None if gk is None else gk[span], args["beta"][span], 0.25, v_heads // k_heads,
        )
        torch.testing.assert_close(out[span].double(), o, rtol=2e-2, atol=2e-2)
        for t in range(length):
            expected_state[slots[start + t]] = states[t]
        start += length
    torch.testing.assert_close(state.double(), expected_state, rtol=2e-2, atol=2e-2)
    untouched = [1, 3]
    assert torch.equal(state[untouched], original[untouched])


def test_chunk_rule_returns_each_output_and_the_last_state_per_sequence():
    lengths = [4, 1, 3]
    tokens, k_heads, v_heads, k_dim, v_dim = 8, 1, 2, 8, 4
    args = _inputs(tokens, k_heads, v_heads, k_dim, v_dim, seed=3)
    initial = torch.rand(len(lengths), v_heads, v_dim, k_dim, generator=torch.Generator().manual_seed(4))
    out, final = torch_npu.npu_chunk_gated_delta_rule(
        args["query"], args["key"], args["value"], beta=args["beta"], initial_state=initial,
        actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32), scale=0.5, g=args["g"],
    )
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32 and final.shape == initial.shape
    start = 0
    for i, length in enumerate(lengths):
        span = slice(start, start + length)
        o, states = _reference_sequence(
            initial[i], args["query"][span], args["key"][span], args["value"][span], args["g"][span], None,
            args["beta"][span], 0.5, v_heads // k_heads,
        )
        torch.testing.assert_close(out[span].double(), o, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(final[i].double(), states[-1], rtol=1e-5, atol=1e-5)
        start += length


def _recurrent_call(**overrides):
    args = _inputs(2, 1, 1, 4, 4)
    call = {
        "state": torch.zeros(2, 1, 4, 4, dtype=torch.bfloat16), "beta": args["beta"], "scale": 0.5,
        "actual_seq_lengths": torch.tensor([2], dtype=torch.int32),
        "ssm_state_indices": torch.tensor([0, 1], dtype=torch.int32), "g": args["g"],
    }
    call.update(overrides)
    return args, call


@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"scale": None}, "scale"),
        ({"ssm_state_indices": None}, "ssm_state_indices"),
        ({"actual_seq_lengths": torch.tensor([9], dtype=torch.int32)}, "actual_seq_lengths"),
        ({"ssm_state_indices": torch.tensor([0, 2], dtype=torch.int32)}, "ssm_state_indices"),
        ({"state": torch.zeros(2, 1, 4, 4)}, "state"),
    ],
)
def test_recurrent_rule_refuses_what_the_doc_and_kernel_refuse(overrides, named):
    args, call = _recurrent_call(**overrides)
    with pytest.raises(OpArgumentError) as error:
        torch_npu.npu_recurrent_gated_delta_rule(args["query"], args["key"], args["value"], **call)
    assert error.value.argument == named


def test_chunk_rule_requires_the_initial_state():
    args = _inputs(2, 1, 1, 4, 4)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_chunk_gated_delta_rule(
            args["query"], args["key"], args["value"], beta=args["beta"],
            actual_seq_lengths=torch.tensor([2], dtype=torch.int32),
        )
    assert (exc.value.op, exc.value.argument) == ("npu_chunk_gated_delta_rule", "initial_state")


def test_the_ops_pass_opcheck():
    args, call = _recurrent_call()
    torch.library.opcheck(
        torch.ops.npu.npu_recurrent_gated_delta_rule_functional.default,
        (args["query"], args["key"], args["value"], call.pop("state")), call,
    )
    torch.library.opcheck(
        torch.ops.npu.npu_chunk_gated_delta_rule.default,
        (args["query"], args["key"], args["value"]),
        {"beta": args["beta"], "initial_state": torch.zeros(1, 1, 4, 4),
         "actual_seq_lengths": torch.tensor([2], dtype=torch.int32), "g": args["g"]},
    )


def test_compiled_recurrent_rule_updates_the_state_as_eager_does():
    args, call = _recurrent_call()
    state = call.pop("state")

    def step(q, k, v, s):
        return torch_npu.npu_recurrent_gated_delta_rule(q, k, v, s, **call) * 2

    eager_state, compiled_state = state.clone(), state.clone()
    eager = step(args["query"], args["key"], args["value"], eager_state)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(
        args["query"], args["key"], args["value"], compiled_state
    )
    assert torch.equal(eager, compiled) and torch.equal(eager_state, compiled_state)
    assert not torch.equal(eager_state, state)
