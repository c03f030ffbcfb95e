"""Linear-attention ops: the gated delta rule of Qwen3-Next's Gated DeltaNet layers, as vLLM-Ascend calls it.

Both ops carry a state matrix ``S`` (``[Nv, Dv, Dk]`` per sequence) through a sequence of tokens with one
update per token, ``S_t = alpha_t S_{t-1} + beta_t (v_t - alpha_t S_{t-1} k_t) k_t^T``, and output
``o_t = S_t q_t * scale``. The recurrent op (decode, speculative decoding) reads and writes each token's
state in a paged state pool; the chunked op (prefill) starts from one state per sequence and returns the
last. torch_npu's chunked kernel splits each sequence into chunks for parallelism (arXiv 2412.06464), which
changes the order of the float32 sums but not the function, so one recurrence serves both CPU kernels.

Query and key heads may be fewer than value heads (``Nv`` a multiple of ``Nk``): value head ``h`` reads
query and key head ``h // (Nv / Nk)``, as op-plugin's golden reference does.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import OpArgumentError
from .checks import require_dtype
from .registry import Arguments, Out, SampleCall, npu_op

STATE_DTYPES = (torch.bfloat16, torch.float32)


def _require_heads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[int, int, int, int, int]:
    """(T, Nk, Dk, Nv, Dv) of a ``[T, Nk, Dk]`` query and key and a ``[T, Nv, Dv]`` value, ``Nv % Nk == 0``."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() != 3:
            raise OpArgumentError(
                f"{name} has shape {list(tensor.shape)}; expected 3 dims [T, N, D] (TND layout)", argument=name
            )
        require_dtype(name, tensor, (torch.bfloat16,))
    if key.shape != query.shape:
        raise OpArgumentError(
            f"key has shape {list(key.shape)}; expected query's shape {list(query.shape)}", argument="key"
        )
    tokens, k_heads, k_dim = query.shape
    v_tokens, v_heads, v_dim = value.shape
    if v_tokens != tokens:
        raise OpArgumentError(
            f"value has {v_tokens} tokens; expected query's {tokens} (dim 0 of [T, Nv, Dv])", argument="value"
        )
    if v_heads % k_heads != 0:
        raise OpArgumentError(
            f"value has {v_heads} heads, not a multiple of query's {k_heads}; each key head serves Nv / Nk value heads",
            argument="value"
        )
    return tokens, k_heads, k_dim, v_heads, v_dim


def _require_per_head(name: str, tensor: Optional[torch.Tensor], shape: list, dtype: torch.dtype) -> None:
    if tensor is None:
        return
    if list(tensor.shape) != shape:
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected {shape}", argument=name)
    require_dtype(name, tensor, (dtype,))


def _require_lengths(name: str, tensor: Optional[torch.Tensor], why: str) -> torch.Tensor:
    """A 1-D int32 tensor of per-sequence values (lengths, accepted tokens)."""
    if tensor is None:
        raise OpArgumentError(f"{name} is required: {why}", argument=name)
    if tensor.dim() != 1:
        raise OpArgumentError(
            f"{name} has shape {list(tensor.shape)}; expected [B], one value per sequence", argument=name
        )
    require_dtype(name, tensor, (torch.int32,))
    return tensor


