"""Memory/misc ops of ``pytest_npufuse.torch_npu`` against plain-torch formulas from their API pages."""

from __future__ import annotations

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

from pytest_npufuse import torch_npu


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


def _aot_graphs(fn, *inputs) -> tuple[list[str], object]:
    """Run ``fn`` compiled through AOT autograd; return the aten graphs' code and the result."""
    codes: list[str] = []

    def backend(gm, example_inputs):
        def inner(graph, _inputs):
            codes.append(graph.code)
            return make_boxed_func(graph.forward)

        return aot_module_simplified(gm, example_inputs, fw_compiler=inner)

    result = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return codes, result


def test_scatter_nd_update_replaces_addressed_slices() -> None:
    gen = _gen()
    base = torch.randn(4, 5, 6, generator=gen)
    indices = torch.tensor([[0, 1], [3, 4], [2, 0]], dtype=torch.int64)
    updates = torch.randn(3, 6, generator=gen)
    out = torch_npu.npu_scatter_nd_update(base, indices, updates)
    expected = base.clone()
    for (i, j), row in zip(indices.tolist(), updates):
        expected[i, j] = row
    assert torch.equal(out, expected)
    assert not torch.equal(base, expected)  # the input is unchanged


def test_scatter_nd_update_inplace_writes_the_cache_and_last_duplicate_wins() -> None:
    cache = torch.zeros(6, 2, dtype=torch.bfloat16)
    slots = torch.tensor([[4], [1], [4]], dtype=torch.int32)
    rows = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=torch.bfloat16)
    returned = torch_npu.npu_scatter_nd_update_(cache, slots, rows)
    assert returned is cache
    assert cache[4].tolist() == [3.0, 3.0] and cache[1].tolist() == [2.0, 2.0] and not cache[0].any()
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scatter_nd_update_(cache, torch.tensor([[6]]), rows[:1])
    assert (exc.value.op, exc.value.argument) == ("npu_scatter_nd_update_", "indices")


