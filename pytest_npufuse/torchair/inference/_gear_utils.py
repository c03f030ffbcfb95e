"""``torchair.inference._gear_utils``: where TorchAir keeps ``set_dim_gears`` and the GE option text
built from the gears (torchair: python/torchair/inference/_gear_utils.py, commit fced8842).

``set_dim_gears`` is the model's own; the GE option text (``generate_dynamic_dims_option``) is for GE's
graph build, which the model does not run, so it is refused by name.
"""

from __future__ import annotations

from .._internal import refused_function
from ..ge import refusal
from . import set_dim_gears  # noqa: F401  (TorchAir defines it here)

__all__: list[str] = []

generate_dynamic_dims_option = refused_function("torchair.inference._gear_utils.generate_dynamic_dims_option", refusal)
