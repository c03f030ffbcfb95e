"""A LLaMA-style decoder fine-tuning step with torch_npu's fused training ops (``decoder_training.py``):
the backward holds their Grad kernels, the step is bit-exact between BASELINE and VARIANT, the frozen
embedding gets no gradient, and the step's device memory is modeled (activations kept for the backward)."""

import pytest
import torch
from decoder_training import Decoder, causal_lm_loss, fine_tune_batch


def fine_tune(model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=1e-5, foreach=True)


def test_fine_tuning_step_runs_the_fused_grad_kernels(npufuse):
    model = Decoder()
    ids, cos, sin, mask, labels = fine_tune_batch()
    report = npufuse.check(model, ids, cos, sin, mask, loss=causal_lm_loss(labels), optimizer=fine_tune(model))
    assert report.bit_exact and report.phases == ("forward", "backward", "optimizer")
    table = report.attribution["variant"]
    for grad in ("RmsNormGrad", "RotaryMulGrad", "FlashAttentionScoreGrad"):
        row = table.op_type(grad)
        assert row is not None and row.backward_pct == pytest.approx(100.0), grad
    assert "grad[embed_tokens.weight]" in report.outputs and "param[layers.0.mlp.up_proj.weight]" in report.outputs
    memory = report.memory
    assert memory is not None and memory.activations > 0 and memory.peak > memory.parameters + memory.optimizer_state
