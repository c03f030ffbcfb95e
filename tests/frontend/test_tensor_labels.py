"""Tensors named in the user's words: the variable or expression of the source line, never an FX name."""

from pathlib import Path

import torch

from pytest_npufuse import torch_npu
from pytest_npufuse import torchair as tng
from pytest_npufuse.frontend.dynamo import compile_once
from pytest_npufuse.frontend.names import expression_of, user_expression
from pytest_npufuse.pipeline.backend import NpuBackend
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.target.profile import load_profile


def test_an_assignments_whole_value_is_named_by_its_target():
    code = "hidden = x * 2"
    assert expression_of(code, 9, 14).name(None) == "hidden"
    assert expression_of("self.cache[0] += x @ w", 17, 22).name(None) == "self.cache[0]"


def test_a_subexpression_is_named_by_its_text():
    code = "out = torch.relu(hidden @ self.w) @ self.w"
    start = code.index("hidden")
    assert expression_of(code, start, start + len("hidden @ self.w")).name(None) == "hidden @ self.w"


def test_a_tuple_target_names_each_output_and_falls_back_for_underscore():
    code = "normed, _ = torch_npu.npu_rms_norm(x, gamma)"
    expression = expression_of(code, 12, len(code))
    assert expression.targets == ("normed", "_") and expression.tuple_target
    assert expression.name(0) == "normed"
    assert expression.name(1) == "(torch_npu.npu_rms_norm(x, gamma))[1]"


def test_a_compound_statements_header_and_a_return_are_expressions():
    assert expression_of("with torch.npu.stream(s):", 5, 24).name(None) == "torch.npu.stream(s)"
    assert expression_of("return a + b", 7, 12).name(None) == "a + b"


def test_the_caret_line_of_a_stack_trace_marks_the_expression():
    trace = (
        '  File "/site-packages/torch/nn/modules/module.py", line 1, in _call_impl\n    return f()\n'
        '  File "/home/me/model.py", line 12, in forward\n'
        "    out = torch.relu(hidden @ self.w) @ self.w\n"
        "                     ^^^^^^^^^^^^^^^\n"
    )
    assert user_expression(trace).name(None) == "hidden @ self.w"
    whole = '  File "/home/me/model.py", line 3, in forward\n    y = f(x)\n'
    assert user_expression(whole).name(None) == "y"
    inside_torch = Path(torch.__file__).parent / "nn" / "functional.py"
    assert user_expression(f'  File "{inside_torch}", line 1, in f\n    g()\n') is None


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(64, 64, generator=gen))
        self.gamma = torch.nn.Parameter(torch.ones(64))

    def forward(self, x):
        hidden = x * 2
        normed, _ = torch_npu.npu_rms_norm(hidden, self.gamma)
        with tng.scope.npu_stream_switch("1"):
            side = torch.relu(hidden @ self.w) @ self.w
        return normed + side


def test_every_kernel_output_of_a_model_carries_the_users_name():
    config = tng.CompilerConfig()
    torch._dynamo.reset()
    backend = NpuBackend(config.graph_options(), load_profile("a3"), Variant.VARIANT, multistream=False)
    compile_once(Layer(), (torch.randn(8, 64, generator=torch.Generator().manual_seed(1)),), backend)
    program = backend.graphs[0].program
    made = {program.buffers[k.outputs[0]].label: k.op_type for k in program.kernels if k.outputs}
    assert made["hidden"] == "aten::mul" and made["normed"] == "npu::npu_rms_norm"
    assert made["hidden @ self.w"] == "aten::mm" and made["side"] == "aten::mm"
    assert made["torch.relu(hidden @ self.w)"] == "aten::relu" and made["normed + side"] == "aten::add"
    produced = [b for b in program.buffers.values() if b.producer is not None]
    assert produced and all(b.label and "getitem" not in b.label for b in produced)


def test_dynamos_end_column_is_not_trusted_the_op_chooses_among_expressions_at_the_caret():
    code = "out = torch.relu(hidden @ self.w) @ self.w"
    start = code.index("torch")
    assert expression_of(code, start, len(code), "aten::relu").name(None) == "torch.relu(hidden @ self.w)"
    assert expression_of(code, start, len(code), "aten::mm").name(None) == "out"
