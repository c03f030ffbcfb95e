"""L2 residency (issue 21): a tensor the previous kernel wrote, or a step that fits in L2, is read from L2."""

from dataclasses import replace

from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.simulate.l2 import effective_bytes
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def chain(rows: int):
    builder = ProgramBuilder()
    x = builder.input("x", (rows, 4096))
    y = builder.op("aten::mul", [x, x], (rows, 4096))
    builder.op("aten::add", [y, y], (rows, 4096))
    return builder.build()


def test_a_step_that_fits_in_l2_reads_even_its_inputs_from_l2():
    program = chain(256)  # 2 MiB tensors
    priced = effective_bytes(program, A3)
    # each reads 2 MiB (from L2 now) and writes 2 MiB
    assert all(priced[kernel.name] < 0.6 * kernel.bytes for kernel in program.kernels)


def test_a_producer_s_output_is_still_in_l2_for_its_consumer_but_cold_inputs_are_not():
    program = chain(8192)  # 64 MiB tensors: the step outgrows the share of L2 that holds data
    first, second = program.kernels
    priced = effective_bytes(program, A3)
    assert first.name not in priced  # x comes from HBM
    assert priced[second.name] < second.bytes  # y was just written
    assert second.name not in effective_bytes(program, replace(A3, l2_activation_share=0.1))
