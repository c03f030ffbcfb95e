"""Write ``tests/shim/torch_npu_api.toml``: the real torch_npu's public names, the ones its op tests use,
and which of those the shim lacks or declares differently (the tracked gaps).

Not a benchmark: the one-off extraction behind the public-API test (tests/shim/test_torch_npu_api.py),
kept here so the data file can be regenerated when the modeled torch_npu moves. It reads the sources of
the torch_npu version pytest-npufuse models, from git directories (e.g. the search tool's ``fetch`` of
``github:Ascend/pytorch`` and ``github:Ascend/op-plugin``), never an installed torch_npu:

* ops: ``torch_npu.<name>`` is ``torch.ops.npu.<name>`` for every op torch_npu registers
  (``torch_npu/_init/core/_exports.py``). Their schemas: op-plugin's ``op_plugin_functions.yaml``
  ``custom`` section (an entry counts when torch v2.13 is among its ``acl_op``/``op_api``/``sparse``
  versions, as ``torchnpugen/gen_op_plugin_functions.py`` filters it), torch_npu's own
  ``torch_npu/csrc/aten/npu_native_functions.yaml`` ``custom`` section, and the ATB ops op-plugin defines
  with ``m.def("...")`` in ``op_plugin/ops/atb/``. A name's schema is its default overload's, else its
  only overload's.
* dtypes: the ``def_readonly_static`` names of ``torch_npu/csrc/custom_dtype/Init.cpp``, valued as the
  shim's :mod:`pytest_npufuse.torch_npu.dtypes` (ACL value + 256), whose values the test checks.
* modules: the ``__all__`` of ``torch_npu/contrib``, ``torch_npu/contrib/module`` and ``torch_npu/onnx``,
  and the constructor signatures of the contrib classes the shim provides (read with ``ast``).
* used: the ``torch_npu.<name>`` and ``torch.ops.npu.<name>`` names the peer-suite test files reference
  (the list of files: ``FILE`` lines of a suite.txt), read from the same commits, and the ``torch_npu.<name>``
  names vLLM-Ascend's package code uses (``github:vllm-project/vllm-ascend``, ``vllm_ascend/``).

Run from the repository root::

    PYTHONPATH=. python benchmarks/torch_npu_api.py --pytorch PYTORCH_GIT_DIR --op-plugin OP_PLUGIN_GIT_DIR \\
        --vllm-ascend VLLM_ASCEND_GIT_DIR --suite SUITE_TXT [--check]

``--check`` writes nothing and exits 1 when the file on disk differs from what would be written.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

PYTORCH_COMMIT = "9e73e708ab9350d203475609f36f8a43f6a0c2ab"  # Ascend/pytorch master, 2026-08-21
OP_PLUGIN_COMMIT = "6b46b284d04116e7ac551fddb916027629176579"  # its third_party/op-plugin submodule pin
VLLM_ASCEND_COMMIT = "182b75ea84ff13ece27b57391331ef8935410aea"  # vllm-project/vllm-ascend main, 2026-08-22
TORCH_VERSION = "v2.13"
OUT = Path(__file__).resolve().parents[1] / "tests" / "shim" / "torch_npu_api.toml"
CONTRIB_CLASSES = {"LinearQuant": "linear_quant", "LinearA8W8Quant": "linear_a8w8_quant",
                   "LinearWeightQuant": "linear_weight_quant"}
_USE = re.compile(r"\btorch(?:_npu|\.ops\.npu)\.([A-Za-z_]\w*)")
_DEF = re.compile(r'm\.def\(\s*"([^"]+)"')
_PY_DEF = re.compile(r'\.define\(\s*"(\w+(?:\.\w+)?\([^"]*\) -> [^"]+)"')


def show(git_dir: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def listing(git_dir: Path, commit: str, folder: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit, folder],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def _versions(spec: object, all_versions: list[str]) -> list[str]:
    """op-plugin's version field: ``all_version``, ``[first, last|newest]`` or ``"v2.1, v2.2"``."""
    if spec is None:
        return []
    if spec == "all_version":
        return all_versions
    if isinstance(spec, list):
        start = all_versions.index(spec[0])
        return all_versions[start:] if spec[1] == "newest" else all_versions[start:all_versions.index(spec[1]) + 1]
    return [item.strip() for item in str(spec).split(",")]


def _add(schemas: dict[str, dict[str, str]], func: str, exposed: bool = False) -> None:
    full, _, _ = func.partition("(")
    name, _, overload = full.partition(".")
    schemas.setdefault(name, {})[overload] = func.replace(f"{full}(", f"{name}(", 1)
    if exposed:
        schemas[name]["exposed"] = "true"


