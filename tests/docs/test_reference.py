"""Every option, ini key, marker, fixture and command-line flag pytest-npufuse registers is in the reference,
and no user-facing text names the project's source documents by number ("seed 003") instead of saying what
they are."""

import argparse
import re
import sys
from pathlib import Path

import pytest

from pytest_npufuse.cli.main import parser

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

from generated import TABLES, expand  # noqa: E402

DOCS = ROOT / "docs"
SEED = re.compile(r"\bseeds?[ -]?\d{3}\b", re.I)


def _page(name: str) -> str:
    return expand((DOCS / "reference" / name).read_text())


def _registered(pytester: pytest.Pytester, flag: str, pattern: str) -> set[str]:
    """Names the run lists with ``flag`` (``--markers``, ``--fixtures``, ``--help``) that only the plugin adds."""
    def names(*extra: str) -> set[str]:
        lines = pytester.runpytest_inprocess(flag, "-p", "no:cacheprovider", *extra).stdout.lines
        return {m.group(1) for line in lines if (m := re.match(pattern, line))}

    return names() - names("-p", "no:npufuse")


@pytest.fixture(scope="module")
def plugin_page() -> str:
    return _page("plugin.md")


def test_every_option_and_ini_key_is_in_the_reference(pytester, plugin_page):
    flags = _registered(pytester, "--help", r"^\s+(--[a-z][a-z-]+)")
    ini_keys = _registered(pytester, "--help", r"^  ([a-z][a-z_]+) \(")
    assert "--npu-target" in flags and "npufuse_json" in ini_keys
    assert {flag for flag in flags if f"`{flag}`" not in plugin_page} == set()
    assert {key for key in ini_keys if f"`{key}`" not in plugin_page} == set()


def test_every_marker_is_in_the_reference(pytester, plugin_page):
    markers = _registered(pytester, "--markers", r"^@pytest\.mark\.(\w+)")
    assert {"superkernel", "multistream", "npu_target", "npu_affinity"} <= markers
    assert {name for name in markers if f"### `{name}`" not in plugin_page} == set()


def test_every_fixture_is_in_the_reference(pytester, plugin_page):
    fixtures = _registered(pytester, "--fixtures", r"^(\w+)(?: \[\w+ scope\])? -- ")
    assert {"npufuse", "npu_target"} <= fixtures
    assert {name for name in fixtures if f"### `{name}`" not in plugin_page} == set()


def _commands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_and_its_flags_are_in_the_reference():
    page = _page("cli.md")
    sections = dict(re.findall(r"^### `(\w+)`\n(.*?)(?=^### |\Z)", page, re.S | re.M))
    assert set(sections) == set(_commands())
    for name, command in _commands().items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            words = action.option_strings or [action.metavar or action.dest]
            assert all(f"`{word}" in sections[name] for word in words), (name, words)


def _cli_help() -> list[str]:
    texts = [parser().format_help()]
    texts += [command.format_help() for command in _commands().values()]
    return texts


def test_no_user_facing_text_names_a_source_document_by_number(pytester):
    pages = [path.read_text() for path in DOCS.rglob("*.md")] + [(ROOT / "README.md").read_text()]
    generated = [table() for table in TABLES.values()]
    pytest_help = [pytester.runpytest_inprocess(flag, "-p", "no:cacheprovider").stdout.str() for flag in ("--help", "--markers")]
    found = [match.group(0) for text in pages + generated + _cli_help() + pytest_help for match in SEED.finditer(text)]
    assert found == []
