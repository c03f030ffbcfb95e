"""The CI conformance gates (.ci/conformance.py): each judges its suite's last line, and passes, saying so,
where the shared suites are absent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gate(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("ci_conformance", ROOT / ".ci" / "conformance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RUNNER", tmp_path / "torchair" / "run.sh")
    monkeypatch.setattr(module, "TORCH_NPU_RUNNER", tmp_path / "torch_npu" / "run.sh")
    return module


def _runner(path: Path, last_line: str) -> None:
    """A stand-in runner that prints the environment the gate gave it, then ``last_line``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'echo "strict=$PEERSUITE2_STRICT only=$PEERSUITE2_ONLY"\necho "{last_line}"\n')


def test_without_the_shared_suites_both_gates_pass_saying_so(gate, capsys):
    assert gate.main("python") == 0
    out = capsys.readouterr().out
    assert "the TorchAir conformance gate is skipped" in out and "the torch_npu conformance gate is skipped" in out


@pytest.mark.parametrize(
    ("passed", "numeric", "crash", "status"),
    [(None, 0, 0, 0), (-1, 0, 0, 1), (None, 1, 0, 1), (None, 0, 1, 1)],
    ids=["at-the-floor", "below-the-floor", "a-fail-numeric", "a-crash"],
)
def test_the_torch_npu_gate_runs_its_subset_strictly_and_judges_the_counts(gate, capsys, passed, numeric, crash, status):
    count = gate.TORCH_NPU_FLOOR + (passed or 0)
    _runner(gate.TORCH_NPU_RUNNER, f"peersuite2: pass={count} fail-numeric={numeric} fail-api=3 fail-harness=2 "
            f"crash={crash} of 400 tests in 9 files")
    assert gate.torch_npu_gate("python") == status
    out = capsys.readouterr().out
    if status:
        assert f"strict=1 only={gate.TORCH_NPU_FILES}" in out  # the suite's output is shown on failure


def test_a_runner_without_a_result_line_fails(gate, capsys):
    _runner(gate.TORCH_NPU_RUNNER, "something else")
    assert gate.torch_npu_gate("python") == 1
    assert "printed no result line" in capsys.readouterr().out
