"""Argument checks shared by the op families: each raises an error that names the torch_npu argument.

Type checks (``require_int``, ``require_bool``, ...) need no tensor metadata and run in the public
wrappers, also while Dynamo traces; shape and dtype checks run in the meta functions.  Ints and floats
computed from symbolic shapes arrive as ``torch.SymInt`` / ``torch.SymFloat`` under ``dynamic=True`` and
are accepted as such.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, Optional, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import OpArgumentError, OpTypeError
from ..gaps import refused
from .dtypes import DTYPE_CODES

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def kernel_checks_apply(tensor: torch.Tensor) -> bool:
    """Whether the checks only torch_npu's device kernel makes apply to a call: on real tensors. op-plugin's
    meta function of an op (what FakeTensorMode and a compiled graph's tracing run) makes fewer, and gives
    the output shapes of calls its kernel would refuse; on fake tensors those checks are left to the kernel,
    which the model runs on the call's real values."""
    return not is_fake(tensor)


def dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def _type_error(name: str, value: object, noun: str, optional: bool, shows_value: bool = True) -> OpTypeError:
    """The error for an argument of the wrong type: what it must be (``or None`` where its schema type is
    optional, ``Tensor?``, ``ScalarType?``) and what was given."""
    alternative = " or None" if optional else ""
    given = f"{type(value).__name__} {value!r}" if shows_value else type(value).__name__
    return OpTypeError(f"{name} must be {noun}{alternative}, got {given}", argument=name)


def require_tensor(name: str, value: object, optional: bool = False) -> Optional[torch.Tensor]:
    """Return ``value`` if it is a tensor (or None, if ``optional``), otherwise raise a TypeError naming the
    argument; the message names the given value's type only, as a tensor-like value's repr can be huge."""
    if not isinstance(value, torch.Tensor) and not (optional and value is None):
        raise _type_error(name, value, "a torch.Tensor", optional, shows_value=False)
    return value


def require_tensor_list(name: str, value: object) -> list[torch.Tensor]:
    """A list of tensors, of at least one: not a list is the type error, an empty one a value the op refuses
    (a RuntimeError too, as torch_npu's argument check raises)."""
    if not isinstance(value, (list, tuple)):
        raise OpTypeError(f"{name} must be a non-empty list of tensors, got {type(value).__name__}", argument=name)
    if len(value) == 0:
        raise OpArgumentError(
            f"{name} must be a non-empty list of tensors, got an empty {type(value).__name__}", argument=name
        )
    return [require_tensor(f"{name}[{i}]", item) for i, item in enumerate(value)]


def require_dtype(name: str, tensor: torch.Tensor, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if tensor.dtype not in allowed:
        context = f" {why}" if why else ""
        raise OpArgumentError(
            f"{name} has dtype {tensor.dtype}; expected one of {dtype_names(allowed)}{context}", argument=name
        )


def require_shape(name: str, tensor: torch.Tensor, allowed: Sequence[Sequence[int]]) -> None:
    shapes = [tuple(s) for s in allowed]
    if tuple(tensor.shape) not in shapes:
        expected = " or ".join(str(list(s)) for s in shapes)
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected {expected}", argument=name)


def require_int(name: str, value: object, optional: bool = False) -> Any:
    """An integer: a Python int, a numpy integer scalar (``numbers.Integral``, which the dispatcher converts
    as torch_npu's binding does) or a SymInt under ``dynamic=True``; a bool is refused although Python
    counts it an int (numpy's bool is no ``numbers.Integral``)."""
    integral = isinstance(value, (int, torch.SymInt, numbers.Integral)) and not isinstance(value, bool)
    if not integral and not (optional and value is None):
        raise _type_error(name, value, "an int", optional)
    return value


def require_bool(name: str, value: object, optional: bool = False) -> Optional[bool]:
    if not isinstance(value, bool) and not (optional and value is None):
        raise _type_error(name, value, "a bool", optional)
    return value


def require_float(name: str, value: object, optional: bool = False) -> Any:
    """A real number (a schema ``float``): a Python int or float, a numpy scalar such as ``np.float16(0.088)``
    (``numbers.Real``: torch_npu's binding takes any real number, and callers often compute a scale in
    numpy), or a SymInt/SymFloat; bools are refused as in :func:`require_int`."""
    real = (int, float, torch.SymInt, torch.SymFloat, numbers.Real)
    number = isinstance(value, real) and not isinstance(value, bool)
    if not number and not (optional and value is None):
        raise _type_error(name, value, "a float", optional)
    return value


def require_scalar(name: str, value: object, optional: bool = False) -> Any:
    """A number (a schema ``Scalar``): an int, a float or a bool, as torch's dispatcher accepts."""
    number = isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat))
    if not number and not (optional and value is None):
        raise _type_error(name, value, "a number", optional)
    return value


