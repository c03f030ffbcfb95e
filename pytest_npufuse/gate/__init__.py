"""Judging a case: the CI baseline gate and the expectations a test states (markers). Nothing here
imports torch."""
