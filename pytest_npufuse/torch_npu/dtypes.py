"""torch_npu's own dtype names (``torch_npu.hifloat8``, ``torch_npu.float4_e2m1fn_x2``, ...), as plain ints.

torch has no dtype for several of the NPU's formats (HiFloat8, FP6, int4), so torch_npu names every ACL
data type by an int: the ACL enum value plus an offset of 256, which keeps the codes apart
from ``torch.ScalarType`` values (an op taking ``int? x1_dtype`` accepts either and tells them apart by
that offset). torch_npu sets one module attribute per name when it loads, including the standard types
(``torch_npu.float32 == 256``). Ops take them where their schema says ``int? <name>_dtype``, beside a
tensor whose torch dtype has the same width: uint8 bytes for hifloat8 and the float6 formats, torch's
own ``float8_*`` and ``float4_e2m1fn_x2`` where torch has them (torch_npu's CalcuOpUtil.cpp map), int32
words of eight int4 values.

Sources: the names and the offset are torch_npu's ``torch_npu/csrc/custom_dtype/Init.cpp`` and ``Init.h``
(``DType``, ``g_toAclOffset = 256``; exported by ``torch_npu/_init/core/_exports.py``) at Ascend/pytorch
``9e73e708ab93``; the ACL values are CANN's ``aclDataType`` (hicann/runtime ``docs/api_docs/aclDataType.md``).
"""

from __future__ import annotations

from types import MappingProxyType

ACL_OFFSET = 256  # torch_npu's g_toAclOffset: a torch_npu dtype code is the aclDataType value plus this

# torch_npu's name of each ACL data type -> the aclDataType value.
_ACL_DATA_TYPES = {
    "float32": 0,
    "float16": 1,
    "int8": 2,
    "int32": 3,
    "uint8": 4,
    "int16": 6,
    "uint16": 7,
    "uint32": 8,
    "int64": 9,
    "uint64": 10,
    "float64": 11,
    "bool": 12,
    "string": 13,
    "complex64": 16,
    "complex128": 17,
    "bfloat16": 27,
    "int4": 29,
    "uint1": 30,
    "complex32": 33,
    "hifloat8": 34,
    "float8_e5m2": 35,
    "float8_e4m3fn": 36,
    "float8_e8m0fnu": 37,
    "float6_e3m2": 38,
    "float6_e2m3": 39,
    "float4_e2m1fn_x2": 40,
    "float4_e1m2fn_x2": 41,
}

DTYPE_CODES = MappingProxyType({name: ACL_OFFSET + value for name, value in _ACL_DATA_TYPES.items()})
