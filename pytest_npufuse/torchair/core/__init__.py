"""``torchair.core``: ``torchair.core.utils`` (its logger) is what model code uses; ``_backend`` (GE's
runtime binding, refused by name) is reached as an attribute by TorchAir's tests, as in TorchAir."""

from . import _backend, utils  # noqa: F401

__all__ = ["utils"]
