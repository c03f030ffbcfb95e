"""A user's own FX pass puts ops on a second stream (TorchAir's and npugraph_ex's custom-pass documents).

Reconstruction of the call pattern (not a copy) of Ascend/torchair @ fced8842d149f16b587c2c867d427e4b766831ca,
docs/zh/ascend_ir/features/basic/post_grad_custom_pass.md and docs/zh/npugraph_ex/advanced/post_grad_custom_pass.md:
a model ``mm -> abs -> add`` and ``sub(x, mm)``; a pass ``fn(gm, example_inputs, config)`` given as
``CompilerConfig.post_grad_custom_pre_pass`` (TorchAir) or ``options={"post_grad_custom_pre_pass": fn}``
(npugraph_ex) that wraps mm and abs in ``scope_enter(["_user_stream_label"], ["stream_1"])`` /
``scope_exit()``, records an event after abs with ``record()`` and waits for it before sub with
``wait([record])``, in the ``air`` or ``npugraph_ex`` op namespace.

Finding: under TorchAir's GE backend the graph is right (GE orders cross-stream reads by their data).
Under npugraph_ex, whose captured graph is ordered by events alone, the documents' ``add`` reads ``abs``
from ``stream_1`` with no wait before it: a race (the model poisons the racy read), while ``sub``, which
waits, is right. Moving the wait before ``add`` fixes it.
"""

import torch
import torch_npu
import torchair


class Model(torch.nn.Module):
    def forward(self, x):
        mm = torch.mm(x, x)
        abs_res = torch.abs(mm)
        add = torch.add(abs_res, 1)
        sub = torch.sub(x, mm)
        return add, sub


def stream_pass(ops, wait_before=torch.ops.aten.sub.Tensor):
    def custom_pre_pass(gm, example_inputs, config):
        graph = gm.graph
        for node in graph.nodes:
            if node.op == "call_function" and node.target == torch.ops.aten.mm.default:
                with graph.inserting_before(node):
                    graph.call_function(ops.scope_enter.default, args=(["_user_stream_label"], ["stream_1"]))
            if node.op == "call_function" and node.target == torch.ops.aten.abs.default:
                with graph.inserting_after(node):
                    record_node = graph.call_function(ops.record.default, args=())
                with graph.inserting_after(record_node):
                    graph.call_function(ops.scope_exit.default, args=())
            if node.op == "call_function" and node.target == wait_before:
                with graph.inserting_before(node):
                    graph.call_function(ops.wait.default, args=([record_node],))

    return custom_pre_pass


def test_torchair_ge_graph_with_a_pass_placed_stream_is_right():
    config = torchair.CompilerConfig()
    config.post_grad_custom_pre_pass = stream_pass(torch.ops.air)
    model = torch.compile(Model().npu(), backend=torchair.get_npu_backend(compiler_config=config))
    x = torch.randn([3, 3]).npu()
    add, sub = model(x)
    assert torch.allclose(add, torch.abs(x @ x) + 1) and torch.allclose(sub, x - x @ x)


def test_npugraph_ex_documents_pass_leaves_add_racing_and_a_wait_before_it_fixes_it():
    x = torch.randn([3, 3]).npu()
    as_documented = {"post_grad_custom_pre_pass": stream_pass(torch.ops.npugraph_ex)}
    add, sub = torch.compile(Model().npu(), backend="npugraph_ex", options=as_documented)(x)
    assert torch.isnan(add).all() and torch.allclose(sub, x - x @ x)

    torch._dynamo.reset()
    fixed = {"post_grad_custom_pre_pass": stream_pass(torch.ops.npugraph_ex, wait_before=torch.ops.aten.add.Tensor)}
    add, sub = torch.compile(Model().npu(), backend="npugraph_ex", options=fixed)(x)
    assert torch.allclose(add, torch.abs(x @ x) + 1) and torch.allclose(sub, x - x @ x)
