"""pytest's ``--npu-target`` is the device the code under test runs on (issue 37): ``torch.npu.get_device_name()``
names its SoC as under ``python -m pytest_npufuse run --npu-target``, so torch_npu's ``SupportedDevices``
gates run their tests on the target they name."""

from __future__ import annotations

import pytest

from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.target.running import stated_running_target

NAMES = '''
import torch

def test_device_name(request):
    import torch_npu
    print("DEVICE", torch.npu.get_device_name(), torch_npu.npu.get_device_name(0))
'''

GATED = '''
import torch_npu
from torch_npu.testing.testcase import TestCase
from torch_npu.testing.common_utils import SupportedDevices

AT_IMPORT = torch_npu.npu.get_device_name()


class TestGate(TestCase):
    @SupportedDevices(["Ascend910B"])
    def test_a2_only(self):
        assert AT_IMPORT == "Ascend910B2"
'''


def _devices(result: pytest.RunResult) -> list[str]:
    """The device names the test printed (pytest prints them after the file's name, on its line)."""
    return [line.split("DEVICE ")[1].split()[0] for line in result.outlines if "DEVICE " in line]


@pytest.mark.parametrize(("args", "expected"), [((), "Ascend910_9391"), (("--npu-target=a2",), "Ascend910B2"), (("--npu-target=910b4",), "Ascend910B4")])
def test_get_device_name_follows_npu_target(pytester, args, expected):
    pytester.makepyfile(test_names=NAMES)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", *args)
    result.assert_outcomes(passed=1)
    assert _devices(result) == [expected]
    assert stated_running_target() is None  # the session's statement ends with it


def test_an_ini_target_counts_too(pytester):
    pytester.makeini("[pytest]\nnpu_target = a2\n")
    pytester.makepyfile(test_names=NAMES)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s")
    assert _devices(result) == ["Ascend910B2"]


def test_each_target_of_a_list_runs_its_parametrized_tests(pytester):
    pytester.makepyfile(test_names=NAMES.replace("(request)", "(npu_target)"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", "--npu-target=a2,a3")
    result.assert_outcomes(passed=2)
    assert _devices(result) == ["Ascend910B2", "Ascend910_9391"]


def test_supported_devices_gate_runs_on_a2_and_skips_on_a3(pytester):
    pytester.makepyfile(test_gated=GATED)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--npu-target=a2").assert_outcomes(passed=1)
    skipped = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "--npu-target=a3")
    skipped.assert_outcomes(skipped=1)
    assert "Only run on ['Ascend910B'], current device is Ascend910_93." in skipped.stdout.str()


def test_without_a_pytest_target_the_run_commands_target_stays(pytester):
    """``python -m pytest_npufuse run --npu-target=a2 script.py`` whose script starts pytest without one."""
    pytester.makepyfile(test_names=NAMES)
    with modeled_run(load_profile("a2")):
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s")
    assert _devices(result) == ["Ascend910B2"]
