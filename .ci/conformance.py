"""CI gates: TorchAir's own user-facing tests (issue 22) and a fixed subset of torch_npu's own op tests
(issue 37) against the shim must not regress.

Both run shared conformance suites (``../shared/conformance/``, the upstream test files at pinned commits,
never copied into this repository) with this checkout first on ``PYTHONPATH``, one after the other (each
runs one pytest at a time), and read the runner's last line:

* TorchAir (``torchair/run.sh``): ``peersuite: P passed / N user-facing tests (F fail-api, I fail-internal,
  C crash)``; fails when P drops below :data:`FLOOR`, F rises above :data:`FAIL_API_CEILING` (a public
  TorchAir name or behaviour newly missing or wrong) or any test crashes inside pytest_npufuse.
* torch_npu (``torch_npu/run.sh``, strict: the shim alone provides ``torch_npu.testing``), the files
  :data:`TORCH_NPU_FILES` names: ``peersuite2: pass=P fail-numeric=V ... crash=C of M tests``; fails when P
  drops below :data:`TORCH_NPU_FLOOR`, or on any fail-numeric (a kernel disagreeing with upstream's
  golden) or crash.

Without a suite (a fresh clone outside the team's tree) it says so and passes that gate.
``NPUFUSE_CONFORMANCE_RUNNER`` / ``NPUFUSE_TORCH_NPU_CONFORMANCE_RUNNER`` name the runners elsewhere (a git
worktree has no ``../shared`` beside it).

    python .ci/conformance.py [PYTHON]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

FLOOR = 150  # CI's own run measured 154 passes (134 fail-api) after issue 37's TorchAir debug folder, dump options
# JSON, cache_compile(backend=) and aclgraph output memory (71 of the review's 79 public tests pass), minus 4 for noise (load)
# Failures the runner calls fail-api, measured with issue 37: TorchAir's private modules now import, so the
# test bodies behind them run and most fail on TorchAir's own log lines, FX passes and aclgraph internals
# asserted in public-looking lines (docs/shim.md); a rise is a public name newly wrong. Measured 141 at the
# same run (down from 147: the public tests fixed above); CI's run of those changes measured 134.
FAIL_API_CEILING = 138
ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(os.environ.get("NPUFUSE_CONFORMANCE_RUNNER", ROOT.parent / "shared" / "conformance" / "torchair" / "run.sh"))
LAST_LINE = re.compile(r"peersuite: (\d+) passed / (\d+) user-facing tests \((\d+) fail-api, (\d+) fail-internal, (\d+) crash\)")

TORCH_NPU_RUNNER = Path(os.environ.get(
    "NPUFUSE_TORCH_NPU_CONFORMANCE_RUNNER", ROOT.parent / "shared" / "conformance" / "torch_npu" / "run.sh"))
# The torch_npu subset (a grep -E pattern over the suite's file paths, ten files): the two format-cast files
# (torch_npu.testing, storage formats and get_npu_format) and the op files of scatter_update, fast_gelu,
# confusion_transpose, dynamic_quant, quantize, moe_gating_top_k, rms_norm and add_rms_norm. Measured
# under load on two shared cores: 14 files took 411 s; these ten 4.1 minutes.
TORCH_NPU_FILES = (
    r"custom_ops/test_npu_format_cast|test_base_ops/test_format_cast|custom_ops/test_scatter_update|"
    r"test_base_ops/test_fast_gelu\.py|test_base_ops/test_confusion_transpose\.py|test_npu_dynamic_quant\.py|"
    r"test_npu_quantize|test_npu_moe_gating_topk\.py|test_npu_rms_norm\.py|test_npu_add_rms_norm\.py"
)
TORCH_NPU_FLOOR = 98  # passes of those files strictly: 100 of 100 counted tests in CI's run after issue 37's fixes, minus 2
TORCH_NPU_LAST_LINE = re.compile(
    r"peersuite2: pass=(\d+) fail-numeric=(\d+) fail-api=(\d+) fail-harness=(\d+) crash=(\d+) of (\d+) tests in (\d+) files")


def _stop_session(session: int) -> None:
    """Stop every process of the session: the runner's ``timeout`` puts each pytest in a process group of its own."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry.name)) == session:
                    os.kill(int(entry.name), signal.SIGTERM)


def _run(command: list[str], env: dict[str, str]) -> tuple[str, str, int]:
    """Run the suite in a session of its own, so that CI stopping this script (it runs in the background of
    .ci/run, which stops it when an earlier step fails) also stops every pytest the runner started."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                               start_new_session=True)

    def stop(signum: int, _frame: object) -> None:
        _stop_session(process.pid)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    stdout, stderr = process.communicate()
    return stdout, stderr, process.returncode


def _with_checkout(extra: dict[str, str]) -> dict[str, str]:
    """The environment with this checkout first on ``PYTHONPATH``, plus ``extra``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def _suite(runner: Path, python: str, extra: dict[str, str], last_line: re.Pattern[str], name: str) -> tuple[re.Match[str] | None, str]:
    """Run one suite; its result line (None after printing why there is none) and its output."""
    started = time.monotonic()
    stdout, stderr, returncode = _run(["bash", str(runner), python], _with_checkout(extra))
    found = last_line.search(stdout)
    if found is None:
        print(stdout[-3000:], stderr[-3000:], sep="\n")
        print(f"conformance: the {name} suite printed no result line (exit {returncode})")
        return None, stdout
    print(f"conformance: {found.group(0)} in {(time.monotonic() - started) / 60:.1f} min")
    return found, stdout


def torchair_gate(python: str) -> int:
    if not RUNNER.exists():
        print(f"conformance: {RUNNER} not found; the TorchAir conformance gate is skipped")
        return 0
    found, stdout = _suite(RUNNER, python, {}, LAST_LINE, "TorchAir")
    if found is None:
        return 1
    passed, total, api, internal, crash = map(int, found.groups())
    print(f"conformance: TorchAir floor {FLOOR} passes, at most {FAIL_API_CEILING} fail-api, 0 crashes")
    if crash or passed < FLOOR or api > FAIL_API_CEILING:
        print(stdout)
        print(f"conformance: FAILED: {passed} passes (floor {FLOOR}), {api} fail-api (ceiling {FAIL_API_CEILING}), {crash} crash(es)")
        return 1
    return 0


def torch_npu_gate(python: str) -> int:
    if not TORCH_NPU_RUNNER.exists():
        print(f"conformance: {TORCH_NPU_RUNNER} not found; the torch_npu conformance gate is skipped")
        return 0
    extra = {"PEERSUITE2_STRICT": "1", "PEERSUITE2_ONLY": TORCH_NPU_FILES}
    found, stdout = _suite(TORCH_NPU_RUNNER, python, extra, TORCH_NPU_LAST_LINE, "torch_npu")
    if found is None:
        return 1
    passed, numeric, _api, _harness, crash, _total, _files = map(int, found.groups())
    print(f"conformance: torch_npu (strict, files {TORCH_NPU_FILES!r}) floor {TORCH_NPU_FLOOR} passes, "
          "0 fail-numeric, 0 crashes")
    if crash or numeric or passed < TORCH_NPU_FLOOR:
        print(stdout)
        print(f"conformance: FAILED: {passed} passes (floor {TORCH_NPU_FLOOR}), {numeric} fail-numeric, {crash} crash(es)")
        return 1
    return 0


def main(python: str) -> int:
    """Both gates, one after the other; fails when either does."""
    return max(torchair_gate(python), torch_npu_gate(python))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else sys.executable))
