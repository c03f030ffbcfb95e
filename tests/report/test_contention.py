"""Contention between streams (docs/feature-docs.md#multi-stream): kernels on two streams that each take every core of one unit
take turns, and the report says how much of the overlap their busy time allows is lost. The end-to-end
case (two 4096x4096 matmuls split over two streams) is cases/test_multistream.py."""

from pytest_npufuse.report.contention import contention_of
from pytest_npufuse.simulate.timeline import Bound, KernelRun, RunReport

CORES = {"cube": 24, "vector": 48}


def run(*kernels: KernelRun) -> RunReport:
    streams = tuple(dict.fromkeys(k.stream for k in kernels))
    end = max(k.end_us for k in kernels)
    return RunReport("variant", "a3", "max-autotune", end, end, 0.0, Bound.DEVICE, len(kernels), kernels, streams=streams)


def test_two_cube_saturating_kernels_that_take_turns_lose_all_their_overlap():
    report = run(KernelRun("mm", "aten::mm", "default", 0.0, 10.0, 24, "cube"),
                 KernelRun("mm_1", "aten::mm", "1", 10.0, 20.0, 24, "cube"))
    contention = contention_of(report, CORES)
    assert contention.unit == "Cube" and contention.streams == ("default", "1")
    assert contention.possible_us == 10.0 and contention.achieved_us == 0.0 and contention.lost_pct == 100.0
    assert "take all 24 Cube cores" in contention.describe() and "100.0%" in contention.describe()


def test_partial_overlap_is_the_share_lost():
    report = run(KernelRun("mm", "aten::mm", "default", 0.0, 10.0, 24, "cube"),
                 KernelRun("mm_1", "aten::mm", "1", 7.5, 17.5, 24, "cube"))
    assert contention_of(report, CORES).lost_pct == 75.0


def test_a_side_stream_that_leaves_cores_free_is_not_contention():
    report = run(KernelRun("mm", "aten::mm", "default", 0.0, 10.0, 24, "cube"),
                 KernelRun("mul", "aten::mul", "1", 0.0, 4.0, 8, "vector"),
                 KernelRun("mm_1", "aten::mm", "1", 4.0, 9.0, 12, "cube"))
    assert contention_of(report, CORES) is None
    assert contention_of(run(KernelRun("mm", "aten::mm", "default", 0.0, 10.0, 24, "cube")), CORES) is None
