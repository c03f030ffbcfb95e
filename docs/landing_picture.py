"""Make the picture of the docs site's landing page (docs/img/docs_landing.png) in headless Chromium.

Builds the site with ``mkdocs build --strict`` into a temporary directory and has Chromium take a
screenshot of its ``index.html``. Run from the repository root: ``python docs/landing_picture.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))

from browser import Chromium, find_chromium  # noqa: E402

PICTURE = ROOT / "docs" / "img" / "docs_landing.png"


def main() -> None:
    chromium = Chromium(find_chromium() or sys.exit("chromium is not installed; apt-get install chromium"))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", tmp],
                       cwd=ROOT, check=True)
        PICTURE.parent.mkdir(exist_ok=True)
        chromium.screenshot(Path(tmp) / "index.html", PICTURE, 1280, 900)
    print(f"wrote {PICTURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
