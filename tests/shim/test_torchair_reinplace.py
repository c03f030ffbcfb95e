"""TorchAir's reinplacing of registered functional NPU ops in the aclgraph modes (Ascend/torchair
python/torchair/_acl_concrete_graph/graph_pass.py, commit fced8842): a registered op that updates graph
inputs runs in place, without the ``copy_`` write-backs, unless an updated input has users on more than
one stream or the pass is turned off. In max-autotune the op stays functional, and GE drops the copies
around it as redundant (frontend/reinplace.py)."""

from __future__ import annotations

import contextlib
import importlib
import logging

import pytest
import torch

from pytest_npufuse import torchair
from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.target.profile import load_profile

ROPE, RMS = 16, 32


@pytest.fixture
def session(shim):
    with modeled_run(load_profile("a3")) as run:
        yield run


def _inputs():
    gen = torch.Generator().manual_seed(40)
    kv = torch.randn(4, 1, 1, RMS + ROPE, generator=gen).bfloat16()
    gamma = torch.randn(RMS, generator=gen).bfloat16()
    cos, sin = torch.randn(4, 1, 1, ROPE, generator=gen).bfloat16(), torch.randn(4, 1, 1, ROPE, generator=gen).bfloat16()
    caches = torch.zeros(2, 16, 1, ROPE, dtype=torch.bfloat16), torch.zeros(2, 16, 1, RMS, dtype=torch.bfloat16)
    return (kv, gamma, cos, sin, torch.tensor([17, 0, 31, 5])), caches


def _write_caches(kv, gamma, cos, sin, slots, k_cache, ckv_cache):
    import torch_npu

    k, y = torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, slots, k_cache, ckv_cache, cache_mode="PA_NZ", is_output_kv=True)
    return k + 1, y


def _write_on_a_side_stream_then_read_on_the_default(kv, gamma, cos, sin, slots, k_cache, ckv_cache):
    import torch_npu

    side = torch.npu.Stream()
    with torch.npu.stream(side):
        _, y = torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, slots, k_cache, ckv_cache, cache_mode="PA_NZ", is_output_kv=True)
    torch.npu.current_stream().wait_stream(side)
    return k_cache.sum() + y.sum()


def _write_inside_a_default_stream_block_then_read(kv, gamma, cos, sin, slots, k_cache, ckv_cache):
    import torch_npu

    with torch.npu.stream(torch.npu.default_stream()):
        _, y = torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, slots, k_cache, ckv_cache, cache_mode="PA_NZ", is_output_kv=True)
    return k_cache.sum() + y.sum()


def _run(session, fn, config):
    args, caches = _inputs()
    expected_caches = tuple(c.clone() for c in caches)
    expected = fn(*args, *expected_caches)
    deprecated = config.mode.value == "reduce-overhead"  # TorchAir's notice: the mode moves to npugraph_ex
    with pytest.warns(DeprecationWarning, match="npugraph_ex") if deprecated else contextlib.nullcontext():
        backend = torchair.get_npu_backend(compiler_config=config)
    got = torch.compile(fn, backend=backend, dynamic=False)(*args, *caches)
    for a, b in zip([*got, *caches] if isinstance(got, tuple) else [got, *caches],
                    [*expected, *expected_caches] if isinstance(expected, tuple) else [expected, *expected_caches], strict=True):
        assert torch.equal(a, b)
    return session.graphs()[-1]


def _config(mode: str) -> torchair.CompilerConfig:
    config = torchair.CompilerConfig()
    config.mode = mode
    return config


def test_reduce_overhead_runs_the_registered_op_in_place_without_the_cache_copies(session):
    graph = _run(session, _write_caches, _config("reduce-overhead"))
    kernels = graph.program.kernels
    assert [k.op_type for k in kernels] == ["npu::npu_kv_rmsnorm_rope_cache_v2", "aten::add"]
    write = kernels[0]
    assert write.info.kernel_type == "KvRmsNormRopeCache"  # the device kernel of its functional form
    cache_inputs = graph.program.inputs[5:]
    assert [graph.program.storage(name) for name in write.outputs[2:]] == list(cache_inputs)


def test_the_option_keeps_the_functional_op_and_its_write_backs(session):
    config = _config("reduce-overhead")
    config.debug.aclgraph.disable_reinplace_input_mutated_ops_pass = True
    graph = _run(session, _write_caches, config)
    op_types = [k.op_type for k in graph.program.kernels]
    assert op_types[0] == "npu::npu_kv_rmsnorm_rope_cache_v2_functional" and op_types.count("aten::copy_") == 2


def test_max_autotune_keeps_the_functional_op_but_ge_drops_its_redundant_copies(session):
    graph = _run(session, _write_caches, _config("max-autotune"))
    op_types = [k.op_type for k in graph.program.kernels]
    assert op_types[0] == "npu::npu_kv_rmsnorm_rope_cache_v2_functional" and "aten::copy_" not in op_types


def test_npugraph_ex_reinplaces_unless_input_inplace_pass_is_off(session):
    import npugraph_ex

    for enabled, expected in ((True, "npu::npu_kv_rmsnorm_rope_cache_v2"), (False, "npu::npu_kv_rmsnorm_rope_cache_v2_functional")):
        config = npugraph_ex.CompilerConfig()
        config.input_inplace_pass = enabled
        args, caches = _inputs()
        torch.compile(_write_caches, backend=npugraph_ex.get_npu_backend(compiler_config=config), dynamic=False)(*args, *caches)
        assert session.graphs()[-1].program.kernels[0].op_type == expected
        torch._dynamo.reset()


def test_users_of_an_updated_input_on_two_streams_keep_it_functional_and_say_why(session, caplog):
    with caplog.at_level(logging.DEBUG, logger="torchair"):
        graph = _run(session, _write_on_a_side_stream_then_read_on_the_default, _config("reduce-overhead"))
    assert graph.program.kernels[0].op_type == "npu::npu_kv_rmsnorm_rope_cache_v2_functional"
    assert "[multi_stream_multi_reinplace]Current node: npu_kv_rmsnorm_rope_cache_v2_functional, type: " in caplog.text
    assert "check no multi stream users failed for reinplace. The users of the mutated input node have multiple streams." in caplog.text


def test_a_block_on_the_default_stream_is_the_default_stream_to_the_reinplace_check(session):
    """The stream labels TorchAir's check reads are lowering's: ``torch.npu.stream(default_stream())`` issues
    on the stream the ops outside it use, so the cache's users are on one stream and the op runs in place."""
    graph = _run(session, _write_inside_a_default_stream_block_then_read, _config("reduce-overhead"))
    assert graph.program.kernels[0].op_type == "npu::npu_kv_rmsnorm_rope_cache_v2"
    assert {kernel.stream for kernel in graph.program.kernels} == {"default"}


def test_a_user_registers_its_own_op_through_torchairs_graph_pass_module(shim):
    graph_pass = importlib.import_module("torchair._acl_concrete_graph.graph_pass")
    functional = torch.ops.npu.npu_kv_rmsnorm_rope_cache_v2_functional.default
    entry = graph_pass.inplaceable_npu_ops[functional]
    assert entry.mutated_arg == [5, 6] and entry.extra_check is graph_pass.check_multi_stream_for_multi_reinplace
    graph_pass.register_inplaceable_npu_op("no_such_functional", "no_such_op", mutated_arg=[0])
    assert len(graph_pass.inplaceable_npu_ops) == len({*graph_pass.inplaceable_npu_ops})
    assert all("no_such" not in str(op) for op in graph_pass.inplaceable_npu_ops)
