"""torchair.ops.npu_print inside a compiled function (TorchAir's own print tests).

Reconstruction of the call pattern (not a copy) of
Ascend/torchair, tests/st/torchair_print_st.py @ fced8842d149f16b587c2c867d427e4b766831ca
(``test_summarize_1`` and ``test_npu_backend``): ``npu_print("x =", v, summarize_size=1)``, ``abs``,
``npu_print("abs(x) =", v, summarize_size=1)``, ``add(v, 1)`` and a third print, on a bfloat16 ``[10, 10]``
tensor of -1; the expected lines are TorchAir's (numpy-style, one leading and trailing item per dim).
The original asserts the eager and ``aot_eager`` output and that the GE converter is reached; here the
same function runs under ``torchair.get_npu_backend()``, where the print stays in the graph.
"""

import torch
import torchair

EXPECTED = """x = [[-1 ... -1]
 ...
 [-1 ... -1]]
abs(x) = [[1 ... 1]
 ...
 [1 ... 1]]
add(abs(x), 1) = [[2 ... 2]
 ...
 [2 ... 2]]
"""


def func(v):
    torchair.ops.npu_print("x =", v, summarize_size=1)
    v = torch.abs(v)
    torchair.ops.npu_print("abs(x) =", v, summarize_size=1)
    v = torch.add(v, 1)
    torchair.ops.npu_print("add(abs(x), 1) =", v, summarize_size=1)
    return v


def test_npu_print_in_a_compiled_graph_prints_what_eager_prints(capsys):
    t = torch.neg(torch.ones(10, 10, dtype=torch.bfloat16))
    func(t)
    assert capsys.readouterr().out == EXPECTED
    out = torch.compile(func, backend=torchair.get_npu_backend(), fullgraph=True)(t)
    assert capsys.readouterr().out == EXPECTED and torch.equal(out, torch.full((10, 10), 2, dtype=torch.bfloat16))
