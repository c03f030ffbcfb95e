"""What the issue found contradicting the product stays fixed: ``npufuse.check()``'s signature is stated once,
in the reference, and linked from everywhere else; the concepts page says what the training page documents;
the concepts page's table of what orders two streams in each mode is what the stream sanitizer does."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from markdown_blocks import ROOT, pages
from pytest_npufuse import compare, torchair as tng
from pytest_npufuse.pytest.library import NpuFuse

_FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
_CHECK_CALL = re.compile(r"`npufuse\.check\(([^`]*)\)[^`]*`")


def _prose(page) -> str:
    """A page without its code blocks."""
    return _FENCED.sub("", page.read_text())


def test_check_is_stated_once_in_the_reference_with_its_real_signature():
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    parameters = ", ".join(stars.get(p.kind, "") + name for name, p in inspect.signature(NpuFuse.check).parameters.items()
                           if name != "self")
    stated = {page.relative_to(ROOT).as_posix(): [args for args in _CHECK_CALL.findall(_prose(page)) if args not in ("", "...")]
              for page in pages()}
    assert {page: calls for page, calls in stated.items() if calls} == {"docs/reference/plugin.md": ["model, *inputs, **fields", "spec"]}
    assert parameters == "model, *inputs, **fields"


def test_pages_that_name_check_link_to_its_reference():
    for page in pages():
        if page.name == "plugin.md":
            continue
        prose = _prose(page)
        if re.search(r"`npufuse\.check\(\)`(?!\]\()", prose) and "plugin.md#check" not in prose:
            pytest.fail(f"{page.relative_to(ROOT)} names npufuse.check() without a link to reference/plugin.md#check")


def test_concepts_says_what_the_training_page_documents():
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    assert "(training.md)" in concepts and "`loss=`" in concepts
    refusals = re.findall(r"[^.]*\b(?:backward|training|gradient)[^.]*\b(?:refused|not supported|rejected)[^.]*\.", concepts, re.I)
    assert refusals == []


def _ordering_table() -> dict[str, tuple[str, str]]:
    """The concepts page's table: per mode, what a read along a data edge and an in-place write get."""
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| (ordered|race) \| (ordered|race) \|", concepts, re.M)
    return {mode: (read, write) for mode, read, write in rows}


def _stream(native: bool):
    return torch.npu.stream(torch.npu.Stream()) if native else tng.scope.npu_stream_switch("1")


def _reads_along_a_data_edge(native: bool):
    def model(a, b):
        x = a + b
        with _stream(native):
            y = x @ b
        return y
    return model


def _writes_in_place(native: bool):
    def model(a, b):
        with _stream(native):
            y = a @ b
        a.mul_(2)
        return y
    return model


@pytest.mark.parametrize("mode", ["max-autotune", "reduce-overhead", "npugraph_ex", "eager"])
def test_the_concepts_table_of_stream_ordering_is_what_the_sanitizer_does(mode):
    expected = _ordering_table()[mode]
    native = mode in ("npugraph_ex", "eager")  # torch.npu streams; TorchAir's stream switch elsewhere
    found = []
    for model in (_reads_along_a_data_edge(native), _writes_in_place(native)):
        report = compare(model, torch.randn(8, 8), torch.randn(8, 8), mode=mode)
        found.append("race" if report.races else "ordered")
    assert tuple(found) == expected
