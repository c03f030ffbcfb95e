"""Tests assert on an error's fields, not on its wording: at least 90% of the ``pytest.raises`` in the tests
read a field of the error they caught (``kind``, ``op``, ``argument``, ``where``, ``file``, ``entry``,
``bound``, ``gap``/``gaps``, or an ImportError's ``name``), directly or through ``inner_exception`` of a
compiler's wrapper. The message is rendered from the fields in one place
(:meth:`pytest_npufuse.errors.NpufuseError.__str__`); a test that pins wording does so on purpose (an
error that mirrors TorchAir's or torch_npu's own words) and is among the other 10%.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FIELDS = frozenset({"kind", "op", "argument", "where", "file", "entry", "bound", "gap", "gaps", "stopped", "name"})


def _raises(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.raises"


def _reads_a_field(scope: ast.AST, name: str, first: int, last: int) -> bool:
    """Whether ``scope`` reads a field of ``name.value`` (or of an alias ``x = name.value``) in lines
    ``first`` to ``last``."""
    nodes = [n for n in ast.walk(scope) if first <= getattr(n, "lineno", 0) <= last]
    aliases = {
        n.targets[0].id for n in nodes
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and ast.unparse(n.value) == f"{name}.value"
    }
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr in FIELDS:
            owner = ast.unparse(node.value)
            if owner.startswith(f"{name}.value") or owner in aliases:
                return True
    return False


def _field_asserting(path: Path) -> tuple[int, int]:
    """(raises that read a field of their error, all raises) in one test file."""
    tree = ast.parse(path.read_text())
    found = fields = 0
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        withs = sorted(
            (n.lineno, item.optional_vars.id if isinstance(item.optional_vars, ast.Name) else None)
            for n in ast.walk(function) if isinstance(n, ast.With) for item in n.items if _raises(item.context_expr)
        )
        for index, (line, name) in enumerate(withs):
            later = [other for other, same in withs[index + 1:] if same == name]
            found += 1
            fields += bool(name) and _reads_a_field(function, name, line, (later[0] - 1) if later else function.end_lineno)
    return fields, found


def test_nine_in_ten_raises_assert_on_the_errors_fields():
    counts = [_field_asserting(path) for path in sorted(TESTS.rglob("*.py"))]
    fields, found = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert found > 300 and fields >= 0.9 * found, f"{fields} of {found} pytest.raises assert on error fields"
