"""Prefill/decode gating of SuperKernel scopes, as the scope analysis guide writes it
(docs/feature-docs.md#scope-analysis, Q3).

    with superkernel_scope(enable and not is_prefill, "decoder_layer", options):
        ...

Prefill runs without SuperKernel, decode with the scope the analysis chose; the cann-recipes models
use the same helper. Off, the block is an ordinary block: no scope reaches the graph at all.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

from .torchair import scope


def superkernel_scope(enable: bool, label: str, options: str = "") -> ContextManager[None]:
    """A SuperKernel scope named ``label`` with ``options`` when ``enable``, else nothing."""
    return scope.super_kernel(label, options) if enable else contextlib.nullcontext()
