"""``torchair.configs``, kept at TorchAir's import path."""
