"""Streams inside a SuperKernel (TorchAir's stream-fusion option).

With stream-fusion=0 the SuperKernel runs its sub-kernels in issue order, and ops of two streams in one
scope must be linked by an event; with stream-fusion=1 it runs them on one lane per stream, so a Cube
sub-kernel and a Vector sub-kernel overlap (research: at most two real streams in one SuperKernel).
"""

import pytest
import torch

from pytest_npufuse import torch_npu, torchair

N = 1024


class TwoStreams(torch.nn.Module):
    """A projection on the main stream and a normalisation on stream '2', in one scope."""

    def __init__(self, options: str, linked: bool = True, third_stream: bool = False) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(9)
        self.w = torch.nn.Parameter(torch.randn(N, N, generator=gen) / 32)
        self.gamma = torch.nn.Parameter(torch.ones(N))
        self.options, self.linked, self.third_stream = options, linked, third_stream

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torchair.scope.super_kernel("sk", self.options):
            projected = x @ self.w
            with torchair.scope.npu_stream_switch("2"):
                if self.linked:
                    torchair.scope.npu_wait_tensor(y, projected)
                normed, _ = torch_npu.npu_rms_norm(y, self.gamma)
            outputs = (projected, normed)
            if self.third_stream:
                with torchair.scope.npu_stream_switch("3"):
                    outputs += (torch_npu.npu_swiglu(y),)
        return outputs


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(4096, N, generator=gen), torch.randn(4096, N, generator=gen)


@pytest.mark.superkernel(scope="sk", segments=1)
@pytest.mark.multistream(streams=2)
def test_stream_fusion_0_serialises_linked_streams(npufuse):
    report = npufuse.check(TwoStreams("stream-fusion=0"), *data())
    sub = {k.op_type: k for k in report.variant.kernels if k.parent}
    assert sub["npu::npu_rms_norm"].start_us >= sub["aten::mm"].end_us


@pytest.mark.npu_target("a3")  # the stream-fusion checks belong to SuperKernel, which a2 lacks
def test_stream_fusion_0_rejects_unlinked_streams(npufuse):
    with pytest.raises(pytest.fail.Exception, match="with no event between them; with stream-fusion=0 add an event"):
        npufuse.check(TwoStreams("stream-fusion=0", linked=False), *data())


@pytest.mark.superkernel(scope="sk", segments=1)
@pytest.mark.multistream(streams=2)
def test_stream_fusion_1_overlaps_cube_and_vector(npufuse):
    serial = npufuse.check(TwoStreams("stream-fusion=0"), *data())
    fused = npufuse.check(TwoStreams("stream-fusion=1", linked=False), *data())
    sub = {k.op_type: k for k in fused.variant.kernels if k.parent}
    assert sub["npu::npu_rms_norm"].start_us < sub["aten::mm"].end_us
    assert fused.variant.time_us < serial.variant.time_us


@pytest.mark.npu_target("a3")  # the stream-fusion checks belong to SuperKernel, which a2 lacks
def test_more_streams_than_a_superkernel_runs_is_an_error(npufuse):
    with pytest.raises(pytest.fail.Exception, match="has ops on 3 streams .* a SuperKernel runs at most 2"):
        npufuse.check(TwoStreams("stream-fusion=1", third_stream=True), *data())
