"""``torchair.configs._option_base``: where TorchAir defines its option classes, which tests and config
code import (``CallableValue`` for a pass option); they are the model's own
(:mod:`pytest_npufuse.torchair.configs._options`; torchair: python/torchair/configs/_option_base.py,
commit fced8842)."""

from __future__ import annotations

from ._options import CallableValue, OptionValue  # noqa: F401  (TorchAir defines them here)

__all__: list[str] = []
