"""A digest of the bundled cases' run report, to show a refactor left every modeled number unchanged.

    PYTHONPATH=. python benchmarks/report_digest.py                # runs `pytest cases --npu-target=a3`
    PYTHONPATH=. python benchmarks/report_digest.py run.json       # digests a report already written

The report is the ``--npufuse-json`` run report. Before hashing, the checkout's own directory is cut
from every source location (``/path/to/checkout/cases/x.py:12`` becomes ``cases/x.py:12``), so two
checkouts or worktrees of the same code give the same digest; the report has no timestamps or
durations. The digest printed before and after a change must match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def portable(value: Any, root: str) -> Any:
    """``value`` with the checkout's directory cut from every string that starts with it."""
    if isinstance(value, dict):
        return {portable(key, root): portable(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item, root) for item in value]
    if isinstance(value, str) and value.startswith(root):
        return value[len(root):]
    return value


def digest(report: Path) -> str:
    """The sha256 of the report's canonical JSON (sorted keys), made portable across checkouts."""
    data = portable(json.loads(report.read_text()), f"{ROOT}/")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def run_cases(target: str, out: Path) -> None:
    """The bundled cases on ``target`` (two workers), writing the run report to ``out``."""
    command = [sys.executable, "-m", "pytest", "cases", f"--npu-target={target}", "-q", "-p", "no:randomly",
               "-n", "2", f"--npufuse-json={out}"]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", nargs="?", type=Path, help="a --npufuse-json run report (default: run the cases)")
    parser.add_argument("--npu-target", default="a3", help="the target the cases run on (default: a3)")
    args = parser.parse_args()
    if args.report is not None:
        print(digest(args.report))
        return
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "run.json"
        run_cases(args.npu_target, report)
        print(digest(report))


if __name__ == "__main__":
    main()
