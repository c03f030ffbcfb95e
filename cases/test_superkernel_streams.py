"""Streams inside a SuperKernel (TorchAir's stream-fusion option).

With stream-fusion=0 (the default) a SuperKernel takes ops of at most two streams, runs them in issue
order, and they must be linked by an event; with stream-fusion=1 its ops may sit on one or more streams
(docs/feature-docs.md#superkernel-scopes), one lane per stream, so a Cube sub-kernel and a Vector sub-kernel
overlap. The same page advises against stream-fusion=1 in a MicroBatch layout (streams bound to their own cores): a
warning.
"""

import contextlib
import warnings

import pytest
import torch

from pytest_npufuse import torch_npu, torchair

N = 1024


class TwoStreams(torch.nn.Module):
    """A projection on the main stream and a normalisation on stream '2', in one scope."""

    def __init__(self, options: str, linked: bool = True, third_stream: bool = False, cores: int | None = None) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(9)
        self.w = torch.nn.Parameter(torch.randn(N, N, generator=gen) / 32)
        self.gamma = torch.nn.Parameter(torch.ones(N))
        self.options, self.linked, self.third_stream, self.cores = options, linked, third_stream, cores

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torchair.scope.super_kernel("sk", self.options):
            projected = x @ self.w
            with torchair.scope.npu_stream_switch("2"), self._bound():
                if self.linked:
                    torchair.scope.npu_wait_tensor(y, projected)
                normed, _ = torch_npu.npu_rms_norm(y, self.gamma)
            outputs = (projected, normed)
            if self.third_stream:
                with torchair.scope.npu_stream_switch("3"), self._bound():
                    outputs += (torch_npu.npu_swiglu(y),)
        return outputs

    def _bound(self):
        """Each side stream bound to its own cores (a MicroBatch layout) when ``cores`` is set."""
        return torchair.scope.limit_core_num(self.cores, 2 * self.cores) if self.cores else contextlib.nullcontext()


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


@pytest.mark.superkernel(scope="sk", segments=1)
@pytest.mark.multistream(streams=3)
def test_stream_fusion_1_takes_one_or_more_streams(npufuse):
    report = npufuse.check(TwoStreams("stream-fusion=1", linked=False, third_stream=True), *data())
    sub = {k.op_type: k for k in report.variant.kernels if k.parent}
    assert set(sub) == {"aten::mm", "npu::npu_rms_norm", "npu::npu_swiglu"}  # all three streams in the one SuperKernel
    assert sub["npu::npu_swiglu"].start_us < sub["aten::mm"].end_us


@pytest.mark.npu_target("a3")  # the stream-fusion checks belong to SuperKernel, which a2 lacks
def test_stream_fusion_0_takes_at_most_two_streams(npufuse):
    with pytest.raises(pytest.fail.Exception, match="has ops on 3 streams .* with stream-fusion=0 a SuperKernel takes at most 2"):
        npufuse.check(TwoStreams("stream-fusion=0", third_stream=True), *data())


@pytest.mark.npu_target("a3")  # the stream-fusion checks belong to SuperKernel, which a2 lacks
def test_stream_fusion_1_over_core_bound_streams_warns(npufuse):
    with pytest.warns(UserWarning, match="streams 2, 3 are bound to their own cores with limit_core_num .* advises against"):
        npufuse.check(TwoStreams("stream-fusion=1", linked=False, third_stream=True, cores=8), *data())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        npufuse.check(TwoStreams("stream-fusion=1", linked=False, third_stream=True), *data())