# torch's ScalarType number of int8 (Char), and the dtype the dispatcher converts to it: the int8 value of a
# schema ``int`` holding a ScalarType number (op-plugin passes these to aclnn as at::ScalarType).
INT8_SCALAR_TYPE = (1, torch.int8)


def require_scalar_type_number(name: str, value: object, optional: bool = False) -> Any:
    """A schema ``int`` that holds torch's ScalarType number (npu_dynamic_block_quant's ``dst_type``): an int,
    or the torch.dtype the dispatcher converts to that number, as callers pass ``dst_type=torch.int8``."""
    if isinstance(value, torch.dtype):
        return value
    return require_int(name, value, optional)


def require_choice(name: str, value: Any, allowed: Sequence[Any], meaning: str) -> None:
    """An argument limited to the listed values; ``meaning`` says what the values select."""
    if value not in allowed:
        choices = ", ".join(str(v) for v in allowed)
        raise OpArgumentError(
            f"{name}={value} is not implemented; expected one of {choices} ({meaning})", argument=name
        )


def require_unused(op: str, **values: object) -> None:
    """Refuse optional inputs of a feature the CPU model does not implement (None or [] pass). ``op`` is the
    op's name, optionally followed by the feature the inputs belong to (``"npu_x (int8 caches)"``), which
    the message quotes; the error's ``op`` field is the name alone."""
    for name, value in values.items():
        if value is not None and not (isinstance(value, (list, tuple)) and len(value) == 0):
            error = OpArgumentError(
                f"{name} is not implemented by the CPU model of {op}; pass None", op=op.partition(" ")[0], argument=name
            )
            refused(error, f"torch_npu.{op}", name, "pass None: the CPU model does not implement its feature")


def require_trailing(name: str, tensor: torch.Tensor, x_name: str, x: torch.Tensor) -> None:
    """``tensor`` (e.g. a norm's gamma) must equal the trailing dims of ``x``."""
    dims = tensor.dim()
    if not 1 <= dims <= x.dim() or tuple(x.shape[x.dim() - dims :]) != tuple(tensor.shape):
        raise OpArgumentError(
            f"{name} has shape {list(tensor.shape)}; it must equal the trailing dims of {x_name} "
            f"(shape {list(x.shape)}), usually [{x.shape[-1] if x.dim() else 'H'}]",
            argument=name,
        )


def require_str(name: str, value: object, optional: bool = False) -> Optional[str]:
    if not isinstance(value, str) and not (optional and value is None):
        raise _type_error(name, value, "a str", optional)
    return value


def require_dtype_code(name: str, value: object, optional: bool = False) -> Any:
    """A dtype passed where op-plugin's schema declares an ``int`` (``int? x_dtype``, ``int? customize_dtype``):
    torch_npu takes a torch.dtype there, which the dispatcher turns into its ScalarType number, or that
    number itself (torch_npu's own dtypes, ``torch_npu.hifloat8``, are such numbers)."""
    if isinstance(value, torch.dtype):
        return value
    try:
        return require_int(name, value, optional)
    except OpTypeError:
        raise _type_error(name, value, "a torch.dtype or its int code", optional) from None


# c10's ScalarType numbers (c10/core/ScalarType.h), which the dispatcher hands a kernel for a torch.dtype
# passed to an ``int`` argument; torch_npu's own codes (:mod:`.dtypes`, ACL value + 256) are numbers past these.
_SCALAR_TYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
    6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16, 16: torch.quint4x2,
    23: torch.float8_e5m2, 24: torch.float8_e4m3fn,
}
# torch_npu's code of each format torch has a dtype of its own for (``torch_npu.bfloat16``, ...); its
# ``int4`` is the int4 packed in int32 words that torch spells quint4x2 in these ops.
_TORCH_NPU_CODES = {
    code: torch.quint4x2 if name == "int4" else getattr(torch, name)
    for name, code in DTYPE_CODES.items()
    if name == "int4" or isinstance(getattr(torch, name, None), torch.dtype)
}


