"""NPU storage formats: which ACL format each tensor's device memory is laid out in.

On a real NPU the format belongs to the tensor's storage (torch_npu's ``NPUStorageDesc``: the format and
the shape the storage was made for): a new tensor gets its shape's base format, ``torch_npu.npu_format_cast``
makes one in another format, every view of that storage shares it, and ``torch_npu.get_npu_format`` reads
it back. The CPU model keeps values in torch's own layout (a format changes where the NPU puts the bytes,
never what they are), so the format is bookkeeping: recorded per storage for what a format cast returns,
the base format of the shape a storage was made for (the viewed tensor's) for any other. The rules are
torch_npu's (Ascend/pytorch @9e73e708ab93): ``torch_npu/npu/_format.py`` (the ``Format`` numbers),
``csrc/framework/FormatHelper.cpp`` (each format's base format; any other number is an unknown format)
and ``csrc/framework/InferFormat.cpp`` (``GuessBaseFormat``, ``GuessStorageFormat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from ..errors import OpArgumentError


class Format(IntEnum):
    """torch_npu's storage format numbers (``torch_npu.Format``); ``get_npu_format`` returns one."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self) -> str:
        return self.name


# The formats a tensor can be cast to, each with its base format (FormatHelper's table).
BASE_FORMAT = {
    Format.NC1HWC0: Format.NCHW,
    Format.ND: Format.ND,
    Format.NCHW: Format.NCHW,
    Format.NHWC: Format.NHWC,
    Format.FRACTAL_NZ: Format.ND,
    Format.FRACTAL_Z: Format.NCHW,
    Format.NDHWC: Format.NCDHW,
    Format.NCDHW: Format.NCDHW,
    Format.NDC1HWC0: Format.NCDHW,
    Format.FRACTAL_Z_3D: Format.NCDHW,
    Format.FRACTAL_NZ_C0_16: Format.ND,
    Format.FRACTAL_NZ_C0_32: Format.ND,
    Format.FRACTAL_NZ_C0_2: Format.ND,
    Format.FRACTAL_NZ_C0_4: Format.ND,
    Format.FRACTAL_NZ_C0_8: Format.ND,
}


@dataclass(frozen=True)
class StorageDesc:
    """What torch_npu keeps with a storage: its format and the shape it was made for (a view's own shape
    may differ)."""

    format: Format
    base_shape: tuple[int, ...]


# Storage (held weakly, so its address cannot be reused while it is here) -> its description. This is data
# of each storage, as torch_npu keeps it with the storage itself, and lives as long as the storage: a tensor
# formatted in one test keeps its format when a later one reads it, so it is not session state.
_RECORDED: dict[StorageWeakRef, StorageDesc] = {}


def base_format(shape: torch.Size | tuple[int, ...]) -> Format:
    """The format of a new tensor of ``shape``: NCDHW for 5 dims, NCHW for 4, ND otherwise."""
    return {5: Format.NCDHW, 4: Format.NCHW}.get(len(shape), Format.ND)


def _known(acl_format: int) -> Format:
    try:
        wanted = Format(acl_format)
    except ValueError:
        wanted = None
    if wanted not in BASE_FORMAT:
        names = ", ".join(f"{f.value} ({f.name})" for f in BASE_FORMAT)
        raise OpArgumentError(
            f"acl_format={acl_format} is not a storage format torch_npu knows; use one of {names}.",
            argument="acl_format",
        )
    return wanted


def is_base_format(fmt: Format) -> bool:
    """Whether ``fmt`` is a base format (ND, NCHW, ...) rather than one a format cast makes (FRACTAL_NZ)."""
    return BASE_FORMAT.get(fmt) is fmt


def storage_format(shape: torch.Size | tuple[int, ...], acl_format: int) -> Format:
    """The format a new ``shape`` tensor asked for in ``acl_format`` really gets (``GuessStorageFormat`` then
    ``GuessFormatUnit``): shapes a format cannot hold stay in a base format (no FRACTAL_NZ below 2 dims,
    NCHW only for 4, scalars and [1] stay ND), and a 4-dim ND tensor is NCHW."""
    wanted = _known(acl_format)
    dims, base = len(shape), BASE_FORMAT[wanted]
    if wanted is Format.FRACTAL_NZ and dims < 2:
        guessed = Format.ND
    elif wanted is base and base is Format.NCDHW:
        guessed = {4: Format.NCHW, 5: Format.NCDHW}.get(dims, Format.ND)
    elif wanted is Format.NCHW and dims != 4:
        guessed = Format.ND
    elif dims == 0 or (dims == 1 and shape[0] == 1 and base is Format.ND):
        guessed = Format.ND
    else:
        guessed = wanted
    guessed_base = BASE_FORMAT[guessed]
    if dims == 4 and (guessed is Format.ND or guessed_base is Format.NCDHW):
        return Format.NCHW
    return guessed


def _desc(tensor: torch.Tensor) -> StorageDesc:
    """``tensor``'s storage description. A storage no format cast made was made for the tensor a view
    looks into (``tensor._base``), or ``tensor`` itself, in that shape's base format; a sparse or other
    storage-less tensor has its own shape's."""
    recorded = _RECORDED.get(StorageWeakRef(tensor.untyped_storage())) if tensor.layout == torch.strided else None
    if recorded is not None:
        return recorded
    owner = tensor._base if tensor._base is not None else tensor
    return StorageDesc(base_format(owner.shape), tuple(owner.shape))


def cast_format(source: torch.Tensor, acl_format: int) -> StorageDesc:
    """What ``npu_format_cast(source, acl_format)`` returns is laid out as: the asked format when the source
    already has it or both are base formats (torch_npu relabels the storage), else a new storage of the
    source storage's shape in that format (:func:`storage_format`)."""
    wanted, current = _known(acl_format), _desc(source)
    if wanted is current.format or (is_base_format(wanted) and is_base_format(current.format)):
        return StorageDesc(wanted, current.base_shape)
    return StorageDesc(storage_format(current.base_shape, wanted), current.base_shape)


def record_format(tensor: torch.Tensor, desc: StorageDesc) -> torch.Tensor:
    """Note that ``tensor``'s storage (the result of a format cast) is laid out as ``desc``; returns ``tensor``."""
    for gone in [ref for ref in _RECORDED if ref.expired()]:
        del _RECORDED[gone]
    _RECORDED[StorageWeakRef(tensor.untyped_storage())] = desc
    return tensor


def get_npu_format(tensor: torch.Tensor) -> Format:
    """``torch_npu.get_npu_format(tensor)``: the format a format cast gave ``tensor``'s storage, else its
    shape's base format."""
    if not isinstance(tensor, torch.Tensor):
        raise OpArgumentError(
            f"get_npu_format takes a tensor, got {type(tensor).__name__}.",
            op="get_npu_format", argument="tensor",
        )
    return _desc(tensor).format
