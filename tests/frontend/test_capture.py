"""Capture and the program IR: scope ops survive lowering, nesting resolves per kernel, views alias."""

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

from pytest_npufuse import NpufuseError, compare, torchair
from pytest_npufuse.errors import CaptureError, ScopeError
from pytest_npufuse.frontend import scopes
from pytest_npufuse.frontend.lower import build_program
from pytest_npufuse.target.catalog import load_catalog


def aten_program(model, *inputs):
    """Capture ``model`` and return its program IR plus the aten graph the backend saw."""
    seen = {}

    def backend(gm, example_inputs):
        def fw(aten_gm, fw_inputs):
            aten_gm.graph.eliminate_dead_code()
            seen["gm"] = aten_gm
            return aten_gm

        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, fullgraph=True, dynamic=False)(*inputs)
    return build_program(seen["gm"], load_catalog()), seen["gm"]


class Nested(torch.nn.Module):
    def forward(self, a, b):
        with torchair.scope.super_kernel("outer", "feed-sync-all=1"):
            x = a @ b
            with torchair.scope.npu_stream_switch("2", 3):
                y = x @ b
                with torchair.scope.super_kernel(None):
                    z = y @ b
                    with torchair.scope.super_kernel("inner", ""):
                        w = z @ b
            with torchair.scope.limit_core_num(8, 16):
                v = w @ b
        return v


def test_scope_ops_survive_dead_code_elimination():
    _, gm = aten_program(Nested(), torch.ones(4, 4), torch.ones(4, 4))
    targets = [node.target for node in gm.graph.nodes]
    assert targets.count(scopes.SCOPE_ENTER) == 5
    assert targets.count(scopes.SCOPE_EXIT) == 5


def test_nested_scopes_resolve_innermost_wins_and_none_clears():
    program, _ = aten_program(Nested(), torch.ones(4, 4), torch.ones(4, 4))
    x, y, z, w, v = (kernel.annotations for kernel in program.kernels)
    assert (x.sk_scope, x.sk_options, x.stream) == ("outer", "feed-sync-all=1", None)
    assert (y.sk_scope, y.stream, y.stream_priority) == ("outer", "2", 3)
    assert (z.sk_scope, z.sk_options, z.stream) == (None, "", "2")
    assert (w.sk_scope, w.sk_options, w.stream) == ("inner", "", "2")
    assert (v.sk_scope, v.aicore_limit, v.vectorcore_limit, v.stream) == ("outer", 8, 16, None)


class Views(torch.nn.Module):
    def forward(self, a, b):
        with torchair.scope.super_kernel("sp1", ""):
            c = (a @ b).t().reshape(-1)
            return c.unsqueeze(0) * 2


def test_view_ops_are_aliases_not_kernels():
    program, _ = aten_program(Views(), torch.ones(4, 8), torch.ones(8, 4))
    assert [k.op_type for k in program.kernels] == ["aten::mm", "aten::clone", "aten::mul"]
    mul = program.kernels[-1]
    (view,) = mul.inputs[:1]
    assert program.buffers[view].alias_of is not None
    assert program.storage(view) == program.kernels[1].outputs[0]
    mm = program.kernels[0]
    assert mm.output_specs[0].shape == (4, 4) and mm.output_specs[0].nbytes == 64
    assert mm.flops == 2 * 16 * 16 * 16  # the Cube multiplies whole 16x16x16 fractals


def test_kernels_are_named_like_ge_nodes():
    program, _ = aten_program(Nested(), torch.ones(4, 4), torch.ones(4, 4))
    assert [k.name for k in program.kernels] == ["MatMulV3", "MatMulV3_1", "MatMulV3_2", "MatMulV3_3", "MatMulV3_4"]


class RepeatsTensor(torch.nn.Module):
    """The affinity guide's fast RepeatInterleave branch: a 1-D repeats tensor, with its output size."""

    def forward(self, lens):
        return torch.repeat_interleave(lens, torch.full(lens.shape, 8), output_size=lens.shape[0] * 8)


