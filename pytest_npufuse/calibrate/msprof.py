"""Reading a profile measured on real hardware: msprof's ``kernel_details.csv`` and ``op_statistic.csv``.

Column names are msprof's own. ``kernel_details.csv`` is what the Ascend PyTorch profiler writes to
``ASCEND_PROFILER_OUTPUT``: msprof's ``op_summary`` with six columns renamed (Ascend/pytorch
``torch_npu/profiler/analysis/prof_common_func/_csv_headers.py`` at 1e849b07, ``OP_SUMMARY_SHOW_HEADERS``
-> ``OP_SUMMARY_KERNEL_BASE_HEADERS``: ``Op Name`` -> ``Name``, ``OP Type`` -> ``Type``, ``Task Type`` ->
``Accelerator Core``, ``Task Duration(us)`` -> ``Duration(us)``), so an ``op_summary_*.csv`` reads the
same. Its fields (CANN 8.2.RC1 Profiling guide, "kernel_details.csv", hiascend atlasprofiling_16_1149):
``Step Id``, ``Name``, ``Type``, ``Accelerator Core``, ``Duration(us)`` and ``Input Shapes``, the
shapes of the inputs separated by ``;`` and their dimensions by ``,`` (an empty shape is a scalar).
``op_statistic.csv`` (CANN 8.3.RC1, atlasprofiling_16_0068) has ``OP Type``, ``Core Type``, ``Count`` and
``Total Time(us)`` per op type.

msprof writes plain numbers with a ``.`` decimal point. A file re-saved by a spreadsheet in another
locale (``;`` between fields, a byte-order mark, UTF-16) is read (:func:`~pytest_npufuse.files.csvfile.read_table`,
which holds every CSV to its bounds); a number written ``1.234,5`` is refused with its line, because
``1,234`` could be either 1234 or 1.234 and a guess would calibrate to the wrong time.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import CalibrationError
from ..files import FileRole, Kind, kind_of
from ..files.reading import refuse_kind
from ..files.csvfile import read_table
from ..files.limits import MAX_CSV_BYTES, MAX_TIME_US

KERNEL_FILE = "kernel_details.csv"
STATISTIC_FILE = "op_statistic.csv"
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_FIX = "export it again with the Ascend PyTorch profiler (torch_npu.profiler, ASCEND_PROFILER_OUTPUT) or msprof"
_FIX_SENTENCE = _FIX[0].upper() + _FIX[1:]
PROFILE_CSV = FileRole("msprof CSV", CalibrationError, _FIX, MAX_CSV_BYTES)
# An input's dimensions: at most 8 (Ascend/op-plugin op_plugin/third_party/atb/inc/types.h, MAX_DIM = 8; the
# CANN operators take 0 to 8 dimensions), each an int64 count; a shape beyond these is not one msprof wrote.
MAX_SHAPE_RANK = 8
MAX_SHAPE_DIM = 2**63 - 1

# What a column means -> the names msprof and the PyTorch profiler give it (kernel_details first).
KERNEL_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "type": ("Type", "OP Type"),
    "duration": ("Duration(us)", "Task Duration(us)"),
}
OPTIONAL_KERNEL_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "name": ("Name", "Op Name"),
    "core": ("Accelerator Core", "Task Type"),
    "step": ("Step Id", "Step ID"),
    "shapes": ("Input Shapes",),
}
STATISTIC_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "type": ("OP Type",),
    "core": ("Core Type",),
    "count": ("Count",),
    "total": ("Total Time(us)",),
}

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LOCALE_NUMBER = re.compile(r"[+-]?\d{1,3}(?:[.\s\u00a0']\d{3})*,\d+|[+-]?\d+,\d+|[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_MISSING = {"", "N/A", "NA", "-"}

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ProfiledKernel:
    """One row of kernel_details.csv: where it is (``line``), its step, op type and time, and its input
    shapes (None when the file has no shapes for it)."""

    line: int
    step: str
    name: str
    op_type: str
    core: str
    duration_us: float
    shapes: tuple[Shape, ...] | None

    def describe(self) -> str:
        shapes = "" if self.shapes is None else " [" + "; ".join(",".join(map(str, s)) for s in self.shapes) + "]"
        return f"line {self.line}: {self.op_type}{shapes} {self.duration_us:g} us"


@dataclass(frozen=True)
class OpStatistic:
    """One row of op_statistic.csv: an op type's call count and summed time on one core type."""

    line: int
    op_type: str
    core: str
    count: int
    total_us: float


