"""torch.npu.set_stream inside a compiled function: switching to side streams and back (TorchAir smoke test).

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, tests/smoke/aclgraph_test.py @ fced8842d149f16b587c2c867d427e4b766831ca,
``test_stream_event_replace_with_set_stream`` and ``test_event_record_with_stream`` (their user
functions): ``default_stream = torch.npu.current_stream()``, three ``torch.npu.Stream()``, adds issued
after ``torch.npu.set_stream(s1)``, ``set_stream(s2)``, ``set_stream(s3)``, back to ``current_s1`` (read
with ``current_stream()`` while on s1) and finally ``set_stream(default_stream)``; and an event recorded
on a named stream, ``e1.record(s1)``, after switching back. The original compiles with a custom backend
that runs TorchAir's private stream pass and asserts on its nodes; here it compiles with
``backend="npugraph_ex"``, whose stream pass that is.

Finding: as written, the chain of adds crosses four streams with no event between them; npugraph_ex
keeps each switch's ops in order only on one stream, so the model's sanitizer reports the cross-stream
reads (the smoke test only checks the graph's nodes, never the values).
"""

import pytest
import torch
import torch_npu


def set_stream_chain(t):
    default_stream = torch.npu.current_stream()
    s1 = torch.npu.Stream()
    s2 = torch.npu.Stream()
    s3 = torch.npu.Stream()
    tmp = torch.add(t, 0)
    torch.npu.set_stream(s1)
    tmp = torch.add(tmp, 1)
    current_s1 = torch.npu.current_stream()
    torch.npu.set_stream(s2)
    tmp = torch.add(tmp, 2)
    torch.npu.set_stream(s3)
    tmp = torch.add(tmp, 3)
    torch.npu.set_stream(current_s1)
    r = torch.add(tmp, 4)
    torch.npu.set_stream(default_stream)
    return r


def record_on_named_stream(t):
    default_stream = torch.npu.current_stream()
    s1 = torch.npu.Stream()
    e1 = torch.npu.Event()
    torch.npu.set_stream(s1)
    tmp = torch.add(t, 1)
    torch.npu.set_stream(default_stream)
    e1.record(s1)
    e1.wait()
    return torch.add(tmp, 2)


class Wrapped(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, t):
        return self.fn(t)


@pytest.mark.multistream(streams=4, race_free=False)
def test_set_stream_chain_runs_on_four_streams_and_races(npufuse):
    i = torch.randn([3, 3]).to("npu")
    compiled = torch.compile(set_stream_chain, backend="npugraph_ex", fullgraph=True, dynamic=False)
    assert compiled(i).shape == (3, 3) and torch.npu.current_stream() == torch.npu.default_stream()
    report = npufuse.check(Wrapped(set_stream_chain), i, mode="npugraph_ex")
    assert not report.bit_exact


@pytest.mark.multistream(streams=2, race_free=True)
def test_event_recorded_on_a_named_stream_orders_the_default_stream(npufuse):
    i = torch.randn([3, 3]).to("npu")
    npufuse.check(Wrapped(record_on_named_stream), i, mode="npugraph_ex")
    compiled = torch.compile(record_on_named_stream, backend="npugraph_ex", fullgraph=True, dynamic=False)
    assert torch.equal(compiled(i), i + 1 + 2)
