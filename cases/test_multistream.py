"""TorchAir's in-graph multi-stream example, and the stream sanitizer on each of its syncs.

The example of docs/feature-docs.md#multi-stream runs as written in reduce-overhead mode. Its syncs order ops that share
no data, so removing one changes timing, not results; the ``Dependent`` variant makes each side-stream op read
the result of the previous stream, so that every sync carries data and each removal is a real bug the
sanitizer must catch: a read-after-write race (the corrupted outputs follow, as on hardware) or, when a
record is removed, a wait that can never be satisfied (a modeled deadlock, not a hang).
"""

import pytest
import torch

from decoder_layers import Decoder, decode_inputs
from pytest_npufuse import torch_npu, torchair as tng
from pytest_npufuse.gate.expectations import parse_multistream

SIDE = 1000


class Seed001(torch.nn.Module):
    """The example's model (docs/feature-docs.md#multi-stream), unchanged but for the device: tensors live on the CPU
    here."""

    def __init__(self):
        super().__init__()
        self.tagged_event1 = tng.ops.npu_create_tagged_event(tag="66")
        self.tagged_event2 = tng.ops.npu_create_tagged_event(tag="77")

    def forward(self, in1, in2, in3, in4):
        add_result = torch.add(in1, in2)
        tng.ops.npu_tagged_event_record(self.tagged_event1)
        with tng.scope.npu_stream_switch("1"):
            tng.ops.npu_tagged_event_wait(self.tagged_event1)
            mm_result = torch.mm(in3, in4)
            tng.ops.npu_tagged_event_record(self.tagged_event2)
            B = in3 + in4
            tng.ops.npu_record_tagged_stream(B, "1")
            mm1 = torch.mm(in3, in4)
            del B
        C = torch.ones(SIDE, SIDE, dtype=torch.float16)
        C.add_(2)
        with tng.scope.npu_stream_switch("2"):
            tng.ops.npu_tagged_event_wait(self.tagged_event2)
            add2 = torch.add(in3, in4)
        return add_result, mm_result, mm1, add2, C


class Dependent(torch.nn.Module):
    """The example of docs/feature-docs.md#multi-stream with data flowing along its syncs; ``drop`` removes syncs to
    show each one matters."""

    def __init__(self, drop=()):
        super().__init__()
        self.drop = drop
        self.event1 = tng.ops.npu_create_tagged_event(tag="66")
        self.event2 = tng.ops.npu_create_tagged_event(tag="77")

    def forward(self, in1, in2, in3, in4):
        add_result = torch.add(in1, in2)
        if "record 66" not in self.drop:
            tng.ops.npu_tagged_event_record(self.event1)
        with tng.scope.npu_stream_switch("1"):
            if "wait 66" not in self.drop:
                tng.ops.npu_tagged_event_wait(self.event1)
            mm_result = torch.mm(add_result, in4)
            if "record 77" not in self.drop:
                tng.ops.npu_tagged_event_record(self.event2)
            mm1 = torch.mm(in3, in4)
        with tng.scope.npu_stream_switch("2"):
            if "wait 77" not in self.drop:
                tng.ops.npu_tagged_event_wait(self.event2)
            add2 = torch.add(mm_result, in4)
        return add_result, mm_result, mm1, add2


def seed_inputs():
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(SIDE, SIDE, generator=gen).to(torch.float16) for _ in range(4)]


@pytest.mark.multistream(streams=3, race_free=True, min_speedup=1.15)
def test_multistream_example_as_written(npufuse):
    report = npufuse.check(Seed001(), *seed_inputs(), mode="reduce-overhead")
    assert report.streams == ("default", "1", "2") and report.bit_exact


@pytest.mark.multistream(streams=3, race_free=True)
def test_multistream_example_with_data_along_its_syncs(npufuse):
    npufuse.check(Dependent(), *seed_inputs(), mode="reduce-overhead")


@pytest.mark.parametrize("drop", ["wait 66", "record 66", "wait 77", "record 77"])
@pytest.mark.multistream(race_free=False)
def test_each_removed_sync_is_caught(npufuse, drop):
    report = npufuse.check(Dependent(drop=(drop,)), *seed_inputs(), mode="reduce-overhead")
    if drop.startswith("wait"):
        (race,) = report.races
        assert race.kind == "read-after-write race" and not report.bit_exact
    else:
        assert "which is never recorded" in report.deadlock and report.variant.failure is not None


