"""Every citation in the package resolves to a section of a page in the repository: a source the code
or a data file cites is written ``docs/<page>.md#<anchor>``, and the page has that anchor (an explicit
``{#anchor}`` on a heading). The notes the project once cited by section sign or seed number are not in
the repository, so neither form may come back. The bundled cases and the benchmarks cite the same
pages, and their citations must resolve too."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_npufuse"
CITATION = re.compile(r"docs/(sources|feature-docs)\.md#([a-z0-9-]+)")
UNRESOLVABLE = re.compile(r"§|\bseeds?[ -]?\d{3}\b", re.I)


def _texts(*folders: Path) -> dict[str, str]:
    files = [p for folder in folders for p in sorted(folder.rglob("*"))
             if p.suffix in (".py", ".toml", ".md", ".txt") and p.is_file()]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}


def _anchors(page: str) -> set[str]:
    return set(re.findall(r"\{#([a-z0-9-]+)\}", (ROOT / "docs" / f"{page}.md").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return _texts(PACKAGE)


@pytest.fixture(scope="module")
def citing() -> dict[str, str]:
    """Everything that cites the pages: the package, the bundled cases and the benchmarks."""
    return _texts(PACKAGE, ROOT / "cases", ROOT / "benchmarks")


def test_every_citation_names_an_anchor_its_page_has(citing):
    anchors = {page: _anchors(page) for page in ("sources", "feature-docs")}
    cited = [(path, match) for path, text in citing.items() for match in CITATION.finditer(text)]
    assert len(cited) > 200  # the data files and the code cite these pages throughout
    missing = [f"{path}: {match.group(0)}" for path, match in cited if match.group(2) not in anchors[match.group(1)]]
    assert missing == []


def test_no_citation_points_outside_the_repository(texts):
    found = [f"{path}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
             for path, text in texts.items() for match in UNRESOLVABLE.finditer(text)]
    assert found == []


def test_every_anchor_the_pages_declare_is_cited_or_linked(citing):
    """A section no citation uses is a fact kept for nothing; drop it or cite it."""
    cited = {match.group(2) for text in citing.values() for match in CITATION.finditer(text)}
    linked = set(re.findall(r"\]\([a-z-]*\.md#([a-z0-9-]+)\)|\]\(#([a-z0-9-]+)\)",
                            (ROOT / "docs" / "sources.md").read_text(encoding="utf-8")))
    linked_flat = {anchor for pair in linked for anchor in pair if anchor}
    unused = sorted((_anchors("sources") | _anchors("feature-docs")) - cited - linked_flat)
    assert unused == []
