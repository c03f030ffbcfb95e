"""``torchair._acl_concrete_graph.utils``: the helpers of TorchAir's aclgraph capture that its tests
import (torchair: python/torchair/_acl_concrete_graph/utils.py, commit fced8842).

``WeakRef`` and ``LazyMessage`` are general helpers and behave as TorchAir's: a holder that keeps a
tensor only weakly (any other object strongly), and a log argument formatted only when the record is
emitted. ``reconstruct_args_kwargs`` rebuilds a captured node's tensors from TorchAir's saved metadata,
which the model never saves, so it is refused by name.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from .._internal import refused_function

__all__: list[str] = []


class WeakRef:
    """Holds a tensor by a weak reference (calling it gives None once the tensor is freed) and any
    other object as it is; ``swap_weakref`` holds another one."""

    def __init__(self, held: Any) -> None:
        self.swap_weakref(held)

    def swap_weakref(self, held: Any) -> None:
        self._get: Callable[[], Any] = weakref.ref(held) if isinstance(held, torch.Tensor) else (lambda: held)

    def __call__(self) -> Any:
        return self._get()


class LazyMessage:
    """``str()`` of it is ``str(func(*args, **kwargs))``, computed only then: a costly log argument
    (a dump of memory state) costs nothing while the level is off."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def __str__(self) -> str:
        return str(self.func(*self.args, **self.kwargs))


reconstruct_args_kwargs = refused_function("torchair._acl_concrete_graph.utils.reconstruct_args_kwargs")
