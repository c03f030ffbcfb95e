"""Every code block of the docs runs, as doctest runs a docstring's examples: a page's blocks run in order in
a directory of their own (a pytester directory), test files with pytest and the plugin, scripts in Python,
commands as a shell would, TOML checked against the product's schema, shown output compared with what was
printed. ``markdown_blocks`` says how a block is marked when it needs more than its language says."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pytest.pytester import SysModulesSnapshot

from markdown_blocks import ROOT, Block, blocks, commands, pages, unmatched
from pytest_npufuse.cli.main import main as cli_main
from pytest_npufuse.target.userconfig import load_user_config

PAGES = [page for page in pages() if blocks(page)]
CI_LINES = [line.split(" || ")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
_FIRST_TEST = re.compile(r"^def (test_\w+)", re.M)
MOST_SKIPS = 6
"""Blocks that cannot run here (a package CI does not install, another CI system's job) are marked, with the
reason, and stay few."""


class Page:
    """Runs one page's blocks in order in ``pytester``'s directory; ``printed`` is what the last run printed,
    ``names`` what the last script left."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.printed = ""
        self.names: dict[str, Any] = {}
        self._options: set[str] | None = None
        self._last_test: Block | None = None
        subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)  # for the pages' git commands

    def run(self, block: Block) -> None:
        if block.has("skip"):
            assert block.words["skip"], f"{block.where}: a skipped block says why"
            return
        if block.has("ci"):
            missing = [command for command in commands(block.text) if command not in CI_LINES]
            assert missing == [], f"{block.where}: not a line of .ci/run: {missing}"
            return
        handler = getattr(self, f"_{block.language or 'text'}", None)
        assert handler is not None, f"{block.where}: a {block.language or 'plain'} block its docs test cannot run"
        handler(block)

    def _path(self, relative: str) -> Path:
        path = self.pytester.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _python(self, block: Block) -> None:
        if block.has("file"):
            self._path(block.words["file"]).write_text(block.text)
        elif block.is_test_file:
            path = self._path(_FIRST_TEST.search(block.text).group(1) + ".py")  # named by its first test
            path.write_text(block.text)
            result = self.pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", path.name)
            self._finished(block, result.ret, result.stdout.str() + result.stderr.str())
            self._last_test = block
        else:
            self._script(block)

    def _script(self, block: Block) -> None:
        names = self.names if block.has("continues") else {"__name__": "__main__"}
        if block.has("continues") and self._last_test is not None:  # the names the test file defines
            names = {"__name__": "docs_test_file"}
            exec(compile(self._last_test.text, self._last_test.where, "exec"), names)
        self._last_test = None
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.text, block.where, "exec"), names)
        self.names, self.printed = names, out.getvalue()

    def _bash(self, block: Block) -> None:
        for command in commands(block.text):
            status, printed = self._command(command)
            self._finished(block, status, printed, command)

    def _command(self, command: str) -> tuple[int, str]:
        words = shlex.split(command)
        if words[:3] == ["python", "-m", "pytest_npufuse"]:
            self._link(words[3:])
            out = io.StringIO()
            with contextlib.redirect_stderr(out):
                try:
                    status = cli_main(words[3:], out)
                except SystemExit as stop:  # argparse's usage errors
                    status = int(stop.code or 0)
            return status, out.getvalue()
        if words[:3] == ["python", "-m", "pytest"]:
            result = self.pytester.runpytest_inprocess("-p", "no:randomly", *words[3:])
            return int(result.ret), result.stdout.str() + result.stderr.str()
        done = subprocess.run(command, shell=True, cwd=self.pytester.path, capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr

    def _link(self, words: list[str]) -> None:
        """The files of this repository a command names (``cases/decoder_layers.py:advisor_case``), linked into
        the page's directory where the page did not write them itself."""
        for word in words:
            relative = word.split(":")[0]
            if relative and not relative.startswith("-") and (ROOT / relative).exists() and not (self.pytester.path / relative).exists():
                link = self.pytester.path / relative
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(ROOT / relative)

    def _finished(self, block: Block, status: int, printed: str, command: str = "") -> None:
        self.printed = printed
        failed = status != 0
        assert failed == block.has("fails"), f"{block.where}: {command or 'the block'} exited {status}:\n{printed[-4000:]}"

    def _text(self, block: Block) -> None:
        assert block.has("output"), f"{block.where}: a text block is an output (mark it output) or says why not (skip)"
        line = unmatched(block.text, self.printed)
        assert line is None, f"{block.where}: not printed: {line!r}\nprinted:\n{self.printed[-6000:]}"

    def _toml(self, block: Block) -> None:
        if block.has("written"):
            written = self._path(block.words["written"]).read_text()
            line = unmatched(block.text, written)
            assert line is None, f"{block.where}: not in {block.words['written']}: {line!r}\n{written}"
            return
        path = self._path(block.words.get("file") or "pyproject.toml")
        path.write_text(block.text)
        config = load_user_config(path)  # parsed, every table and key checked
        config.check_targets()
        config.catalog()

    def _yaml(self, block: Block) -> None:
        for command in _runs(yaml.safe_load(block.text)):
            words = shlex.split(command)
            if words[:3] == ["python", "-m", "pytest_npufuse"]:
                status, printed = self._command(f"{command} --help")
                assert status == 0, f"{block.where}: {command}: {printed}"
            elif words[:3] == ["python", "-m", "pytest"]:
                unknown = {w.split("=")[0] for w in words if w.startswith("--npu")} - self._plugin_options()
                assert unknown == set(), f"{block.where}: options the plugin does not have: {unknown}"
            elif words[:2] == ["pip", "install"] and "--no-deps" not in words:
                assert '"torch==2.13.0"' in command, f"{block.where}: installs torch unpinned: {command}"

    def _plugin_options(self) -> set[str]:
        if self._options is None:
            lines = self.pytester.runpytest_inprocess("--help").stdout.lines
            self._options = {word.split("=")[0].rstrip(",") for line in lines for word in line.split() if word.startswith("--npu")}
        return self._options


def _runs(document: Any) -> list[str]:
    """Every command of a CI workflow's ``run:`` steps (a folded ``>`` step is one line, a literal ``|`` step
    one command a line)."""
    if isinstance(document, dict):
        run = document.get("run")
        found = commands(run) if isinstance(run, str) else []
        return found + [command for key, value in document.items() if key != "run" for command in _runs(value)]
    if isinstance(document, list):
        return [command for value in document for command in _runs(value)]
    return []


def _kept(name: str) -> bool:
    """Modules an inner pytest run may import first and must not take away when it ends: torch's and the
    package's register operators once per process (a second import of one fails), and pytester's own."""
    return name.startswith(("torch", "functorch", "pytest_npufuse", "sympy", "numpy", "zope", "readline"))


@pytest.fixture
def sandbox(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """``pytester``, whose runs keep the modules :func:`_kept` names when they restore ``sys.modules``."""
    monkeypatch.setattr(pytester, "_Pytester__take_sys_modules_snapshot", lambda: SysModulesSnapshot(preserve=_kept))
    pytester._sys_modules_snapshot = SysModulesSnapshot(preserve=_kept)
    return pytester


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_every_block_of_the_page_runs(page: Path, sandbox: pytest.Pytester) -> None:
    pytester = sandbox
    pytester.syspathinsert()
    pytester.syspathinsert(ROOT / "cases")  # the pages use the bundled models (cases/full_size) by name
    before = set(sys.modules)
    try:
        runner = Page(pytester)
        for block in blocks(page):
            runner.run(block)
    finally:  # the page's own modules (a model.py) are not another page's
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(pytester.path)):
                del sys.modules[name]


def test_blocks_that_do_not_run_are_few_and_say_why():
    skipped = [block for page in pages() for block in blocks(page) if block.has("skip")]
    assert all(block.words["skip"] for block in skipped)
    assert len(skipped) <= MOST_SKIPS, [block.where for block in skipped]
