"""Tagged events and npu_record_tagged_stream in reduce-overhead (aclgraph) mode.

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, tests/smoke/aclgraph_test.py @ fced8842d149f16b587c2c867d427e4b766831ca
(``test_pattern_pass_batch_matmul_transpose_for_aclgraph_with_multistream``, model ``DsModel2``): two
events created in ``__init__`` with ``torchair.ops.npu_create_tagged_event(tag="66")``/``"77"``, a matmul
on the main stream, record 66, ``npu_stream_switch('2', 3)`` waiting on 66 before a transpose, record 77
and ``npu_record_tagged_stream(output, '2')`` inside, wait 77 back on the main stream;
``CompilerConfig().mode = "reduce-overhead"``. Same shapes as the test ([64, 4, 512] x [64, 512, 128] fp16).
"""

import pytest
import torch
import torchair


class DsModel2Pattern(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.event1 = torchair.ops.npu_create_tagged_event(tag="66")
        self.event2 = torchair.ops.npu_create_tagged_event(tag="77")

    def forward(self, x1, x2):
        y = torch.matmul(x1, x2)
        torchair.ops.npu_tagged_event_record(self.event1)
        with torchair.scope.npu_stream_switch('2', 3):
            torchair.ops.npu_tagged_event_wait(self.event1)
            output = torch.transpose(y, 1, 0)
            torchair.ops.npu_tagged_event_record(self.event2)
            torchair.ops.npu_record_tagged_stream(output, '2')
        torchair.ops.npu_tagged_event_wait(self.event2)
        return output


@pytest.mark.multistream(race_free=True)
def test_tagged_events_in_reduce_overhead(npufuse):
    """Stream '2' holds only a transpose, a view that launches no kernel: the run uses one stream."""
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randn(64, 4, 512, dtype=torch.float16, generator=gen).npu()
    x2 = torch.randn(64, 512, 128, dtype=torch.float16, generator=gen).npu()
    npufuse.check(DsModel2Pattern(), x1, x2, mode="reduce-overhead")
