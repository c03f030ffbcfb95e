"""``torch_npu.testing`` under the shim (issue 37): torch_npu's TestCase assertions, the device and CANN skip
decorators, the input makers, dtype/format parametrization and the one-NPU distributed skip, each as
Ascend/pytorch torch_npu/testing/ defines it."""

from __future__ import annotations

import unittest

import numpy as np
import pytest
import torch

from pytest_npufuse.errors import ArgumentError, NotModeledAttributeError
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.target.running import state_running_target


@pytest.fixture
def on_target(shim):
    """Run the test's code on a named target, as pytest's --npu-target states it (for this test only: the
    statement is in the test's session)."""
    return lambda name: state_running_target(load_profile(name))


def _outcome(case: type, name: str) -> unittest.TestResult:
    result = unittest.TestResult()
    case(name).run(result)
    return result


def _case(shim):
    from torch_npu.testing.testcase import TestCase

    return TestCase("run")


# ---------------------------------------------------------------- assertRtolEqual

def test_rtol_equal_tolerates_a_small_share_of_misses_but_not_more(shim):
    case = _case(shim)
    x = np.linspace(1, 2, 10_000, dtype=np.float32)
    y = x.copy()
    y[:1] += 1.0  # one element of 10,000 off: within prec (1e-4) of the elements
    case.assertRtolEqual(x, y)
    y[:5] += 1.0  # five: more than 1e-4 of them miss both ways
    with pytest.raises(AssertionError, match="result error"):
        case.assertRtolEqual(x, y)


def test_rtol_equal_uses_prec16_for_float16_and_checks_shape_dtype_and_nans(shim):
    case = _case(shim)
    x = torch.full((4, 4), 1.0, dtype=torch.float16)
    case.assertRtolEqual(x, x * (1 + 5e-4))  # within prec16 = 1e-3 relatively
    with pytest.raises(AssertionError):
        case.assertRtolEqual(x, x * 1.01)
    with pytest.raises(AssertionError, match="shape error"):
        case.assertRtolEqual(x, x[:2])
    with pytest.raises(AssertionError, match="dtype error"):
        case.assertRtolEqual(x, x.float())
    case.assertRtolEqual(x, x.float(), auto_trans_dtype=True)
    nan = x.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(AssertionError, match="NaN"):
        case.assertRtolEqual(x, nan)


def test_rtol_equal_compares_bfloat16_pairs_with_allclose_and_recurses_into_sequences(shim):
    case = _case(shim)
    a = torch.ones(8, dtype=torch.bfloat16)
    case.assertRtolEqual(a, a + 0.0005)
    with pytest.raises(AssertionError, match="result error"):
        case.assertRtolEqual(a, a + 0.1)
    case.assertRtolEqual([a, torch.zeros(2)], [a, torch.zeros(2)])
    case.assertRtolEqual(torch.tensor([1.0, 2.0]), [1.0, 2.0])


# ---------------------------------------------------------------- assertEqual and friends

def test_assert_equal_is_torch_npus_absolute_tolerance_with_loose_dtypes(shim):
    case = _case(shim)
    case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 5e-6]))  # within precision 1e-5
    with pytest.raises(AssertionError):
        case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]))
    case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), prec=0.2)
    case.assertEqual(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))  # dtypes need not match by default
    with pytest.raises(AssertionError):
        case.assertEqual(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]), exact_dtype=True)
    case.assertEqual(torch.Size([2, 3]), (2, 3))
    case.assertEqual(torch.tensor(3.0), 3)
    case.assertEqual({"a": torch.ones(2)}, {"a": torch.ones(2)})
    with pytest.raises(AssertionError):
        case.assertEqual([1, 2], [1, 2, 3])
    with pytest.raises(AssertionError):
        case.assertEqual(torch.tensor([float("nan")]), torch.tensor([0.0]))
    case.assertEqual(torch.float16, torch.float16)


def test_assert_not_equal_and_almost_equal_and_expected_inline(shim):
    case = _case(shim)
    case.assertNotEqual(torch.zeros(3), torch.ones(3))
    with pytest.raises(AssertionError):
        case.assertNotEqual(torch.zeros(3), torch.zeros(3))
    case.assertAlmostEqual(1.0, 1.004, places=2)
    with pytest.raises(AssertionError):
        case.assertAlmostEqual(1.0, 1.1, places=2)
    case.assertExpectedInline("a\nb\nException raised from f at x.cpp:1", "a\nb")
    with pytest.raises(AssertionError):
        case.assertExpectedInline("a", "b")


def test_each_test_starts_from_the_seed_and_the_class_selects_the_npu(shim, monkeypatch):
    from torch_npu.testing.testcase import TestCase

    draws = []

    class Draw(TestCase):
        def test_draw(self):
            draws.append((torch.rand(2), self.npu_device))

    monkeypatch.setenv("SEED", "7")
    for _ in range(2):
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Draw)
        assert suite.run(unittest.TestResult()).wasSuccessful()
    assert torch.equal(draws[0][0], draws[1][0])
    torch.manual_seed(7)
    assert torch.equal(draws[0][0], torch.rand(2))
    assert draws[0][1] == "npu:0"


# ---------------------------------------------------------------- device and CANN gates

