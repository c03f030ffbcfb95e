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

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Optional

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


def cast_in_place(source: torch.Tensor, acl_format: int) -> bool:
    """Whether ``npu_format_cast(source, acl_format)`` returns ``source`` itself, as torch_npu's does
    (FormatCastKernelNpu.cpp ``npu_format_cast``/``_npu_format_cast``): when the storage already has the
    format (after the fallback of a tensor below 2 dims to ND) or when both formats are base formats,
    where ``format_cast_as_base_format`` relabels the source's storage, recorded here, and keeps its
    bytes."""
    wanted, current = cast_format(source, acl_format), _desc(source)
    if wanted == current:
        return True
    if is_base_format(wanted.format) and is_base_format(current.format):
        record_format(source, wanted)
        return True
    return False


# FormatHelper.cpp's BLOCKBYTES and BLOCKSIZE: a FRACTAL_NZ tile is BLOCK_ROWS rows of 32 bytes.
BLOCK_BYTES = 32
BLOCK_ROWS = 16


def _nz_c0(dtype: torch.dtype, customize_dtype: object) -> int:
    """Elements per tile row (C0): 32 bytes of ``customize_dtype`` when it names a torch dtype (torch.int32:
    C0 = 8, as aclnnNpuFormatCastCalculateSizeAndFormat computes), else of ``dtype`` with 4-byte dtypes
    counted as 2 (``InferShapeNDToNZ``: "float32 will cast to float16"), so int8 has 32 and the rest 16.
    An int4 code (torch spells it quint4x2 here) keeps the default, as torch_npu's halving of it does."""
    if isinstance(customize_dtype, torch.dtype) and customize_dtype is not torch.quint4x2:
        return BLOCK_BYTES // customize_dtype.itemsize
    return BLOCK_BYTES // min(dtype.itemsize, 2)


def storage_elements(desc: StorageDesc, dtype: torch.dtype, customize_dtype: object = None) -> int:
    """How many ``dtype`` elements a storage laid out as ``desc`` holds: FRACTAL_NZ pads the last two dims
    of its base shape to whole tiles, [..., ceil(n / C0), ceil(m / 16), 16, C0] (``InferShapeNDToNZ``, a
    shape below 2 dims taken as [m, 1]); every other format holds exactly its elements."""
    shape = list(desc.base_shape)
    if desc.format is not Format.FRACTAL_NZ:
        return math.prod(shape)
    dims = (shape or [1]) + [1] * (len(shape) < 2)
    *batch, rows, cols = dims
    c0 = _nz_c0(dtype, customize_dtype)
    return math.prod(batch) * -(-cols // c0) * -(-rows // BLOCK_ROWS) * BLOCK_ROWS * c0


def empty_in_format(
    shape: torch.Size, dtype: torch.dtype, desc: StorageDesc, customize_dtype: Optional[object] = None
) -> torch.Tensor:
    """A dense ``shape`` tensor whose storage (zeroed) is as large as the device's in ``desc``'s layout, so
    ``untyped_storage().size()`` reads as on the NPU; the values sit in torch's row-major order at offset
    0, the padding after them."""
    elements = max(storage_elements(desc, dtype, customize_dtype), math.prod(shape))
    storage = torch.zeros(elements, dtype=dtype).untyped_storage()
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


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