@dataclass(frozen=True)
class MeasuredProfile:
    """A profile read from disk: its kernels in launch order and, when present, msprof's per-op-type table."""

    source: str
    kernels: tuple[ProfiledKernel, ...]
    statistics: tuple[OpStatistic, ...] = ()

    @property
    def has_shapes(self) -> bool:
        return any(kernel.shapes is not None for kernel in self.kernels)


def profile_files(path: Path) -> tuple[Path, Path | None]:
    """kernel_details.csv (required) and op_statistic.csv (if there) of ``path``: the CSV file itself, the
    ``ASCEND_PROFILER_OUTPUT`` directory, or a directory holding exactly one of them (the profiler's
    ``*_ascend_pt`` directory or the directory above it)."""
    kind = kind_of(path)
    if kind is Kind.REGULAR:
        sibling = path.parent / STATISTIC_FILE
        return path, sibling if kind_of(sibling) is Kind.REGULAR else None
    if kind not in (Kind.DIRECTORY, Kind.MISSING):
        raise refuse_kind(path, kind, PROFILE_CSV)
    if kind is not Kind.DIRECTORY:
        raise CalibrationError(f"{path}: no such profile; give the profiler's ASCEND_PROFILER_OUTPUT directory or "
                               f"its {KERNEL_FILE}.", file=str(path))
    folders = sorted(
        {p.parent for pattern in (KERNEL_FILE, f"{OUTPUT_DIR}/{KERNEL_FILE}", f"*/{OUTPUT_DIR}/{KERNEL_FILE}")
         for p in path.glob(pattern)}
    )
    if not folders:
        raise CalibrationError(
            f"{path}: holds no {KERNEL_FILE} (looked in it, in {OUTPUT_DIR}/ and in */{OUTPUT_DIR}/); profile the "
            "model with torch_npu.profiler (export_type text) and give its output directory.",
            file=str(path), entry=KERNEL_FILE
        )
    if len(folders) > 1:
        raise CalibrationError(
            f"{path}: holds {len(folders)} profiles ({', '.join(str(p) for p in folders[:4])}); give the one to "
            "calibrate from (one rank, one run).", file=str(path)
        )
    folder = folders[0]
    statistic = folder / STATISTIC_FILE
    return folder / KERNEL_FILE, statistic if kind_of(statistic) is Kind.REGULAR else None


def read_profile(path: Path) -> MeasuredProfile:
    """The kernels (and op statistics) of the profile at ``path``; a file msprof did not write as it
    writes (a missing column, a number in another locale, a row cut short) is an error naming the file,
    the line and the fix."""
    kernels_path, statistic_path = profile_files(path)
    kernels = read_kernels(kernels_path)
    statistics = read_statistics(statistic_path) if statistic_path is not None else ()
    return MeasuredProfile(str(kernels_path.parent if kind_of(path) is Kind.DIRECTORY else path), kernels, statistics)


def read_kernels(path: Path) -> tuple[ProfiledKernel, ...]:
    """The rows of a kernel_details.csv (or op_summary csv), in file order."""
    rows, columns = _table(path, KERNEL_COLUMNS, OPTIONAL_KERNEL_COLUMNS)
    kernels = tuple(
        ProfiledKernel(
            line=line,
            step=row.get("step", ""),
            name=row.get("name", ""),
            op_type=_op_type(path, line, columns["type"], row["type"]),
            core=row.get("core", ""),
            duration_us=_number(path, line, columns["duration"], row["duration"]),
            shapes=_shapes(path, line, row["shapes"]) if "shapes" in row else None,
        )
        for line, row in rows
    )
    if not kernels:
        raise CalibrationError(
            f"{path}: has a header but no kernel rows; profile at least one step of the model.", file=str(path)
        )
    return kernels


