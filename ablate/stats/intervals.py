"""The one-sample interval every claim rests on, and the levels shared by the statistics modules
(:mod:`ablate.stats.inference`, :mod:`ablate.stats.sequential`), kept below both so neither imports the other."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

#: Confidence level of every interval.
CONFIDENCE = 0.95
#: Family-wise error rate of the claims.
ALPHA = 0.05
#: Fewer seeds than this give no interval and no verdict but "not resolved".
MIN_SEEDS = 3


def finite(values: object) -> np.ndarray:
    """``values`` as a flat float array without its non-finite entries."""
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def t_interval(values: object, confidence: float = CONFIDENCE, min_n: int = MIN_SEEDS) -> tuple[float, float]:
    """The t-interval of the mean of ``values`` (one per seed): ``mean +- t_{n-1} sd / sqrt(n)``.

    Args:
        values: [n] finite values (non-finite ones are dropped).
        confidence: the interval's level.
        min_n: fewer values give ``(nan, nan)``: no interval.

    Returns:
        ``(low, high)`` in the values' units; a zero-width interval when every value is equal.
    """
    x = finite(values)
    if x.size < max(2, min_n):
        return math.nan, math.nan
    half = stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)