def test_supported_devices_runs_on_the_targets_family_and_skips_elsewhere(on_target):
    from torch_npu.testing.common_utils import SupportedDevices, device_family
    from torch_npu.testing.testcase import TestCase

    class Gated(TestCase):
        @SupportedDevices(["Ascend910B"])
        def test_a2(self):
            pass

        @SupportedDevices(["Ascend910_93"])
        def test_a3(self):
            pass

    on_target("a2")
    assert _outcome(Gated, "test_a2").skipped == []
    assert [reason for _, reason in _outcome(Gated, "test_a3").skipped] == [
        "Only run on ['Ascend910_93'], current device is Ascend910B."
    ]
    on_target("a3")
    assert _outcome(Gated, "test_a3").skipped == []
    assert len(_outcome(Gated, "test_a2").skipped) == 1
    assert [device_family(n) for n in ("Ascend910B4", "Ascend910_9391", "Ascend950PR")] == [
        "Ascend910B", "Ascend910_93", "Ascend950",
    ]


def test_cann_gate_compares_with_the_modeled_cann_as_torch_npu_orders_versions(shim):
    from torch_npu.testing.common_utils import SkipIfNotGteCANNVersion
    from torch_npu.testing.testcase import TestCase

    class Gated(TestCase):
        @SkipIfNotGteCANNVersion("9.0.0")
        def test_old_enough(self):
            pass

        @SkipIfNotGteCANNVersion("9.2.RC1")
        def test_too_new(self):
            pass

    assert _outcome(Gated, "test_old_enough").skipped == []
    assert [reason for _, reason in _outcome(Gated, "test_too_new").skipped] == [
        "Only run on 9.2.RC1 or greater, current cann version is 9.1.0."
    ]


def test_multi_npu_tests_skip_saying_the_model_has_one(shim):
    from torch_npu.testing import common_distributed
    from torch_npu.testing.common_distributed import skipIfUnsupportMultiNPU
    from torch_npu.testing.testcase import TestCase

    class Ranks(TestCase):
        @skipIfUnsupportMultiNPU(1)
        def test_one(self):
            pass

        @skipIfUnsupportMultiNPU(16)
        def test_sixteen(self):
            pass

        @skipIfUnsupportMultiNPU(32)
        def test_thirty_two(self):
            pass

    assert _outcome(Ranks, "test_one").skipped == []
    assert _outcome(Ranks, "test_sixteen").skipped == []  # an A3 node: 16 dies
    (_, reason), = _outcome(Ranks, "test_thirty_two").skipped
    assert "needs 32 NPUs" in reason and "models 16" in reason
    with pytest.raises(NotModeledAttributeError) as exc:
        common_distributed.with_comms  # noqa: B018
    assert exc.value.op == "torch_npu.testing.common_distributed.with_comms"


# ---------------------------------------------------------------- input makers and parametrization

def test_input_makers_give_equal_cpu_and_npu_tensors_in_the_asked_format(shim, monkeypatch):
    import torch_npu
    from torch_npu.testing.common_utils import create_common_tensor, create_dtype_tensor, get_npu_device

    np.random.seed(0)
    cpu, npu = create_common_tensor([np.float16, 29, [16, 32]], -1, 1)
    assert cpu.dtype == npu.dtype == torch.float16 and torch.equal(cpu, npu)
    assert cpu.min() >= -1 and cpu.max() < 1
    assert torch_npu.get_npu_format(npu) == torch_npu.Format.FRACTAL_NZ
    assert torch_npu.get_npu_format(cpu) == torch_npu.Format.ND
    cpu, npu = create_dtype_tensor((3, 4), torch.int32, npu_format=29, no_zero=True)
    assert cpu.dtype == torch.int32 and (cpu != 0).all() and torch_npu.get_npu_format(npu) == 2  # ints keep ND
    cpu, _ = create_dtype_tensor((5,), torch.bool)
    assert cpu.dtype == torch.bool
    assert get_npu_device() == "npu:0"
    monkeypatch.setenv("SET_NPU_DEVICE", "3")
    assert get_npu_device() == "npu:3"
    for junk in ("npu:1", "x", "", "9" * 5000):
        monkeypatch.setenv("SET_NPU_DEVICE", junk)
        with pytest.raises(ArgumentError) as exc:  # not a device index
            get_npu_device()
        assert exc.value.argument == "SET_NPU_DEVICE"


@pytest.mark.parametrize("value", ["seed!", "1e3", "9" * 5000, str(2**64)])
def test_a_seed_variable_torch_cannot_take_is_an_error_naming_it(monkeypatch, value):
    from pytest_npufuse.torch_npu.testing.testcase import seed_from_environment

    monkeypatch.setenv("SEED", value)
    with pytest.raises(ArgumentError) as exc:  # not a random seed
        seed_from_environment()
    assert exc.value.argument == "SEED"
    monkeypatch.setenv("SEED", "-5")
    assert seed_from_environment() == -5


def test_instantiate_tests_makes_one_test_per_dtype_and_format(shim):
    from torch_npu.testing.decorator import Dtypes, Formats, instantiate_tests
    from torch_npu.testing.testcase import TestCase

    seen = []

    @instantiate_tests
    class Ops(TestCase):
        @Dtypes(torch.float16, torch.float32)
        @Formats(2, 29)
        def test_op(self, device, dtype, npu_format):
            seen.append((device, dtype, npu_format))

    names = sorted(n for n in vars(Ops) if n.startswith("test_"))
    assert names == ["test_op_float16_2", "test_op_float16_29", "test_op_float32_2", "test_op_float32_29"]
    assert _outcome(Ops, "test_op_float32_29").wasSuccessful()
    assert seen == [("npu", torch.float32, 29)]
    with pytest.raises(RuntimeError, match="No dtypes given"):
        Dtypes()
