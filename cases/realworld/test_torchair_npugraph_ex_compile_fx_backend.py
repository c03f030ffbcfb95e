"""A custom torch.compile backend built on npugraph_ex's compile_fx (TorchAir's npugraph_ex docs).

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, docs/zh/npugraph_ex/api/npugraph_ex/compile_fx.md @ fced8842d149f16b587c2c867d427e4b766831ca
(调用示例; the same example closes docs/zh/npugraph_ex/quick_start.md): a ``custom_compiler(gm,
example_inputs)`` that returns ``torch.npu.npugraph_ex.compile_fx(gm, example_inputs, {"clone_input":
False})``, a ``custom_backend`` that hands it to ``aot_module_simplified(gm, example_inputs,
fw_compiler=custom_compiler)``, and ``torch.compile(Model().npu(), backend=custom_backend, fullgraph=True,
dynamic=False)`` on int32 ``[2, 2]`` ones; the model adds its two inputs.
"""

import torch
import torch_npu
from torch._functorch.aot_autograd import aot_module_simplified


class Model(torch.nn.Module):
    def forward(self, x, y):
        x = x + y
        return x


def custom_compiler(gm: torch.fx.GraphModule, example_inputs):
    test_options = {"clone_input": False}
    return torch.npu.npugraph_ex.compile_fx(gm, example_inputs, test_options)


def custom_backend(gm: torch.fx.GraphModule, example_inputs):
    return aot_module_simplified(gm, example_inputs, fw_compiler=custom_compiler)


def test_compile_fx_under_a_users_own_aot_backend():
    x = torch.ones([2, 2], dtype=torch.int32).npu()
    y = torch.ones([2, 2], dtype=torch.int32).npu()
    model = torch.compile(Model().npu(), backend=custom_backend, fullgraph=True, dynamic=False)
    ret = model(x, y)
    assert ret.dtype == torch.int32 and torch.equal(ret, torch.full((2, 2), 2, dtype=torch.int32))