def _gated_delta_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of every value head, in float32: ``state`` [Nv, Dv, Dk], ``q``/``k`` [Nv, Dk] (already
    expanded to value heads, ``q`` scaled), ``v`` [Nv, Dv], ``decay`` [Nv, Dk] (``alpha_t Diag(alpha_kt)``)
    and ``beta`` [Nv]. Returns (o_t [Nv, Dv], S_t)."""
    decayed = state * decay[:, None, :]
    error = v - torch.einsum("hvk,hk->hv", decayed, k)
    updated = decayed + beta[:, None, None] * error[:, :, None] * k[:, None, :]
    return torch.einsum("hvk,hk->hv", updated, q), updated


def _expanded(tensor: torch.Tensor, v_heads: int) -> torch.Tensor:
    """[T, Nk, D] query or key in float32, repeated to [T, Nv, D] so value head h reads head h // (Nv/Nk)."""
    return tensor.to(torch.float32).repeat_interleave(v_heads // tensor.shape[1], dim=1)


def _decay(g: Optional[torch.Tensor], gk: Optional[torch.Tensor], tokens: int, v_heads: int, k_dim: int) -> torch.Tensor:
    """Per token and value head, the factor each state column decays by: ``exp(g)`` times ``exp(gk)``."""
    decay = torch.ones(tokens, v_heads, k_dim, dtype=torch.float32)
    if g is not None:
        decay = decay * g.to(torch.float32).exp()[:, :, None]
    if gk is not None:
        decay = decay * gk.to(torch.float32).exp()
    return decay


def _betas(beta: Optional[torch.Tensor], tokens: int, v_heads: int) -> torch.Tensor:
    return torch.ones(tokens, v_heads) if beta is None else beta.to(torch.float32)


# ---------------------------------------------------------------------------------------------
# npu_recurrent_gated_delta_rule
# ---------------------------------------------------------------------------------------------


MAX_RECURRENT_LENGTH = 8  # the doc's 1 <= L_i <= 8 (the decode tokens of one step, speculative ones included)


def _recurrent_meta(call: Arguments) -> tuple[Out, Out]:
    """o [T, Nv, Dv] in bfloat16, then the new state pool (the functional form's second output)."""
    tokens, _, k_dim, v_heads, v_dim = _require_heads(call.query, call.key, call.value)
    state = call.state
    if state.dim() != 4 or list(state.shape[1:]) != [v_heads, v_dim, k_dim]:
        raise OpArgumentError(
            f"state has shape {list(state.shape)}; expected [BlockNum, "
            f"Nv, Dv, Dk] = [BlockNum, {v_heads}, {v_dim}, {k_dim}]",
            argument="state"
        )
    require_dtype("state", state, (torch.bfloat16,))
    _require_per_head("beta", call.beta, [tokens, v_heads], torch.bfloat16)
    _require_per_head("g", call.g, [tokens, v_heads], torch.float32)
    _require_per_head("gk", call.gk, [tokens, v_heads, k_dim], torch.float32)
    lengths = _require_lengths(
        "actual_seq_lengths", call.actual_seq_lengths, "it says which tokens form each sequence"
    )
    indices = call.ssm_state_indices
    if indices is None:
        raise OpArgumentError(
            "ssm_state_indices is required: it says which state slot each token reads and writes",
            argument="ssm_state_indices",
        )
    if list(indices.shape) != [tokens]:
        raise OpArgumentError(
            f"ssm_state_indices has shape {list(indices.shape)}; expected [T] = [{tokens}]",
            argument="ssm_state_indices",
        )
    require_dtype("ssm_state_indices", indices, (torch.int32,))
    if call.num_accepted_tokens is not None:
        accepted = _require_lengths("num_accepted_tokens", call.num_accepted_tokens, "")
        if accepted.shape != lengths.shape:
            raise OpArgumentError(
                f"num_accepted_tokens has shape {list(accepted.shape)}; "
                f"expected actual_seq_lengths' {list(lengths.shape)}",
                argument="num_accepted_tokens"
            )
    return Out([tokens, v_heads, v_dim], torch.bfloat16), Out(list(state.shape), state.dtype)


def _require_recurrent_values(call: Arguments, tokens: int, blocks: int) -> tuple[list[int], list[int]]:
    """The sequence lengths and accepted-token counts as ints, each in its documented range."""
    lengths = call.actual_seq_lengths.tolist()
    if any(not 1 <= length <= MAX_RECURRENT_LENGTH for length in lengths) or sum(lengths) != tokens:
        raise OpArgumentError(
            f"actual_seq_lengths is {lengths}; each length must be in [1, {MAX_RECURRENT_LENGTH}] and they must "
            f"sum to T = {tokens}", argument="actual_seq_lengths"
        )
    accepted = [1] * len(lengths) if call.num_accepted_tokens is None else call.num_accepted_tokens.tolist()
    if any(not 1 <= count <= length for count, length in zip(accepted, lengths)):
        raise OpArgumentError(
            f"num_accepted_tokens is {accepted}; each count must be in [1, L_i] for actual_seq_lengths {lengths}",
            argument="num_accepted_tokens"
        )
    slots = call.ssm_state_indices.tolist()
    if any(not 0 <= slot < blocks for slot in slots):
        raise OpArgumentError(
            f"ssm_state_indices holds a slot outside [0, {blocks}) (BlockNum, state's dim 0)",
            argument="ssm_state_indices",
        )
    return lengths, accepted


def _recurrent_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, _, k_dim, v_heads, v_dim = _require_heads(call.query, call.key, call.value)
    lengths, accepted = _require_recurrent_values(call, tokens, call.state.shape[0])
    pool = call.state.to(torch.float32, copy=True)
    q = _expanded(call.query, v_heads) * call.scale
    k = _expanded(call.key, v_heads)
    v = call.value.to(torch.float32)
    decay = _decay(call.g, call.gk, tokens, v_heads, k_dim)
    beta = _betas(call.beta, tokens, v_heads)
    slots = call.ssm_state_indices.tolist()
    out = torch.empty(tokens, v_heads, v_dim, dtype=torch.float32)
    start = 0
    for length, count in zip(lengths, accepted):
        state = pool[slots[start + count - 1]]
        for t in range(start, start + length):
            out[t], state = _gated_delta_step(state, q[t], k[t], v[t], decay[t], beta[t])
            pool[slots[t]] = state
        start += length
    return out.to(torch.bfloat16), pool.to(call.state.dtype)


def _gated_inputs(tokens: int, heads: int, dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    """bfloat16 query and key (L2-normalised, as the pages ask), value and beta, float32 g <= 0."""
    gen = torch.Generator().manual_seed(seed)
    query, key = (torch.nn.functional.normalize(torch.rand(tokens, heads, dim, generator=gen), dim=-1) for _ in range(2))
    value = torch.rand(tokens, heads, dim, generator=gen)
    beta, g = torch.rand(tokens, heads, generator=gen), -torch.rand(tokens, heads, generator=gen)
    return query.bfloat16(), key.bfloat16(), value.bfloat16(), beta.bfloat16(), g


def _recurrent_samples() -> list[SampleCall]:
    """Two decode tokens of one sequence, each writing its own state slot."""
    query, key, value, beta, g = _gated_inputs(2, 1, 4, seed=0)
    state = torch.zeros(2, 1, 4, 4, dtype=torch.bfloat16)
    return [SampleCall((query, key, value, state), {
        "beta": beta, "scale": 0.5, "actual_seq_lengths": torch.tensor([2], dtype=torch.int32),
        "ssm_state_indices": torch.tensor([0, 1], dtype=torch.int32), "g": g})]


@npu_op(meta=_recurrent_meta, kernel=_recurrent_kernel, writes_back={"state": 1}, schema_mutates=True,
        samples=_recurrent_samples)
def npu_recurrent_gated_delta_rule(call: Arguments) -> None:
    """Recurrent gated delta rule over a paged state pool: returns o [T, Nv, Dv] (bfloat16), updates ``state``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_recurrent_gated_delta_rule.md (formula,
    shapes, 1 <= L_i <= 8) and test/test_custom_ops/test_npu_recurrent_gated_delta_rule.py (which slot a
    sequence starts from). Sequence ``i`` covers the next ``actual_seq_lengths[i]`` tokens and starts from
    the state in slot ``ssm_state_indices[start + num_accepted_tokens[i] - 1]`` (the last token the previous
    step accepted; its first token without ``num_accepted_tokens``); each token ``t`` writes its new state
    to slot ``ssm_state_indices[t]``. ``alpha_t = exp(g)`` per head and ``exp(gk)`` per key column (1 where
    None), ``beta`` 1 where None. Computed in float32; the state is rounded to bfloat16 once per call.
    ``scale`` is required, as op-plugin's kernel checks (``scale cannot be empty``); so are
    ``actual_seq_lengths`` and ``ssm_state_indices``, which the doc describes but gives no default for.
    """
    if call.scale is None:
        raise OpArgumentError(
            "scale is required (op-plugin: 'scale cannot be empty'); usually Dk ** -0.5", argument="scale"
        )


# ---------------------------------------------------------------------------------------------
# npu_chunk_gated_delta_rule
# ---------------------------------------------------------------------------------------------


def _chunk_meta(call: Arguments) -> tuple[Out, Out]:
    """o [T, Nv, Dv] in bfloat16 and the final state, initial_state's shape [B, Nv, Dv, Dk] and dtype."""
    tokens, _, k_dim, v_heads, v_dim = _require_heads(call.query, call.key, call.value)
    required = "the doc requires beta, initial_state and actual_seq_lengths in the TND layout"
    state = call.initial_state
    if state is None:
        raise OpArgumentError(f"initial_state is required: {required}", argument="initial_state")
    if call.beta is None:
        raise OpArgumentError(f"beta is required: {required}", argument="beta")
    lengths = _require_lengths("actual_seq_lengths", call.actual_seq_lengths, required)
    expected = [lengths.shape[0], v_heads, v_dim, k_dim]
    if list(state.shape) != expected:
        raise OpArgumentError(
            f"initial_state has shape {list(state.shape)}; expected [B, Nv, Dv, Dk] = {expected}",
            argument="initial_state",
        )
    require_dtype("initial_state", state, STATE_DTYPES)
    _require_per_head("beta", call.beta, [tokens, v_heads], torch.bfloat16)
    _require_per_head("g", call.g, [tokens, v_heads], torch.float32)
    return Out([tokens, v_heads, v_dim], torch.bfloat16), Out(list(state.shape), state.dtype)


def _chunk_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, _, k_dim, v_heads, v_dim = _require_heads(call.query, call.key, call.value)
    lengths = call.actual_seq_lengths.tolist()
    if any(length < 1 for length in lengths) or sum(lengths) != tokens:
        raise OpArgumentError(
            f"actual_seq_lengths is {lengths}; each must be >= 1 and they must sum to T = {tokens}",
            argument="actual_seq_lengths",
        )
    scale = 1.0 if call.scale is None else call.scale
    q = _expanded(call.query, v_heads) * scale
    k = _expanded(call.key, v_heads)
    v = call.value.to(torch.float32)
    decay = _decay(call.g, None, tokens, v_heads, k_dim)
    beta = _betas(call.beta, tokens, v_heads)
    final = call.initial_state.to(torch.float32, copy=True)
    out = torch.empty(tokens, v_heads, v_dim, dtype=torch.float32)
    start = 0
    for sequence, length in enumerate(lengths):
        state = final[sequence]
        for t in range(start, start + length):
            out[t], state = _gated_delta_step(state, q[t], k[t], v[t], decay[t], beta[t])
        final[sequence] = state
        start += length
    return out.to(torch.bfloat16), final.to(call.initial_state.dtype)


def _chunk_samples() -> list[SampleCall]:
    """Two sequences of two and one tokens from their initial states."""
    query, key, value, beta, g = _gated_inputs(3, 1, 4, seed=1)
    return [SampleCall((query, key, value), {
        "beta": beta, "initial_state": torch.zeros(2, 1, 4, 4), "g": g,
        "actual_seq_lengths": torch.tensor([2, 1], dtype=torch.int32)})]


@npu_op(meta=_chunk_meta, kernel=_chunk_kernel, samples=_chunk_samples)
def npu_chunk_gated_delta_rule(call: Arguments) -> None:
    """Chunked gated delta rule (prefill): returns (o [T, Nv, Dv] bfloat16, final state [B, Nv, Dv, Dk]).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_chunk_gated_delta_rule.md (formula,
    shapes, dtypes; beta, initial_state and actual_seq_lengths required in TND) and op-plugin's meta
    function (the final state has initial_state's dtype). Sequence ``i`` covers the next
    ``actual_seq_lengths[i]`` tokens and starts from ``initial_state[i]``; ``alpha_t = exp(g)`` (1 where
    None) and ``scale`` 1.0 where None. The chunking changes only the order of float32 sums, so the CPU
    kernel runs the token recurrence in float32.
    """
