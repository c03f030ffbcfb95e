"""Calibration: the cost model against published Ascend measurements, fitted on a training split only.

    PYTHONPATH=. python benchmarks/calibration.py            # the table with the shipped profiles
    PYTHONPATH=. python benchmarks/calibration.py --fit      # fit the estimates on the training rows
    PYTHONPATH=. python benchmarks/calibration.py --fit-only mc2.phase_us mc2.rank_us   # re-fit a few
    PYTHONPATH=. python benchmarks/calibration.py --rows     # every row, published against modeled
    PYTHONPATH=. python benchmarks/calibration.py --loso --folds 0   # leave-one-source-out, the honest one
    PYTHONPATH=. python benchmarks/calibration.py --coverage --folds 0   # the dataset by kind, family, SKU, mode

Every row of benchmarks/data/published.toml (100+ measurements with their sources, the SKU, shapes and
mode) is built from its own fields (benchmarks/fidelity/: a builder per kind, the decoder builder per
model family) and simulated on its SKU's built-in target. The printed figures are for the validation split
fixed in the data file before any tuning, for k-fold cross-validation (the fit repeated with each fold
held out), for leave-one-source-out (each row predicted by a fit that saw no row of its source document:
the figure that says how the model does on a workload from a new source) and, beside them, in-sample over
the training rows. A row the model cannot build is a miss.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity import fit as fitting  # noqa: E402
from fidelity import gain_errors, host_rows  # noqa: E402
from fidelity.coverage import coverage_lines  # noqa: E402
from fidelity.evaluate import evaluate  # noqa: E402
from fidelity.metrics import HEADER, summarize  # noqa: E402
from fidelity.rows import Profiles, load_rows  # noqa: E402
from host_sweep import sweep_lines  # noqa: E402


def row_line(outcome) -> str:
    row = outcome.row
    unit = "x" if row.is_pair and row.get("delta") is None else row.unit
    modeled = "    -   " if outcome.modeled is None else f"{outcome.modeled:>9.3g}"
    error = "   miss" if outcome.modeled is None else f"{100 * outcome.error:>+6.0f}%"
    sign = {None: " ", True: "+", False: "!"}[outcome.sign_right]
    note = f"  lacks: {outcome.lacks}" if outcome.lacks else ""
    where = f"{row.split[:5]:<5} {row.kind[:10]:<10} {row.id[:52]:<52}"
    return f"{where} {outcome.published:>9.3g} {modeled} {unit:<2} {error} {sign}{note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="fit the estimates on the training rows and print them")
    parser.add_argument(
        "--fit-only", nargs="+", metavar="SECTION.KEY",
        help="fit only these estimates on the training rows, from their shipped values, every other constant as shipped",
    )
    parser.add_argument("--folds", type=int, default=5, help="k of the k-fold cross-validation (0: skip it)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1,
        help="run the k-fold fits in this many processes (the same figures; default: one per CPU)",
    )
    parser.add_argument(
        "--loso", action="store_true",
        help="also validate leave-one-source-out: one fit per source document, over every row (slow: a fit per source)",
    )
    parser.add_argument("--coverage", action="store_true", help="print the dataset's rows by kind, family, SKU and mode")
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument(
        "--gain-errors", action="store_true",
        help="write the held-out error per kind of gain into pytest_npufuse/report/gain_errors.toml (the report's trust line)",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="the tiling cache's sweep over the host article's models (benchmarks/host_sweep.py; captures six)"
    )
    args = parser.parse_args()
    rows = load_rows()
    if args.coverage:
        print("\n".join(coverage_lines(rows)) + "\n")
    profiles = Profiles()
    outcomes = [evaluate(row, profiles) for row in rows]
    if args.rows:
        for outcome in outcomes:
            print(row_line(outcome))
        print()
    validation = [o for o in outcomes if o.row.split == "validation"]
    train = [o for o in outcomes if o.row.split == "train"]
    print(HEADER)
    print(summarize(validation).line("validation (shipped)"))
    evaluator = fitting.Evaluator(rows)
    held_out = fitting.cross_validate(rows, args.folds, evaluator, args.jobs) if args.folds else []
    if held_out:
        print(summarize(held_out).line(f"{args.folds}-fold (refit per fold)"))
    by_source = fitting.leave_one_source_out(rows, evaluator, args.jobs) if args.loso else []
    if by_source:
        print(summarize(by_source).line("leave-one-source-out"))
    print(summarize(train).line("in-sample: training rows"))
    print(summarize(outcomes).line("in-sample: all rows"))
    held, protocol = (by_source, "leave-one-source-out") if by_source else (held_out, f"{args.folds}-fold, refit per fold")
    if not held:
        held, protocol = validation, "fixed validation split, shipped profiles"
    print("\ngains by kind (size and sign, the rule of benchmarks/fidelity/gain_errors.py):")
    print("\n".join(gain_errors.lines(held, protocol)))
    if args.gain_errors:
        gain_errors.write(held, protocol)
        print(f"wrote {gain_errors.ERRORS_PATH}")
    missed = [o for o in validation if o.modeled is None or abs(o.error) > 0.3]
    if missed:
        print("\nvalidation rows outside +-30%:")
        for outcome in missed:
            print("  " + row_line(outcome))
    folded_misses = [o for o in held_out if o.modeled is None or abs(o.error) > 0.3]
    if args.rows and folded_misses:
        print(f"\n{args.folds}-fold: rows outside +-30% when their fold is held out:")
        for outcome in folded_misses:
            print("  " + row_line(outcome))
    source_misses = [o for o in by_source if o.modeled is None or abs(o.error) > 0.3]
    if args.rows and source_misses:
        print("\nleave-one-source-out: rows outside +-30% when their source is held out:")
        for outcome in source_misses:
            print("  " + row_line(outcome))
    if args.fit or args.fit_only:
        training = [row for row in rows if row.split == "train"]
        values = (
            fitting.fit_only(training, args.fit_only, evaluator) if args.fit_only else fitting.fit(training, evaluator)
        )
        print("\nfitted on the training rows (write these into dav_c220.toml):")
        for (section, key), value in sorted(values.items()):
            print(f"  [{section}] {key} = {value:.4g}")
        fitted = evaluator.outcomes(values, rows)
        print(HEADER)
        print(summarize([o for o in fitted if o.row.split == "validation"]).line("validation (fitted)"))
        print(summarize([o for o in fitted if o.row.split == "train"]).line("in-sample (fitted)"))
        if args.rows:
            for outcome in fitted:
                print(row_line(outcome))
    if args.sweep:
        print("\nhost scheduling: the tiling cache by model (benchmarks/host_sweep.py)")
        print("\n".join(sweep_lines(host_rows.size_sweep(Profiles().get("910b2")))))


if __name__ == "__main__":
    main()
