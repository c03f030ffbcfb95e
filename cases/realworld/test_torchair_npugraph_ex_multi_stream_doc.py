"""npugraph_ex's multi-stream expression: streams and events created inside forward, record_stream.

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, docs/zh/npugraph_ex/advanced/multi_stream.md @ fced8842d149f16b587c2c867d427e4b766831ca
(使用示例): ``forward`` creates two ``torch.npu.Stream()`` and two ``torch.npu.Event()``; an add and
``B = in3 + in4`` on the default stream; ``event1.record()``; inside ``with torch.npu.stream(stream1)``
``event1.wait(stream1)``, an mm reading B, ``event2.record()``, ``B.record_stream(stream1)``; an mm on the
default stream; inside ``with torch.npu.stream(stream2)`` ``event2.wait(stream2)`` and an add; compiled
with ``backend="npugraph_ex", fullgraph=False, dynamic=False``. Shapes shrunk from 1000x1000 to 256x256.

The streams and events are made inside the compiled function, which npugraph_ex turns into tagged
events of the graph; the model lowers them to the same graph streams and events as TorchAir's scopes,
so the sanitizer sees the cross-stream reads: with the document's record/wait pairs there is no race.
"""

import pytest
import torch
import torch_npu

N = 256


class DocMultiStream(torch.nn.Module):
    def forward(self, in1, in2, in3, in4):
        stream1 = torch.npu.Stream()
        stream2 = torch.npu.Stream()
        event1 = torch.npu.Event()
        event2 = torch.npu.Event()

        add_result = torch.add(in1, in2)
        B = in3 + in4
        event1.record()
        with torch.npu.stream(stream1):
            event1.wait(stream1)
            mm_result = torch.mm(B, in4)
            event2.record()
            B.record_stream(stream1)
        mm1 = torch.mm(in3, in4)
        with torch.npu.stream(stream2):
            event2.wait(stream2)
            add2 = torch.add(in3, in4)
        return add_result, mm_result, mm1, add2


@pytest.mark.multistream(streams=3, race_free=True)
def test_doc_streams_made_inside_forward_are_graph_streams(npufuse):
    gen = torch.Generator().manual_seed(5)
    inputs = [torch.randn(N, N, generator=gen, dtype=torch.float16).npu() for _ in range(4)]
    npufuse.check(DocMultiStream(), *inputs, mode="npugraph_ex")
    compiled = torch.compile(DocMultiStream().npu(), backend="npugraph_ex", fullgraph=False, dynamic=False)
    for got, expected in zip(compiled(*inputs), DocMultiStream()(*inputs)):  # the Cube's fp32 sums vs torch's CPU fp16
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=5e-2)
