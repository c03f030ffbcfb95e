"""Seed 002's host-scheduling row: LLaMA-2 under GE host scheduling, small-shape ops on device or on host."""

from __future__ import annotations

from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate

from .rows import Profiles, Row

SHAPE_OPS_PER_LAYER = 21  # seed 002: "650+" Pack/Gather/Concat ops over LLaMA2's 32 layers


def llama2_host_scheduled(config, tokens: int = 1):
    """A LLaMA2 forward as GE host-schedules it with dynamic shapes: per layer ~20 device ops and a chain
    of small int64 shape ops (Pack, Gather, Concat) whose result a value-dependent op reads."""
    hidden, ffn, layers = config["hidden"], config["ffn"], config["layers"]
    b = ProgramBuilder()
    x = b.input("x", (tokens, hidden))
    wq = b.input("wq", (hidden, hidden))
    wf = b.input("wf", (hidden, ffn))
    wd = b.input("wd", (ffn, hidden))
    shape = b.input("shape", (4,), "int64")
    for _ in range(layers):
        s = shape
        for index in range(SHAPE_OPS_PER_LAYER):
            op = ("aten::stack", "aten::index_select", "aten::cat")[index % 3]
            s = b.op(op, [s, shape], (4,), "int64")
        b.op("aten::_local_scalar_dense", [s], (), "int64")
        h = b.op("npu::npu_rms_norm", [x], (tokens, hidden))
        q, k, v = (b.op("aten::mm", [h, wq], (tokens, hidden)) for _ in range(3))
        for t in (q, k):
            for op in ("aten::mul", "aten::neg", "aten::mul", "aten::add"):
                t = b.op(op, [t, t], (tokens, hidden))
        a = b.op("aten::bmm", [q, k], (32, tokens, 1024))
        a = b.op("aten::_softmax", [a], (32, tokens, 1024))
        a = b.op("aten::bmm", [a, v], (tokens, hidden))
        x = b.op("aten::add", [x, b.op("aten::mm", [a, wq], (tokens, hidden))], (tokens, hidden))
        h = b.op("npu::npu_rms_norm", [x], (tokens, hidden))
        g = b.op("aten::silu", [b.op("aten::mm", [h, wf], (tokens, ffn))], (tokens, ffn))
        u = b.op("aten::mul", [g, b.op("aten::mm", [h, wf], (tokens, ffn))], (tokens, ffn))
        x = b.op("aten::add", [x, b.op("aten::mm", [u, wd], (tokens, hidden))], (tokens, hidden))
    return b.build()


def host_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    """End-to-end time with the small-shape ops launched on the device (before) and computed on the host
    (after), one host thread, warm tiling cache."""
    profile = profiles.for_row(row)
    program = llama2_host_scheduled(row.model)
    plan = plan_program(program, profile, variant=Variant.BASELINE)

    def run(on_host: bool) -> float:
        return simulate(program, plan, profile, dynamic=True, host=HostConfig(threads=1, small_shape_on_host=on_host)).time_us

    return run(False), run(True)