def read_statistics(path: Path) -> tuple[OpStatistic, ...]:
    """The rows of an op_statistic.csv."""
    rows, columns = _table(path, STATISTIC_COLUMNS, {})
    found = []
    for line, row in rows:
        count = _number(path, line, columns["count"], row["count"])
        if count != int(count):
            raise CalibrationError(f"{path} line {line}: column {columns['count']!r} is {row['count']!r}, not a "
                                   f"whole number of calls; {_FIX}.",
            file=str(path), entry=f"line {line} column {columns['count']!r}")
        op_type = _op_type(path, line, columns["type"], row["type"])
        found.append(OpStatistic(line, op_type, row["core"], int(count),
                                 _number(path, line, columns["total"], row["total"])))
    return tuple(found)


Row = dict[str, str]


def _table(
    path: Path, required: Mapping[str, Sequence[str]], optional: Mapping[str, Sequence[str]]
) -> tuple[list[tuple[int, Row]], dict[str, str]]:
    """The data rows of the CSV ``path`` (each with its line number, as meaning -> cell) and the column
    each meaning was read from."""
    table = read_table(path, PROFILE_CSV)
    columns = _columns(path, table.header, required, optional)
    where = {meaning: table.header.index(column) for meaning, column in columns.items()}
    rows = [(line, {meaning: cells[i].strip() for meaning, i in where.items()}) for line, cells in table.rows]
    return rows, columns


def _columns(
    path: Path, header: Sequence[str], required: Mapping[str, Sequence[str]], optional: Mapping[str, Sequence[str]]
) -> dict[str, str]:
    """The header's column for each meaning; a required one missing is an error with the closest name."""
    columns = {}
    for meaning, names in {**required, **optional}.items():
        found = next((name for name in names if name in header), None)
        if found is not None:
            columns[meaning] = found
        elif meaning in required:
            near = difflib.get_close_matches(names[0], list(header), n=1, cutoff=0.6)
            hint = f" ({near[0]!r} is close: rename it to {names[0]!r})" if near else ""
            raise CalibrationError(
                f"{path} line 1: no column {names[0]!r}{hint}; msprof's {path.name} has it (header here: "
                f"{', '.join(header[:12])}{', ...' if len(header) > 12 else ''}). {_FIX_SENTENCE}.",
                file=str(path), entry=f"line 1 column {names[0]!r}"
            )
    return columns


def _op_type(path: Path, line: int, column: str, value: str) -> str:
    if value in _MISSING:
        raise CalibrationError(f"{path} line {line}: column {column!r} is empty; every kernel needs its op type. "
                               f"{_FIX_SENTENCE}.", file=str(path), entry=f"line {line} column {column!r}")
    return value


def _number(path: Path, line: int, column: str, value: str) -> float:
    """A number as msprof writes it (a trailing tab some profiler versions leave is dropped)."""
    text = value.strip()
    if _NUMBER.fullmatch(text):
        number = float(text)
        if math.isfinite(number) and 0 <= number <= MAX_TIME_US:
            return number
        raise CalibrationError(f"{path} line {line}: column {column!r} is {value!r}; a time or count is a finite "
                               f"number >= 0 and at most {MAX_TIME_US:g}. {_FIX_SENTENCE}.",
                               file=str(path), entry=f"line {line} column {column!r}", bound=MAX_TIME_US)
    if _LOCALE_NUMBER.fullmatch(text):
        raise CalibrationError(
            f"{path} line {line}: column {column!r} is {value!r}, a number in another locale's format (a decimal "
            "comma or a thousands separator); msprof writes 1234.5. Save the CSV with '.' as the decimal mark and "
            "no thousands separators, or export it again from the profiler output.",
            file=str(path), entry=f"line {line} column {column!r}",
        )
    raise CalibrationError(f"{path} line {line}: column {column!r} is {value!r}, not a number; "
                           f"{_FIX}.", file=str(path), entry=f"line {line} column {column!r}")


