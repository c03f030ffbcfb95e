"""Contention between streams (docs/feature-docs.md#multi-stream): kernels on two streams that each take every core of one unit
take turns, and the report says how much of the overlap their busy time allows is lost. The end-to-end
case (two 4096x4096 matmuls split over two streams) is cases/test_multistream.py."""

import torch

from pytest_npufuse import Target, compare, torchair as tng
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


class TwoBigMatmuls(torch.nn.Module):
    """Two projections that each want every Cube core, the second on a side stream."""

    def forward(self, a, b, c):
        first = a @ b
        with tng.scope.npu_stream_switch("1"):
            second = a @ c
        return first, second


def test_contention_of_a_project_target_counts_the_cores_of_that_target(tmp_path):
    """A project's own target (here 20 Cube cores, laid over a3's 24) has no built-in profile to look up by
    its name: the report measures contention on the profile the case ran on."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.npufuse.targets.mine]\nbase = "a3"\n[tool.npufuse.targets.mine.cores]\naic = 20\naiv = 40\n')
    target = Target.resolve("mine", pyproject)
    a, b, c = (torch.empty(4096, 4096, device="meta") for _ in range(3))
    report = compare(TwoBigMatmuls(), a, b, c, target=target, numerics="none")
    assert report.target == "mine" and all(k.block_dim == 20 for k in report.variant.kernels)
    assert report.contention is not None and report.contention.cores == 20 and report.contention.unit == "Cube"
    assert "take all 20 Cube cores" in report.summary()
