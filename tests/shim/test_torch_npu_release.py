"""What the shim's torch_npu says about itself and its device (issue 37): ``torch_npu.__version__``, the storage
format of a tensor (``get_npu_format``, torch_npu's InferFormat rules), ``torch_npu.utils`` and
``torch_npu.npu.utils`` (CANN version, SoC number of the modeled target)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse.errors import NotModeledAttributeError, OpArgumentError
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.target.running import state_running_target
from pytest_npufuse.torch_npu.release import cann_version_key, release


def test_version_is_the_torch_line_the_shim_runs_on(shim):
    import torch_npu

    assert torch_npu.__version__ == release().torch_npu == "2.13.0"
    assert torch.__version__.startswith(".".join(torch_npu.__version__.split(".")[:2]))


def test_a_new_tensor_has_its_shapes_base_format_and_a_cast_records_the_one_it_gets(shim):
    import torch_npu

    fmt = torch_npu.get_npu_format
    assert (fmt(torch.rand(8, 16)), fmt(torch.rand(2, 3, 4, 5)), fmt(torch.rand(1, 2, 3, 4, 5))) == (2, 0, 30)
    nz = torch_npu.npu_format_cast(torch.rand(15, 17).half().npu(), 29)
    assert fmt(nz) == torch_npu.Format.FRACTAL_NZ and str(fmt(nz)) == "FRACTAL_NZ"
    assert fmt(torch_npu.npu_format_cast(nz, 2)) == 2
    assert fmt(torch_npu.npu_format_cast(torch.rand(12), 29)) == 2  # no NZ below two dims
    assert fmt(torch_npu.npu_format_cast(torch.rand(4, 8, 28, 28), 3)) == torch_npu.Format.NC1HWC0
    nchw = torch_npu.npu_format_cast(torch.rand(2, 2, 4, 4), 3)
    assert fmt(torch_npu.npu_format_cast(nchw, 2)) == 0  # a 4-dim tensor leaving an internal format is NCHW
    assert fmt(torch_npu.npu_format_cast(torch.rand(2, 2, 4, 4), 2)) == 2  # between base formats: relabelled
    assert fmt(torch_npu.npu_format_cast(nz, 0)) == 2  # NCHW only for four dims
    view = torch_npu.npu_format_cast(torch.rand(4, 8, 28, 28), 3).reshape(4, -1)
    assert fmt(view) == 3  # a view shares its storage's format
    assert fmt(torch_npu.npu_format_cast(torch.rand(32, 64).reshape(-1), 29)) == 29  # the storage is 2-dim
    assert fmt(torch.rand(2, 3, 4, 5).view(6, 20)) == 0  # a view of a 4-dim tensor's storage
    grad = torch_npu.npu_format_cast(torch.rand(4, 8, requires_grad=True), 29)
    assert fmt(grad) == 29 and grad.requires_grad


def test_an_unknown_format_is_refused_naming_the_known_ones(shim):
    import torch_npu

    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_format_cast(torch.rand(4, 4), 7)
    assert (exc.value.op, exc.value.argument) == ("npu_format_cast", "acl_format")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.get_npu_format([1, 2])
    assert (exc.value.op, exc.value.argument) == ("get_npu_format", "tensor")


def test_cann_versions_order_as_torch_npu_compares_them():
    order = ["8.3.T5", "8.3.RC1", "8.3.RC1.alpha002", "8.3.RC2", "8.3.0.alpha001", "8.3.0", "8.5.0", "9.0.0", "9.1.0"]
    assert sorted(order, key=cann_version_key) == order
    with pytest.raises(OpArgumentError) as exc:
        cann_version_key("latest")
    assert exc.value.argument == "version"


def test_utils_report_the_modeled_cann_and_refuse_the_rest(shim):
    import torch_npu.utils

    assert torch_npu.utils.get_cann_version() == torch_npu.utils.get_cann_version("OPP") == "9.1.0"
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.utils.get_cann_version("DRIVER")
    assert (exc.value.op, exc.value.argument) == ("get_cann_version", "module")
    with pytest.raises(NotModeledAttributeError) as exc:
        torch_npu.utils.FlopsCounter  # noqa: B018
    assert exc.value.op == "torch_npu.utils.FlopsCounter"


def test_path_manager_makes_and_removes_folders_as_torch_npus_onnx_tests_use_it(shim, tmp_path):
    from torch_npu.utils._path_manager import PathManager

    from pytest_npufuse.errors import PathManagerError

    folder = tmp_path / "onnx" / "out"
    PathManager.make_dir_safety(str(folder))
    PathManager.make_dir_safety(str(folder))  # an existing folder is left alone
    assert folder.is_dir() and PathManager.check_path_is_writeable(str(folder))
    PathManager.create_file_safety(str(folder / "model.onnx"))
    with pytest.raises(PathManagerError, match="is a directory path"):
        PathManager.check_input_file_path(str(folder))
    PathManager.remove_path_safety(str(tmp_path / "onnx"))
    PathManager.remove_path_safety(str(tmp_path / "onnx"))  # a missing folder is already removed
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="The path does not exist"):
        PathManager.check_directory_path_writeable(str(folder))


@pytest.mark.parametrize(("target", "soc", "number"), [("a2", "Ascend910B2", 221), ("910b4", "Ascend910B4", 224), ("a3", "Ascend910_9391", 250)])
def test_npu_utils_answer_for_the_modeled_soc(shim, target, soc, number):
    import torch_npu.npu.utils as utils

    state_running_target(load_profile(target))
    assert (utils.get_device_name(), utils.get_soc_version()) == (soc, number)
    assert utils._is_gte_cann_version("9.0.0") and not utils._is_gte_cann_version("10.0.RC1")
    assert utils.current_device() == 0
    with pytest.raises(NotModeledAttributeError) as exc:
        utils.obfuscation_initialize  # noqa: B018
    assert exc.value.op == "torch_npu.npu.utils.obfuscation_initialize"
