"""The BERT case of Ascend's affinity-operator guide: a BERT pre-training step (the guide ran it on an
Atlas A2 part; the case runs on whichever target the session models, the default one included), whose
profile showed IndexPutV2 (the boolean-mask writes of ``masked_softmax`` and the backward of the
masked-LM gather) taking most of the step, and the guide's rewrites priced on the whole step (forward,
backward and optimizer).

The model is d2l's BERT (``bert_layers.py``) at d2l's pre-training size with a smaller batch; the step
is checked like an inference graph: outputs, loss, every gradient and every AdamW-updated parameter bit
for bit between BASELINE and VARIANT.
"""

from pathlib import Path

import bert_layers
import pytest
import torch
from bert_layers import D2L, batch, bert, bert_loss


def line_of(text: str) -> str:
    """``bert_layers.py:<line>`` of the first source line containing ``text``."""
    lines = Path(bert_layers.__file__).read_text().splitlines()
    return f"bert_layers.py:{next(number for number, line in enumerate(lines, start=1) if text in line)}"


@pytest.fixture(scope="module")
def step():
    model, data = bert(D2L), batch(D2L)
    return model, data, torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)


@pytest.mark.npu_affinity(max_findings=12)
def test_bert_step_is_bit_exact_and_index_put_dominates(npufuse, step):
    model, data, optimizer = step
    report = npufuse.check(model, *data.inputs, loss=bert_loss(data), optimizer=optimizer)
    assert report.bit_exact and report.phases == ("forward", "backward", "optimizer")
    assert any(name.startswith("grad[blks.0.attention.W_q") for name in report.outputs)
    table = report.attribution["variant"]
    top = table.op_types[0]
    assert top.op_type == "IndexPutV2"
    assert top.ratio_pct > 40 and top.backward_pct > 40  # the guide: 75% of the step, most of it backward

    at = {(finding.pattern, finding.source.rsplit("/", 1)[-1]): finding for finding in report.findings}
    masked = at["index_put (IndexPutV2)", line_of("x[~mask] = value")]
    assert masked.occurrences == 2 * D2L.layers  # each layer's forward write and its backward
    assert masked.gain_us > 0.3 * report.variant.time_us and masked.exactness == "bit-exact (values and gradient)"
    gathered = at["index_put (IndexPutV2)", line_of("masked_x = x[batch_idx")]
    assert gathered.kernels[0].startswith("backward/") and gathered.gain_us > 0
    assert not gathered.exactness.startswith("not checked")  # two index tensors: rows of the flattened [b*s, h]
    by_pattern = {finding.pattern: finding for finding in report.findings}
    assert by_pattern["one_hot+sum"].gain_us > 0
    assert by_pattern["repeat_interleave(scalar)"].gain_us > 0

    # the attention's finding carries the backward it causes: the backward BatchMatMuls of its two bmms
    attention = by_pattern["FlashAttentionScore (unfused)"]
    assert any(group.kernel_type.startswith("BatchMatMul") for group in attention.backward), attention.backward
    assert attention.backward_us > 0 and "its backward:" in attention.describe()
    # AdamW's optimizer kernels are a measurable share of the step: the fused optimizer is suggested, priced
    # on the step and checked (torch_npu rounds the first moment differently: within the documented tolerance)
    fused = by_pattern["fused optimizer"]
    assert fused.gain_us > 0.05 * report.variant.time_us
    assert "NpuFusedAdamW" in fused.rewrite and "within the documented tolerance" in fused.exactness, fused.exactness
