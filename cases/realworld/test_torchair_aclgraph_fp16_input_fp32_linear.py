"""Two fp32 ``Linear`` layers fed an fp16 input, compiled in TorchAir's reduce-overhead (aclgraph) mode.

Reconstruction of the call pattern (not a copy) of Ascend/torchair, tests/smoke/aclgraph_test.py @
fced8842d149f16b587c2c867d427e4b766831ca, ``test_aclgraph_static_kernel_debug_time`` (its model and
config): ``Linear(2, 2)`` twice, ``x = torch.randn([2, 2], dtype=torch.float16).npu()``,
``config.mode = "reduce-overhead"``, ``config.experimental_config.aclgraph._aclnn_static_shape_kernel =
True``, ``torch.compile(model, fullgraph=True, backend=torchair.get_npu_backend(compiler_config=config),
dynamic=True)``. The smoke test asserts on static-kernel log lines; here the values are checked.

Finding: the model never casts its weights, so each ``addmm`` multiplies fp16 by fp32. torch's CPU
kernels refuse that; the device's aclnn matmuls promote the pair to fp32, which the model now does,
returning the fp32 result the captured graph promises. TorchAir deprecates the reduce-overhead mode in
favour of the npugraph_ex backend; the case expects that warning rather than letting it reach the summary.
"""

import pytest
import torch
import torch_npu
import torchair


class Model1(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(2, 2)
        self.linear2 = torch.nn.Linear(2, 2)

    def forward(self, x):
        ln1 = self.linear1(x)
        ln2 = self.linear2(x)
        return ln1 + ln2


def test_fp16_input_through_fp32_linears_in_reduce_overhead_mode():
    x = torch.randn([2, 2], dtype=torch.float16).npu()
    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    model = Model1().npu()
    with pytest.warns(DeprecationWarning, match="npugraph_ex"):
        backend = torchair.get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=True)
    with torch.no_grad():
        out = compiled(x)
        expected = model.linear1(x.float()) + model.linear2(x.float())
    assert out.dtype == torch.float32 and torch.allclose(out, expected)
