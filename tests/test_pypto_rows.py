"""The calibration's PyPTO kernel rows run as the subgraph tasks their sources state
(benchmarks/fidelity/kernels.py, pytest_npufuse/cost/mpmd.py)."""

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def fidelity(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import kernels, rows

    return kernels, rows, {row.id: row for row in rows.load_rows()}


def _kernel(kernels, row):
    build = next(build for pattern, build in kernels._KERNELS if pattern.search(row.get("op")))
    program = kernels.program(row, build, kernels._catalog(row, build))
    return program.kernels[-1]


@pytest.mark.parametrize(
    ("row_id", "tasks"),
    [
        ("pypto-fused-recurrent-kda-910b3-baseline", 512),  # 32 sequences x 4 heads x 4 subgraphs
        ("pypto-fused-recurrent-kda-910b3-optimized", 128),  # the 4 subgraphs merged into 1
        ("pypto-matmul-884736x16-reshaped", 48),  # 432 tiles of 512 rows, 9 a task (L1Reuse)
        ("pypto-matmul-6144x6144x6144-tiles", 1152),  # 48 x 24 tiles of 128 x 256
    ],
)
def test_a_pypto_row_runs_the_tasks_its_source_states(fidelity, row_id, tasks):
    kernels, _, rows = fidelity
    assert _kernel(kernels, rows[row_id]).info.mpmd_tasks == tasks


def test_merging_subgraphs_shortens_the_modeled_kda_kernel_when_tasks_cost(fidelity):
    kernels, rows_module, rows = fidelity
    profiles = rows_module.Profiles({"overhead_us": {"mpmd_task": 0.5}})
    free = rows_module.Profiles({"overhead_us": {"mpmd_task": 0.0}})
    baseline, optimized = (rows[f"pypto-fused-recurrent-kda-910b3-{name}"] for name in ("baseline", "optimized"))
    assert kernels.kernel_us(baseline, profiles) > 2 * kernels.kernel_us(optimized, profiles)
    # with a free scheduler the two versions do the same work
    assert kernels.kernel_us(baseline, free) == pytest.approx(kernels.kernel_us(optimized, free), rel=0.1)
