"""Calibrating a target to a team's own profile (``python -m pytest_npufuse calibrate``); torch-free.

:mod:`.msprof` reads msprof's ``kernel_details.csv`` and ``op_statistic.csv``, :mod:`.match` matches their
kernels to a captured program's by op type, order and input shapes, :mod:`.fit` is the package's fitter
of ``estimate`` constants (the benchmarks' calibration uses it too), :mod:`.calibration` fits a target's
estimates and per-op-type corrections to the matched kernels, and :mod:`.table` prints the per-op-type
error and writes the target into ``pyproject.toml``. Capturing the model is the caller's (the CLI).
"""

from .calibration import Calibration, KernelFit, calibrate
from .match import Matching, match
from .msprof import MeasuredProfile, read_profile
from .table import error_rows, target_toml, write_target

__all__ = [
    "Calibration", "KernelFit", "Matching", "MeasuredProfile", "calibrate", "error_rows", "match", "read_profile",
    "target_toml", "write_target",
]
