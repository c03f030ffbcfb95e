"""Command line: ``python -m pytest_npufuse <command>``, for people and CI steps outside pytest.

Each command is a subparser with its own ``run`` function, its texts and example lines in
``commands.toml``; exit codes follow pytest's spirit: 0 fine, 1 a regression, 2 bad usage or an
unreadable file.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from importlib import metadata
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from ..errors import NpufuseError
from ..files import Kind, check_outputs, kind_of, write_text
from ..files.toml import read_toml
from ..gate import comparison_formats as formats
from ..gate.baseline import IMPROVED, count_line, dumps, model_notice, parse_percent
from ..gate.comparison import compare_runs, read_run
from ..gate.merge import merge_documents
from ..report.escaping import TerminalStream
from ..report.table import aligned
from ..target.profile import BUILTIN_TARGETS, DEFAULT_TARGET, TARGET_HELP

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def _stderr() -> TerminalStream:
    """Standard error (looked up at each call: a test may have replaced it), users' names and file
    content quoted in a message shown safely, as on standard output."""
    return TerminalStream(sys.stderr)


def _percent(text: str) -> float:
    value = parse_percent(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage >= 0")
    return value


_FORMATS = (("markdown", "markdown (PR comment)", formats.markdown), ("json", "JSON", lambda c: dumps(formats.to_json(c))),
            ("csv", "CSV", formats.to_csv), ("html", "HTML", formats.html))


def compare(args: argparse.Namespace, out: TextIO) -> int:
    """Compare baselines or run reports, oldest first; exit 1 when the newest is slower than the one
    before it by more than ``--fail-above`` percent on any case."""
    if len(args.runs) < 2:
        print("npufuse compare: give at least two files, oldest first (OLD.json NEW.json)", file=_stderr())
        return EXIT_USAGE
    try:
        runs = [read_run(path) for path in args.runs]
        inputs = {f"input {path}": path for path in args.runs}
        check_outputs({**inputs, **{f"--{name}": getattr(args, name) for name, _, _ in _FORMATS}}, kept=inputs)
    except (NpufuseError, OSError) as exc:
        print(f"npufuse compare: {exc}", file=_stderr())
        return EXIT_USAGE
    comparison = compare_runs(runs, args.fail_above)
    old, new = runs[-2], runs[-1]
    changes = comparison.changes
    for line in formats.text_table(comparison):
        print(line, file=out)
    print(count_line(changes) or "no entries on either side", file=out)
    notice = model_notice(changes, new.results.model, old.results.model) if new.results.model else None
    if notice:
        print(f"{notice}; produce {old.path} again with the new model.", file=out)
    for line in formats.text_deltas(comparison):
        print(line, file=out)
    for name, what, render in _FORMATS:
        path = getattr(args, name)
        if path is not None:
            try:
                write_text(path, render(comparison), f"{what} file", named=True)
            except (NpufuseError, OSError) as exc:
                print(f"npufuse compare: {exc}", file=_stderr())
                return EXIT_USAGE
            print(f"wrote {path}", file=out)
    regressed = comparison.regressed
    if regressed:
        print(
            f"FAILED: {len(regressed)} case(s) slower than {args.fail_above:g}% over {old.path}: "
            + "; ".join(c.describe() for c in regressed),
            file=out,
        )
        return EXIT_REGRESSION
    if any(c.status == IMPROVED for c in changes):
        print(f"improvements found; refresh {old.path} to lock them in.", file=out)
    return EXIT_OK


def merge(args: argparse.Namespace, out: TextIO) -> int:
    """Combine the run reports (or baselines) of several CI shards into OUT; exit 2, writing nothing,
    on mixed kinds, another model version or a test found in two shards."""
    inputs = [path.resolve() for path in args.inputs]
    if args.out.exists() and args.out.resolve() not in inputs and not args.force:
        print(f"npufuse merge: {args.out} exists and is not one of the inputs; give a new path, or --force to "
              "replace it (did you forget OUT? the first path is the file written).", file=_stderr())
        return EXIT_USAGE
    try:
        document, notes = merge_documents(args.inputs, as_baseline=args.baseline)
        write_text(args.out, dumps(document), "merged file", named=True)
    except (NpufuseError, OSError) as exc:
        print(f"npufuse merge: {exc}", file=_stderr())
        return EXIT_USAGE
    for note in notes:
        print(f"npufuse merge: {note}", file=out)
    entries = sum(len(targets) for targets in document["entries"].values())
    tests = f", {len(document['tests'])} test(s)" if "tests" in document else ""
    print(f"wrote {args.out}: {document['kind']} of {entries} entr{'y' if entries == 1 else 'ies'}{tests} "
          f"from {len(args.inputs)} file(s)", file=out)
    return EXIT_OK


def _import_module(where: str) -> Any:
    """The module ``where`` names; a module that is not there at all is the user's typo, so it is a
    clear error, while a module the user's own code fails to import keeps its own traceback."""
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (where == exc.name or where.startswith(exc.name + ".")):
            raise
        raise NpufuseError(
            f"no module named {exc.name!r} (from {where!r}); give a .py file path or a module importable "
            "from the current directory, e.g. cases/decoder_layers.py:advisor_case"
        ) from None


