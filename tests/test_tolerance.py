"""tests/tolerance.py, the suite's one float comparison: by hand.

To re-measure the levels' headroom on a processor (every ATen kernel set it has, 1 and 2 threads):
``python benchmarks/tolerance_kernels.py`` (benchmarks/RESULTS.md keeps the figures)."""

import pytest
import torch
from tolerance import EXACT, MODEL, OPS, assert_close, error_ulps, is_close

EPS32 = torch.finfo(torch.float32).eps


def test_the_error_is_in_ulps_of_the_largest_value():
    expected = torch.tensor([0.5, 1e-9, -2.0])  # scale 2: a near-zero entry is judged at the scale's rounding
    actual = expected + torch.tensor([0.0, 3 * EPS32 * 2.0, 0.0])
    error, scale = error_ulps(actual, expected)
    assert scale == 2.0 and error == pytest.approx(3.0, rel=1e-6)
    assert_close(actual, expected, 4)
    assert not is_close(actual, expected, 2)


def test_float64_is_judged_at_float64_rounding_and_a_given_scale_widens_it():
    expected = torch.tensor([1.0], dtype=torch.float64)
    actual = expected + 1e-12  # 4504 ulps of float64 at scale 1
    assert not is_close(actual, expected, EXACT)
    assert is_close(actual, expected, EXACT, scale=1e4)  # a small difference of terms of size 1e4
    assert is_close(torch.tensor([1e-3]), torch.tensor([0.0]), 1, scale=2e-3 / EPS32)  # 0.5 ulps


def test_each_level_still_catches_a_wrong_result_of_a_thousandth_of_the_scale():
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(64, 64, generator=g)
    wrong = expected.clone()
    wrong[3, 5] += 1e-3 * float(expected.abs().max())  # a dropped term, a shifted position
    for ulps in (EXACT, OPS, MODEL):
        assert not is_close(wrong, expected, ulps)
    assert is_close(expected + EPS32 * expected.abs().max(), expected, OPS)


def test_an_allowance_is_added_and_named():
    assert is_close([1.4997], [1.49975], EXACT, atol=0.5e-4)  # a published value printed with 4 decimals
    with pytest.raises(AssertionError, match=r"bound 64 ulps \+ atol 1e-05"):
        assert_close([1.4997], [1.49975], EXACT, atol=1e-5)


def test_shapes_and_nans_must_match():
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close(torch.ones(3), torch.ones(()))
    assert_close(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0]))


def test_the_message_names_the_error_and_the_bound():
    with pytest.raises(AssertionError, match=r"w: largest difference .* ulps of the scale 1 \(bound 128 ulps\)"):
        assert_close(torch.tensor([1.0]), torch.tensor([0.999]), OPS, msg="w")
