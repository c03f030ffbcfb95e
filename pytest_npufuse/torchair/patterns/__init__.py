"""``torchair.patterns``: TorchAir's pattern-fusion passes; :mod:`.pattern_pass_manager` holds the user's
own replacement rules (``torchair.register_replacement``)."""

from . import pattern_pass_manager

__all__: list[str] = []
