"""``torchair.use_internal_format_weight`` (also ``torchair.experimental.inference``'s): every Linear weight of
a model, nested ones included, is cast to FRACTAL_NZ with ``torch_npu.npu_format_cast`` in place, values
kept; other parameters are left alone (Ascend/torchair python/torchair/experimental/inference.py)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse.errors import NotModeledError


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))

    def forward(self, ids):
        return self.block(self.embed(ids))


def test_each_linear_weight_is_cast_in_place_with_its_values_kept(shim, monkeypatch):
    import torchair
    from torchair.experimental import inference

    casts: list[int] = []
    cast = inference.npu_format_cast
    monkeypatch.setattr(inference, "npu_format_cast", lambda x, acl_format: casts.append(acl_format) or cast(x, acl_format))
    torch.manual_seed(0)
    model, ids = _Model(), torch.tensor([[1, 2, 3]])
    before = {name: (p.data.data_ptr(), p.detach().clone()) for name, p in model.named_parameters()}
    expected = model(ids)
    assert torchair.use_internal_format_weight is inference.use_internal_format_weight
    torchair.use_internal_format_weight(model)
    assert casts == [29, 29]  # ACL_FORMAT_FRACTAL_NZ, once per Linear weight
    for name, p in model.named_parameters():
        pointer, value = before[name]
        assert torch.equal(p, value)
        assert (p.data.data_ptr() != pointer) == (name.startswith("block") and name.endswith("weight")), name
    assert torch.allclose(model(ids), expected)


def test_npu_format_cast_via_cpu_is_refused_by_name(shim):
    import torchair
    from torchair.experimental import inference

    for namespace, path in ((inference, "torchair.experimental.inference"), (torchair, "torchair")):
        with pytest.raises(NotModeledError) as exc:
            namespace.npu_format_cast_via_cpu  # noqa: B018
        assert exc.value.op == f"{path}.npu_format_cast_via_cpu"
        assert not hasattr(namespace, "npu_format_cast_via_cpu")
