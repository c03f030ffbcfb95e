"""npugraph_ex stream-level core limit around a matmul and an add (TorchAir's npugraph_ex example).

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, docs/zh/npugraph_ex/advanced/limit_cores.md @ fced8842d149f16b587c2c867d427e4b766831ca
(usage example): ``with torch.npu.npugraph_ex.scope.limit_core_num(4, 5):`` around ``torch.mm`` and
``torch.add``, a second ``torch.mm`` outside, compiled with backend "npugraph_ex"; inputs made with
``.npu()``. Shapes shrunk from 1000x1000 to 256x256 fp16.
"""

import pytest
import torch
import torch_npu

N = 256


class LimitedCores(torch.nn.Module):
    def __init__(self, limited: bool = True) -> None:
        super().__init__()
        self.limited = limited

    def forward(self, in1, in2, in3, in4):
        if self.limited:
            with torch.npu.npugraph_ex.scope.limit_core_num(4, 5):
                mm_result = torch.mm(in3, in4)
                add_result = torch.add(in1, in2)
        else:
            mm_result = torch.mm(in3, in4)
            add_result = torch.add(in1, in2)
        mm1_result = torch.mm(in3, in4)
        return add_result, mm_result, mm1_result


def inputs():
    gen = torch.Generator().manual_seed(19)
    return [torch.randn(N, N, dtype=torch.float16, generator=gen).npu() for _ in range(4)]


def test_core_limit_in_npugraph_ex_is_exact_and_slower(npufuse):
    limited = npufuse.check(LimitedCores(), *inputs(), mode="npugraph_ex")
    free = npufuse.check(LimitedCores(limited=False), *inputs(), mode="npugraph_ex")
    assert limited.bit_exact
    assert limited.variant.time_us > free.variant.time_us