def test_scatter_nd_update_inplace_survives_compilation() -> None:
    def step(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        torch_npu.npu_scatter_nd_update_(cache, slots, rows)
        return cache * 2

    cache = torch.zeros(4, 3)
    slots, rows = torch.tensor([[2]]), torch.ones(1, 3)
    codes, out = _aot_graphs(step, cache, slots, rows)
    assert any("npu_scatter_nd_update" in code for code in codes)
    assert out[2].tolist() == [2.0, 2.0, 2.0] and cache[2].tolist() == [1.0, 1.0, 1.0]


def test_prefetch_changes_nothing_and_stays_in_the_graph() -> None:
    weight = torch.randn(8, 8)

    def layer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        torch_npu.npu_prefetch(w, x, 256)
        return x + 1

    x = torch.randn(2, 8)
    codes, out = _aot_graphs(layer, x, weight)
    assert torch.equal(out, x + 1)
    assert any("npu_prefetch" in code for code in codes)
    assert torch_npu.npu_prefetch(weight, None, 64) is None
    with pytest.raises(ValueError, match="max_size should be greater than zero, but got 0") as exc:
        torch_npu.npu_prefetch(weight, None, 0)
    assert (exc.value.op, exc.value.argument) == ("npu_prefetch", "max_size")


def _ref_top_k_top_p(logits: torch.Tensor, p: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    out = logits.clone()
    for b in range(logits.shape[0]):
        row = logits[b].double()
        kth = torch.sort(row, descending=True).values[int(k[b]) - 1]
        kept = row >= kth
        probs = torch.softmax(row.masked_fill(~kept, float("-inf")), dim=0)
        order = torch.argsort(row, stable=True)  # ascending
        cumulative = torch.cumsum(probs[order], dim=0)
        drop = cumulative <= 1 - float(p[b])
        drop[-1] = False
        dropped = torch.zeros_like(kept)
        dropped[order] = drop
        out[b] = logits[b].masked_fill(~kept | dropped, float("-inf"))
    return out


def test_top_k_top_p_matches_the_documented_filter() -> None:
    gen = _gen()
    logits = torch.randn(3, 32, generator=gen)
    p = torch.tensor([0.5, 0.9, 1.0])
    k = torch.tensor([4, 10, 32], dtype=torch.int32)
    out = torch_npu.npu_top_k_top_p(logits, p, k)
    assert torch.equal(out, _ref_top_k_top_p(logits, p, k))
    only_k = torch_npu.npu_top_k_top_p(logits, None, k)
    assert int(torch.isfinite(only_k[0]).sum()) == 4


@pytest.mark.parametrize("transpose_first", [True, False])
def test_confusion_transpose_is_permute_and_reshape(transpose_first: bool) -> None:
    x = torch.randn(2, 3, 4, 6, generator=_gen())
    if transpose_first:
        out = torch_npu.npu_confusion_transpose(x, [0, 2, 1, 3], [2, 4, 18], True)
        expected = x.permute(0, 2, 1, 3).reshape(2, 4, 18)
    else:
        out = torch_npu.npu_confusion_transpose(x, [0, 2, 1], [2, 12, 6], False)
        expected = x.reshape(2, 12, 6).permute(0, 2, 1)
    assert torch.equal(out, expected) and out.is_contiguous()
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_confusion_transpose(x, [0, 1], [5, 5], False)
    assert exc.value.op == "npu_confusion_transpose"


def test_scatter_update_writes_each_batch_from_its_offset_along_the_axis() -> None:
    gen = torch.Generator().manual_seed(29)
    data = torch.randn(3, 2, 8, 4, generator=gen).to(torch.bfloat16)
    updates = torch.randn(3, 2, 2, 4, generator=gen).to(torch.bfloat16)
    offsets = torch.tensor([0, 5, 3], dtype=torch.int32)
    expected = data.clone()
    for b, start in enumerate(offsets.tolist()):  # the README's formula, written out per element row
        for k in range(2):
            expected[b, :, start + k, :] = updates[b, :, k, :]
    out = torch_npu.scatter_update(data, offsets, updates, -2)
    assert torch.equal(out, expected) and not torch.equal(data, expected)
    column = torch.randn(3, 2, 8, 1, generator=gen).to(torch.bfloat16)
    last = torch_npu.scatter_update(data, torch.tensor([3, 0, 2]), column, -1)
    for b, start in enumerate([3, 0, 2]):
        assert torch.equal(last[b, :, :, start], column[b, :, :, 0])
        assert torch.equal(last[b].index_fill(-1, torch.tensor([start]), 0), data[b].index_fill(-1, torch.tensor([start]), 0))
    assert torch_npu.scatter_update_(data, offsets, updates, 2) is data and torch.equal(data, expected)


def test_scatter_update_refuses_out_of_range_offsets_and_2d_indices() -> None:
    data = torch.zeros(2, 4, 3)
    with pytest.raises(ValueError) as exc:
        torch_npu.scatter_update(data, torch.tensor([0, 3]), torch.ones(2, 2, 3), -2)
    assert (exc.value.op, exc.value.argument) == ("scatter_update", "indices")
    with pytest.raises(ValueError) as exc:
        torch_npu.scatter_update(data, torch.zeros(2, 2, dtype=torch.int64), torch.ones(2, 1, 3), -2)
    assert (exc.value.op, exc.value.argument) == ("scatter_update", "indices")
    with pytest.raises(ValueError) as exc:
        torch_npu.scatter_update(data, torch.tensor([0, 1]), torch.ones(1, 4, 3), 0)
    assert (exc.value.op, exc.value.argument) == ("scatter_update", "axis")


def test_a_functionalized_scatter_update_holds_the_functional_op_and_one_copy_into_the_input() -> None:
    """torch_npu's functionalization of ``scatter_update_`` (Ascend/pytorch test/custom_ops/
    test_functionalization.py): ``scatter_update``, then ``copy_`` into the input, returning the former."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def functionalized(data: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
        inputs = [torch._to_functional_tensor(t) for t in (data, indices, updates)]
        torch._enable_functionalization(reapply_views=False)
        try:
            out = torch.ops.npu.scatter_update_(*inputs, -2)
        finally:
            torch._disable_functionalization()
        torch._sync(inputs[0])
        data.copy_(torch._from_functional_tensor(inputs[0]))
        torch._sync(out)
        return torch._from_functional_tensor(out)

    args = (torch.zeros(2, 1, 4, 2), torch.tensor([1, 3]), torch.ones(2, 1, 1, 2))
    graph = make_fx(functionalized)(*args).graph
    targets = [str(node.target) for node in graph.nodes if node.op == "call_function"]
    assert targets == ["npu.scatter_update.default", "aten.copy_.default"]
    data = args[0].clone()
    assert torch.equal(functionalized(data, *args[1:]), torch_npu.scatter_update(*args, -2))
    assert data.sum() == 4
