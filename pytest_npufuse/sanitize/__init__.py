"""The stream sanitizer: happens-before between streams, races, lifetime hazards and deadlocks.

It checks a plan before anything runs, as PyTorch's CUDA sanitizer checks a stream program. Nothing here
imports torch."""