def _factory(spec: str) -> Callable[[], Any]:
    """The callable ``MODULE_OR_FILE:FACTORY`` names; a file's directory goes on ``sys.path`` first, so
    the file imports its neighbours as it does under pytest."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise NpufuseError(f"{spec!r} is not MODULE_OR_FILE:FACTORY, e.g. cases/decoder_layers.py:advisor_case")
    path = Path(where)
    if where.endswith(".py") or kind_of(path) is not Kind.MISSING:
        module = _load_file(path, where)
    else:
        module = _import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise NpufuseError(f"{where} has no callable {name!r}; FACTORY must return (model, inputs)")
    return factory


def _load_file(path: Path, where: str) -> Any:
    """The module of the Python file ``path``, loaded under a name of its own. The file's stem is not
    used as the module name: ``sub/torch.py`` would replace ``sys.modules["torch"]`` and ``sub/json.py``
    the standard library's json for the rest of the process. Its directory goes at the end of
    ``sys.path``, so it finds its neighbours without any of them hiding an installed module."""
    kind = kind_of(path)
    if kind is not Kind.REGULAR:
        what = "missing" if kind is Kind.MISSING else f"{kind.value}, not a file"
        raise NpufuseError(f"{where} is {what}; give a Python file or an importable module")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    digest = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    name = "npufuse_user_" + re.sub(r"\W", "_", path.stem) + "_" + digest
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def _model_and_inputs(spec: str) -> tuple[Any, tuple[Any, ...]]:
    """The model and inputs the ``MODULE_OR_FILE:FACTORY`` named by ``spec`` returns (the capture path of
    every command that models a user's model)."""
    made = _factory(spec)()
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise NpufuseError(f"{spec} returned {type(made).__name__}; it must return (model, inputs)")
    model, inputs = made
    return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _user_config() -> Any:
    """The project's ``[tool.npufuse]`` settings (targets, ops) from ``pyproject.toml`` in the current
    directory, as the plugin reads them from its rootdir."""
    from ..target.resolve import project_settings

    return project_settings()


def _target(name: str) -> Any:
    """A target by name, resolved as every entry point resolves it: a table of the project's pyproject.toml
    (a calibrated target), a built-in one or a profile file, with the project's op catalog."""
    from ..target.resolve import Target

    return Target.resolve(name)


def advise(args: argparse.Namespace, out: TextIO) -> int:
    """Rank SuperKernel scope layouts for the model FACTORY returns and print the recommendation."""
    from ..advisor import advise as run_advisor
    from ..advisor.attempts import attempt_of, earlier_attempts, record_attempt

    try:
        if args.json is not None:  # a bad record or output fails before the model runs
            check_outputs({"--json": args.json}, streams=("--json",))
            if kind_of(args.json) is Kind.REGULAR:
                earlier_attempts(args.json)
        model, inputs = _model_and_inputs(args.factory)
        advice = run_advisor(model, *inputs, target=_target(args.npu_target), options=args.options)
        print(advice, file=out)
        if args.json is not None:
            count = record_attempt(args.json, attempt_of(advice, args.factory, args.options))
            print(f"recorded attempt {count} in {args.json}", file=_stderr())
    except NpufuseError as exc:
        print(f"npufuse advise: {exc.diagnosis}", file=_stderr())
        return EXIT_USAGE
    return EXIT_OK


def calibrate(args: argparse.Namespace, out: TextIO) -> int:
    """Fit a target to an msprof profile of the model FACTORY returns and write it into pyproject.toml."""
    from ..calibrate import calibrate as fit_target, match, read_profile, write_target
    from ..calibrate.msprof import disagreements
    from ..calibrate.table import check_destination
    from ..pipeline.chain import capture

    try:
        check_destination(args.pyproject, args.name, force=args.force)
        profile = read_profile(args.profile)
        for note in disagreements(profile):
            print(f"npufuse calibrate: note: {note}", file=out)
        model, inputs = _model_and_inputs(args.factory)
        program = capture(model, *inputs, catalog=_user_config().catalog())
        matching = match(profile, program, args.factory)
        result = fit_target(program, matching, args.npu_target, args.name)
        _print_calibration(result, out)
        created = write_target(result, args.pyproject, profile.source, force=args.force)
    except (NpufuseError, OSError) as exc:
        print(f"npufuse calibrate: {exc}", file=_stderr())
        return EXIT_USAGE
    print(f"{'created' if created else 'wrote'} [tool.npufuse.targets.{args.name}] in {args.pyproject}; use it with "
          f"--npu-target={args.name}", file=out)
    return EXIT_OK


def _print_calibration(result: Any, out: TextIO) -> None:
    """The matching, what moved and the per-op-type error before and after."""
    from ..calibrate import error_rows

    matching = result.matching
    total = len(matching.matched) + len(matching.unmatched)
    missing = Counter(kernel.info.kernel_type for kernel in matching.unmeasured)
    listed = ", ".join(f"{op} x{count}" for op, count in sorted(missing.items()))
    print(f"npufuse calibrate ({result.base} -> {result.name}): {len(matching.matched)} of {total} profiled kernels "
          f"matched; {len(matching.unmeasured)} kernel(s) of the model not in the profile"
          + (f" ({listed})" if listed else ""), file=out)
    if matching.unmatched:
        print(f"not matched ({len(matching.unmatched)}), left out of the fit:", file=out)
        for item in matching.unmatched[:_LISTED]:
            print(f"  {item.describe()}", file=out)
        if len(matching.unmatched) > _LISTED:
            print(f"  ... and {len(matching.unmatched) - _LISTED} more", file=out)
    for (section, key), (old, new) in sorted(result.moved.items()):
        bound = " (at the fit's bound)" if result.at_bound(section, key) else ""
        print(f"  [{section}] {key}: {old:g} -> {new:g}{bound}", file=out)
    for op, (factor, count) in sorted(result.corrections.items()):
        print(f"  [corrections] {op}: x{factor:g} ({count} kernel(s))", file=out)
    for line in aligned(error_rows(result.kernels)):
        print(line, file=out)


_LISTED = 20


OP_HEADER = ("op", "family", "engine", "fusable", "cost rule", "backward", "source")


def _has_backward(op_type: str) -> str:
    """Whether the registered op has an autograd kernel: asked of the dispatcher, so an op gains the
    column's yes where its backward is registered, not where a list says so."""
    has = any(_dispatch_has(op_type, key) for key in ("Autograd", "AutogradCPU", "CompositeImplicitAutograd"))
    return "yes" if has else "no"


def _dispatch_has(op_type: str, key: str) -> bool:
    """``torch._C._dispatch_has_kernel_for_dispatch_key``, false for an op type the dispatcher does not know
    (a GE or collective op type of the catalog)."""
    import torch

    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op_type, key))
    except RuntimeError:
        return False


