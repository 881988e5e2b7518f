"""How a report prints a number (ablate.report.findings.num, signed, ci_text): 3 significant digits, and
thousands separators where the g format would print an exponent (issue 54: dapo_ladder's sample count read
"1.12e+03 [910, 1.33e+03]")."""

import math

import numpy as np
import pytest

from ablate.report.findings import ci_text, num, signed


@pytest.mark.parametrize(("x", "shown"), [
    (1120.4, "1,120"), (910.2, "910"), (1334.9, "1,330"), (25712.0, "25,700"), (-1.5e6, "-1,500,000"),
    (999.4, "999"), (999.6, "1,000"), (3.14159, "3.14"), (0.000539, "0.000539"), (5.39e-5, "5.39e-05"),
    (1e15, "1e+15"), (7, "7"), (np.int64(1920), "1920"), (math.nan, "–"), (math.inf, "∞"), (None, "–"),
])
def test_num_prints_three_significant_digits_without_a_positive_exponent(x, shown):
    assert num(x) == shown


@pytest.mark.parametrize(("x", "shown"), [(1120.4, "+1,120"), (-25712.0, "-25,700"), (0.5, "+0.5"),
                                          (-1e-13, "+0"), (999.6, "+1,000")])
def test_signed_carries_the_sign(x, shown):
    assert signed(x) == shown


def test_an_interval_in_the_thousands_reads_without_exponents():
    assert ci_text(910.2, 1334.9) == "[910, 1,330]"
    assert ci_text(0.0912, 0.133, scale=100) == "[9.12, 13.3]"
