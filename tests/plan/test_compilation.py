"""The compile work of a variant's SuperKernels: identical SuperKernels share one build."""

from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.plan.compilation import CompileWork, compile_work
from pytest_npufuse.plan.superkernel import plan_variant
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def _layers(rows: list[int], label) -> tuple:
    """One scoped block of two matmuls per entry of ``rows`` (its token count), each block followed by an
    unscoped add, as a decoder layer's scope is followed by the residual outside it."""
    builder = ProgramBuilder()
    weight = builder.input("w", (512, 512))
    for index, tokens in enumerate(rows):
        x = builder.input(f"x{index}", (tokens, 512))
        h = builder.op("aten::mm", [x, weight], (tokens, 512), scope=label(index))
        h = builder.op("aten::mm", [h, weight], (tokens, 512), scope=label(index))
        builder.op("aten::add", [h, x], (tokens, 512))
    program = builder.build()
    return compile_work(plan_variant(program, A3, variant=Variant.VARIANT), program)


def test_identical_layers_compile_once():
    work = _layers([16, 16, 16], lambda index: f"layer_{index}")
    assert work == CompileWork(superkernels=3, compiled=1, sub_kernels=2, largest=2)


def test_a_layer_with_other_shapes_is_compiled_on_its_own():
    work = _layers([16, 16, 32], lambda index: "decoder_layer")
    assert (work.superkernels, work.compiled, work.sub_kernels) == (3, 2, 4)


def test_no_scope_compiles_nothing():
    work = _layers([16, 16], lambda index: None)
    assert work == CompileWork() and work.describe() == "-"