class MlaSideStream(torch.nn.Module):
    """MLA's KV path (a projection, then RMSNorm and RoPE-like vector ops) on stream '11' beside the Q
    projection, joined with npu_wait_tensor, as vllm-ascend's multistream MLA does."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.wq_a = torch.nn.Parameter(torch.randn(1024, 1536, generator=gen) / 32)
        self.wq_b = torch.nn.Parameter(torch.randn(1536, 3072, generator=gen) / 40)
        self.wkv_a = torch.nn.Parameter(torch.randn(1024, 576, generator=gen) / 32)
        self.q_gamma = torch.nn.Parameter(torch.ones(1536))
        self.kv_gamma = torch.nn.Parameter(torch.ones(512))
        self.cos = torch.nn.Parameter(torch.rand(64, generator=gen))
        self.sin = torch.nn.Parameter(torch.rand(64, generator=gen))

    def forward(self, x):
        kv = x @ self.wkv_a
        with tng.scope.npu_stream_switch("11"):
            tng.scope.npu_wait_tensor(kv, kv)
            latent, _ = torch_npu.npu_rms_norm(kv[:, :512], self.kv_gamma)
            rope = kv[:, 512:] * self.cos + kv[:, 512:].flip(-1) * self.sin
        q, _ = torch_npu.npu_rms_norm(x @ self.wq_a, self.q_gamma)
        q = q @ self.wq_b
        tng.scope.npu_wait_tensor(q, latent)
        return q, latent, rope


@pytest.mark.multistream(streams=2, min_speedup=1.02)
def test_mla_vector_ops_on_a_side_stream(npufuse):
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(8))
    report = npufuse.check(MlaSideStream(), x)
    side = [k for k in report.variant.kernels if k.stream == "11"]
    assert {k.engine for k in side} == {"vector"}


@pytest.mark.multistream(streams=2, min_speedup=1.05)
def test_moe_shared_expert_on_a_side_stream(npufuse):
    report = npufuse.check(Decoder(layers=1, shared_stream="22"), *decode_inputs())
    shared = [k for k in report.variant.kernels if k.stream == "22"]
    assert [k.op_type for k in shared] == ["aten::mm", "npu::npu_swiglu", "aten::mm"]


class TwoBigMatmuls(torch.nn.Module):
    """Two projections that each want every Cube core, the second on a side stream."""

    def forward(self, a, b, c):
        first = a @ b
        with tng.scope.npu_stream_switch("1"):
            second = a @ c
        return first, second


@pytest.mark.multistream(streams=2)
def test_saturated_cube_gains_nothing(npufuse):
    """The warning of docs/feature-docs.md#multi-stream: when Cube is saturated, a second stream gains nothing. The
    kernels serialise on the Cube cores; all that is left is a hidden dispatch minus the join event, under 0.1%, where a
    Cube-light side stream gains 10% or more (the MLA and MoE cases)."""
    gen = torch.Generator().manual_seed(6)
    a, b, c = (torch.randn(4096, 4096, generator=gen) for _ in range(3))
    report = npufuse.check(TwoBigMatmuls(), a, b, c)
    first, second = (k for k in report.variant.kernels)
    assert first.block_dim == second.block_dim == npufuse.target.aic
    assert first.end_us <= second.start_us or second.end_us <= first.start_us
    assert report.speedup < 1.001
    # and the report says so: both streams want every Cube core, all their possible overlap is lost
    contention = report.contention
    assert contention is not None and contention.unit == "Cube" and contention.lost_pct > 90
    assert "contention: streams" in report.summary()
    # a stream expectation this split cannot meet says why
    failures = parse_multistream((), {"streams": 2, "min_speedup": 1.05}).failures(report)
    assert any("It cannot be met" in str(failure) and "Cube" in str(failure) for failure in failures), failures


class KeepAlive(torch.nn.Module):
    """A tensor made on the main stream, read on stream '1', then dropped: without
    npu_record_tagged_stream its memory can be reused by the next allocation on the main stream."""

    def __init__(self, record_stream: bool) -> None:
        super().__init__()
        self.record_stream = record_stream
        self.ready = tng.ops.npu_create_tagged_event(tag="ready")

    def forward(self, a, b):
        scaled = a * 2
        tng.ops.npu_tagged_event_record(self.ready)
        with tng.scope.npu_stream_switch("1"):
            tng.ops.npu_tagged_event_wait(self.ready)
            out = scaled @ b
            if self.record_stream:
                tng.ops.npu_record_tagged_stream(scaled, "1")
        shifted = b - 1
        return out, shifted


def small_pair():
    gen = torch.Generator().manual_seed(2)
    return torch.randn(512, 512, generator=gen), torch.randn(512, 512, generator=gen)


@pytest.mark.multistream(race_free=False)
def test_missing_record_stream_is_a_lifetime_hazard(npufuse):
    report = npufuse.check(KeepAlive(record_stream=False), *small_pair(), mode="reduce-overhead")
    (race,) = report.races
    assert race.kind == "lifetime hazard" and "npu_record_tagged_stream(scaled, '1')" in race.fix


@pytest.mark.multistream(streams=2, race_free=True)
def test_record_stream_keeps_the_memory_alive(npufuse):
    npufuse.check(KeepAlive(record_stream=True), *small_pair(), mode="reduce-overhead")
