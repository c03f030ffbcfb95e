"""What is modeled: hardware profiles (one Ascend target each), the op catalog, and a project's own targets and ops.

Facts only, read from TOML data; no stage logic. Nothing here imports torch."""
