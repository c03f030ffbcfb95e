"""Make the pictures of the HTML report the way the browser tests see it.

``docs/html_report.png``: a few bundled cases (a scope split by an Add, the multi-stream example with a
wait removed, a missing ``record_stream``). ``docs/img/html_failure.png`` and ``docs/img/html_zoomed.png``: a test
whose scope an Add and a clone split, failing its ``segments=1`` expectation, with the failure message
and, zoomed in on the VARIANT's SuperKernels, the timeline with its kernel names. Each report is
rendered with ``--npufuse-html`` and photographed by headless Chromium. Run from the repository root:
``PYTHONPATH=. python docs/report_picture.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))

from browser import Chromium, find_chromium  # noqa: E402

CASES = (
    "cases/test_superkernel_scopes.py::test_add_inside_the_scope_splits_it",
    "cases/test_multistream.py::test_each_removed_sync_is_caught[wait 66]",
    "cases/test_multistream.py::test_missing_record_stream_is_a_lifetime_hazard",
)
PICTURE = ROOT / "docs" / "html_report.png"
FAILURE, ZOOMED = ROOT / "docs" / "img" / "html_failure.png", ROOT / "docs" / "img" / "html_zoomed.png"

FAILING = '''
import pytest
import torch
from pytest_npufuse import torchair


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.up, self.down = (torch.nn.Parameter(torch.randn(256, 256, generator=gen) / 16) for _ in range(2))

    def forward(self, x):
        with torchair.scope.super_kernel("block", ""):
            h = x @ self.up
            h = h + x            # a residual add: a TBE kernel, it splits the scope
            h = h.clone()        # a copy: splits it again
            return h @ self.down


@pytest.mark.superkernel("block", segments=1)
def test_block_is_one_superkernel(npufuse):
    npufuse.check(Block(), torch.ones(16, 256))
'''


def failure_pictures(chromium: Chromium, tmp: Path) -> None:
    """The report of one failing test: its message, then its timeline zoomed on the VARIANT's kernels."""
    project = tmp / "failing"
    project.mkdir()
    (project / "test_block.py").write_text(FAILING)
    page = project / "report.html"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                    f"--npufuse-html={page}", "test_block.py"], cwd=project, check=False)
    FAILURE.parent.mkdir(exist_ok=True)
    chromium.screenshot(page, FAILURE, 1280, 1150)
    span = float(page.read_text().split('data-span-us="', 1)[1].split('"', 1)[0])
    chromium.screenshot(page, ZOOMED, 1280, 1150, f"#zoom=0:{span * 0.53:.3f}-{span * 0.8:.3f}")  # the first SuperKernel and the Add


def main() -> int:
    executable = find_chromium()
    if executable is None:
        print("chromium is not installed; apt-get install chromium")
        return 2
    chromium = Chromium(executable)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--npufuse-html={page}", *CASES],
                       cwd=ROOT, check=True)
        chromium.screenshot(page, PICTURE, 1280, 2250)
        failure_pictures(chromium, Path(tmp))
    for picture in (PICTURE, FAILURE, ZOOMED):
        print(f"wrote {picture.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