def op_schemas(pytorch: Path, op_plugin: Path) -> dict[str, str]:
    """torch_npu.<name> -> the schema of its default (or only) overload, for torch 2.13."""
    schemas: dict[str, dict[str, str]] = {}
    plugin = yaml.safe_load(show(op_plugin, OP_PLUGIN_COMMIT, "op_plugin/config/op_plugin_functions.yaml"))
    all_versions = plugin["all_version"]
    for entry in plugin["custom"]:
        present = sum((_versions(entry.get(key), all_versions) for key in ("acl_op", "op_api", "sparse")), [])
        if TORCH_VERSION in present:
            _add(schemas, entry["func"], TORCH_VERSION in _versions(entry.get("exposed"), all_versions))
    native = yaml.safe_load(show(pytorch, PYTORCH_COMMIT, "torch_npu/csrc/aten/npu_native_functions.yaml"))
    for entry in native.get("custom", []):
        _add(schemas, entry["func"] if isinstance(entry, dict) else entry)
    for path in listing(op_plugin, OP_PLUGIN_COMMIT, "op_plugin/ops/atb"):
        source = show(op_plugin, OP_PLUGIN_COMMIT, path)
        joined = re.sub(r'"\s*\n\s*"', "", source)  # C++ string literals split over lines
        for func in _DEF.findall(joined):
            _add(schemas, func)
    found = subprocess.run(["git", "--git-dir", str(pytorch), "grep", "-l", 'define("', PYTORCH_COMMIT, "--",
                            "torch_npu/*.py"], capture_output=True, text=True).stdout.split()
    for hit in found:  # torch_npu's own Python-defined ops (save_npugraph_tensor: torch_npu/npu/graphs.py)
        for func in _PY_DEF.findall(show(pytorch, PYTORCH_COMMIT, hit.partition(":")[2])):
            _add(schemas, func)
    chosen = {}
    for name, overloads in sorted(schemas.items()):
        forms = {k: v for k, v in overloads.items() if k != "exposed"}
        if "" in forms or len(forms) == 1:
            chosen[name] = forms.get("") or next(iter(forms.values()))
    return chosen


def dtype_names(pytorch: Path) -> list[str]:
    source = show(pytorch, PYTORCH_COMMIT, "torch_npu/csrc/custom_dtype/Init.cpp")
    return re.findall(r'def_readonly_static\("(\w+)"', source)


