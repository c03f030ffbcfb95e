"""Bit-exact comparison: raw bits, not values."""

import torch

from pytest_npufuse.numerics.compare import compare_output, compare_outputs


def test_identical_tensors_match():
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    assert compare_output("out", x, x.clone()) is None


def test_negative_zero_differs_from_zero():
    mismatch = compare_output("out", torch.tensor([1.0, 0.0]), torch.tensor([1.0, -0.0]))
    assert mismatch is not None
    assert mismatch.index == (1,)
    assert "0x00000000" in mismatch.baseline and "0x80000000" in mismatch.variant


def test_nan_payloads_are_compared():
    quiet = torch.tensor([float("nan")])
    other = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert compare_output("out", quiet, quiet.clone()) is None
    assert compare_output("out", quiet, other) is not None


def test_bfloat16_last_bit_and_first_index():
    a = torch.zeros(2, 3, dtype=torch.bfloat16)
    b = a.clone()
    b.view(torch.int16)[1, 2] = 1
    b.view(torch.int16)[1, 0] = 1
    mismatch = compare_output("output[0]", a, b)
    assert mismatch.index == (1, 0) and mismatch.differing == 2
    assert "output[0]: 2 element(s) differ; first at index [1, 0]" in mismatch.describe()


def test_dtype_and_shape_changes_are_mismatches():
    assert "int8" in compare_output("o", torch.zeros(2), torch.zeros(2, dtype=torch.int8)).variant
    assert "[3]" in compare_output("o", torch.zeros(2), torch.zeros(3)).variant


def test_bool_complex_and_non_tensor_outputs():
    assert compare_output("o", torch.tensor([True]), torch.tensor([False])) is not None
    c = torch.tensor([1 + 2j])
    assert compare_output("o", c, c.clone()) is None
    assert compare_output("o", c, torch.tensor([1 + 3j])) is not None
    assert compare_output("o", 3, 3) is None and compare_output("o", 3, 4) is not None
    nan = float("nan")
    assert compare_output("o", nan, nan) is None and compare_output("o", 0.0, -0.0) is not None
    mismatch = compare_output("o", torch.zeros(3), 1.0)
    assert mismatch.baseline == "tensor([0., 0., 0.])" and mismatch.variant == "1.0"


def test_compare_outputs_lists_every_differing_output():
    same, diff = torch.ones(2), torch.zeros(2)
    found = compare_outputs(["a", "b", "c"], [same, same, same], [same, diff, diff])
    assert [m.output for m in found] == ["b", "c"]


def test_one_tensor_matches_itself_without_reading_its_values():
    # A VARIANT sharing its BASELINE's values hands the same tensors: nothing to read (a meta tensor has no
    # values to read, so comparing its bits would raise).
    values = torch.empty(1 << 20, device="meta")
    assert compare_output("grad[w]", values, values) is None
