"""``torch_npu.testing.decorator``: parametrize a test method over dtypes and ACL formats.

``@Dtypes(torch.float16, torch.float32)`` and ``@Formats(2, 29)`` mark a method; ``@instantiate_tests`` on
the class replaces each marked method with one test per combination, named ``<name>_<format>_<dtype>``
in the order the marks were read, and passes each value to the parameter whose name contains ``dtype``
or ``format`` (and ``device="npu"`` to a ``device`` parameter). Behaviour follows Ascend/pytorch
``torch_npu/testing/decorator.py`` @9e73e708ab93.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from typing import Any, Callable

import torch

__all__ = ["Dtypes", "Formats", "instantiate_tests"]


class Dtypes:
    """Mark a test method with the torch dtypes it runs for."""

    def __init__(self, *dtypes: torch.dtype) -> None:
        if not dtypes:
            raise RuntimeError("No dtypes given")
        if not all(isinstance(dtype, torch.dtype) for dtype in dtypes):
            raise RuntimeError(f"Unknown dtype in {dtypes}")
        self.args = dtypes

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.dtypes = self.args  # type: ignore[attr-defined]
        return fn


class Formats:
    """Mark a test method with the ACL formats it runs for."""

    def __init__(self, *formats: int) -> None:
        if not formats:
            raise RuntimeError("No formats given")
        self.args = formats

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.formats = self.args  # type: ignore[attr-defined]
        return fn


def _suffix(key: str, value: Any) -> str:
    return f"_{value}" if key == "format" else f"_{str(value).split('.')[1]}"


def _bound(fn: Callable[..., Any], name: str, kwargs: dict[str, Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def test(self: Any) -> Any:
        __tracebackhide__ = True  # a failure in the test points at the test's line
        return fn(self, **kwargs)

    test.__name__ = test.__qualname__ = name
    return test


def _parameter_for(key: str, parameters: list[str]) -> str:
    matches = [parameter for parameter in parameters if key in parameter]
    if len(matches) > 1:
        raise RuntimeError(f"Multiple matches for {key}")
    if not matches:
        raise RuntimeError(f"No parameter takes the {key} values (its name must contain {key!r})")
    return matches[0]


def instantiate_tests(cls: type) -> type:
    """Replace each method marked with ``Dtypes`` / ``Formats`` by one test per combination of its values."""
    for name, fn in list(vars(cls).items()):
        marks = {key: getattr(fn, attr) for key, attr in (("dtype", "dtypes"), ("format", "formats")) if hasattr(fn, attr)}
        if not marks:
            continue
        parameters = inspect.getfullargspec(fn).args
        for values in itertools.product(*marks.values()):
            kwargs: dict[str, Any] = {"device": "npu"} if "device" in parameters else {}
            test_name = name
            for key, value in zip(marks, values):
                test_name += _suffix(key, value)
                kwargs[_parameter_for(key, parameters)] = value
            setattr(cls, test_name, _bound(fn, test_name, kwargs))
        delattr(cls, name)
    return cls
