"""Speed of the scope advisor on a 61-layer decode model (DeepSeek-V3 depth).

    PYTHONPATH=. python benchmarks/advisor_speed.py

The bundled DeepSeek-style decoder (cases/decoder_layers.py) with 61 layers is advised once, as
``python -m pytest_npufuse advise`` would: the capture (its 61 identical layers are captured as the
first 2 and the first 3 layers and the 61-layer program extrapolated, pytest_npufuse/frontend/repeat.py;
the result equals a full capture), then every candidate layout planned and simulated from that one
program, the affinity-op findings priced, and the recommendation. Printed side by side: the capture
time, the planning of all layouts (capture once, plan many) and the whole advise.

Target (issue 13): the whole advise within 10 s on 2 cores. Wall-clock time is measured here only,
never in the model; CPU time of this process is printed beside it, since a shared machine stretches
the wall clock. The exit status is 1 when the target is missed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cases"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from decoder_layers import Decoder, decode_inputs  # noqa: E402
from timing import check, timed  # noqa: E402

from pytest_npufuse.advisor import advice  # noqa: E402

LAYERS = 61
TARGET_S = 10.0


def main() -> int:
    model, inputs = Decoder(layers=LAYERS), decode_inputs()
    captured = {}
    capture = advice.capture_program

    def timed_capture(*args, **kwargs):
        run = timed(lambda: capture(*args, **kwargs))
        captured["seconds"], captured["cpu"], captured["kernels"] = run.wall, run.cpu, len(run.value.kernels)
        return run.value

    advice.capture_program = timed_capture
    run = timed(lambda: advice.advise(model, *inputs, target="a3"))
    result, total, total_cpu = run.value, run.wall, run.cpu
    advice.capture_program = capture
    print("\n".join(result.lines()[:12]))
    print(f"kernels: {captured['kernels']}, layouts: {len(result.candidates)}, affinity findings: {len(result.findings)}")
    print(f"capture {captured['seconds']:.2f} s (cpu {captured['cpu']:.2f} s), planning and simulating every layout "
          f"and the affinity rewrites {total - captured['seconds']:.2f} s (cpu {total_cpu - captured['cpu']:.2f} s), "
          f"advise {total:.2f} s (cpu {total_cpu:.2f} s)")
    passed = check(total <= TARGET_S, f"advise of a {LAYERS}-layer decode model in {total:.2f} s "
                   f"(target <= {TARGET_S:.0f} s, ratio {total / TARGET_S:.2f})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
