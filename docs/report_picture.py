"""Make the docs' picture of the HTML report (docs/html_report.png) the way the browser tests see it.

Runs a few bundled cases (a scope split by an Add, the multi-stream example with a wait removed, a missing
``record_stream``) with ``--npufuse-html``, then has headless Chromium take a
screenshot of the report. Run from the repository root: ``python docs/report_picture.py``.
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


def main() -> int:
    executable = find_chromium()
    if executable is None:
        print("chromium is not installed; apt-get install chromium")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--npufuse-html={page}", *CASES],
                       cwd=ROOT, check=True)
        Chromium(executable).screenshot(page, PICTURE, 1280, 2250)
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
