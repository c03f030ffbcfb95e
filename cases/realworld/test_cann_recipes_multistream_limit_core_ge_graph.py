"""GE-graph multi-stream with core limits: a side-stream branch and a main-stream branch split the cores.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, docs/cann/en/multi_stream_principles.md @ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9
(section 3.2 "ge_graph"): after op A, branch B runs under ``tng.scope.npu_stream_switch("1")`` inside
``tng.scope.limit_core_num(12, 24)``; branch C stays on the main stream under the same core limit and calls
``tng.scope.npu_wait_tensor(out_C1, out_B2)`` before its second op; op D consumes both. The document's
ops are placeholders (op_A ... op_D); here they are a projection, RMSNorm and SwiGLU of a decoder MLP.
"""

import pytest
import torch
import torch_npu
import torchair as tng

HIDDEN, TOKENS = 512, 256


class CoreSplitBranches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(121)
        self.w_a = torch.nn.Parameter((torch.randn(HIDDEN, HIDDEN, generator=gen) / 23).half())
        self.w_b = torch.nn.Parameter((torch.randn(HIDDEN, 2 * HIDDEN, generator=gen) / 23).half())
        self.w_c = torch.nn.Parameter((torch.randn(HIDDEN, HIDDEN, generator=gen) / 23).half())
        self.gamma = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.float16))

    def forward(self, x):
        out_a = x @ self.w_a
        with tng.scope.npu_stream_switch("1"):
            with tng.scope.limit_core_num(12, 24):
                out_b1 = out_a @ self.w_b
                out_b2 = torch_npu.npu_swiglu(out_b1)
        with tng.scope.limit_core_num(12, 24):
            out_c1 = out_a @ self.w_c
            tng.scope.npu_wait_tensor(out_c1, out_b2)
            out_c2 = torch_npu.npu_rms_norm(out_c1, self.gamma)[0]
        return out_b2 + out_c2


@pytest.mark.multistream(streams=2, race_free=True)
def test_core_split_side_stream(npufuse):
    x = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(17)).half().npu()
    npufuse.check(CoreSplitBranches(), x)
