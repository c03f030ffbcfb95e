"""The host items of GE's dynamic-shape scheduling article (docs/feature-docs.md#host-scheduling) on captured
decode steps: the tiling cache over the article's models and sizes, and GE's size ops of LLaMA-2 7B.

    PYTHONPATH=. python benchmarks/host_sweep.py             # the sweep and the size ops (captures eight steps)
    PYTHONPATH=. python benchmarks/host_sweep.py --quick     # the two 7B rows and the size ops only

Each model is a LLaMA-shaped decoder from a public config (benchmarks/fidelity/host_rows.py), its decode
step captured by torch.compile with the KV length symbolic (weights on the meta device) and simulated on
the 910b2 target under GE host scheduling with one host thread. Columns: the Tiling time the cache saves on
a step whose KV cache is one token longer than the last one's; Tiling's share of the host's time without
the cache; the step's end-to-end gain of the cache; what bounds the cached step. What the sweep shows, and
why, is docs/fidelity.md#tiling-cache-sweep. Not a timing: the figures are the model's, the same on every
machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity import host_rows  # noqa: E402
from fidelity.rows import Profiles  # noqa: E402


def sweep_lines(rows: list[host_rows.SweepRow]) -> list[str]:
    """The sweep as a table."""
    lines = [f"  {'model':<30} {'params':>7} {'layers':>6} {'kernels':>7} {'size ops':>8} {'Tiling cut':>10} "
             f"{'Tiling share':>12} {'step gain':>9} {'bound':>6}"]
    for row in rows:
        model = row.model
        lines.append(f"  {model.name:<30} {model.parameters / 1e9:>6.1f}B {model.layers:>6} {row.kernels:>7} "
                     f"{row.size_ops:>8} {row.cut_pct:>9.1f}% {row.share_pct:>11.1f}% {row.gain_pct:>8.1f}% "
                     f"{row.bound:>6}")
    return lines


def size_op_lines() -> list[str]:
    """GE's size ops of LLaMA-2 7B's decode step at batch 1 and at a symbolic batch of 4."""
    llama = host_rows.SIZES[0]
    lines = []
    for batch in (1, 4):
        kinds = host_rows.size_ops(llama, batch)
        detail = ", ".join(f"{kind.removeprefix('ge::')} {count}" for kind, count in sorted(kinds.items()))
        lines.append(f"  {llama.name} decode, batch {batch}{' (symbolic)' if batch > 1 else ''}: "
                     f"{sum(kinds.values())} size ops ({detail})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the two LLaMA-2 7B rows of the sweep")
    args = parser.parse_args()
    models = host_rows.SIZES[:2] if args.quick else host_rows.SIZES
    print("the tiling cache by model (GE host scheduling, one host thread, a step after one with a KV cache one "
          "token shorter):")
    print("\n".join(sweep_lines(host_rows.size_sweep(Profiles().get("910b2"), models))))
    print("\nGE's size ops (computed on the host with small-shape optimisation; the article's LLaMA2: 650+):")
    print("\n".join(size_op_lines()))


if __name__ == "__main__":
    main()
