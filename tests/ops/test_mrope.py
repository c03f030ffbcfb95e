"""npu_mrope (RopeWithSinCosCache) against a float64 RoPE written from the README's formulas."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu

TOKENS, HEAD, ROTARY, MAX_POS = 5, 64, 32, 40


def _cache(dtype: torch.dtype) -> torch.Tensor:
    angles = torch.arange(MAX_POS, dtype=torch.float64)[:, None] * torch.linspace(0.01, 1.0, ROTARY // 2, dtype=torch.float64)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def _reference(x, positions, cache, sections, mode):
    """Each head's first ROTARY values rotated by its token's angles; the rest unchanged."""
    table = cache.to(torch.float64)
    if positions.dim() == 1:
        rows = table[positions]
    else:
        bounds = [0, *torch.tensor(sections).cumsum(0).tolist()]
        picks = []
        for part in (slice(0, ROTARY // 2), slice(ROTARY // 2, ROTARY)):
            half = table[:, part]
            picks.append(torch.cat([half[positions[i], bounds[i]:bounds[i + 1]] for i in range(len(sections))], -1))
        rows = torch.cat(picks, -1)
    cos, sin = rows[:, : ROTARY // 2][:, None, :], rows[:, ROTARY // 2 :][:, None, :]
    heads = x.to(torch.float64).reshape(x.shape[0], -1, HEAD).clone()
    part = heads[..., :ROTARY]
    if mode == "half":
        a, b = part[..., : ROTARY // 2], part[..., ROTARY // 2 :]
        heads[..., :ROTARY] = torch.cat((a * cos - b * sin, b * cos + a * sin), -1)
    else:
        a, b = part[..., 0::2], part[..., 1::2]
        heads[..., 0:ROTARY:2], heads[..., 1:ROTARY:2] = a * cos - b * sin, b * cos + a * sin
    return heads.reshape(x.shape)


@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("multimodal", [False, True])
def test_npu_mrope_rotates_the_rotary_part_of_every_head(mode, multimodal):
    gen = torch.Generator().manual_seed(1)
    query = torch.randn(TOKENS, 4 * HEAD, generator=gen).to(torch.bfloat16)
    key = torch.randn(TOKENS, 2 * HEAD, generator=gen).to(torch.bfloat16)
    if multimodal:
        positions, sections = torch.randint(0, MAX_POS, (3, TOKENS), generator=gen), [4, 6, 6]
    else:
        positions, sections = torch.randint(0, MAX_POS, (TOKENS,), generator=gen), [0, 0, 0]
    cache = _cache(torch.bfloat16)
    q_out, k_out = torch_npu.npu_mrope(positions, query, key, cache, HEAD, mrope_section=sections, rotary_mode=mode)
    for out, x in ((q_out, query), (k_out, key)):
        assert out.shape == x.shape and out.dtype == torch.bfloat16
        assert torch.allclose(out.to(torch.float64), _reference(x, positions, cache, sections, mode), atol=2e-2, rtol=1e-2)
        assert torch.equal(out.reshape(TOKENS, -1, HEAD)[..., ROTARY:], x.reshape(TOKENS, -1, HEAD)[..., ROTARY:])


def test_npu_mrope_compiles_to_one_node_and_refuses_what_the_op_refuses():
    positions = torch.arange(TOKENS)
    query, key, cache = torch.randn(TOKENS, HEAD), torch.randn(TOKENS, HEAD), _cache(torch.float32)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(lambda *a: torch_npu.npu_mrope(*a, HEAD, rotary_mode="half"), backend=backend, fullgraph=True)
    assert all(torch.equal(c, e) for c, e in zip(compiled(positions, query, key, cache), torch_npu.npu_mrope(positions, query, key, cache, HEAD)))
    assert [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function" and "npu" in str(n.target)] == ["npu.npu_mrope"]
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mrope(positions.repeat(3, 1), query, key, cache, HEAD, mrope_section=[4, 4, 4])
    assert (exc.value.op, exc.value.argument) == ("npu_mrope", "mrope_section")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mrope(positions, query.reshape(TOKENS, 1, HEAD), key, cache, HEAD)
    assert (exc.value.op, exc.value.argument) == ("npu_mrope", "query")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mrope(positions, query.bfloat16(), key.bfloat16(), cache, HEAD)
    assert (exc.value.op, exc.value.argument) == ("npu_mrope", "cos_sin_cache")
    with pytest.raises(RuntimeError, match="cache_mode only support default or interleave"):
        torch_npu.npu_mrope(positions, query, key, cache, HEAD, cache_mode="interleaved")
    with pytest.raises(ValueError, match="interleaves three position rows"):
        torch_npu.npu_mrope(positions.repeat(4, 1), query, key, cache, HEAD, mrope_section=[4, 4, 4, 4],
                            cache_mode="interleave")


def test_npu_mrope_interleave_cache_mode_cycles_the_position_rows():
    """The API page's cache_mode='interleave' formula: row 0's cos/sin, with columns 1::3 and 2::3 below
    3 * mrope_section[1] taken from rows 1 and 2 of positions."""
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(TOKENS, 2 * HEAD, generator=gen, dtype=torch.float64).float()
    key = torch.randn(TOKENS, HEAD, generator=gen, dtype=torch.float64).float()
    positions, sections = torch.randint(0, MAX_POS, (3, TOKENS), generator=gen), [6, 5, 5]
    cache = _cache(torch.float32)
    half = ROTARY // 2
    rows = cache.to(torch.float64)[positions]
    cos, sin = rows[..., :half], rows[..., half:]
    mixed_cos, mixed_sin = cos[0].clone(), sin[0].clone()
    for row in (1, 2):
        mixed_cos[:, row:sections[1] * 3:3] = cos[row, :, row:sections[1] * 3:3]
        mixed_sin[:, row:sections[1] * 3:3] = sin[row, :, row:sections[1] * 3:3]
    # one positions row holding the mixed table's angles is the same as the interleaved lookup
    table = torch.cat((mixed_cos, mixed_sin), -1)
    q_out, k_out = torch_npu.npu_mrope(positions, query, key, cache, HEAD, mrope_section=sections,
                                       cache_mode="interleave")
    for out, x in ((q_out, query), (k_out, key)):
        expected = _reference(x, torch.arange(TOKENS), table, sections, "half")
        assert torch.allclose(out.to(torch.float64), expected, atol=1e-5)
