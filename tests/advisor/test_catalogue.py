"""The affinity-API catalogue as data (advisor/affinity.toml): every documented replacement with its
pattern, conditions, tolerance and source; matched on a training step's forward, backward and optimizer
graphs, with the backward kernels a forward line causes and the fused optimizer."""

import inspect

import pytest
import torch

from pytest_npufuse import compare
from pytest_npufuse.advisor import PATTERNS
from pytest_npufuse.advisor.affinity import FORMS
from pytest_npufuse.advisor.catalogue import load_affinity_catalogue
from pytest_npufuse.vocabulary import Phase


def test_every_entry_names_its_pattern_replacement_conditions_and_source():
    catalogue = load_affinity_catalogue()
    assert len(catalogue.entries) == len(PATTERNS)
    for entry in catalogue.entries:
        assert entry.form in FORMS and entry.pattern and entry.replacement and entry.source, entry
        assert set(entry.phases) <= {"training", "inference"} and entry.phases, entry
    apis = " ".join(entry.replacement for entry in catalogue.entries)
    for api in ("npu_rms_norm", "npu_rotary_mul", "npu_swiglu", "npu_fusion_attention", "npu_confusion_transpose",
                "NpuFusedAdamW", "npu_scaled_masked_softmax", "contrib.module.SiLU", "contrib.module.Mish"):
        assert api in apis, api
    fused = [entry for entry in catalogue.entries if entry.tolerance is not None]
    assert fused and all(entry.tolerance.thresholds["float16"] == 2**-10 for entry in fused)


def test_conditions_gate_an_entry_by_phase_and_dtype():
    entries = {entry.name: entry for entry in load_affinity_catalogue().entries}
    optimizer = entries["fused optimizer"]
    assert optimizer.applies_to(frozenset({Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER}))
    assert not optimizer.applies_to(frozenset({Phase.FORWARD}))
    assert optimizer.takes("float32") and not optimizer.takes("bfloat16")  # NpuFusedAdamW: fp32 / fp16 only


class Step(torch.nn.Module):
    """The affinity-op guide's bmm to ``[b, 1, 1]`` (whose backward runs the same slow BatchMatMul) and its ``where``
    (whose backward is SelectV2), trained with a foreach AdamW."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.v = torch.nn.Parameter(torch.randn(1, 256, 1))
        self.floor = torch.nn.Parameter(torch.randn(512, 256))
        self.layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(8))

    def forward(self, a, x):
        dot = torch.bmm(a, self.v.expand(a.shape[0], 256, 1))
        clipped = torch.where(self.floor > x, self.floor, x)
        for layer in self.layers:
            clipped = layer(clipped)
        return dot.sum() + clipped.sum()


def line_of(text: str) -> str:
    lines, first = inspect.getsourcelines(Step)
    return f"test_catalogue.py:{first + next(i for i, line in enumerate(lines) if text in line)}"


@pytest.fixture(scope="module")
def step_findings():
    gen = torch.Generator().manual_seed(3)
    a, x = torch.randn(64, 1, 256, generator=gen), torch.randn(512, 256, generator=gen)
    model = Step()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    report = compare(model, a, x, loss=lambda out: out, optimizer=optimizer, affinity=True)
    assert report.bit_exact and report.phases == ("forward", "backward", "optimizer")
    return report, {f.pattern: f for f in report.findings}


def test_a_forward_finding_includes_the_backward_kernels_it_causes(step_findings):
    _, found = step_findings
    bmm = found["bmm [b,n,1] -> [b,1,1]"]
    assert bmm.source.endswith(line_of("dot = torch.bmm"))
    assert any(group.kernel_type.startswith("BatchMatMul") for group in bmm.backward), bmm.backward
    assert bmm.backward_us > 0 and "its backward: BatchMatMul" in bmm.describe()
    where = found["where(x < y, y, x)"]
    assert any(group.kernel_type.startswith("Select") for group in where.backward), where.backward


def test_the_fused_optimizer_is_suggested_priced_and_checked(step_findings):
    report, found = step_findings
    fused = found["fused optimizer"]
    assert fused.gain_us > 0
    assert "NpuFusedAdamW" in fused.rewrite
    assert "within the documented tolerance" in fused.exactness or fused.exactness.startswith("bit-exact"), fused.exactness
