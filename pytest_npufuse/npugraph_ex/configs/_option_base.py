"""``npugraph_ex.configs._option_base``: npugraph_ex's copy of TorchAir's option classes
(:mod:`pytest_npufuse.torchair.configs._option_base`)."""

from __future__ import annotations

from ...torchair.configs._options import CallableValue, OptionValue  # noqa: F401  (npugraph_ex defines them here)

__all__: list[str] = []