def _shapes(path: Path, line: int, value: str) -> tuple[Shape, ...] | None:
    """``"128,1024;1024,256;256"`` -> ((128, 1024), (1024, 256), (256,)); brackets some versions add are
    dropped; an empty shape is a scalar."""
    shapes = _parsed_shapes(value)
    if shapes is False:
        raise CalibrationError(
            f"{path} line {line}: column 'Input Shapes' is {_cut(value)}; msprof writes each input's dimensions, "
            f"at most {MAX_SHAPE_RANK} whole numbers from 0 to 2**63-1, separated by ',' and the inputs by ';' "
            "(e.g. \"128,1024;1024,256\"). Export it again from the profiler output.",
            file=str(path), entry=f"line {line} column 'Input Shapes'", bound=MAX_SHAPE_RANK,
        )
    return shapes


@functools.lru_cache(maxsize=4096)
def _parsed_shapes(value: str) -> tuple[Shape, ...] | None | bool:
    """The shapes of an ``Input Shapes`` cell, None for none given, False for a cell that is not shapes.
    A profile repeats a few cells many times, so each is parsed once."""
    text = value.strip().strip('"')
    if text in _MISSING:
        return None
    shapes = []
    for part in text.split(";"):
        dims = part.strip().strip("[]()").strip()
        if not dims:
            shapes.append(())
            continue
        shape = _dims(dims)
        if shape is None:
            return False
        shapes.append(shape)
    return tuple(shapes)


_DIMS = re.compile(r"\s*[0-9]{1,19}\s*(?:,\s*[0-9]{1,19}\s*){0,%d}" % (MAX_SHAPE_RANK - 1))


def _dims(text: str) -> Shape | None:
    """One input's dimensions (``"128, 1024"``), or None when they are not a shape an aclTensor can have
    (too many, not a whole number, negative, beyond int64)."""
    if not _DIMS.fullmatch(text):
        return None
    dims = tuple(int(dim) for dim in text.split(","))
    return dims if max(dims) <= MAX_SHAPE_DIM else None


def _cut(value: str, keep: int = 80) -> str:
    """``value`` quoted for a message, cut to ``keep`` characters (a cell may hold 128 Ki of them)."""
    return repr(value) if len(value) <= keep else f"{value[:keep]!r}... ({len(value)} characters)"


def disagreements(profile: MeasuredProfile) -> list[str]:
    """Where op_statistic.csv and kernel_details.csv disagree on an op type's call count or summed time
    (more than 1%): msprof writes both from one run, so a disagreement means files of two runs (or a file
    cut short); the kernels of kernel_details.csv are what is fitted."""
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    for kernel in profile.kernels:
        counts[kernel.op_type] = counts.get(kernel.op_type, 0) + 1
        totals[kernel.op_type] = totals.get(kernel.op_type, 0.0) + kernel.duration_us
    stated: dict[str, tuple[int, int, float]] = {}
    for row in profile.statistics:
        line, count, total = stated.get(row.op_type, (row.line, 0, 0.0))
        stated[row.op_type] = (line, count + row.count, total + row.total_us)
    notes = []
    for op_type, (line, count, total) in stated.items():
        seen, summed = counts.get(op_type, 0), totals.get(op_type, 0.0)
        if count != seen or abs(total - summed) > 0.01 * max(total, summed):
            notes.append(
                f"{STATISTIC_FILE} line {line}: {op_type} has Count {count}, Total Time {total:g} us, but "
                f"{KERNEL_FILE} has {seen} kernel(s), {summed:g} us; are the two files of one run?"
            )
    return notes
