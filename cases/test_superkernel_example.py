"""TorchAir's SuperKernel example (图内标定SuperKernel范围): quant matmul + dequant-swiglu-quant fused as ``sp1``.

The feature document compiles the same two ops once without a scope (``ModelOrigin``) and once inside
``super_kernel("sp1", "")`` (``ModelSuperKernel``), with m=864, k=7168, n=4096, and requires every
output to be bit-identical. On a modeled Atlas A3 the scope must form exactly one SuperKernel and save
the second kernel's dispatch and head.
"""

import pytest
import torch

from pytest_npufuse import torch_npu, torchair

M, K, N = 864, 7168, 4096


class ModelOrigin(torch.nn.Module):
    def forward(self, x1, x2, scale, offset, bias, pertoken_scale, weight_scale):
        quant_matmul_res = torch_npu.npu_quant_matmul(
            x1, x2, scale, offset=offset, bias=bias, pertoken_scale=pertoken_scale, output_dtype=torch.bfloat16
        )
        swiglu_res = torch_npu.npu_dequant_swiglu_quant(quant_matmul_res, weight_scale=weight_scale)
        return swiglu_res, quant_matmul_res


class ModelSuperKernel(torch.nn.Module):
    def forward(self, x1, x2, scale, offset, bias, pertoken_scale, weight_scale):
        with torchair.scope.super_kernel("sp1", ""):
            quant_matmul_res = torch_npu.npu_quant_matmul(
                x1, x2, scale, offset=offset, bias=bias, pertoken_scale=pertoken_scale, output_dtype=torch.bfloat16
            )
            swiglu_res = torch_npu.npu_dequant_swiglu_quant(quant_matmul_res, weight_scale=weight_scale)
        return swiglu_res, quant_matmul_res


def seed_inputs() -> tuple:
    """The seed's inputs, drawn from a fixed generator so every run sees the same numbers."""
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randint(-10, 10, (M, K), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-10, 10, (N, K), dtype=torch.int8, generator=gen)
    x2 = torch_npu.npu_format_cast(x2.transpose(1, 0).contiguous(), 29)
    scale = torch.randn((N,), dtype=torch.float32, generator=gen)
    pertoken_scale = torch.randn((M,), dtype=torch.float32, generator=gen)
    weight_scale = torch.randn((M, N), dtype=torch.float32, generator=gen)
    return x1, x2, scale, None, None, pertoken_scale, weight_scale


@pytest.mark.superkernel(scope="sp1", segments=1, breaks=[], min_speedup=1.005)
def test_sp1_fuses_quant_matmul_and_dequant_swiglu_quant(npufuse):
    report = npufuse.check(ModelSuperKernel(), *seed_inputs(), reference=ModelOrigin())
    sp1 = report.superkernels["sp1"]
    assert sp1.names == ("sk_sp1_start_QuantBatchMatmulV3_end_DequantSwigluQuant",)
    assert sp1.block_dim == max(kernel.block_dim for kernel in report.baseline.kernels)
    assert report.variant.tasks == 1 and report.baseline.tasks == 2


@pytest.mark.npu_target("a2")
@pytest.mark.superkernel(scope="sp1", outcome="unsupported")
def test_sp1_is_unsupported_on_a2(npufuse):
    report = npufuse.check(ModelSuperKernel(), *seed_inputs(), reference=ModelOrigin())
    assert report.variant.time_us == report.baseline.time_us


def test_seed_config_dumps_the_scoped_graph_as_pbtxt(tmp_path, monkeypatch):
    """The seed's script sets ``config.debug.graph_dump.type = "pbtxt"`` before compiling both models: the
    dump of ModelSuperKernel shows both ops in scope sp1, where TorchAir writes it (the working directory)."""
    monkeypatch.chdir(tmp_path)
    config = torchair.CompilerConfig()
    config.debug.graph_dump.type = "pbtxt"
    npu_backend = torchair.get_npu_backend(compiler_config=config)
    model_sk = torch.compile(ModelSuperKernel(), backend=npu_backend, dynamic=False)
    with torch.no_grad():
        model_sk(*seed_inputs())
    (dump,) = tmp_path.glob("dynamo_original_graph_*_rank_0_pid_*_ts_*.pbtxt")
    text = dump.read_text()
    for op in ("QuantBatchMatmulV3", "DequantSwigluQuant"):
        block = text[text.index(f'type: "{op}"'):]
        assert 'attr { key: "_super_kernel_scope" value { s: "sp1" } }' in block.split("op {")[0]
