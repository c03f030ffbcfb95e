"""Reference tables generated from the code, so the docs cannot drift from what pytest-npufuse registers.

A page asks for a table with a line ``<!-- generated: NAME -->``; the mkdocs hook :func:`on_page_markdown`
replaces it when the site is built (``mkdocs build``), and ``tests/docs/test_reference.py`` reads the
pages through :func:`expand` too. NAME is one of :data:`TABLES`; an unknown one stops the build.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

PLACEHOLDER = re.compile(r"^<!-- generated: ([a-z_]+) -->$", re.M)


def _cell(value: object) -> str:
    """A table cell: pipes escaped, line breaks flattened."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def options() -> str:
    """Every command-line option with its ini key, from ``pytest_npufuse.pytest.options.OPTIONS``."""
    from pytest_npufuse.pytest.options import OPTIONS, Kind

    def value(option) -> str:
        if option.kind is Kind.SWITCH:
            return "switch; ini `true` or `false`"
        return " or ".join(f"`{word}`" for word in option.metavar.split("|")) if option.metavar else "text"

    def default(option) -> str:
        if option.kind is Kind.SWITCH:
            return "`true`" if option.default else "`false`"
        return f"`{option.default}`" if option.default else "not set"

    rows = [(f"`{o.flag}`<br>ini `{o.name}`", value(o), default(o), o.help) for o in OPTIONS]
    return _table(("option", "value", "default", "what it does"), rows)


