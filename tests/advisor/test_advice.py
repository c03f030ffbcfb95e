"""The scope advisor: layouts built from the module hierarchy, capture once / plan many, the
decision tree of docs/feature-docs.md#scope-analysis, top-down shrinking, the command line and the prefill/decode gating
helper."""

import io
import sys
from pathlib import Path

import pytest
import torch

from pytest_npufuse import advise, compare, superkernel_scope
from pytest_npufuse.advisor import Family, Layout, Role, advice
from pytest_npufuse.advisor.advice import capture_program
from pytest_npufuse.advisor.structure import structure_of
from pytest_npufuse.cli.main import main

CASES = Path(__file__).parents[2] / "cases"
sys.path.insert(0, str(CASES))
from decoder_layers import Decoder, DecoderLayer, decode_inputs  # noqa: E402
import llama_layers  # noqa: E402
from llama_layers import LlamaModel, llama_inputs  # noqa: E402


@pytest.fixture(scope="module")
def deepseek():
    return advise(Decoder(layers=2), *decode_inputs())


@pytest.fixture(scope="module")
def llama():
    return advise(LlamaModel(layers=2), *llama_inputs())


def test_structure_finds_layers_and_their_blocks(deepseek, llama):
    assert deepseek.structure.family is Family.MOE and len(deepseek.structure.layers) == 2
    assert [b.role for b in deepseek.structure.layers[0].blocks] == [Role.ATTENTION, Role.MOE]
    assert deepseek.structure.layers[1].frame.path == "layers.1"
    assert llama.structure.family is Family.STANDARD
    assert {b.frame.path for b in llama.structure.layers[0].blocks} == {"layers.0.self_attn", "layers.0.mlp"}


def test_deepseek_recommendation_follows_the_moe_branch(deepseek):
    rec = deepseek.recommendation
    assert rec.layout is Layout.DECODER_LAYER
    assert "MoE is the bottleneck" in rec.reason and "pursuing the best performance" in rec.reason
    moe = deepseek.candidate(Layout.MOE)
    assert moe.valid and moe.gain_pct(deepseek.reference_us) > 0
    assert rec.gain_pct == pytest.approx(deepseek.candidate(Layout.DECODER_LAYER).gain_pct(deepseek.reference_us))
    assert any(line.strip() == 'with torchair.scope.super_kernel("decoder_layer", ""):' for line in deepseek.paste)


def test_llama_recommendation_follows_the_standard_branch(llama):
    rec = llama.recommendation
    assert rec.steps[1] == "first attempt -> attention only"
    assert rec.layout in (Layout.DECODER_LAYER, Layout.ATTENTION)
    assert any(line.startswith("recommend decoder_layer") for line in str(llama).splitlines())


class WideMLP(llama_layers.LlamaMLP):
    """An FFN wide enough to take more of the run than the attention."""

    def __init__(self, gen: torch.Generator) -> None:
        torch.nn.Module.__init__(self)
        self.gate_up_proj = llama_layers._param(gen, llama_layers.HIDDEN, 128 * llama_layers.INTER)
        self.down_proj = llama_layers._param(gen, 64 * llama_layers.INTER, llama_layers.HIDDEN)


def test_a_standard_model_whose_ffn_is_the_bottleneck_starts_from_the_ffn(llama):
    model = LlamaModel(layers=2)
    gen = torch.Generator().manual_seed(5)
    for layer in model.layers:
        layer.mlp = WideMLP(gen)
    wide = advise(model, *llama_inputs())
    steps = wide.recommendation.steps
    assert steps[2].startswith("profile: FFN is the bottleneck (FFN ") and steps[2].endswith("-> ffn only")
    assert steps[3].startswith("ffn validated") and steps[4].startswith("widen to the whole decoder layer")
    assert not any(step.startswith("profile:") for step in llama.recommendation.steps)  # attention dominates there


class Qwen3MoeDecoderLayer(DecoderLayer):
    """The attention + MoE layer under the class name Qwen's public MoE code gives its layer."""


def test_a_qwen_model_gets_the_guide_s_attention_only_template(deepseek):
    model = Decoder(layers=2)
    gen = torch.Generator().manual_seed(11)
    model.layers = torch.nn.ModuleList(Qwen3MoeDecoderLayer(gen) for _ in range(2))
    qwen = advise(model, *decode_inputs())
    rec = qwen.recommendation
    assert deepseek.recommendation.layout is Layout.DECODER_LAYER  # the same layers under another name
    assert rec.layout is Layout.ATTENTION and qwen.candidate(Layout.ATTENTION).pays(qwen.reference_us)
    assert "Qwen series template: attention -> attention" in rec.reason and "instead of decoder_layer" in rec.reason
    assert any(line.strip() == 'with torchair.scope.super_kernel("attention", ""):' for line in qwen.paste)


