"""The package's layers, kept: imports run downward only, no module imports itself round a cycle, and
the torch-free layers (and the pytest entry point) load without torch.

The table is the one docs/ARCHITECTURE.md explains. A module may import from its own top-level package
or from any lower layer. Imports under ``if TYPE_CHECKING:`` count too: they never run, but a type named
from a higher layer is a dependency on it all the same, and a cycle through one is a cycle of meaning.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_npufuse

PACKAGE = Path(pytest_npufuse.__file__).resolve().parent
NAME = "pytest_npufuse"

# Lowest first. Each entry is one top-level module or subpackage of pytest_npufuse.
LAYERS: tuple[str, ...] = (
    "vocabulary",
    "errors",
    "gaps",
    "files",
    "session",
    "ir",
    "target",
    "cost",
    "plan",
    "sanitize",
    "simulate",
    "report",
    "gate",
    "calibrate",
    "numerics",
    "torch_npu",
    "frontend",
    "execute",
    "advisor",
    "pipeline",
    "torchair",
    "npugraph_ex",
    "gating",
    "shim",
    "cli",
    "pytest",
    "plugin",
    "__main__",
    "__init__",
)
TORCH_FREE = LAYERS[: LAYERS.index("calibrate") + 1] + ("frontend.tagged_events",)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The package-internal modules an import names, as dotted paths under pytest_npufuse."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        if module == "__init__":
            base = []
        target = [p for p in base + (node.module.split(".") if node.module else []) if p]
    elif node.module and (node.module == NAME or node.module.startswith(NAME + ".")):
        target = node.module.split(".")[1:]
    else:
        return []
    found = []
    for alias in node.names:
        sub = ".".join(target + [alias.name])
        found.append(sub if sub in MODULES else ".".join(target) or "__init__")
    return found


def imports_of(module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) of every import inside the package, those under
    ``if TYPE_CHECKING:`` included."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            targets = _resolve(module, path.name == "__init__.py", node)
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".", 1)[1] for a in node.names if a.name.startswith(NAME + ".")]
        else:
            continue
        found += [(target, node.lineno, id(node) in top) for target in targets if target in MODULES]
    return found


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def test_every_top_level_module_has_a_layer():
    missing = sorted({module.split(".")[0] for module in MODULES} - set(LAYERS))
    assert not missing, f"add {missing} to LAYERS here and to docs/ARCHITECTURE.md"


def test_imports_only_run_downward():
    upward = []
    for module in MODULES:
        for target, line, _ in imports_of(module):
            same_package = module.split(".")[0] == target.split(".")[0]
            if not same_package and _layer(target) >= _layer(module):
                upward.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not upward, "imports that run upward or sideways:\n" + "\n".join(upward)


def _cycle() -> list[str] | None:
    graph = {module: {target for target, _, _ in imports_of(module) if target != module} for module in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_cycles():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_over_600_lines_outside_the_op_library():
    long = [f"{m} ({n} lines)" for m, p in MODULES.items() if not m.startswith("torch_npu")
            and (n := len(p.read_text().splitlines())) > 600]
    assert not long, f"split these by job: {long}"


_NO_TORCH = """
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch imported by " + repr(name))
sys.meta_path.insert(0, Block())
for module in sys.argv[1:]:
    importlib.import_module(module)
"""


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] in TORCH_FREE or m in TORCH_FREE))
def test_torch_free_layers_import_without_torch(module):
    name = NAME if module == "__init__" else f"{NAME}.{module}"
    result = subprocess.run([sys.executable, "-c", _NO_TORCH, name], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr.strip().splitlines()[-1]


def test_the_pytest_entry_point_loads_neither_torch_nor_the_pipeline():
    code = (
        "import sys, pytest_npufuse.plugin\n"
        "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('pytest_npufuse.pipeline', "
        "'pytest_npufuse.frontend.backend', 'pytest_npufuse.advisor')))\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_typing_only_imports_count():
    """cost.registry names ``Kernel`` only under ``if TYPE_CHECKING:``; that import is still an edge."""
    assert "ir.program" in {target for target, _, _ in imports_of("cost.registry")}
