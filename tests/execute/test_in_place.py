"""A functionalized optimizer step computed in place on the CPU: the same bits, and only where no node
can tell (execute/inplace.py)."""

import operator

import torch
from torch._functorch.aot_autograd import aot_module_simplified

from pytest_npufuse.execute.graph import run_graph
from pytest_npufuse.execute.inplace import broadcast_fills, in_place_overloads
from pytest_npufuse.frontend.lower import build_program
from pytest_npufuse.target.catalog import load_catalog


def functionalized(step, *lists):
    """The aten graph AOT hands our backend for ``step`` (input mutations kept as a copy_ epilogue)."""
    seen = {}

    def backend(gm, example_inputs):
        def fw(aten_gm, _):
            seen["gm"] = aten_gm
            return aten_gm

        return aot_module_simplified(gm, example_inputs, fw_compiler=fw, keep_inference_input_mutations=True)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(step, backend=backend, fullgraph=True, dynamic=False)(*[[t.clone() for t in ts] for ts in lists])
    return seen["gm"]


def adam_like(params, exp_avgs, grads):
    torch._foreach_mul_(params, 0.9)
    torch._foreach_mul_(exp_avgs, 0.9)
    torch._foreach_add_(exp_avgs, grads, alpha=0.1)
    denom = torch._foreach_sqrt(torch._foreach_mul(exp_avgs, exp_avgs))
    torch._foreach_add_(denom, 1e-8)
    torch._foreach_addcdiv_(params, exp_avgs, denom, value=-0.01)


def tensors(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(17, 5, generator=gen), torch.randn(3, generator=gen)]


def bits(tensor):
    return tensor.view(torch.int32)


def run(gm, flat, in_place):
    """Run the graph on copies of ``flat``; out of place when an observer asks to see every value."""
    args = [t.clone() for t in flat]
    run_graph(gm, build_program(gm, load_catalog()), args, {}, observe=None if in_place else lambda *_: None)
    return args


def test_an_optimizer_step_runs_in_place_with_the_same_bits():
    params, exp_avgs, grads = tensors(0), tensors(1), tensors(2)
    gm = functionalized(adam_like, params, exp_avgs, grads)
    chosen = in_place_overloads(gm)
    nodes = {node.name: node for node in gm.graph.nodes}
    written = {node.args[0].name for node in gm.graph.nodes if node.target is torch.ops.aten.copy_.default}
    selves = [element for name in chosen for element in nodes[name].args[0]]
    # Inputs the graph overwrites and dead intermediates are computed in place; an input it only reads never.
    assert any(element.op == "placeholder" for element in selves)
    assert any(element.target is operator.getitem for element in selves)
    assert all(element.op != "placeholder" or element.name in written for element in selves)
    flat = [*params, *exp_avgs, *grads]
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    assert len(placeholders) == len(flat)
    for got, want in zip(run(gm, flat, True), run(gm, flat, False)):
        assert torch.equal(bits(got), bits(want))


def reads_the_old_value(params):
    doubled = torch._foreach_mul(params, 2.0)
    torch._foreach_add_(params, doubled)


def lerp(exp_avgs, grads):
    torch._foreach_lerp_(exp_avgs, grads, 0.1)


def in_place_inputs(gm):
    """The graph inputs the chosen kernels write into."""
    nodes = {node.name: node for node in gm.graph.nodes}
    return {element.name for name in in_place_overloads(gm) for element in nodes[name].args[0]
            if element.op == "placeholder"}


def test_an_input_read_into_new_tensors_before_it_is_overwritten_is_still_written_in_place():
    params = tensors(3)
    gm = functionalized(reads_the_old_value, params)
    assert len(in_place_inputs(gm)) == 2
    for got, want in zip(run(gm, params, True), params):
        assert torch.equal(got, want * 3)
    exp_avgs, grads = tensors(4), tensors(5)
    gm = functionalized(lerp, exp_avgs, grads)  # AOT: grad - exp_avg, then exp_avg + 0.1 * that
    assert len(in_place_inputs(gm)) == 2
    flat = [*exp_avgs, *grads]
    for got, want in zip(run(gm, flat, True), run(gm, flat, False)):
        assert torch.equal(bits(got), bits(want))


def reads_it_in_another_kernel(params):
    total = params[0] * 2
    torch._foreach_add_(params, 1.0)
    return total


def test_an_input_another_kind_of_kernel_reads_stays_out_of_place():
    """Only a functional ``_foreach_*`` kernel is known to read its operands into new tensors."""
    params = tensors(6)
    gm = functionalized(reads_it_in_another_kernel, params)
    assert in_place_overloads(gm) == {}


def test_a_compiled_adamw_step_leaves_the_same_parameters_and_state_as_out_of_place(monkeypatch):
    import torch.nn.functional as F

    from pytest_npufuse import compare
    from pytest_npufuse.pipeline import training

    calls = []

    def recording(gm, program, args, stale, **kwargs):
        calls.append((gm, program, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], stale))
        return run_graph(gm, program, args, stale, **kwargs)

    monkeypatch.setattr(training, "run_graph", recording)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
    compare(model, x, loss=lambda out: F.mse_loss(out, y), optimizer=optimizer)
    gm, program, args, stale = calls[-1]  # the optimizer step: parameters, gradients and state are its inputs
    assert in_place_overloads(gm)
    runs = []
    for observe in (None, lambda *_: None):
        inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_graph(gm, program, inputs, stale, observe=observe)
        runs.append([a for a in inputs if isinstance(a, torch.Tensor)])
    for got, want in zip(*runs):
        assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))


def test_a_fill_read_only_as_a_factor_is_held_broadcast_with_the_same_bits():
    """AdamW's lerp decomposed: ``exp_avg + full_like(diff, 0.1) * diff``. Sizes past the CPU's parallel
    grain and not a multiple of a vector, so the threaded, vectorized and tail loops all read the fill."""
    gen = torch.Generator().manual_seed(7)
    exp_avgs = [torch.randn(301, 257, generator=gen), torch.randn(1001, generator=gen)]
    grads = [torch.randn(301, 257, generator=gen), torch.randn(1001, generator=gen)]
    gm = functionalized(lerp, exp_avgs, grads)
    assert len(broadcast_fills(gm)) == 2
    flat = [*exp_avgs, *grads]
    for got, want in zip(run(gm, flat, True), run(gm, flat, False)):
        assert torch.equal(bits(got), bits(want))


def fills_written(params):
    fills = [torch.full_like(p, 0.5) for p in params]
    torch._foreach_mul_(fills, params)
    return fills


def test_a_fill_a_kernel_writes_or_the_caller_gets_is_materialized():
    params = tensors(8)
    gm = functionalized(fills_written, params)
    assert broadcast_fills(gm) == frozenset()
    outputs = run_graph(gm, build_program(gm, load_catalog()), [p.clone() for p in params], {}).outputs
    for got, param in zip(outputs, params):
        assert got.stride() == param.stride() and torch.equal(got, param * 0.5)
