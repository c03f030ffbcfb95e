"""A write into a graph input is priced as the in-place kernel TorchAir leaves, not as functionalisation's copies."""

import torch

from pytest_npufuse import capture, compare, torch_npu, torchair

CACHE = (64, 4, 128)  # 64 slots of 4 heads x 128: 64 KiB of bf16, against 1 KiB per token written


class CacheWrite(torch.nn.Module):
    """A decode step's KV-cache write (``npu_scatter_nd_update_`` into the cache it is handed), then a read."""

    def forward(self, cache, slots, rows):
        torch_npu.npu_scatter_nd_update_(cache, slots, rows)
        return cache.sum(0)


def _inputs():
    cache = torch.zeros(CACHE, dtype=torch.bfloat16)
    return cache, torch.tensor([[5]]), torch.ones(1, 4, 128, dtype=torch.bfloat16)


def test_a_cache_write_is_one_in_place_kernel_that_moves_the_slots_only():
    program = capture(CacheWrite(), *_inputs())
    assert [kernel.op_type for kernel in program.kernels] == ["npu::npu_scatter_nd_update_", "aten::sum"]
    scatter = program.kernels[0]
    assert program.storage(scatter.outputs[0]) == program.inputs[0]  # it writes the cache's own memory
    assert scatter.bytes < 4 * 128 * 2 * 3  # the row written and its index, not the 64 KiB cache
    assert program.producer(program.kernels[1].inputs[0]) is None  # the read sees the updated input


def test_a_checked_cache_write_runs_no_copy_and_computes_as_the_graph_does():
    report = compare(CacheWrite(), *_inputs())
    assert report.bit_exact and report.races == ()
    assert {kernel.kernel_type for kernel in report.variant.kernels} == {"ScatterNdUpdate", "ReduceSum"}


class Scaled(torch.nn.Module):
    def forward(self, x, w):
        x.mul_(2)
        return x @ w


def test_a_pointwise_op_in_place_still_reads_and_writes_every_element():
    program = capture(Scaled(), torch.ones(8, 8), torch.ones(8, 8))
    mul = next(kernel for kernel in program.kernels if kernel.op_type == "aten::mul")
    assert "aten::copy_" not in {kernel.op_type for kernel in program.kernels}
    assert mul.bytes == 2 * 8 * 8 * 4 and program.storage(mul.outputs[0]) == program.inputs[0]


class TwoStreams(torch.nn.Module):
    """The cache is read on a side stream and written on the main one, with no event between them."""

    def forward(self, cache, slots, rows):
        with torchair.scope.npu_stream_switch("1"):
            total = cache.sum(0)
        torch_npu.npu_scatter_nd_update_(cache, slots, rows)
        return total


def test_an_input_used_on_two_streams_keeps_its_copies_as_torchair_does():
    program = capture(TwoStreams(), *_inputs())
    assert [kernel.op_type for kernel in program.kernels][-1] == "aten::copy_"


class StackedCacheWrite(torch.nn.Module):
    """vLLM-Ascend's KV-cache write into one half of a stacked ``[2, slots, heads, dim]`` cache
    (``npu_scatter_nd_update_(kv_cache[1], slots, value)``): functionalisation writes the view's new value
    back with a ``select_scatter``, which TorchAir's reinplacing undoes as it does a plain input's copy."""

    def forward(self, kv_cache, slots, rows):
        torch_npu.npu_scatter_nd_update_(kv_cache[1], slots, rows)
        return kv_cache.sum(0)


class DecodeCacheWrite(torch.nn.Module):
    """cann-recipes' decode write ``scatter_update_(past_key, kv_len, key_states, -2)`` into one layer's
    view of a cache that holds every layer."""

    def forward(self, caches, offsets, rows):
        torch_npu.scatter_update_(caches[:, 0], offsets, rows, -2)
        return caches.sum(1)


def test_a_write_into_a_view_of_the_cache_is_one_in_place_kernel():
    stacked = (torch.zeros(2, *CACHE, dtype=torch.bfloat16), torch.tensor([[5]]),
               torch.ones(1, 4, 128, dtype=torch.bfloat16))
    layers = (torch.zeros(2, 2, 4, 64, 16, dtype=torch.bfloat16), torch.tensor([0, 9]),
              torch.ones(2, 4, 1, 16, dtype=torch.bfloat16))
    for module, inputs, op in ((StackedCacheWrite(), stacked, "npu::npu_scatter_nd_update_"),
                               (DecodeCacheWrite(), layers, "npu::scatter_update")):
        program = capture(module, *inputs)
        assert [kernel.op_type for kernel in program.kernels] == [op, "aten::sum"]
        write = program.kernels[0]
        assert program.storage(write.outputs[0]) == program.inputs[0]  # the cache's own memory
        assert write.bytes < inputs[0].numel()  # the rows written, not the cache
        report = compare(module, *inputs)
        assert report.bit_exact and report.races == ()
