"""The calibration's fragment rows capture the source's code on the row's inputs and price it eagerly
(op by op) and compiled by Inductor (one fused kernel) (benchmarks/fidelity/fragments.py)."""

from dataclasses import replace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ROW = "dsv4flash-a3-hc-post-eager-vs-compiled"


@pytest.fixture()
def fidelity(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import evaluate, fragments, rows

    return fragments, evaluate, rows, {row.id: row for row in rows.load_rows()}


def test_the_hc_post_row_runs_five_eager_kernels_and_one_compiled_on_its_inputs(fidelity):
    fragments, _, _, rows = fidelity
    eager, compiled = fragments.programs(rows[ROW])
    assert sorted(k.info.kernel_type for k in eager.kernels) == [
        "Add", "Cast", "Mul", "Mul", "ReduceSum"
    ]
    (fused,) = compiled.kernels
    # reads x (bf16 4096), residual (bf16 4x4096), post and comb (fp32), writes the bf16 4x4096 result
    assert fused.bytes == 2 * 4096 + 2 * 4 * 4096 + 4 * 4 + 4 * 16 + 2 * 4 * 4096


def test_the_row_is_built_from_its_inputs(fidelity):
    fragments, _, _, rows = fidelity
    row = rows[ROW]
    wider = [dict(tensor, shape=[*tensor["shape"][:-1], 8192]) if tensor["shape"][-1] == 4096 else tensor
             for tensor in row.get("inputs")]
    other = replace(row, id=f"{ROW}-wider", fields={**row.fields, "inputs": wider})
    assert fragments.programs(other)[1].kernels[0].bytes > fragments.programs(row)[1].kernels[0].bytes


def test_the_row_evaluates_to_a_speedup_of_the_compiled_fragment(fidelity):
    _, evaluate, rows_module, rows = fidelity
    outcome = evaluate.evaluate(rows[ROW], rows_module.Profiles())
    assert outcome.published == 4.0
    assert outcome.modeled is not None and outcome.modeled > 1
    assert outcome.gain[1] > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"fragment": "hc_pre"}, r"fragment = 'hc_pre' is not a fragment .* one of \['hc_post'\]"),
        ({"inputs": [{"name": "x", "shape": [1, 4096], "dtype": "bfloat17"}]}, r"input dtype 'bfloat17' is not a torch dtype"),
    ],
)
def test_a_row_naming_an_unknown_fragment_or_dtype_says_which_and_what_to_write(fidelity, change, message):
    fragments, _, _, rows = fidelity
    row = rows[ROW]
    bad = replace(row, id=f"{ROW}-bad-{next(iter(change))}", fields={**row.fields, **change})
    with pytest.raises(ValueError, match=rf"row {bad.id}: {message}"):
        fragments.programs(bad)
