"""Exact numeric helpers shared by every reference kernel, and the bit-exact comparison of outputs."""