def module_all(pytorch: Path, path: str) -> list[str]:
    tree = ast.parse(show(pytorch, PYTORCH_COMMIT, path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return sorted(ast.literal_eval(node.value))
    return []


def init_signature(pytorch: Path, module: str, cls: str) -> str:
    """The parameters of ``cls.__init__`` as source text: names, kinds and default values."""
    tree = ast.parse(show(pytorch, PYTORCH_COMMIT, f"torch_npu/contrib/module/{module}.py"))
    init = next(node for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls
                for node in c.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    args = init.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parts = [a.arg + (f"={ast.unparse(d)}" if d is not None else "") for a, d in zip(positional, defaults)]
    if args.kwonlyargs:
        parts.append("*")
        parts += [a.arg + (f"={ast.unparse(d)}" if d is not None else "")
                  for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return f"({', '.join(parts)})"


def public_code_names(vllm_ascend: Path) -> list[str]:
    """The ``torch_npu.<name>`` names vLLM-Ascend's package code uses: the public code the shim serves."""
    out = subprocess.run(["git", "--git-dir", str(vllm_ascend), "grep", "-h", "-o", "-E", r"\btorch_npu\.[A-Za-z_]\w*",
                          VLLM_ASCEND_COMMIT, "--", "vllm_ascend/*.py"], check=True, capture_output=True, text=True)
    return sorted({hit.rpartition(".")[2] for hit in out.stdout.split()})


def used_names(pytorch: Path, op_plugin: Path, suite: Path) -> list[str]:
    names: set[str] = set()
    for line in suite.read_text().splitlines():
        if not line.startswith("FILE "):
            continue
        path = line.split()[1]
        repo, commit, inner = ((pytorch, PYTORCH_COMMIT, path[len("pytorch/"):]) if path.startswith("pytorch/")
                               else (op_plugin, OP_PLUGIN_COMMIT, path[len("op-plugin/"):]))
        names.update(_USE.findall(show(repo, commit, inner)))
    return sorted(names)


def _test_module() -> ModuleType:
    """The public-API test, whose comparison of a shim op with a real schema this script reuses (the data
    file it reads need not exist yet: an empty one is put in its place while it loads)."""
    if not OUT.exists():
        OUT.write_text('[used]\ntests = []\npublic_code = []\n[gaps]\n[ops]\n[dtypes]\nnames = []\n[contrib]\n[modules]\n')
    spec = importlib.util.spec_from_file_location("test_torch_npu_api", OUT.with_name("test_torch_npu_api.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gaps(ops: dict[str, str], dtypes: list[str], submodules: list[str], used: list[str],
         contrib: dict[str, str]) -> dict[str, str]:
    """Each used name, declared op and contrib class the shim lacks or declares with another signature, with why."""
    from pytest_npufuse.torch_npu.contrib import module as shim_contrib
    from pytest_npufuse.torch_npu.schema import declarations

    checks = _test_module()
    compare_op, shim_has = checks.compare_op, checks.shim_has

    found = {}
    for name in sorted(set(used) | set(declarations())):
        if name in ops:
            why = compare_op(name, ops[name])
        elif name in dtypes:
            why = None if shim_has(name) else "dtype missing"
        elif name in submodules:
            why = None if shim_has(name) else "submodule missing"
        else:
            why = None if shim_has(name) else "missing (a Python-level name: not among the ops, dtypes or submodules)"
        if why:
            found[name] = why
    for cls, signature in contrib.items():
        mine = getattr(shim_contrib, cls, None)
        if mine is None:
            found[f"contrib.module.{cls}"] = "missing"
        elif checks.constructor_text(mine) != signature:
            found[f"contrib.module.{cls}"] = f"__init__ is {checks.constructor_text(mine)}"
    return found


def _toml_string(text: str) -> str:
    return "'" + text + "'" if "'" not in text else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(ops: dict[str, str], dtypes: list[str], modules: dict[str, list[str]], contrib: dict[str, str],
           tests: list[str], public: list[str], found: dict[str, str]) -> str:
    lines = [
        "# The real torch_npu's public names and the ones its op tests use, written by",
        "# benchmarks/torch_npu_api.py (do not edit by hand; rerun it) from Ascend/pytorch",
        f"# {PYTORCH_COMMIT[:12]} and Ascend/op-plugin {OP_PLUGIN_COMMIT[:12]} (the submodule it pins), torch 2.13.",
        "# tests/shim/test_torch_npu_api.py checks the shim against it: every used name not under [gaps] is",
        "# provided with the same signature, and every [gaps] entry is still a gap.",
        "",
        "[source]",
        f'pytorch = "{PYTORCH_COMMIT}"',
        f'op_plugin = "{OP_PLUGIN_COMMIT}"',
        f'vllm_ascend = "{VLLM_ASCEND_COMMIT}"',
        f'torch = "{TORCH_VERSION}"',
        "",
        "# tests: names torch_npu's op tests in the peer suite reference as torch_npu.<name> or torch.ops.npu.<name>;",
        "# public_code: torch_npu.<name> names vLLM-Ascend's package code uses.",
        "[used]",
        "tests = [" + ", ".join(f'"{n}"' for n in tests) + "]",
        "public_code = [" + ", ".join(f'"{n}"' for n in public) + "]",
        "",
        "# Used names and the shim's own ops that it lacks or declares with another schema: the tracked gaps.",
        "[gaps]",
        *[f'"{name}" = {_toml_string(why)}' for name, why in sorted(found.items())],
        "",
        "# torch_npu's dtype names (torch_npu/csrc/custom_dtype/Init.cpp).",
        "[dtypes]",
        "names = [" + ", ".join(f'"{n}"' for n in dtypes) + "]",
        "",
        "# __all__ of torch_npu's Python packages the shim models.",
        "[modules]",
        *[f'"{path}" = [' + ", ".join(f'"{n}"' for n in names) + "]" for path, names in modules.items()],
        "",
        "# __init__ parameters of the contrib classes the shim provides.",
        "[contrib]",
        *[f'{cls} = "{signature}"' for cls, signature in contrib.items()],
        "",
        "# torch_npu.<name> -> the schema of torch.ops.npu.<name> (default overload, else its only one).",
        "[ops]",
        *[f'{name} = {_toml_string(schema)}' for name, schema in ops.items()],
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytorch", type=Path, required=True, help="git dir of Ascend/pytorch")
    parser.add_argument("--op-plugin", type=Path, required=True, help="git dir of Ascend/op-plugin")
    parser.add_argument("--vllm-ascend", type=Path, required=True, help="git dir of vllm-project/vllm-ascend")
    parser.add_argument("--suite", type=Path, required=True, help="suite.txt naming the peer-suite files")
    parser.add_argument("--check", action="store_true", help="compare with the file on disk, write nothing")
    args = parser.parse_args()
    ops = op_schemas(args.pytorch, args.op_plugin)
    dtypes = dtype_names(args.pytorch)
    modules = {f"torch_npu.{p.replace('/', '.')}": module_all(args.pytorch, f"torch_npu/{p}/__init__.py")
               for p in ("contrib", "contrib/module", "onnx")}
    contrib = {cls: init_signature(args.pytorch, module, cls) for cls, module in CONTRIB_CLASSES.items()}
    tests = used_names(args.pytorch, args.op_plugin, args.suite)
    public = public_code_names(args.vllm_ascend)
    used = sorted(set(tests) | set(public))
    submodules = sorted({p.split("/")[1].removesuffix(".py") for p in listing(args.pytorch, PYTORCH_COMMIT, "torch_npu")})
    text = render(ops, dtypes, modules, contrib, tests, public, gaps(ops, dtypes, submodules, used, contrib))
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT.name}: {'up to date' if same else 'differs: rerun without --check'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(ops)} ops, {len(used)} used names, {text.count(chr(10) + chr(34))} lines of gaps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