def op_rows(every: bool = False) -> list[tuple[str, ...]]:
    """A header and one row per torch_npu op with a CPU kernel: its op type, family, engine, fusable flag,
    cost rule, backward and the document it follows (also the op table of the docs site). ``every`` adds
    the catalog's other op types (aten, GE, collectives, the user's own), whose family is their namespace
    and whose source is the catalog that prices them."""
    from ..cost import check_catalog
    from ..target.catalog import load_catalog
    from ..torch_npu import OPS

    catalog = check_catalog(_user_config().catalog()) if every else load_catalog()
    rows = [OP_HEADER]
    provided = set()
    for op in sorted(OPS.values(), key=lambda op: (op.family, op.name)):
        info = catalog.lookup(op.op_type)
        provided.add(op.op_type)
        rows.append((op.op_type, op.family, info.engine, "yes" if info.fusable else "no", info.cost,
                     _has_backward(op.op_type), op.source))
    if every:
        for op_type, info in sorted(catalog.entries.items()):
            if op_type not in provided:
                rows.append((op_type, op_type.partition("::")[0], info.engine, "yes" if info.fusable else "no",
                             info.cost, _has_backward(op_type), "op catalog"))
    return rows


def ops(args: argparse.Namespace, out: TextIO) -> int:
    """List the torch_npu ops with a CPU kernel (with ``--all``, every op type the catalog prices): family,
    engine, fusable flag, cost rule, backward and the document they follow."""
    try:
        rows = op_rows(every=args.all)
    except NpufuseError as exc:  # a malformed [tool.npufuse.ops] table of the user's pyproject.toml
        print(f"npufuse ops: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in aligned(rows):
        print(line, file=out)
    print(f"{len(rows) - 1} ops", file=out)
    return EXIT_OK


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run a script written for a real NPU under the shim and summarise the modeled run after its output."""
    from .run import run_script

    kind = kind_of(args.script)
    if kind is not Kind.REGULAR:
        problem = "no such script" if kind is Kind.MISSING else f"is {kind.value}, not a script file"
        print(f"npufuse run: {args.script}: {problem}", file=_stderr())
        return EXIT_USAGE
    try:
        return run_script(args.script, args.script_args, args.npu_target, out, Path("pyproject.toml"))
    except NpufuseError as exc:
        print(f"npufuse run: {exc}", file=_stderr())
        return EXIT_USAGE


def _add_target(command: argparse.ArgumentParser) -> None:
    """The ``--npu-target`` option of the commands that model a target (as the pytest option spells it)."""
    command.add_argument("--npu-target", default=DEFAULT_TARGET, metavar="TARGET", help=TARGET_HELP)


@functools.cache
def _command_texts() -> dict[str, dict[str, str]]:
    """commands.toml, read once (a pure function of the package's file)."""
    return read_toml(Path(__file__).parent / "commands.toml")


class _Formatter(argparse.HelpFormatter):
    """argparse's own formatter, which wraps each paragraph to the terminal's width, except that the
    indented example lines of an epilog stay one command a line, as a user copies them."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n".join(line if line.startswith("  ") else fill(line, width, indent) for line in text.split("\n"))


def _examples(name: str) -> list[str]:
    return _command_texts()[name].get("examples", [])


def _command(commands: Any, run: Callable[[argparse.Namespace, TextIO], int]) -> argparse.ArgumentParser:
    """The subcommand that ``run`` carries out, named after it; its help texts and example lines are in
    ``commands.toml``."""
    texts = _command_texts()[run.__name__]
    command = commands.add_parser(
        run.__name__, help=texts["help"], description=texts["description"],
        epilog="examples:\n" + "\n".join(f"  {line}" for line in _examples(run.__name__)),
        formatter_class=_Formatter,
    )
    command.set_defaults(run=run)
    return command


def _version() -> str:
    """This package's version and the torch it runs on, read from the installed metadata (no torch import)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"pytest-npufuse {metadata.version('pytest-npufuse')} (torch {torch_version})"


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="python -m pytest_npufuse",
        description="Model Ascend NPU runs on a CPU outside pytest: compare and merge reports, advise SuperKernel "
        "scopes, calibrate a target, list the ops, run an NPU script unchanged.",
        epilog="examples:\n" + "\n".join(f"  {_examples(name)[0]}" for name in _command_texts())
        + "\n\nEach command's --help has more examples.",
        formatter_class=_Formatter,
    )
    main.add_argument("--version", action="version", version=_version())
    commands = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmp = _command(commands, compare)
    cmp.add_argument("runs", type=Path, nargs="+", metavar="RUN.json",
                     help="baseline files or run reports, oldest first: OLD.json NEW.json, or a history")
    cmp.add_argument("--fail-above", type=_percent, default=0.0, metavar="PCT",
                     help="percent a case may get slower before the command fails (default 0)")
    for name, what, _ in _FORMATS:
        cmp.add_argument(f"--{name}", type=Path, metavar="FILE", help=f"also write the comparison as {what} to FILE")
    adv = _command(commands, advise)
    adv.add_argument("factory", metavar="MODULE_OR_FILE:FACTORY", help="a callable returning (model, inputs)")
    _add_target(adv)
    adv.add_argument("--options", default="", help="SuperKernel options every candidate scope gets, e.g. "
                     "strict-scope-check=abort")
    adv.add_argument("--json", type=Path, metavar="FILE", help="also record this attempt in FILE: each run appends "
                     "its factory, options, ranked layouts, recommendation and findings to the attempts there")
    cal = _command(commands, calibrate)
    cal.add_argument("profile", type=Path, metavar="PROFILE", help="kernel_details.csv or the profiler's output directory")
    cal.add_argument("factory", metavar="MODULE_OR_FILE:FACTORY", help="a callable returning (model, inputs), the "
                     "model and inputs that were profiled")
    cal.add_argument("--name", required=True, help="the new target's name, for --npu-target=NAME afterwards")
    cal.add_argument("--npu-target", default=DEFAULT_TARGET, metavar="TARGET",
                     help=f"the built-in target the profile was measured on, which the fit starts from: one of "
                     f"{', '.join(BUILTIN_TARGETS)} (default {DEFAULT_TARGET})")
    cal.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"), metavar="FILE",
                     help="the file to write the target into (default pyproject.toml, created if missing)")
    cal.add_argument("--force", action="store_true", help="replace an existing [tool.npufuse.targets.NAME] table")
    listing = _command(commands, ops)
    listing.add_argument("--all", action="store_true",
                         help="also list every other op type the op catalog prices (aten, GE, collectives, your own)")
    script = _command(commands, run)
    script.add_argument("script", type=Path, metavar="SCRIPT", help="the Python script to run")
    _add_target(script)
    joined = _command(commands, merge)
    joined.add_argument("out", type=Path, metavar="OUT.json", help="the file to write")
    joined.add_argument("inputs", type=Path, nargs="+", metavar="SHARD.json",
                        help="run reports (--npufuse-json) or baseline files of the shards")
    joined.add_argument("--baseline", action="store_true",
                        help="write OUT as a baseline file (for --npufuse-baseline) even from run reports")
    joined.add_argument("--force", action="store_true", help="replace OUT if it exists and is not an input")
    return main


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser().parse_args(argv[:cut])
    args.script_args = argv[cut + 1:]
    return args.run(args, TerminalStream(out or sys.stdout))
