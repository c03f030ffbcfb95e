"""The affinity advisor on a training step: the forms of docs/feature-docs.md#affinity-ops found in the forward and the
backward and priced on the whole step."""

import inspect

import torch

from pytest_npufuse import compare


class MaskedScores(torch.nn.Module):
    """``x[~mask] = value`` (IndexPutV2 in the forward and again in the backward), advanced indexing
    (an accumulating IndexPutV2 in the backward) and an element gather (GatherElements, whose backward is
    a scatter-add)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x, mask, rows, target):
        scores = self.proj(x)
        scores[~mask] = -1e6
        picked = scores.softmax(-1)[rows]
        return picked.gather(1, target).sum()


def line_of(text: str) -> str:
    """``test_step_affinity.py:<line>`` of the model's line containing ``text``."""
    lines, first = inspect.getsourcelines(MaskedScores)
    return f"test_step_affinity.py:{first + next(i for i, line in enumerate(lines) if text in line)}"


def inputs():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2048, 64, generator=gen)
    mask = torch.rand(2048, 64, generator=gen) > 0.3
    rows = torch.randint(0, 2048, (1536,), generator=gen)
    target = torch.randint(0, 64, (1536, 1), generator=gen)
    return x, mask, rows, target


def test_index_put_sites_join_their_backward_and_are_priced_on_the_step():
    report = compare(MaskedScores(), *inputs(), loss=lambda out: out, affinity=True)
    assert report.bit_exact
    by_pattern = {}
    for finding in report.findings:
        by_pattern.setdefault(finding.pattern, []).append(finding)
    masked = next(f for f in by_pattern["index_put (IndexPutV2)"] if f.source.endswith(line_of("scores[~mask]")))
    assert masked.occurrences == 2  # the forward's write and the backward's
    assert masked.gain_us > 0 and masked.exactness == "bit-exact (values and gradient)"
    indexing = next(f for f in by_pattern["index_put (IndexPutV2)"] if f.source.endswith(line_of("[rows]")))
    assert indexing.occurrences == 1 and indexing.kernels[0].startswith("backward/") and indexing.gain_us > 0
    (gather,) = by_pattern["gather (GatherElements)"]
    assert gather.gain_us > 0 and "gradient" in gather.exactness


def test_a_forward_only_finding_is_the_inference_advisor_s():
    class Forward(torch.nn.Module):
        def forward(self, x, mask):
            x = x.clone()
            x[~mask] = 0.0
            return x

    x, mask, _, _ = inputs()
    inference = compare(Forward(), x, mask, affinity=True)
    (finding,) = [f for f in inference.findings if f.pattern == "index_put (IndexPutV2)"]
    assert finding.occurrences == 1 and finding.gain_us > 0


class PickedSum(torch.nn.Module):
    """The Nonzero form of docs/feature-docs.md#affinity-ops (the sum of the rows a mask picks, through ``nonzero``) and
    its ``where`` form (a select between the two values it compares), on parameters a step trains."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rows = torch.nn.Parameter(torch.randn(2048, 64))
        self.floor = torch.nn.Parameter(torch.randn(256, 512))

    def forward(self, picks, x):
        total = self.rows[torch.nonzero(picks > 0, as_tuple=False).squeeze(1)].sum()
        return total + torch.where(self.floor > x, self.floor, x).sum()


def test_nonzero_and_where_sites_are_priced_on_the_step_with_their_gradients():
    gen = torch.Generator().manual_seed(2)
    picks, x = torch.randn(2048, generator=gen), torch.randn(256, 512, generator=gen)
    report = compare(PickedSum(), picks, x, loss=lambda out: out, affinity=True)
    assert report.bit_exact
    found = {f.pattern: f for f in report.findings}
    nonzero = found["Nonzero + index + sum"]
    with torch.no_grad():  # the forward alone, under the user's no_grad (the check still differentiates)
        (forward,) = [f for f in compare(PickedSum(), picks, x, affinity=True).findings if f.pattern == nonzero.pattern]
    assert forward.exactness == nonzero.exactness
    # on the step the line's backward (an accumulating IndexPutV2 of the picked rows) becomes one Mul by the mask
    assert nonzero.gain_us - forward.gain_us > found["index_put (IndexPutV2)"].gain_us > 0
    # 2048 x 64 values summed in another order (the masked-out rows as zeros); the gradient is exact
    assert nonzero.exactness.startswith("not bit-exact: max |diff|"), nonzero.exactness
    assert nonzero.exactness.endswith("(gradient bit-exact)")
    where = found["where(x < y, y, x)"]
    # x > y picking x: the rewrite is lerp(y, x, (x > y)), exact in the values and both gradients
    assert where.exactness == "bit-exact (values and gradients)" and where.kernels == ("SelectV2",)
    assert "backward" in where.note
    assert not any(k.op_type == "aten::_assert_scalar" for k in report.variant.kernels)
