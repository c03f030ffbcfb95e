"""Speed and scale of the simulator.

    PYTHONPATH=. python benchmarks/simulator_speed.py

1. A synthetic 61-layer MoE decode graph (DeepSeek-V3-like, docs/sources.md#hw-4-2 and docs/sources.md#hw-4-3 layouts):
per layer attention
   on the main stream, a shared expert on a side stream joined by events, a comm stream for dispatch and
   combine, and the MoE part inside a SuperKernel scope. Prints kernels per second, and the time the
   stage before simulation (planning SuperKernels and streams) takes on the same graph.
2. Scale: programs of 1k to 100k kernels; prints the time per kernel at each size and the growth
   exponent (1.0 is linear; n log n from 1k to 100k is about 1.11).
3. The bundled seed case: simulation time against capture (torch.compile) time.

Targets (issue 3): at least 200,000 simulated kernels per second; simulation at most 10% of a case's
total time; growth no worse than n log n. Each is measured as the best of 5 runs (a loaded machine only
adds time; the graphs are timed in rounds, so a slow spell falls on every size alike) and printed as a
PASS or FAIL line; the exit status is 1 when one fails. Wall-clock time is measured here only, never in
the model.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import best_of, check, timed  # noqa: E402

from pytest_npufuse.ir.events import Event  # noqa: E402
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program  # noqa: E402
from pytest_npufuse.simulate.timeline import simulate  # noqa: E402
from pytest_npufuse.target.profile import load_profile  # noqa: E402

TOKENS, HIDDEN, INTER = 16, 7168, 2048
EXPERT_GROUPS = 20  # routed experts in groups of GMM, SwiGlu, GMM inside the layer's SuperKernel scope
ROPE_OPS = 12       # small vector ops of rotary embedding and quantisation before attention


def decode_graph(layers: int):
    """A decode step of ``layers`` MoE layers on three streams, with SuperKernel scopes."""
    b = ProgramBuilder()
    x = b.input("x", (TOKENS, HIDDEN))
    w = b.input("w", (HIDDEN, HIDDEN))
    w_up = b.input("w_up", (HIDDEN, INTER))
    w_down = b.input("w_down", (INTER, HIDDEN))
    syncs: list[Event] = []
    for layer in range(layers):
        scope = f"moe{layer}"
        h = b.op("npu::npu_rms_norm", [x], (TOKENS, HIDDEN))
        for _ in range(ROPE_OPS):
            h = b.op("aten::mul", [h, h], (TOKENS, HIDDEN))
        q = b.op("aten::mm", [h, w], (TOKENS, HIDDEN))
        k = b.op("aten::mm", [h, w], (TOKENS, HIDDEN))
        s = b.op("aten::bmm", [q, k], (TOKENS, HIDDEN))
        p = b.op("aten::_softmax", [s], (TOKENS, HIDDEN))
        a = b.op("aten::mm", [p, w], (TOKENS, HIDDEN))
        x = b.op("aten::add", [x, a], (TOKENS, HIDDEN))
        h = b.op("npu::npu_rms_norm", [x], (TOKENS, HIDDEN), scope=scope)
        b.op("npu::npu_moe_gating_top_k", [h], (TOKENS, 8), scope=scope)
        shared_up = b.op("aten::mm", [h, w_up], (TOKENS, INTER), stream="shared")
        shared_act = b.op("npu::npu_swiglu", [shared_up], (TOKENS, INTER), stream="shared")
        shared = b.op("aten::mm", [shared_act, w_down], (TOKENS, HIDDEN), stream="shared")
        dispatched = b.op("_c10d_functional::all_to_all_single", [h], (TOKENS * 8, HIDDEN), stream="comm")
        for group in range(EXPERT_GROUPS):
            up = b.op("npu::npu_grouped_matmul", [dispatched, w_up], (TOKENS, INTER), scope=scope)
            act = b.op("npu::npu_swiglu", [up], (TOKENS, INTER), scope=scope)
            down = b.op("npu::npu_grouped_matmul", [act, w_down], (TOKENS, HIDDEN), scope=scope)
            if group == 0:
                first_up = up
        combined = b.op("_c10d_functional::all_to_all_single", [down], (TOKENS, HIDDEN), stream="comm")
        x = b.op("aten::add", [combined, shared], (TOKENS, HIDDEN))
        syncs += [
            Event(f"{event}{layer}", b.buffers[after].producer, b.buffers[before].producer)
            for event, after, before in (
                ("h", h, shared_up), ("d", h, dispatched), ("g", dispatched, first_up), ("c", down, combined),
                ("j", combined, x), ("s", shared, x),
            )
        ]
    return b.build(), syncs


REPEATS = 5
TARGET_KERNELS_PER_S = 200_000
TARGET_SHARE = 0.10
SCALE_LAYERS = (12, 120, 1200)


def simulation_of(layers: int, profile):
    """A function that simulates a planned decode graph of ``layers`` layers, and its plan."""
    program, syncs = decode_graph(layers)
    plan = plan_program(program, profile, syncs=syncs)
    return (lambda: simulate(program, plan, profile)), program, plan, syncs


def main() -> int:
    profile = load_profile("a3")
    cases = [simulation_of(layers, profile) for layers in (61, *SCALE_LAYERS)]
    _, program, plan, syncs = cases[0]
    planning = lambda: plan_program(program, profile, syncs=syncs)  # noqa: E731
    *timings, planned = best_of(REPEATS, [*(lambda run=case[0]: timed(run) for case in cases), lambda: timed(planning)])
    plan_seconds = planned.wall
    report, seconds = timings[0].value, timings[0].wall
    kernels = len(report.kernels)
    rate = kernels / seconds
    print(f"61-layer decode graph: {len(program.kernels)} kernels, {len(plan.tasks)} tasks, "
          f"{len(report.streams)} streams, {len(syncs)} events, {sum(t.segment is not None for t in plan.tasks)} SuperKernels")
    print(f"  modeled step {report.time_us / 1000:.3f} ms; simulated {kernels} kernel rows in {seconds * 1000:.1f} ms "
          f"(best of {REPEATS}) = {rate:,.0f} kernels/s")
    print(f"  planning it (SuperKernel segments with their sub-kernels' block dims and internal syncs, streams; "
          f"the stage before simulation, not counted above) takes {plan_seconds * 1000:.1f} ms")

    print(f"scale (single decode graphs of growing depth, 3 streams, SuperKernels; best of {REPEATS}):")
    sizes = []
    for report, seconds in ((t.value, t.wall) for t in timings[1:]):
        n = len(report.kernels)
        sizes.append((n, seconds))
        print(f"  {n:>7,} kernels: {seconds:7.3f} s, {seconds / n * 1e6:6.2f} us/kernel, {n / seconds:,.0f} kernels/s")
    (n0, s0), (n1, s1) = sizes[0], sizes[-1]
    exponent = math.log(s1 / s0) / math.log(n1 / n0)
    nlogn = math.log((n1 * math.log(n1)) / (n0 * math.log(n0))) / math.log(n1 / n0)
    print(f"  growth exponent {exponent:.3f} (linear 1.000, n log n {nlogn:.3f})")
    share, simulated, total = capture_share()

    print(f"targets (issue 3), each measured as the best of {REPEATS} runs:")
    results = [
        check(rate >= TARGET_KERNELS_PER_S, f"speed: {rate:,.0f} kernels/s (target >= {TARGET_KERNELS_PER_S:,})"),
        check(share <= TARGET_SHARE, f"simulation share of a case: {100 * share:.3f}% = {simulated * 1000:.2f} ms of "
                                     f"{total * 1000:.0f} ms (target <= {100 * TARGET_SHARE:.0f}%)"),
        check(exponent <= nlogn, f"growth {n0:,} -> {n1:,} kernels: exponent {exponent:.3f} "
                                 f"(target <= n log n {nlogn:.3f})"),
    ]
    return 0 if all(results) else 1


def capture_share() -> tuple[float, float, float]:
    """Simulation time against the whole case (capture, planning, CPU numerics) for the seed case:
    (share, simulation seconds, total seconds) of the run with the smallest share."""
    import torch  # noqa: PLC0415 - only this part needs torch

    from pytest_npufuse import compare  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cases"))
    from test_superkernel_example import ModelOrigin, ModelSuperKernel, seed_inputs  # noqa: PLC0415

    import pytest_npufuse.pipeline.chain as pipeline  # noqa: PLC0415

    spent = [0.0]
    original = pipeline.simulate

    def counted(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    pipeline.simulate = counted
    inputs = seed_inputs()
    compare(ModelSuperKernel(), *inputs, reference=ModelOrigin())
    runs = []
    for _ in range(REPEATS):
        spent[0] = 0.0
        total = timed(lambda: compare(ModelSuperKernel(), *inputs, reference=ModelOrigin())).wall
        runs.append((spent[0] / total, spent[0], total))
    pipeline.simulate = original
    share, simulated, total = min(runs)
    print(f"seed case: simulation {simulated * 1000:.2f} ms of {total * 1000:.0f} ms total = {100 * share:.3f}%; "
          f"torch {torch.__version__}")
    return share, simulated, total


if __name__ == "__main__":
    sys.exit(main())