def markers() -> str:
    """Every marker as pytest registers it (``pytest --markers``), from ``pytest_npufuse.pytest.markers``."""
    from pytest_npufuse.pytest.markers import MARKERS

    blocks = []
    for line in MARKERS:
        signature, _, text = line.partition(": ")
        name = signature.split("(", 1)[0]
        blocks.append(f"### `{name}`\n\n```python\n@pytest.mark.{signature}\n```\n\n{text}")
    return "\n\n".join(blocks)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _argument_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
            name = ", ".join(f"`{flag}{metavar}`" for flag in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest}`"
        unset = action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings
        default = "" if unset else f" (default `{action.default}`)"
        help_text = (action.help or "") if "(default" in (action.help or "") else (action.help or "") + default
        rows.append((name, help_text))
    return rows


def cli() -> str:
    """Every ``python -m pytest_npufuse`` command with its arguments, from the argparse parser itself."""
    from pytest_npufuse.cli.main import parser

    sections = []
    for name, command in _subcommands(parser()).items():
        usage = " ".join(command.format_usage().split()).removeprefix("usage: ")
        examples = "\n".join(line.strip() for line in (command.epilog or "").splitlines()[1:])
        sections.append(
            f"### `{name}`\n\n{command.description}\n\n```text\n{usage}\n```\n\n"
            + _table(("argument", "meaning"), _argument_rows(command))
            + (f"\n\nExamples:\n\n```bash\n{examples}\n```" if examples else "")
        )
    return "\n\n".join(sections)


def ops() -> str:
    """The torch_npu ops with a CPU reference kernel: the rows ``python -m pytest_npufuse ops`` prints."""
    from pytest_npufuse.cli.main import op_rows

    header, *rows = op_rows()
    return _table(header, rows)


def catalog() -> str:
    """Every op type the op catalog prices (``target/data/ops.toml``), with the form-specific entries."""
    from pytest_npufuse.target.catalog import load_catalog

    loaded = load_catalog()
    entries = [(key, info) for key, info in loaded.entries.items()]
    entries += [(f"{op}@{form}", info) for (op, form), info in loaded.forms.items()]
    rows = [
        (f"`{key}`", info.kernel_type, info.engine, "yes" if info.fusable else "no",
         "yes" if info.sync_all else "no", info.block_dim, info.cost)
        for key, info in sorted(entries)
    ]
    return _table(("op type", "kernel", "engine", "fusable", "SyncAll", "block dim", "cost rule"), rows)


def cost_rules() -> str:
    """Every registered cost rule, its host tiling class and how many catalog entries use it."""
    from pytest_npufuse.cost import cost_rule, rule_names
    from pytest_npufuse.target.catalog import load_catalog

    loaded = load_catalog()
    infos = list(loaded.entries.values()) + list(loaded.forms.values())
    rows = [
        (f"`{name}`", cost_rule(name).tiling, sum(info.cost == name for info in infos)) for name in rule_names()
    ]
    return _table(("rule", "host tiling", "catalog entries using it"), rows)


CATALOG_FILE = "ops.toml"  # the op catalog's file beside the profiles (target/catalog.py reads it)
_LINE = re.compile(r"^\s*(\w+)\s*=\s*(.+?)\s*(?:#\s*(.*))?$")
_SECTION = re.compile(r"^\s*\[(\w+)\]\s*(?:#.*)?$")


def _profile_lines(path: Path) -> dict[str, tuple[str, str]]:
    """``section.key`` -> (value as written, its source comment), in file order. The comments are the
    point (every number's source or ``estimate``), and TOML parsers drop them, so the lines are read
    here; the values are checked against the parsed file below."""
    section, found = "", {}
    for line in path.read_text().splitlines():
        if match := _SECTION.match(line):
            section = match.group(1)
        elif (match := _LINE.match(line)) and section:
            found[f"{section}.{match.group(1)}"] = (match.group(2), match.group(3) or "")
    from pytest_npufuse.files.toml import read_toml, tomllib

    parsed = read_toml(path)
    for key, (value, _) in found.items():
        table, name = key.split(".")
        assert tomllib.loads(f"v = {value}")["v"] == parsed[table][name], f"{path}: {key} read as {value}"
    return found


def profiles() -> str:
    """Every built-in profile file (``target/data/*.toml`` but the op catalog): each key, its value and the
    source it cites. One table per file, as the files are: a target that lays its keys over another
    file's lists only its own."""
    from pytest_npufuse.target.profile import DATA_DIR

    sections = []
    for path in sorted(DATA_DIR.glob("*.toml")):
        if path.name == CATALOG_FILE:
            continue
        rows = [(f"`{key}`", f"`{value}`", source) for key, (value, source) in _profile_lines(path).items()]
        sections.append(f"### `{path.name}`\n\n" + _table(("key", "value", "source"), rows))
    return "\n\n".join(sections)


ROOT = Path(__file__).resolve().parents[2]


def _case_rows(folder: Path) -> list[tuple[str, str]]:
    """Each test file of ``folder`` with the first paragraph of its docstring, which says what it is."""
    rows = []
    for path in sorted(folder.glob("test_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        rows.append((f"`{path.name}`", doc.split("\n\n", 1)[0]))
    return rows


def cases() -> str:
    """The bundled cases of ``cases/``, from their files' docstrings."""
    return _table(("file", "what it checks"), _case_rows(ROOT / "cases"))


def corpus() -> str:
    """The real-code corpus of ``cases/realworld/``, from their files' docstrings."""
    return _table(("file", "what it reconstructs"), _case_rows(ROOT / "cases" / "realworld"))


def coverage() -> str:
    """The published dataset's rows by kind, family, SKU and mode (``calibration.py --coverage`` prints the
    same counts), from ``benchmarks/fidelity/coverage.py``."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fidelity.coverage import coverage_counts
    from fidelity.rows import load_rows

    table = coverage_counts(load_rows())
    return _table(("axis", "value", "rows", "of them validation"), table)


def gain_errors() -> str:
    """The model's measured error on published gains per kind, as the report states it beside a modeled
    speedup (``pytest_npufuse/report/gain_errors.toml``, written by ``calibration.py --gain-errors``)."""
    from pytest_npufuse.report.gain import GainKind, gain_error

    rows = [(str(kind), e.pairs, f"{e.median_pct:.1f}%", f"{e.within_30}/{e.pairs}", f"{e.signs_right}/{e.pairs}",
             e.protocol) for kind in GainKind if (e := gain_error(kind)) is not None]
    return _table(("gain", "published pairs", "median \\|gain error\\|", "within the rule", "signs right", "protocol"),
                  rows)


TABLES: dict[str, Callable[[], str]] = {
    "options": options, "markers": markers, "cli": cli, "ops": ops, "catalog": catalog, "profiles": profiles,
    "cost_rules": cost_rules, "cases": cases, "corpus": corpus, "coverage": coverage, "gain_errors": gain_errors,
}


def expand(markdown: str) -> str:
    """The page with every placeholder replaced by its generated table."""

    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise KeyError(f"<!-- generated: {name} -->: no such table; known: {', '.join(TABLES)}")
        return TABLES[name]()

    return PLACEHOLDER.sub(generate, markdown)


def on_page_markdown(markdown: str, **_: object) -> str:
    """mkdocs hook: expand the placeholders of every page."""
    return expand(markdown)
