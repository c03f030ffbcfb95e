"""The docs site builds with ``mkdocs build --strict`` (a broken link or anchor, a page missing from the
navigation, or an unknown generated table fails it), offline, with the generated reference tables in it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_reference_tables_are_generated_into_the_pages(site):
    ops = (site / "reference" / "ops" / "index.html").read_text()
    assert "npu::npu_quant_matmul" in ops and "aten::mm" in ops
    plugin = (site / "reference" / "plugin" / "index.html").read_text()
    assert "--npufuse-baseline" in plugin and "npufuse_baseline" in plugin
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "--fail-above" in cli
    assert "<!-- generated:" not in ops + plugin + cli


def test_a_page_loads_nothing_from_the_network(site):
    """No web fonts or scripts from elsewhere: the site reads offline, as the HTML report does."""
    for page in (site / "index.html", site / "reference" / "ops" / "index.html"):
        html = page.read_text()
        external = re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)"', html)
        assert external == []
