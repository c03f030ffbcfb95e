"""A cat on a side stream of tensors made on two other streams, streams passed in, dynamic shapes.

Reconstruction of the call pattern (not a copy) of Ascend/torchair, npugraph_ex/tests/smoke/aclgraph_test.py
@ fced8842d149f16b587c2c867d427e4b766831ca, ``test_cat_optimization_cross_stream_multiple_streams_success``
(its user function): two ``torch.npu.Stream()`` made outside and passed to the compiled function,
``x.exp()`` on the current stream, on ``stream1`` and on ``stream2``, then ``torch.cat`` of the three on
``stream2``; ``torch.compile(f, backend="npugraph_ex", dynamic=True)``. The smoke test asserts on
npugraph_ex's cat pass and on the values.

Findings: (1) with ``dynamic=True`` Dynamo made the passed-in streams' priority a symbolic int, so the
stream block broke the graph; streams now stay constant labels. (2) The function has no event: the cat
on ``stream2`` reads what the current stream and ``stream1`` wrote without waiting for them, two races
the sanitizer names (npugraph_ex's own events only order each side stream after the graph's start).
Recording an event after each producer and waiting for it on ``stream2`` fixes it.
"""

import pytest
import torch
import torch_npu


def as_written(x, stream1, stream2):
    output1 = x.exp()
    with torch.npu.stream(stream1):
        output2 = x.exp()
    with torch.npu.stream(stream2):
        output3 = x.exp()
        result = torch.cat([output1, output2, output3], dim=0)
    return result


def with_events(x, stream1, stream2):
    output1 = x.exp()
    first = torch.npu.Event()
    first.record()
    with torch.npu.stream(stream1):
        output2 = x.exp()
        second = torch.npu.Event()
        second.record(stream1)
    with torch.npu.stream(stream2):
        first.wait(stream2)
        second.wait(stream2)
        output3 = x.exp()
        result = torch.cat([output1, output2, output3], dim=0)
    return result


@pytest.mark.parametrize("fn", [as_written, with_events])
def test_cat_across_three_streams(fn):
    stream1, stream2 = torch.npu.Stream(), torch.npu.Stream()
    x = torch.randn(8, dtype=torch.float32).npu()
    result = torch.compile(fn, backend="npugraph_ex", dynamic=True)(x, stream1, stream2)
    expected = torch.cat([x.exp(), x.exp(), x.exp()], dim=0)
    if fn is as_written:
        assert torch.isnan(result[:16]).all() and torch.allclose(result[16:], x.exp())
    else:
        assert torch.allclose(result, expected, atol=1e-5)
