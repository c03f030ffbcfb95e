"""``torchair.experimental``: TorchAir's experimental API; :mod:`.inference` holds its weight-format helpers."""

from . import inference

__all__: list[str] = []
