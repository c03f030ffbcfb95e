"""Calibration: each published result beside the modeled one, from small models of the published setting.

    PYTHONPATH=. python benchmarks/calibration.py

Sources: seed 002 (GE host scheduling: tiling cache, small-shape host ops, three host threads), seed 003
(one_hot + sum against zeros + scatter) and the graph-autofusion SuperKernel sample (hw §3). Each row
prints the published gain, the modeled gain and whether the model is within +-30% of it. Constants are
the shipped a2/a3 profiles; none was tuned to these rows (see the closing notes printed below).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_npufuse.fusion import BASELINE  # noqa: E402
from pytest_npufuse.hardware import load_profile  # noqa: E402
from pytest_npufuse.host import HostConfig  # noqa: E402
from pytest_npufuse.simulate import simulate  # noqa: E402
from pytest_npufuse.synthetic import ProgramBuilder, plan_program  # noqa: E402

A2 = load_profile("a2")
A3 = load_profile("a3")
LLAMA_LAYERS, LLAMA_HIDDEN, LLAMA_FFN = 32, 4096, 11008
SHAPE_OPS_PER_LAYER = 21  # seed 002: "650+" Pack/Gather/Concat ops over LLaMA2's 32 layers


def llama2_host_scheduled(tokens: int = 1):
    """A LLaMA2-7B forward as GE host-schedules it with dynamic shapes: per layer ~20 device ops and a
    chain of small int64 shape ops (Pack, Gather, Concat) whose result a value-dependent op reads."""
    b = ProgramBuilder()
    x = b.input("x", (tokens, LLAMA_HIDDEN))
    wq = b.input("wq", (LLAMA_HIDDEN, LLAMA_HIDDEN))
    wf = b.input("wf", (LLAMA_HIDDEN, LLAMA_FFN))
    wd = b.input("wd", (LLAMA_FFN, LLAMA_HIDDEN))
    shape = b.input("shape", (4,), "int64")
    for _ in range(LLAMA_LAYERS):
        s = shape
        for index in range(SHAPE_OPS_PER_LAYER):
            op = ("aten::stack", "aten::index_select", "aten::cat")[index % 3]
            s = b.op(op, [s, shape], (4,), "int64")
        b.op("aten::_local_scalar_dense", [s], (), "int64")
        h = b.op("npu::npu_rms_norm", [x], (tokens, LLAMA_HIDDEN))
        q, k, v = (b.op("aten::mm", [h, wq], (tokens, LLAMA_HIDDEN)) for _ in range(3))
        for t in (q, k):
            for op in ("aten::mul", "aten::neg", "aten::mul", "aten::add"):
                t = b.op(op, [t, t], (tokens, LLAMA_HIDDEN))
        a = b.op("aten::bmm", [q, k], (32, tokens, 1024))
        a = b.op("aten::_softmax", [a], (32, tokens, 1024))
        a = b.op("aten::bmm", [a, v], (tokens, LLAMA_HIDDEN))
        x = b.op("aten::add", [x, b.op("aten::mm", [a, wq], (tokens, LLAMA_HIDDEN))], (tokens, LLAMA_HIDDEN))
        h = b.op("npu::npu_rms_norm", [x], (tokens, LLAMA_HIDDEN))
        g = b.op("aten::silu", [b.op("aten::mm", [h, wf], (tokens, LLAMA_FFN))], (tokens, LLAMA_FFN))
        u = b.op("aten::mul", [g, b.op("aten::mm", [h, wf], (tokens, LLAMA_FFN))], (tokens, LLAMA_FFN))
        x = b.op("aten::add", [x, b.op("aten::mm", [u, wd], (tokens, LLAMA_HIDDEN))], (tokens, LLAMA_HIDDEN))
    return b.build()


def run(program, profile, **host):
    plan = plan_program(program, profile, variant=BASELINE)
    return simulate(program, plan, profile, dynamic=True, host=HostConfig(**host))


def tiling_share(report) -> float:
    return sum(s.end_us - s.start_us for s in report.host if s.name in ("Tiling", "TilingCacheHit"))


def one_hot_sum_vs_scatter(profile):
    """Seed 003's mask for a MoE router: one_hot(indices, E).sum(1) against zeros().scatter_(), both
    as the device kernels their aten decompositions give (an int64 one-hot, so Cast and ReduceSum run
    on AI CPU). Setting (estimate; the seed gives none): 16k tokens, top-8 of 64 experts."""
    tokens, top_k, experts = 16384, 8, 64
    b = ProgramBuilder()
    idx = b.input("idx", (tokens, top_k), "int64")
    arange = b.op("aten::arange", [], (experts,), "int64")
    eq = b.op("aten::eq", [idx, arange], (tokens, top_k, experts), "bool")
    cast = b.op("aten::_to_copy", [eq], (tokens, top_k, experts), "int64")
    b.op("aten::sum", [cast], (tokens, experts), "int64")
    one_hot = b.build()
    b = ProgramBuilder()
    idx = b.input("idx", (tokens, top_k), "int64")
    zeros = b.op("aten::zeros", [], (tokens, experts))
    b.op("aten::scatter", [zeros, idx], (tokens, experts))
    scatter = b.build()

    def kernel_ms(program):
        report = simulate(program, plan_program(program, profile, variant=BASELINE), profile)
        return sum(k.duration_us for k in report.kernels) / 1000

    return kernel_ms(one_hot), kernel_ms(scatter)


def superkernel_sample(profile):
    """The graph-autofusion MoE sample: six scopes of MoeGatingTopK, GroupedMatmul, DequantSwigluQuant,
    GroupedMatmul, each scope between unfusable ops. Op time summed as op_statistic does."""
    b = ProgramBuilder()
    x = b.input("x", (64, 7168))
    w_up = b.input("w_up", (7168, 512), "int8")
    w_down = b.input("w_down", (256, 7168), "int8")
    for scope in range(6):
        b.op("aten::add", [x, x], (64, 7168))
        b.op("npu::npu_moe_gating_top_k", [x], (64, 8), scope=f"moe{scope}")
        q = b.op("npu::npu_dynamic_quant", [x], (64, 7168), "int8")
        up = b.op("npu::npu_grouped_matmul", [q, w_up], (512, 512), scope=f"moe{scope}")
        act = b.op("npu::npu_dequant_swiglu_quant", [up], (512, 256), "int8", scope=f"moe{scope}")
        b.op("npu::npu_grouped_matmul", [act, w_down], (512, 7168), scope=f"moe{scope}")
    program = b.build()

    def op_time(variant):
        report = simulate(program, plan_program(program, profile, variant=variant), profile)
        return sum(k.duration_us for k in report.kernels if k.parent is None), report.time_us

    return op_time(BASELINE), op_time("variant")


def row(name: str, published: float, modeled: float, unit: str = "%", at_least: bool = False) -> str:
    """One table row; ``at_least`` marks a published lower bound ("more than 50%")."""
    ratio = modeled / published
    if at_least:
        verdict = "meets the bound" if modeled >= published else f"below the bound by {published - modeled:.1f}"
    else:
        verdict = "within 30%" if 0.7 <= ratio <= 1.3 else f"OFF by {100 * (ratio - 1):+.0f}%"
    return f"{name:<58} {published:>10.2f}{unit:<3} {modeled:>10.2f}{unit:<3} {verdict}"


def main() -> None:
    print(f"{'published result (source)':<58} {'published':>13} {'modeled':>13} verdict")
    program = llama2_host_scheduled()
    default = run(program, A2)  # one host thread, tiling cache and small-shape host ops on
    cut = 100 * (1 - tiling_share(default) / tiling_share(run(program, A2, tiling_cache=False)))
    print(row("tiling cache: host tiling time cut, LLaMA2 (seed 002, '>50%')", 50.0, cut, at_least=True))
    on_device = run(program, A2, small_shape_on_host=False)
    gain = 100 * (1 - default.time_us / on_device.time_us)
    print(row("small-shape host ops: LLaMA2 1.062 s -> 1.009 s (seed 002)", 100 * (1 - 1.009 / 1.062), gain))
    one, three = default, run(program, A2, threads=3)
    print(f"{'three host threads: LLaMA2 host time cut (seed 002, figure)':<58} {'n/a':>13} "
          f"{100 * (1 - three.host_us / one.host_us):>10.2f}%   the seed's numbers are in a figure, not the text")
    one_hot_ms, scatter_ms = one_hot_sum_vs_scatter(A2)
    print(row("one_hot+sum / zeros+scatter time ratio (seed 003, 2.2/0.08 ms)", 2.2 / 0.08, one_hot_ms / scatter_ms, "x"))
    (base_ops, base_e2e), (sk_ops, sk_e2e) = superkernel_sample(A3)
    print(row("SuperKernel sample op time 407.54 -> 384.66 us (hw §3)", 100 * (1 - 384.66 / 407.54), 100 * (1 - sk_ops / base_ops)))
    print()
    print(f"details: LLaMA2 model {len(program.kernels)} kernels; host {default.host_us / 1000:.2f} ms, device "
          f"{default.device_us / 1000:.2f} ms, bound={default.bound}; small ops on host {default.time_us / 1000:.2f} ms "
          f"vs on device {on_device.time_us / 1000:.2f} ms; host with 3 threads {three.host_us / 1000:.2f} ms")
    print(f"         one_hot+sum {one_hot_ms:.3f} ms, zeros+scatter {scatter_ms:.3f} ms; SuperKernel sample op time "
          f"{base_ops:.1f} -> {sk_ops:.1f} us, end to end {base_e2e:.1f} -> {sk_e2e:.1f} us "
          f"({100 * (1 - sk_e2e / base_e2e):.2f}% faster)")
    print(NOTES)


NOTES = """
notes on the gaps (no constant was tuned; every constant involved is marked estimate in the profiles):
- small-shape host ops: the model saves ~7 us per op kept on the host (its launch path and one stream
  sync per layer) on a 29 ms decode step, 15% of it. Seed 002 saves 53 ms over 650 ops (~81 us each)
  of a 1.062 s run whose contents (prefill length, steps) it does not give. Fitting stream_sync or the
  host path to one unknown setting would be overfitting.
- one_hot+sum: the model prices ScatterElements as a bandwidth-bound Vector kernel (12 us) and int64
  Cast/ReduceSum on 6 AI CPU cores at 2 GB/s each (estimates). The seed's 0.08 ms for zeros+scatter
  says the real ScatterElements is far below bandwidth (index-driven, scalar); the catalog has no
  published rate to say so, and the seed gives no shapes.
- SuperKernel sample: op_statistic counts kernel time only. The model places the SuperKernel's gain in
  the removed task dispatches and heads (end-to-end gain above, close to the sample's 5.6%) and charges
  each sub-kernel call and each dependent sync inside the kernel, so the SK's own kernel time grows. The
  sample shows kernel time shrinking too, from ICache preload and Early-Start hiding heads (hw §2.3),
  which the model does not credit.
"""


if __name__ == "__main__":
    main()
