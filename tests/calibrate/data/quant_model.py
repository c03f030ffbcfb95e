"""The model of the profile in this directory: the int8 matmuls of the CATLASS 910B3 quant-matmul table.

Each call is ``torch_npu.npu_quant_matmul`` (CANN's QuantBatchMatmulV3) on one (m, n, k) of the table in
hicann/catlass examples/52_quant_multi_core_splitk_matmul_tla (the rows catlass-qmm-910b3-* of
benchmarks/data/published.toml), with a per-channel and a per-token scale and a bf16 output.
"""

from __future__ import annotations

import torch

from pytest_npufuse import torch_npu

SHAPES = ((128, 256, 1024), (128, 256, 2048), (128, 256, 4096), (128, 256, 8192), (128, 256, 16384),
          (256, 512, 16384), (256, 1024, 16384))


class QuantMatmuls(torch.nn.Module):
    """One quantised matmul per (m, n, k), in the table's order."""

    def __init__(self, shapes=SHAPES) -> None:
        super().__init__()
        self.shapes = shapes
        for index, (_, n, k) in enumerate(shapes):
            self.register_buffer(f"w{index}", torch.ones(k, n, dtype=torch.int8))
            self.register_buffer(f"s{index}", torch.ones(n, dtype=torch.float32))

    def forward(self, *xs: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for index, x in enumerate(xs):
            token_scale = torch.ones(x.shape[0], dtype=torch.float32)
            outs.append(torch_npu.npu_quant_matmul(
                x, getattr(self, f"w{index}"), getattr(self, f"s{index}"), pertoken_scale=token_scale,
                output_dtype=torch.bfloat16,
            ))
        return outs


def factory(shapes=SHAPES) -> tuple[QuantMatmuls, tuple[torch.Tensor, ...]]:
    """The model and one int8 activation per matmul."""
    return QuantMatmuls(shapes), tuple(torch.ones(m, k, dtype=torch.int8) for m, _, k in shapes)


def other_factory() -> tuple[QuantMatmuls, tuple[torch.Tensor, ...]]:
    """A model of other shapes (a profile of ``factory`` is not a profile of this one)."""
    return factory(tuple((m * 2, n, k // 2) for m, n, k in SHAPES))
