"""Calibration from a profile: a target fitted to half of a profile's kernels, checked on the other half.

    PYTHONPATH=. python benchmarks/calibrate_profile.py

The profile is a published per-kernel table written in msprof's format: the CATLASS 910B3 quant-matmul
table (hicann/catlass examples/52_quant_multi_core_splitk_matmul_tla, rows ``catlass-qmm-910b3-*`` of
benchmarks/data/published.toml): 7 shapes, each run by the basic kernel (op type QuantMatmul) and the
multi-core split-K one (QuantMultiCoreSplitkMatmul), 14 kernels on one Atlas A2 part. The program is the
same kernels built from each row's fields (benchmarks/fidelity/kernels.py), so every kernel matches.
The kernels_details.csv is read back with the package's reader, matched and calibrated by the package
(``pytest_npufuse.calibrate``, what ``python -m pytest_npufuse calibrate`` runs after capturing a model).

Two splits, each fitting on one half and holding the other back (by position within each op type, so
both halves span the shapes): the target calibrated on a half must reproduce the whole profile within
+-10% median |error| and the held-back half within +-15%.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity.kernels import _matmul, library_catalog  # noqa: E402
from fidelity.rows import load_rows  # noqa: E402

from pytest_npufuse.calibrate import calibrate, error_rows, match, read_profile  # noqa: E402
from pytest_npufuse.report.table import aligned  # noqa: E402
from pytest_npufuse.pipeline.synthetic import ProgramBuilder  # noqa: E402

TABLE = "catlass-qmm-910b3-"
SKU = "910b3"
TARGETS = {"whole profile": 0.10, "held-back half": 0.15}
HEADER = ("Step Id", "Name", "Type", "Accelerator Core", "Duration(us)", "Input Shapes")


class _Builder(ProgramBuilder):
    """A builder whose inputs get names of their own, so each row's kernel reads its own tensors."""

    def input(self, name, shape, dtype="bfloat16"):
        return super().input(f"{name}{len(self.buffers)}", shape, dtype)


def profile_and_program(directory: Path):
    """Write the table as kernel_details.csv in ``directory``; return the program of its kernels."""
    rows = [row for row in load_rows() if row.id.startswith(TABLE)]
    builder = _Builder(library_catalog())
    lines = [",".join(HEADER)]
    for row in rows:
        _matmul(row, builder)
        kernel = builder.kernels[-1]
        shapes = ";".join(",".join(map(str, spec.shape)) for spec in kernel.input_specs)
        lines.append(f'1,{row.id},{kernel.info.kernel_type},AI_CORE,{row.get("value")},"{shapes}"')
    (directory / "kernel_details.csv").write_text("\n".join(lines) + "\n")
    return builder.build(), len(rows)


def median_error(kernels, modeled) -> float:
    return statistics.median(abs(k.error(modeled(k))) for k in kernels)


def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        program, count = profile_and_program(Path(directory))
        profile = read_profile(Path(directory))
    matching = match(profile, program, "the CATLASS 910B3 table's kernels")
    print(f"profile: {count} kernels of the CATLASS 910B3 quant-matmul table ({len(matching.matched)} matched), "
          f"base target {SKU}")
    order = {m.profiled.line: i for i, m in enumerate(matching.matched)}
    by_type = {}
    for m in matching.matched:
        by_type.setdefault(m.profiled.op_type, []).append(order[m.profiled.line])
    position = {index: rank for indices in by_type.values() for rank, index in enumerate(indices)}
    failed = False
    for half in (0, 1):
        result = calibrate(program, matching, SKU, "catlass-910b3",
                           fit_on=lambda m, half=half: position[order[m.profiled.line]] % 2 == half)
        held = [k for k in result.kernels if not k.fitted]
        figures = {
            "whole profile": median_error(result.kernels, lambda k: k.after_us),
            "held-back half": median_error(held, lambda k: k.after_us),
        }
        print(f"\nsplit {half + 1}: fitted on {len(result.kernels) - len(held)} kernels, held back {len(held)}")
        for (section, key), (old, new) in sorted(result.moved.items()):
            print(f"  [{section}] {key}: {old:g} -> {new:g}")
        for op, (factor, used) in sorted(result.corrections.items()):
            print(f"  [corrections] {op}: x{factor:g} ({used} kernels)")
        print("  all kernels:")
        for line in aligned(error_rows(result.kernels)):
            print("    " + line)
        print("  held-back kernels:")
        for line in aligned(error_rows(held)):
            print("    " + line)
        before = median_error(held, lambda k: k.before_us)
        print(f"  held-back half on the base target {SKU}: median |error| {100 * before:.1f}%")
        for what, limit in TARGETS.items():
            ok = figures[what] <= limit
            failed |= not ok
            print(f"  {'PASS' if ok else 'FAIL'} {what}: median |error| {100 * figures[what]:.1f}% "
                  f"(target <= {100 * limit:.0f}%)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