def dtype_of_code(value: Any) -> Any:
    """The torch.dtype an ``int`` dtype argument names (:func:`require_dtype_code`): a torch.dtype as given, a
    ScalarType number or a torch_npu code of a torch format as its dtype; None, and the codes of formats
    torch has no dtype for (``torch_npu.hifloat8``), as given."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _SCALAR_TYPES.get(value) or _TORCH_NPU_CODES.get(value, value)
    return value


def require_dtype_value(name: str, value: object, optional: bool = False) -> Optional[torch.dtype]:
    if not isinstance(value, torch.dtype) and not (optional and value is None):
        raise _type_error(name, value, "a torch.dtype", optional)
    return value


def require_layout(name: str, value: object, optional: bool = False) -> Optional[torch.layout]:
    if not isinstance(value, torch.layout) and not (optional and value is None):
        raise _type_error(name, value, "a torch.layout", optional)
    return value


def require_device(name: str, value: object, optional: bool = False) -> Any:
    """A device (schema ``Device``): a torch.device, its name (``"npu"``, ``"npu:0"``, ``"cpu"``) or index."""
    device = isinstance(value, (torch.device, str, int)) and not isinstance(value, bool)
    if not device and not (optional and value is None):
        raise _type_error(name, value, "a torch.device or its name", optional)
    return value


def model_device(name: str, device: Any) -> Any:
    """The device the CPU model computes a factory op's output on for a ``device`` argument: the NPU
    (``"npu"``, ``"npu:0"``, a ``torch.device("npu")`` where torch knows it, or index 0) is the CPU; another
    NPU index is refused, as the model has one device; any other device is torch's."""
    if isinstance(device, torch.device):
        device = str(device) if device.type in ("npu", "privateuseone") else device
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"npu:{device}"
    if isinstance(device, str) and device.startswith(("npu", "privateuseone")):
        if device.partition(":")[2] not in ("", "0"):
            raise OpArgumentError(f"{name}={device!r}: pytest-npufuse models one NPU, 'npu' or 'npu:0'")
        return "cpu"
    return device


ArgumentCheck = Callable[[str, object], Any]


def comm_domain_name(domain: str) -> ArgumentCheck:
    """The check of an argument naming a communication domain (``hcom``, ``group_ep``): torch_npu takes the
    domain's HCCL name, a str, and a ProcessGroup passed in its place is the likely mistake, so the message
    says where the name comes from (torch_npu's ``get_hccl_comm_name`` page)."""

    def require(name: str, value: object) -> str:
        if not isinstance(value, str):
            raise OpTypeError(
                f"{name} must be a str, the {domain}'s name, not the group itself: pass "
                f"group._get_backend(torch.device('npu')).get_hccl_comm_name(rank); got {type(value).__name__}",
                argument=name,
            )
        return value

    return require


def _require_list(element: ArgumentCheck, what: str, optional: bool) -> ArgumentCheck:
    """A check of a schema list (``int[]``, ``Tensor[]?``): a list or tuple whose every item passes ``element``,
    or None if ``optional``."""

    def require(name: str, value: object) -> None:
        if optional and value is None:
            return
        if not isinstance(value, (list, tuple)):
            raise _type_error(name, value, f"a list of {what}", optional, shows_value=False)
        for i, item in enumerate(value):
            element(f"{name}[{i}]", item)

    return require


_TYPE_CHECKS: dict[str, Callable[..., Any]] = {
    "Tensor": require_tensor,
    "int": require_int,
    "SymInt": require_int,
    "float": require_float,
    "bool": require_bool,
    "str": require_str,
    "ScalarType": require_dtype_value,
    "Scalar": require_scalar,
    "Layout": require_layout,
    "Device": require_device,
}
_ELEMENT_NAMES = {"Tensor": "tensors", "int": "ints", "SymInt": "ints", "float": "floats", "bool": "bools"}


def type_check(schema_type: str, name: str = "") -> Callable[[str, object], Any]:
    """The check of one argument of this schema type (``Tensor?``, ``int[]``, ...): what the dispatcher would
    refuse, refused here first with the argument's name instead of a dispatcher traceback. An ``int`` whose
    ``name`` ends in ``dtype`` is op-plugin's way of declaring a dtype argument (:func:`require_dtype_code`)."""
    optional = schema_type.endswith("?")
    base = schema_type.removesuffix("?")
    if base == "int" and name.endswith("dtype"):
        return functools.partial(require_dtype_code, optional=True) if optional else require_dtype_code
    if base.endswith("]"):
        element = base.partition("[")[0]
        return _require_list(_TYPE_CHECKS[element], _ELEMENT_NAMES[element], optional)
    return functools.partial(_TYPE_CHECKS[base], optional=True) if optional else _TYPE_CHECKS[base]
