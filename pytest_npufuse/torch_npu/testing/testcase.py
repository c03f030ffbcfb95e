"""``torch_npu.testing.testcase``: the ``TestCase`` torch_npu's op tests derive from, and ``run_tests``.

Its assertions are torch_npu's, whose tolerances differ from PyTorch's current ``assertEqual``:

* ``assertRtolEqual(x, y, prec=1e-4, prec16=1e-3)`` compares values elementwise, each within ``prec``
  (``prec16`` for float16) absolutely or relative to the larger magnitude, and fails only when more than
  ``prec`` of the elements miss both ways; NaNs must sit at the same places, shapes and dtypes must match,
  two bfloat16 tensors are compared with ``allclose(rtol=atol=prec16)``;
* ``assertEqual(x, y, prec=None)`` compares numbers and tensors to within ``prec`` (default
  ``self.precision``, 1e-5) in absolute difference, NaNs at the same places, recursing into sequences and
  dicts; dtypes must match only with ``exact_dtype=True``.

Tensors "on the NPU" are CPU tensors under the model, so both sides compare directly. Behaviour follows
Ascend/pytorch ``torch_npu/testing/testcase.py`` @9e73e708ab93; ``assertExpectedInline`` compares as the
``expecttest`` package does when not asked to rewrite the expectation.
"""

from __future__ import annotations

import os
import random
import unittest
from collections import OrderedDict
from collections.abc import Sequence
from numbers import Number
from typing import Any

import numpy as np
import torch

from ...errors import ArgumentError
from .common_utils import is_iterable, set_npu_device

__all__ = ["TestCase", "run_tests"]
# The seed every test starts from (torch_npu's CI sets SEED to vary it).
SEED_VARIABLE = "SEED"
DEFAULT_SEED = 666
# assertRtolEqual: the dtypes it compares, and the floor under the relative error's denominator.
RTOL_DTYPES = (np.bool_, np.uint16, np.int16, np.int32, np.float16, np.float32, np.int8, np.uint8, np.int64, np.float64)
FLOAT16_FLOOR = 6e-8
FLOOR = 1e-9


def run_tests() -> None:
    """Run the calling module's tests with unittest (pytest collects the same classes directly)."""
    unittest.main()


def _as_array(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, Number):
        return np.array(value)
    return value


def seed_from_environment() -> int:
    """The seed each test starts from: ``$SEED`` as torch_npu's runner sets it, else :data:`DEFAULT_SEED`;
    a value ``torch.manual_seed`` cannot take is an error naming the variable, not a ValueError in setUp."""
    value = os.getenv(SEED_VARIABLE, str(DEFAULT_SEED)).strip()
    digits = value[1:] if value[:1] in "+-" else value
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19) or not -(2**63) <= int(value) < 2**64:
        raise ArgumentError(
            f"environment variable {SEED_VARIABLE}={value[:40]!r} is not a random seed; set it to a whole number "
            f"(torch.manual_seed takes -2**63 to 2**64-1), e.g. {SEED_VARIABLE}={DEFAULT_SEED}, or unset it.",
            argument=SEED_VARIABLE,
        )
    return int(value)


