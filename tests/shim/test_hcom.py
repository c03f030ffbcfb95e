"""``torchair.patch_for_hcom()`` and the compatibility module that patches ``all_reduce`` on import: a
model's torch.distributed collectives become collective ops of its graph, as in cann-recipes-infer's
models (they call ``torchair.patch_for_hcom()`` at import, then ``dist.all_reduce(x, group=...)`` in
``forward``), and eager calls stay torch's."""

from __future__ import annotations

import importlib
import logging

import pytest
import torch
import torch.distributed as dist

from pytest_npufuse import capture, torchair

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "all_to_all_single", "all_to_all")


@pytest.fixture
def world(monkeypatch):
    """A one-rank gloo group, and torch.distributed's collectives restored after the test."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    for name in COLLECTIVES:
        monkeypatch.setattr(dist, name, getattr(dist, name))
    return dist.group.WORLD


class TensorParallel(torch.nn.Module):
    """Each torch.distributed collective the patch covers, as a TP/EP layer writes them."""

    def __init__(self, group):
        super().__init__()
        self.group = group

    def forward(self, x):
        y = x @ x.T
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=self.group)
        gathered = torch.empty_like(y)
        dist.all_gather_into_tensor(gathered, y, group=self.group)
        parts = [torch.empty_like(y)]
        dist.all_gather(parts, gathered, group=self.group)
        exchanged = torch.empty_like(parts[0])
        dist.all_to_all_single(exchanged, parts[0], group=self.group)
        dist.broadcast(exchanged, 0, group=self.group)
        outs = [torch.empty_like(exchanged)]
        dist.all_to_all(outs, [exchanged], group=self.group)
        return outs[0] + 1


def test_patch_for_hcom_puts_every_collective_in_the_graph_and_warns_as_torchair(world, caplog):
    with caplog.at_level(logging.WARNING, logger="torchair"):
        torchair.patch_for_hcom()
    assert "no need to call patch_for_hcom anymore" in caplog.text
    model, x = TensorParallel(world), torch.randn(8, 8)
    kernels = [kernel.op_type for kernel in capture(model, x).kernels]
    assert [k for k in kernels if k.startswith("_c10d_functional::")] == [
        "_c10d_functional::all_reduce", "_c10d_functional::all_gather_into_tensor",
        "_c10d_functional::all_gather_into_tensor", "_c10d_functional::all_to_all_single",
        "_c10d_functional::broadcast", "_c10d_functional::all_to_all_single",
    ]
    compiled = torch.compile(model, backend=torchair.get_npu_backend(), fullgraph=True)
    assert torch.equal(compiled(x), model(x))  # eager runs torch's own collectives, after the patch too


def test_without_the_patch_broadcast_breaks_the_graph_as_on_torch(world):
    class Broadcast(torch.nn.Module):
        def forward(self, x):
            dist.broadcast(x, 0)
            return x + 1

    with pytest.raises(Exception) as exc:
        capture(Broadcast(), torch.randn(4))
    assert exc.value.where.startswith(__file__ + ":")
    torchair.patch_for_hcom()
    assert "_c10d_functional::broadcast" in [k.op_type for k in capture(Broadcast(), torch.randn(4)).kernels]


def test_async_collective_in_a_graph_is_torchairs_assertion(world):
    class Async(torch.nn.Module):
        def forward(self, x):
            dist.all_reduce(x, async_op=True)
            return x

    torchair.patch_for_hcom()
    compiled = torch.compile(Async(), backend=torchair.get_npu_backend(), fullgraph=True)
    with pytest.raises(Exception, match="does not support the async_op = True"):  # raised while Dynamo traces
        compiled(torch.randn(4))
    assert dist.all_reduce(torch.ones(2), async_op=True) is not None  # eager: torch's work handle


def test_importing_the_compatibility_module_patches_all_reduce(shim, world):
    module = "torchair.ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce"
    importlib.reload(importlib.import_module(module))
    assert dist.all_reduce.__module__ == "pytest_npufuse.torchair._hcom"
    assert dist.broadcast.__module__ != "pytest_npufuse.torchair._hcom"