class Projection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(256, 256, dtype=torch.bfloat16)

    def forward(self, x):
        return self.fc(self.fc(x))


class Tower(torch.nn.Module):
    """No decoder layers: three modules called one after another, inside a wrapper module."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.ModuleDict({"stem": Projection(), "body": Projection(), "head": Projection()})

    def forward(self, x):
        for name in ("stem", "body", "head"):
            x = self.encoder[name](x)
        return x


def test_a_model_without_decoder_layers_gets_whole_forward_and_per_module_layouts():
    result = advise(Tower(), torch.randn(64, 256, dtype=torch.bfloat16))
    assert result.structure.family is Family.OTHER
    per_module, whole = result.candidate(Layout.PER_MODULE), result.candidate(Layout.WHOLE_FORWARD)
    assert per_module.scopes == ("encoder_stem", "encoder_body", "encoder_head") and per_module.valid
    assert whole.scopes == ("forward",) and whole.segments == 1 and whole.time_us < per_module.time_us
    assert result.recommendation.layout is Layout.WHOLE_FORWARD and "automatic analysis" in result.recommendation.reason
    assert result.top_down == "whole forward works"
    assert result.paste[-1].strip() == 'with torchair.scope.super_kernel("forward", ""):'


def test_every_layout_is_ranked_with_its_gain(deepseek):
    layouts = {c.layout for c in deepseek.candidates}
    assert {Layout.NONE, Layout.ATTENTION, Layout.MOE, Layout.MODULES, Layout.DECODER_LAYER, Layout.PER_LAYER,
            Layout.ALL_LAYERS} <= layouts
    valid = [c for c in deepseek.candidates if c.valid]
    assert [c.time_us for c in valid] == sorted(c.time_us for c in valid)
    moe = deepseek.candidate(Layout.MOE)
    assert moe.breaks[0].op_type == "aten::_to_copy" and moe.breaks[0].count == 2
    path, line = moe.breaks[0].source.rsplit(":", 1)
    assert ".long()" in Path(path).read_text().splitlines()[int(line) - 1]
    assert deepseek.to_json()["recommendation"]["layout"] == "decoder_layer"


def test_each_layout_says_what_it_compiles_and_identical_layers_share_a_build(deepseek):
    per_layer = deepseek.candidate(Layout.PER_LAYER).compile
    assert per_layer.superkernels == deepseek.candidate(Layout.PER_LAYER).segments
    assert per_layer.compiled == per_layer.superkernels // 2  # layers.1 reuses each SuperKernel of layers.0
    attention = deepseek.candidate(Layout.ATTENTION).compile
    assert 0 < attention.sub_kernels < per_layer.sub_kernels
    assert deepseek.candidate(Layout.NONE).compile.superkernels == 0
    row = next(c for c in deepseek.to_json()["candidates"] if c["layout"] == "per-layer")
    assert row["compile"]["sub_kernels"] == per_layer.sub_kernels
    assert "compiling" in deepseek.recommendation.reason


def test_compile_time_is_estimated_and_a_layout_past_the_limit_is_flagged_and_ranked_down(deepseek):
    from pytest_npufuse.plan.compilation import compile_costs

    costs = compile_costs()
    wide = deepseek.candidate(Layout.DECODER_LAYER)
    assert wide.compile.seconds == pytest.approx(
        wide.compile.compiled * costs.per_superkernel_s + wide.compile.sub_kernels * costs.per_sub_kernel_s
    )
    assert deepseek.candidate(Layout.ATTENTION).compile.seconds < wide.compile.seconds
    assert not any(c.compile_timeout for c in deepseek.candidates)  # CANN's limit by default: nothing passes it
    assert "(estimate)" in wide.compile.describe()
    # a limit between the attention scope's compile and the decoder layer's: the wide layouts time out
    limit = (deepseek.candidate(Layout.ATTENTION).compile.seconds + wide.compile.seconds) / 2
    tight = advise(Decoder(layers=2), *decode_inputs(), compile_limit_s=limit)
    flagged = tight.candidate(Layout.DECODER_LAYER)
    assert flagged.compile_timeout and not flagged.valid
    assert tight.recommendation.layout is not Layout.DECODER_LAYER
    assert any("passes the limit" in line for line in tight.lines())
    assert tight.candidates.index(flagged) > tight.candidates.index(tight.candidate(Layout.ATTENTION))
    row = next(c for c in tight.to_json()["candidates"] if c["layout"] == "decoder_layer")
    assert row["compile"]["timeout"] is True and row["compile"]["seconds_estimate"] > limit


def test_a_layout_times_the_same_as_the_model_with_that_scope_written_in(deepseek):
    """Capture once, plan many: re-annotating the captured program gives the run of the edited model."""
    written = compare(Decoder(layers=2, scope="layer"), *decode_inputs())
    candidate = deepseek.candidate(Layout.DECODER_LAYER)
    assert candidate.time_us == pytest.approx(written.variant.time_us)
    assert candidate.segments == written.segments
    assert deepseek.reference_us == pytest.approx(written.baseline.time_us)


def test_strict_scope_check_shrinks_top_down_and_keeps_superkernel_off(monkeypatch):
    captures = []
    real = advice.capture_program
    monkeypatch.setattr(advice, "capture_program", lambda *a, **k: captures.append(1) or real(*a, **k))
    result = advise(Decoder(layers=1), *decode_inputs(), options="strict-scope-check=abort")
    assert captures == [1]
    assert result.candidate(Layout.ALL_LAYERS).outcome == "aborted"
    assert result.top_down.startswith("all_layers aborted -> decoder_layer aborted -> attention + moe/ffn aborted")
    assert result.recommendation.layout is Layout.NONE and result.paste == ()


def test_command_line_prints_the_table_and_a_recommend_line():
    out = io.StringIO()
    assert main(["advise", f"{CASES / 'llama_layers.py'}:advisor_case", "--npu-target=a3"], out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("npufuse advise (a3): standard Transformer")
    assert any(line.startswith("recommend ") for line in lines)


@pytest.mark.parametrize("spec", ["nowhere.py:f", "cases_missing_colon", "json:nothing_here"])
def test_command_line_names_a_bad_factory(spec, capsys):
    assert main(["advise", spec]) == 2
    assert "npufuse advise:" in capsys.readouterr().err


def test_command_line_loads_a_file_named_like_a_module_without_shadowing_it(tmp_path, monkeypatch):
    """``advise sub/torch.py:f``: the file is not registered as ``torch``, and its directory (with a
    ``colorsys.py`` beside it) hides no installed module; its neighbours are still importable."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "torch.py").write_text(
        "import torch\nimport colorsys\nfrom npufuse_neighbour import model\n\n\ndef f():\n"
        "    return model(), (torch.ones(8, 8),)\n"
    )
    (sub / "npufuse_neighbour.py").write_text("def model():\n    return lambda a: (a @ a) @ a\n")
    (sub / "colorsys.py").write_text("raise RuntimeError('the standard library colorsys was shadowed')\n")
    real_torch = sys.modules["torch"]
    out = io.StringIO()
    assert main(["advise", f"{sub / 'torch.py'}:f"], out) == 0
    assert sys.modules["torch"] is real_torch and "recommend" in out.getvalue()
    loaded = [name for name, module in sys.modules.items() if getattr(module, "__file__", None) == str(sub / "torch.py")]
    assert len(loaded) == 1 and loaded[0].startswith("npufuse_user_torch_")
    for name in (*loaded, "npufuse_neighbour"):
        sys.modules.pop(name, None)


class Gated(torch.nn.Module):
    def __init__(self, is_prefill):
        super().__init__()
        self.is_prefill = is_prefill

    def forward(self, a, b):
        with superkernel_scope(not self.is_prefill, "decode_only", "feed-sync-all=1"):
            return (a @ b) @ b


def test_superkernel_scope_gates_prefill_off():
    a, b = torch.ones(16, 32), torch.ones(32, 32)
    assert capture_program(Gated(False), a, b).superkernel_scopes() == ("decode_only",)
    assert capture_program(Gated(True), a, b).superkernel_scopes() == ()
    assert structure_of(capture_program(Gated(False), a, b)).family is Family.OTHER


def test_the_ranked_table_is_the_shared_aligner_s_output_of_its_rows(deepseek):
    rows = deepseek.rows()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    before = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    assert deepseek.lines()[1:1 + len(rows)] == before
