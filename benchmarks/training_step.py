"""A training step's check on 2 cores, and the affinity-op guide's published ratios (docs/feature-docs.md#affinity-ops)
against the modeled ones.

    PYTHONPATH=. python benchmarks/training_step.py [--rounds 1]

1. BERT-base (12 layers, hidden 768, seq 128, batch 8; cases/bert_layers.py, d2l's BERT at BERT-base
   size) with AdamW (foreach): ``compare(model, *inputs, loss=..., optimizer=...)`` end to end: capture
   of the forward, the backward and the optimizer step, planning, simulation and the numerics of the
   step. Target (issue 24): the step "checks in <= 30 s on 2 cores", one capture per graph, every
   gradient bit-exact. The timed region is the check, compare(): building the model and its batch is
   the user's own code, run before it, and its time is printed on a line of its own.
2. The BERT case of Ascend's affinity-operator guide (docs/feature-docs.md#affinity-ops) at the guide's scale (d2l's
pre-training
   configuration, batch 512, on an Atlas A2 part): IndexPutV2's share of the step, published as 75%.
3. Its one_hot+sum -> zeros+scatter rewrite: the pattern's kernels before and after, published as
   2.2 ms -> 0.08 ms (27.5x).

Each ratio row passes within +-30% of the published number, or names the mechanism the model lacks.
Wall-clock time is measured here only; CPU time is printed beside it, since a shared machine stretches
the wall clock. The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cases"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from bert_layers import BASE, D2L, batch, bert, bert_loss  # noqa: E402
from timing import best_of, check, timed  # noqa: E402

from pytest_npufuse import compare  # noqa: E402

TARGET_S = 30.0
SEED_INDEX_PUT_SHARE = 75.0
SEED_ONE_HOT_RATIO = 2.2 / 0.08
TOLERANCE = 0.30


def bert_base_model() -> tuple[object, object]:
    """The user's side of the check: BERT-base, its batch and its optimizer, built before compare()."""
    model, data = bert(BASE), batch(BASE)
    return model, data


def bert_base_step(model: torch.nn.Module, data: object) -> object:
    """The check the target is about: compare() on the user's model, batch and optimizer."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return compare(model, *data.inputs, loss=bert_loss(data), optimizer=optimizer)


def seed_scale_step() -> object:
    size = replace(D2L, batch=512)
    model, data = bert(size), batch(size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return compare(model, *data.inputs, loss=bert_loss(data), optimizer=optimizer, target="a2", affinity=True)


def within(modeled: float, published: float) -> bool:
    return abs(modeled - published) <= TOLERANCE * published


def site_ratio(report: object, pattern: str) -> tuple[float, float]:
    """The modeled time of a finding's kernels before its rewrite, and after (before minus the gain)."""
    finding = next(f for f in report.findings if f.pattern == pattern)
    names = set(finding.kernels)
    before = sum(k.duration_us for k in report.variant.kernels if k.name in names) * finding.occurrences
    return before, before - finding.gain_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds of the BERT-base check (best kept)")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, torch threads: {torch.get_num_threads()}, load: {os.getloadavg()[0]:.1f}")
    built = timed(bert_base_model)
    model, data = built.value
    (base,) = best_of(args.rounds, [lambda: timed(lambda: bert_base_step(model, data))])
    report = base.value
    print(f"BERT-base (12 x 768, seq 128, batch 8) built by the user's code before the check, not timed below: "
          f"{built.wall:.1f} s wall, {built.cpu:.1f} s CPU")
    print(f"BERT-base training step check (AdamW foreach; compare(): capture, plan, simulate, numerics): "
          f"{base.wall:.1f} s wall, {base.cpu:.1f} s CPU; {report.summary()}")
    print(f"  graphs {report.phases}, captures {report.captures}, compared values {len(report.outputs)}")
    ok = check(base.wall <= TARGET_S, f"checked in {base.wall:.1f} s <= {TARGET_S:.0f} s")
    ok &= check(report.captures == len(report.phases) == 3, f"one capture per graph ({report.captures})")
    grads = sum(name.startswith("grad[") for name in report.outputs)
    ok &= check(report.bit_exact and grads > 0, f"{grads} gradients and every updated parameter bit-exact")

    seed = timed(seed_scale_step)
    report = seed.value
    print(f"\nd2l BERT at the affinity-op guide's scale (2 x 128, seq 64, batch 512) on {report.target}: {seed.wall:.1f} s wall")
    print("  " + "\n  ".join(report.attribution["variant"].op_statistic_csv().splitlines()[:6]))
    print("  the affinity advisor on the step (pattern at line x occurrences: modeled gain on the step; check):")
    for finding in sorted(report.findings, key=lambda f: -f.gain_us):
        print(f"    {finding.pattern} at {finding.source.rsplit('/', 1)[-1]} x{finding.occurrences}: "
              f"{finding.gain_us:.1f} us; {finding.exactness}")
    print(f"  memory: {report.memory.describe()}")
    share = report.attribution["variant"].op_type("IndexPutV2")
    modeled = share.ratio_pct if share is not None else 0.0
    ok &= check(within(modeled, SEED_INDEX_PUT_SHARE),
                f"IndexPutV2 share {modeled:.1f}% (backward {share.backward_pct if share else 0:.0f}% of it) vs "
                f"published {SEED_INDEX_PUT_SHARE:.0f}% +-30%")
    before, after = site_ratio(report, "one_hot+sum")
    ratio = before / after if after > 0 else float("inf")
    matched = within(ratio, SEED_ONE_HOT_RATIO)
    missing = "" if matched else (
        "; the guide states no shape for its 2.2 ms, and here int64 OneHot and ReduceSum run on AI CPU (the "
        "catalog's aicpu_dtypes), priced at the profile's [aicpu] rates, which are estimates: no measured AI CPU rate"
    )
    ok &= check(matched, f"one_hot+sum {before:.1f} us -> zeros+scatter {after:.1f} us: {ratio:.1f}x vs published "
                         f"{SEED_ONE_HOT_RATIO:.1f}x +-30%{missing}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