def test_repeat_interleave_with_a_repeats_tensor_is_a_known_op():
    program, _ = aten_program(RepeatsTensor(), torch.arange(16.0))
    (repeat,) = [k for k in program.kernels if k.op_type == "aten::repeat_interleave"]
    assert repeat.info.kernel_type == "RepeatInterleave" and repeat.output_specs[0].shape == (128,)
    assert repeat.info.known


class PickedRows(torch.nn.Module):
    """``nonzero``'s row count is data-dependent: torch checks it against the mask's size in the graph."""

    def forward(self, x, mask):
        return x[torch.nonzero(mask, as_tuple=False).squeeze(1)].sum()


def test_checks_on_a_data_dependent_size_are_no_kernels(recwarn):
    program, gm = aten_program(PickedRows(), torch.randn(64, 8), torch.arange(64) % 3 == 0)
    assert any(node.target is torch.ops.aten._assert_scalar.default for node in gm.graph.nodes)
    assert [k.info.kernel_type for k in program.kernels] == ["NonZero", "Index", "ReduceSum"]
    assert not [w for w in recwarn if "not in the npufuse op catalog" in str(w.message)]


class Unbalanced(torch.nn.Module):
    def forward(self, a):
        torch.ops.npufuse.scope_enter(["_super_kernel_scope", "_super_kernel_options"], ["sp1", ""])
        return a @ a


def test_unbalanced_enter_is_an_error_naming_the_scope():
    with pytest.raises(CaptureError) as exc:
        compare(Unbalanced(), torch.ones(2, 2))
    assert exc.value.where.startswith(__file__ + ":")


class ExitOnly(torch.nn.Module):
    def forward(self, a):
        torch.ops.npufuse.scope_exit()
        return a @ a


def test_exit_without_enter_is_an_error():
    with pytest.raises(ScopeError) as exc:
        compare(ExitOnly(), torch.ones(2, 2))
    assert exc.value.where.startswith(__file__ + ":")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torchair.scope.super_kernel(""), "scope"),
        (lambda: torchair.scope.super_kernel(3), "scope"),
        (lambda: torchair.scope.super_kernel("sp1", None), "options"),
        (lambda: torchair.scope.npu_stream_switch(""), "stream_tag"),
        (lambda: torchair.scope.npu_stream_switch("1", "high"), "stream_priority"),
        (lambda: torchair.scope.limit_core_num(-1, 2), "op_aicore_num"),
    ],
)
def test_bad_scope_arguments(make, message):
    with pytest.raises(ScopeError) as exc:
        make()
    assert exc.value.argument == message


def test_limit_core_num_accepts_digit_strings_like_torchair():
    program, _ = aten_program(_Limited(), torch.ones(2, 2))
    assert program.kernels[0].annotations.aicore_limit == 4


class _Limited(torch.nn.Module):
    def forward(self, a):
        with torchair.scope.limit_core_num("4", "8"):
            return a @ a


def test_compiler_config_mode_is_validated():
    config = torchair.CompilerConfig()
    config.debug.graph_dump.type = "pbtxt"
    with pytest.raises(NpufuseError) as exc:
        config.mode = "turbo"
    assert exc.value.argument == "config.mode"


def test_get_npu_backend_compiles_and_reports():
    backend = torchair.get_npu_backend(compiler_config=torchair.CompilerConfig())
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(Views(), backend=backend, fullgraph=True, dynamic=False)(torch.ones(4, 8), torch.ones(8, 4))
    assert torch.equal(out, Views()(torch.ones(4, 8), torch.ones(8, 4)))
    (graph,) = backend.graphs
    assert graph.plan.scope("sp1").outcome == "fused"
    assert graph.run.target == "a3"


def test_a_graph_with_parameters_is_captured_as_forward_and_backward():
    weight = torch.nn.Parameter(torch.ones(2, 2))
    backend = torchair.get_npu_backend()
    torch._dynamo.reset()
    out = torch.compile(lambda x: x @ weight, backend=backend, fullgraph=True)(torch.ones(2, 2))
    out.sum().backward()
    assert torch.equal(weight.grad, torch.full((2, 2), 2.0))
    forward, backward = backend.graphs
    assert (forward.program.phase, backward.program.phase) == ("forward", "backward")
    assert all(kernel.name.startswith("backward/") for kernel in backward.program.kernels)