class TestCase(unittest.TestCase):
    """torch_npu's test base: a fixed seed per test, the NPU selected per class, torch_npu's assertions."""

    _precision = 1e-5
    maxDiff = None
    exact_dtype = False

    @property
    def precision(self) -> float:
        return self._precision

    @precision.setter
    def precision(self, prec: float) -> None:
        self._precision = prec

    @classmethod
    def setUpClass(cls) -> None:
        cls.npu_device = set_npu_device()

    def setUp(self) -> None:
        seed = seed_from_environment()
        torch.manual_seed(seed)
        random.seed(seed)

    # -- assertRtolEqual ---------------------------------------------------------------------------

    def assertRtolEqual(
        self, x: Any, y: Any, prec: float = 1.0e-4, prec16: float = 1.0e-3, auto_trans_dtype: bool = False,
        message: str | None = None,
    ) -> None:
        __tracebackhide__ = True  # a failure points at the test's line, as pytest's own helpers do
        if isinstance(x, Sequence) and isinstance(y, Sequence):
            for x_item, y_item in zip(x, y):
                self.assertRtolEqual(x_item, y_item, prec, prec16, auto_trans_dtype, message)
            return
        if isinstance(x, torch.Tensor) and isinstance(y, Sequence):
            y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
        elif isinstance(x, Sequence) and isinstance(y, torch.Tensor):
            x = torch.as_tensor(x, dtype=y.dtype, device=y.device)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if auto_trans_dtype:
                x = x.to(y.dtype)
            if x.dtype == torch.bfloat16 and y.dtype == torch.bfloat16:
                if x.shape != y.shape:
                    self.fail(message or "shape error!")
                if not torch.allclose(x.cpu(), y.cpu(), rtol=prec16, atol=prec16):
                    self.fail(message or "result error!")
                return
        if any(isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 for v in (x, y)):
            self.fail(message or "dtype error: one side is bfloat16, the other is not")
        self._assert_arrays_close(_as_array(x), _as_array(y), prec, prec16, message)

    def _assert_arrays_close(self, x: np.ndarray, y: np.ndarray, prec: float, prec16: float, message: str | None) -> None:
        __tracebackhide__ = True
        if x.shape != y.shape:
            self.fail(message or f"shape error: {x.shape} vs {y.shape}")
        if x.dtype != y.dtype:
            self.fail(message or f"dtype error: {x.dtype} vs {y.dtype}")
        if x.dtype.type not in RTOL_DTYPES:
            self.fail(message or f"dtype {x.dtype} is not one of {[t.__name__ for t in RTOL_DTYPES]}")
        if x.dtype == np.bool_:
            if not np.equal(x, y).all():
                self.fail(message or "result error")
            return
        if x.dtype == np.float16:
            self._assert_within(x, y, prec16, FLOAT16_FLOOR, message)
        else:
            self._assert_within(x, y, prec, FLOOR, message)

    def _assert_within(self, x: np.ndarray, y: np.ndarray, prec: float, floor: float, message: str | None) -> None:
        """Each element within ``prec`` absolutely or relatively; fail when more than a ``prec`` share of
        the elements miss both ways (torch_npu's tolerance for accumulated rounding)."""
        __tracebackhide__ = True
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        if not np.array_equal(nan_x, nan_y):
            self.fail(message or "NaNs at different places")
        diff = np.abs(np.where(nan_x, 0, y - x))
        larger = np.maximum(np.abs(x), np.abs(y))
        within_atol = diff <= prec
        with np.errstate(invalid="ignore"):
            within_rtol = diff / (larger + floor) <= prec
        allowed = x.size * prec
        if within_rtol.all() or within_atol.all():
            return
        if np.sum(~within_rtol) > allowed and np.sum(~within_atol) > allowed:
            self.fail(message or f"result error: {np.sum(~within_atol)} of {x.size} elements differ by more than {prec}")

    # -- assertEqual -------------------------------------------------------------------------------

    def assertEqual(  # type: ignore[override]
        self, x: Any, y: Any, prec: Any = None, message: str | None = "", allow_inf: bool = False,
        exact_dtype: bool | None = None,
    ) -> None:
        __tracebackhide__ = True
        if exact_dtype is None:
            exact_dtype = self.exact_dtype
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        self._assert_equal(x, y, prec, message or "", allow_inf, exact_dtype)

    def _assert_equal(self, x: Any, y: Any, prec: float, message: str, allow_inf: bool, exact_dtype: bool) -> None:
        __tracebackhide__ = True
        if isinstance(x, Number) or isinstance(y, Number):
            self._assert_numbers_equal(x, y, prec, message, allow_inf)
        elif isinstance(x, np.bool_) or isinstance(y, np.bool_):
            super().assertEqual(_item(x), _item(y), message)
        elif isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            self._assert_tensors_equal(x, y, prec, message, allow_inf, exact_dtype)
        elif isinstance(x, (str, bytes)) and isinstance(y, (str, bytes)):
            super().assertEqual(x, y, message)
        elif type(x) is set and type(y) is set:
            super().assertEqual(x, y, message)
        elif isinstance(x, dict) and isinstance(y, dict):
            if isinstance(x, OrderedDict) and isinstance(y, OrderedDict):
                self._assert_equal(list(x.items()), list(y.items()), prec, message, allow_inf, exact_dtype)
            else:
                self._assert_equal(set(x), set(y), prec, message, allow_inf, exact_dtype)
                keys = list(x)
                self._assert_equal([x[k] for k in keys], [y[k] for k in keys], prec, message, allow_inf, exact_dtype)
        elif is_iterable(x) and is_iterable(y):
            super().assertEqual(len(x), len(y), message)
            for x_item, y_item in zip(x, y):
                self._assert_equal(x_item, y_item, prec, message, allow_inf, exact_dtype)
        else:
            super().assertEqual(x, y, message)

    def _assert_numbers_equal(self, x: Any, y: Any, prec: float, message: str, allow_inf: bool) -> None:
        __tracebackhide__ = True
        x, y = _item(x), _item(y)
        if abs(x) == float("inf") or abs(y) == float("inf"):
            if not allow_inf:
                self.fail(f"Expected finite numeric values - x={x}, y={y}")
            super().assertEqual(x, y, message)
            return
        super().assertLessEqual(abs(x - y), prec, message)

    def _assert_tensors_equal(
        self, a: torch.Tensor, b: torch.Tensor, prec: float, message: str, allow_inf: bool, exact_dtype: bool
    ) -> None:
        __tracebackhide__ = True
        if a.is_sparse or b.is_sparse:
            a, b = a.to_dense(), b.to_dense()
        super().assertEqual(a.size(), b.size(), message)
        if exact_dtype:
            super().assertEqual(a.dtype, b.dtype, message)
        if a.numel() == 0:
            return
        if (a.dtype == torch.bool) != (b.dtype == torch.bool):
            raise TypeError("Was expecting both tensors to be bool type.")
        if a.dtype in (torch.float16, torch.bfloat16):
            a = a.to(torch.float32)
        b = b.to(a)
        if a.dtype == torch.bool:
            a, b = a.to(torch.int), b.to(torch.int)
        diff = a - b
        if a.dtype.is_floating_point or a.dtype.is_complex:
            nan_mask = torch.isnan(a)
            self.assertTrue(torch.equal(nan_mask, torch.isnan(b)), message)
            diff[nan_mask] = 0
            if allow_inf:
                inf_mask = torch.isinf(a)
                self.assertTrue(torch.equal(inf_mask.sign(), torch.isinf(b).sign()), message)
                diff[inf_mask] = 0
        if diff.is_signed() and diff.dtype != torch.int8:
            diff = diff.abs()
            if diff.is_complex():
                diff = diff.real
        self.assertLessEqual(diff.max().item(), prec, message)

    def assertAlmostEqual(  # type: ignore[override]
        self, x: Any, y: Any, places: int | None = None, msg: str | None = None, delta: float | None = None,
        allow_inf: bool = False,
    ) -> None:
        __tracebackhide__ = True
        prec = 10 ** (-places) if places else delta
        self.assertEqual(x, y, prec, msg, allow_inf)

    def assertNotEqual(self, x: Any, y: Any, prec: Any = None, message: str = "") -> None:  # type: ignore[override]
        """Unequal beyond ``prec``: tensors of one size differ somewhere by at least ``prec``, numbers by at
        least ``prec``."""
        __tracebackhide__ = True
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.size() != y.size():
                return
            self.assertGreater(x.numel(), 0)
            y = y.type_as(x)
            if x.dtype == torch.bool:
                x, y = x.to(torch.int), y.to(torch.int)
            diff = (x - y).abs() if (x - y).is_signed() else x - y
            diff[torch.isnan(x) & torch.isnan(y)] = 0
            self.assertGreaterEqual(diff.max().item(), prec, message)
        elif isinstance(x, Number) and isinstance(y, Number):
            self.assertGreaterEqual(abs(x - y), prec, message)
        else:
            super().assertNotEqual(x, y, message)

    def assertExpectedInline(self, actual: str, expect: str, skip: int = 0) -> None:
        """``actual`` equals the inline expectation ``expect`` (a C++ stack trace after the message is
        ignored, as expecttest does)."""
        __tracebackhide__ = True
        actual = actual.rsplit("\nException raised from", maxsplit=1)[0]
        self.assertMultiLineEqual(expect, actual)


def _item(value: Any) -> Any:
    """A one-element tensor or numpy scalar as a Python number."""
    return value.item() if isinstance(value, (torch.Tensor, np.generic)) else value
