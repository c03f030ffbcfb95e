"""Native torch.npu streams and events (eager / npugraph_ex style): wait_stream, record_stream, events.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, docs/cann/en/multi_stream_principles.md @ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9
(section 3.1 "eager", the form npugraph_ex captures): a side stream from ``torch.npu.Stream()``, the main
one from ``torch.npu.current_stream()``; ``side_stream.wait_stream(main_stream)``, branch B inside
``with torch.npu.stream(side_stream)``, ``out_B2.record_stream(main_stream)``,
``event_B = side_stream.record_event()``, branch C on the main stream, ``main_stream.wait_event(event_B)``
and op D. The document's ops are placeholders; here a projection, SwiGLU and RMSNorm.

Finding: as written, out_A (made on the main stream) is read on the side stream with no
``record_stream(side_stream)``; once the main stream is done with it, its memory is reused by branch C
while the side stream may still be reading it. The sanitizer reports that lifetime hazard; the second
test adds the one missing ``out_A.record_stream(side_stream)`` (marked as our addition) and is race-free.
"""

import pytest
import torch
import torch_npu

HIDDEN, TOKENS = 512, 256


class NativeStreamBranches(torch.nn.Module):
    def __init__(self, keep_out_a_alive: bool = False) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(131)
        self.keep_out_a_alive = keep_out_a_alive
        self.w_a = torch.nn.Parameter((torch.randn(HIDDEN, HIDDEN, generator=gen) / 23).half())
        self.w_b = torch.nn.Parameter((torch.randn(HIDDEN, 2 * HIDDEN, generator=gen) / 23).half())
        self.w_c = torch.nn.Parameter((torch.randn(HIDDEN, HIDDEN, generator=gen) / 23).half())
        self.gamma = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.float16))
        self.side_stream = torch.npu.Stream()

    def forward(self, x):
        main_stream = torch.npu.current_stream()
        out_a = x @ self.w_a
        self.side_stream.wait_stream(main_stream)
        with torch.npu.stream(self.side_stream):
            out_b1 = out_a @ self.w_b
            out_b2 = torch_npu.npu_swiglu(out_b1)
        out_b2.record_stream(main_stream)
        if self.keep_out_a_alive:  # our addition, not in the document
            out_a.record_stream(self.side_stream)
        event_b = self.side_stream.record_event()
        out_c1 = out_a @ self.w_c
        out_c2 = torch_npu.npu_rms_norm(out_c1, self.gamma)[0]
        main_stream.wait_event(event_b)
        return out_b2 + out_c2


def hidden():
    return torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(18)).half().npu()


@pytest.mark.multistream(streams=2, race_free=False)
def test_documented_pattern_has_a_lifetime_hazard_on_out_a(npufuse):
    report = npufuse.check(NativeStreamBranches(), hidden(), mode="npugraph_ex")
    assert not report.bit_exact


@pytest.mark.multistream(streams=2, race_free=True)
def test_recording_out_a_on_the_side_stream_makes_it_race_free(npufuse):
    npufuse.check(NativeStreamBranches(keep_out_a_alive=True), hidden(), mode="npugraph_ex")
