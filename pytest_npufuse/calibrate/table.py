"""What a calibration prints and writes: the per-op-type error table and the target's TOML table."""

from __future__ import annotations

import codecs
import os
import re
import statistics
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import ProfileError
from ..files import locked, present, read_bytes, write_bytes
from ..files.atomic import check_writable
from ..files.reading import decode
from ..files.toml import PROFILE_FILE
from ..files.tomledit import basic_string, with_table
from ..report.escaping import visible
from ..target.profile import BUILTIN_TARGETS
from .calibration import Calibration, KernelFit

_NAME = re.compile(r"[A-Za-z0-9_-]+")

ERROR_HEADER = ("op type", "kernels", "measured us", "before us", "after us", "median |err| before", "after")


def median_error(kernels: Sequence[KernelFit], modeled: Callable[[KernelFit], float]) -> float:
    """Median |relative error| of ``modeled`` over ``kernels`` (0 for none)."""
    return statistics.median(abs(k.error(modeled(k))) for k in kernels) if kernels else 0.0


def error_rows(kernels: Sequence[KernelFit]) -> list[tuple[str, ...]]:
    """A header, one row per op type (most measured time first) and a total row: summed measured and
    modeled times and the median per-kernel |error| on the base target and on the calibrated one."""
    by_type: dict[str, list[KernelFit]] = {}
    for kernel in kernels:
        by_type.setdefault(kernel.op_type, []).append(kernel)
    groups = sorted(by_type.items(), key=lambda item: (-sum(k.measured_us for k in item[1]), item[0]))
    return [ERROR_HEADER, *(_row(op, group) for op, group in groups), _row("all", list(kernels))]


def _row(label: str, kernels: Sequence[KernelFit]) -> tuple[str, ...]:
    return (
        label,
        str(len(kernels)),
        f"{sum(k.measured_us for k in kernels):.1f}",
        f"{sum(k.before_us for k in kernels):.1f}",
        f"{sum(k.after_us for k in kernels):.1f}",
        f"{100 * median_error(kernels, lambda k: k.before_us):.1f}%",
        f"{100 * median_error(kernels, lambda k: k.after_us):.1f}%",
    )


def _number(value: float) -> str:
    """A TOML float that reads back as the same value."""
    text = repr(float(value))
    return text if any(mark in text for mark in ".en") else text + ".0"


def target_toml(calibration: Calibration, prefix: str, source: str, newline: str = "\n") -> str:
    """The TOML text of the calibrated target as tables under ``prefix`` (``tool.npufuse.targets`` in a
    pyproject.toml): its base, each moved constant with the base's value beside it, and each correction
    with how many kernels it rests on. The profile's path goes into a comment as :func:`visible` shows
    it: a line break in a directory name must not become TOML lines (settings) of the user's file."""
    name, matching = calibration.name, calibration.matching
    total = len(matching.matched) + len(matching.unmatched)
    after = median_error(calibration.kernels, lambda k: k.after_us)
    before = median_error(calibration.kernels, lambda k: k.before_us)
    lines = [
        f"[{prefix}.{name}]",
        (f"# Calibrated by `python -m pytest_npufuse calibrate` from {visible(source)}: {len(matching.matched)} of "
         f"{total} kernels matched; median |error| {100 * before:.1f}% on {calibration.base} -> {100 * after:.1f}%."),
        f'base = "{calibration.base}"',
    ]
    for section, keys in _sections(calibration):
        lines += ["", f"[{prefix}.{name}.{section}]", *keys]
    return newline.join(lines) + newline


def _sections(calibration: Calibration) -> Iterable[tuple[str, list[str]]]:
    sections: dict[str, list[str]] = {}
    for (section, key), (old, new) in sorted(calibration.moved.items()):
        sections.setdefault(section, []).append(f"{key} = {_number(new)}  # fit to the profile ({calibration.base}: {old:g})")
    for section, keys in sections.items():
        yield section, keys
    if calibration.corrections:
        yield "corrections", [
            f"{basic_string(op)} = {_number(factor)}  # median measured/modeled body over {count} kernel(s)"
            for op, (factor, count) in sorted(calibration.corrections.items())
        ]


TARGETS_TABLE = ("tool", "npufuse", "targets")


def check_target_name(name: str) -> None:
    """A calibrated target's name is a bare TOML key and not a built-in target's (a table named ``a3``
    would change the built-in a3 for every run of the project)."""
    if name in BUILTIN_TARGETS:
        raise ProfileError(
            f"--name {name}: is a built-in target, and a table of that name would change it for every run of this "
            "project; choose another name (e.g. the model and SKU: llama-910b3)."
        )
    if not _NAME.fullmatch(name):
        raise ProfileError(f"--name {name!r}: use letters, digits, '-' and '_' only (a bare TOML key).")


def check_destination(pyproject: Path, name: str, *, force: bool = False) -> None:
    """Refuse, before any capture or fit, what :func:`write_target` would refuse: a bad name, a
    ``pyproject`` that is a symlink, not a regular file, read-only or not valid TOML, and a table ``name``
    already there (without ``force``) or written in a form the edit cannot replace."""
    check_target_name(name)
    _check_not_a_link(pyproject)
    if present(pyproject, PROFILE_FILE):
        check_writable(pyproject, "pyproject.toml")
        parts = (*TARGETS_TABLE, name)
        with_table(_read(pyproject)[1], parts, f"[{'.'.join(parts)}]\n", pyproject, replace=force)


def _check_not_a_link(pyproject: Path) -> None:
    """A symlinked pyproject.toml is refused: the edit would be written through the link into whatever
    file it names (another project's settings, a file outside the project), which the user did not ask
    to change."""
    if pyproject.is_symlink():
        raise ProfileError(
            f"{pyproject}: is a symlink (to {visible(os.readlink(pyproject))}), and calibrate writes only into the "
            "project's own file, never through a link into another one; give the real file with --pyproject, or "
            "replace the link by a copy.", file=str(pyproject),
        )


def _read(pyproject: Path) -> tuple[bytes, str]:
    """The byte-order mark the file starts with (kept when it is written again) and its text."""
    data = read_bytes(pyproject, PROFILE_FILE)
    mark = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    return mark, decode(data, pyproject, PROFILE_FILE)


def write_target(calibration: Calibration, pyproject: Path, source: str, *, force: bool = False) -> bool:
    """Write the calibrated target into ``pyproject`` as ``[tool.npufuse.targets.NAME]``, atomically and
    under the file's lock, every other byte of the file kept (a byte-order mark too); an existing table
    of that name is replaced only with ``force``. Returns whether the file was created."""
    check_target_name(calibration.name)
    _check_not_a_link(pyproject)  # before the lock too: a link's lock file would go beside the file it names
    with locked(pyproject, "pyproject.toml"):
        _check_not_a_link(pyproject)
        created = not present(pyproject, PROFILE_FILE)
        mark, text = (b"", "") if created else _read(pyproject)
        newline = "\r\n" if "\r\n" in text else "\n"
        block = target_toml(calibration, ".".join(TARGETS_TABLE), source, newline)
        edited = with_table(text, (*TARGETS_TABLE, calibration.name), block, pyproject, replace=force)
        write_bytes(pyproject, mark + edited.encode("utf-8"), "pyproject.toml")
    return created
