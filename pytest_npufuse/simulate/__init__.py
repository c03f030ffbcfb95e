"""The modeled timeline: host and device of one target running one plan, deterministic.

Nothing here imports torch."""
