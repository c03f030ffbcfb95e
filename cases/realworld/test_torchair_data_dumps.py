"""TorchAir's data dumps: npugraph_ex's per-node dump and save_npugraph_tensor, and the GE dump of a scope.

Reconstruction of the call patterns (not copies) of Ascend/torchair @ fced8842d149f16b587c2c867d427e4b766831ca:

* docs/zh/npugraph_ex/dfx/data_dump.md, scene 1: ``torch.compile(model, backend="npugraph_ex",
  options={"dump_tensor_data": True, "data_dump_dir": ..., "data_dump_stage": "optimized"})`` writes
  ``worldsize1_global_rank0/<node>_device_0_<n>.pt`` per FX node; scene 2: ``forward`` calls
  ``torch_npu.save_npugraph_tensor(x1, save_path="./test1.pt")``, squares x0, saves it to ``./test2.pt``,
  adds and multiplies; the documented results are ``test1_device_0_0.pt`` and ``test2_device_0_0.pt``.
* docs/zh/ascend_ir/api/scope/data_dump.md (调用示例): ``add`` outside and ``sub`` inside
  ``with torchair.scope.data_dump():``, ``config.dump_config.enable_dump = True``,
  ``config.dump_config.dump_layer = "Add"``, ``torch.compile(..., fullgraph=True, backend=npu_backend,
  dynamic=False)`` on fp16 ``[2, 2]`` inputs; GE writes the Add and Sub ops' dumps.
"""

import torch
import torch_npu
import torchair


class SaveModel(torch.nn.Module):
    def forward(self, x0, x1):
        torch_npu.save_npugraph_tensor(x1, save_path="./test1.pt")
        sq1 = torch.square(x0)
        torch_npu.save_npugraph_tensor(sq1, save_path="./test2.pt")
        add1 = torch.add(x1, sq1)
        mm1 = torch.mm(x0, add1)
        return mm1


class Network(torch.nn.Module):
    def forward(self, data0, data1):
        add_01 = torch.add(data0, data1)
        with torchair.scope.data_dump():
            sub_01 = torch.sub(data0, data1)
        return add_01, sub_01


def test_npugraph_ex_dump_options_and_save_npugraph_tensor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x0 = torch.randn([10, 10]).npu()
    x1 = torch.randn([10, 10]).npu()
    model = torch.compile(SaveModel(), backend="npugraph_ex", options={
        "dump_tensor_data": True, "data_dump_dir": str(tmp_path), "data_dump_stage": "optimized"})
    model(x0, x1)
    assert torch.equal(torch.load("test1_device_0_0.pt"), x1)
    assert torch.equal(torch.load("test2_device_0_0.pt"), torch.square(x0))
    rank = tmp_path / "worldsize1_global_rank0"
    dumped = sorted(p.name for p in rank.iterdir())
    # x1 and the square are saved by the model itself, so the dump leaves them out: one input (x0), add, mm
    assert len(dumped) == 3 and {"add_device_0_0.pt", "mm_device_0_0.pt"} < set(dumped)
    (arg,) = [name for name in dumped if name.startswith("arg")]
    assert torch.equal(torch.load(rank / arg), x0)


def test_data_dump_scope_with_dump_layer_writes_add_and_sub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    input0 = torch.randn(2, 2, dtype=torch.float16).npu()
    input1 = torch.randn(2, 2, dtype=torch.float16).npu()
    config = torchair.CompilerConfig()
    config.dump_config.enable_dump = True
    config.dump_config.dump_layer = "Add"
    npu_backend = torchair.get_npu_backend(compiler_config=config)
    npu_mode = torch.compile(Network().npu(), fullgraph=True, backend=npu_backend, dynamic=False)
    npu_mode(input0, input1)
    (call_dir,) = (tmp_path / "worldsize1_global_rank0").glob("*/0/graph_*/1/0")
    ops = sorted(p.name.split(".")[0] for p in call_dir.iterdir())
    assert ops == ["Add", "Sub"]
    sub = torch.load(next(call_dir.glob("Sub.*")))
    assert torch.equal(sub["output"][0], torch.sub(input0, input1))
