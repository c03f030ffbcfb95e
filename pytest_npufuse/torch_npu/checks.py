"""Argument checks shared by the op families: each raises an error that names the torch_npu argument.

Type checks (``require_int``, ``require_bool``, ...) need no tensor metadata and run in the public
wrappers, also while Dynamo traces; shape and dtype checks run in the meta functions.  Ints and floats
computed from symbolic shapes arrive as ``torch.SymInt`` / ``torch.SymFloat`` under ``dynamic=True`` and
are accepted as such.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from ..errors import OpArgumentError, OpTypeError

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def require_tensor(name: str, value: object) -> torch.Tensor:
    """Return ``value`` if it is a tensor, otherwise raise a TypeError naming the argument."""
    if not isinstance(value, torch.Tensor):
        raise OpTypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def require_optional_tensor(name: str, value: object) -> Optional[torch.Tensor]:
    if value is None:
        return None
    return require_tensor(name, value)


def require_tensors(**values: object) -> None:
    """Each keyword is a tensor argument that may be None."""
    for name, value in values.items():
        require_optional_tensor(name, value)


def require_tensor_list(name: str, value: object) -> list[torch.Tensor]:
    if not isinstance(value, (list, tuple)) or len(value) == 0:
        raise OpTypeError(f"{name} must be a non-empty list of tensors, got {type(value).__name__}")
    return [require_tensor(f"{name}[{i}]", item) for i, item in enumerate(value)]


def require_dtype(name: str, tensor: torch.Tensor, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if tensor.dtype not in allowed:
        context = f" {why}" if why else ""
        raise OpArgumentError(f"{name} has dtype {tensor.dtype}; expected one of {dtype_names(allowed)}{context}")


def require_shape(name: str, tensor: torch.Tensor, allowed: Sequence[Sequence[int]]) -> None:
    shapes = [tuple(s) for s in allowed]
    if tuple(tensor.shape) not in shapes:
        expected = " or ".join(str(list(s)) for s in shapes)
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected {expected}")


def require_int(name: str, value: object) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise OpTypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def require_optional_int(name: str, value: object) -> Any:
    return None if value is None else require_int(name, value)


def require_ints(**values: object) -> None:
    for name, value in values.items():
        require_int(name, value)


def require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise OpTypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def require_float(name: str, value: object) -> Any:
    """A Python int or float (a schema ``float``); bools are refused as in :func:`require_int`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.SymInt, torch.SymFloat)):
        raise OpTypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    return value


def require_int_list(name: str, value: object) -> None:
    """An optional ``int[]`` argument: None or a list/tuple of ints."""
    if value is None:
        return
    if not isinstance(value, (list, tuple)):
        raise OpTypeError(f"{name} must be a list of ints or None, got {type(value).__name__}")
    for i, item in enumerate(value):
        require_int(f"{name}[{i}]", item)


def require_optional_dtype(name: str, value: object) -> None:
    if value is not None and not isinstance(value, torch.dtype):
        raise OpTypeError(f"{name} must be a torch.dtype or None, got {type(value).__name__}")


def require_choice(name: str, value: Any, allowed: Sequence[Any], meaning: str) -> None:
    """An argument limited to the listed values; ``meaning`` says what the values select."""
    if value not in allowed:
        choices = ", ".join(str(v) for v in allowed)
        raise OpArgumentError(f"{name}={value} is not implemented; expected one of {choices} ({meaning})")


def require_unused(op: str, **values: object) -> None:
    """Refuse optional inputs of a feature the CPU model does not implement (None or [] pass)."""
    for name, value in values.items():
        if value is not None and not (isinstance(value, (list, tuple)) and len(value) == 0):
            raise OpArgumentError(f"{name} is not implemented by the CPU model of {op}; pass None")


def require_trailing(name: str, tensor: torch.Tensor, x_name: str, x: torch.Tensor) -> None:
    """``tensor`` (e.g. a norm's gamma) must equal the trailing dims of ``x``."""
    dims = tensor.dim()
    if not 1 <= dims <= x.dim() or tuple(x.shape[x.dim() - dims :]) != tuple(tensor.shape):
        raise OpArgumentError(
            f"{name} has shape {list(tensor.shape)}; it must equal the trailing dims of {x_name} "
            f"(shape {list(x.shape)}), usually [{x.shape[-1] if x.dim() else 'H'}]"
        )


def require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise OpTypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    return value


def require_dtype_value(name: str, value: object) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise OpTypeError(f"{name} must be a torch.dtype, got {type(value).__name__}")
    return value


def _require_list(element: Callable[[str, object], Any], what: str) -> Callable[[str, object], None]:
    """A check of a schema list: a list or tuple whose every item passes ``element``."""

    def require(name: str, value: object) -> None:
        if not isinstance(value, (list, tuple)):
            raise OpTypeError(f"{name} must be a list of {what}, got {type(value).__name__}")
        for i, item in enumerate(value):
            element(f"{name}[{i}]", item)

    return require


def _optional(require: Callable[[str, object], Any]) -> Callable[[str, object], None]:
    def require_optional(name: str, value: object) -> None:
        if value is not None:
            require(name, value)

    return require_optional


_TYPE_CHECKS: dict[str, Callable[[str, object], Any]] = {
    "Tensor": require_tensor,
    "int": require_int,
    "SymInt": require_int,
    "float": require_float,
    "bool": require_bool,
    "str": require_str,
    "ScalarType": require_dtype_value,
}
_ELEMENT_NAMES = {"Tensor": "tensors", "int": "ints", "SymInt": "ints", "float": "floats", "bool": "bools"}


def type_check(schema_type: str) -> Callable[[str, object], Any]:
    """The check of one argument of this schema type (``Tensor?``, ``int[]``, ...): what the dispatcher would
    refuse, refused here first with the argument's name instead of a dispatcher traceback."""
    if schema_type.endswith("?"):
        return _optional(type_check(schema_type[:-1]))
    if schema_type.endswith("]"):
        element = schema_type.partition("[")[0]
        return _require_list(_TYPE_CHECKS[element], _ELEMENT_NAMES[element])
    return _TYPE_CHECKS[schema_type]
