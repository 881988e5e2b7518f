"""Extended studies: the two-stage test of a claim whose seeds were extended after its report was read.

A study that ran n1 seeds, whose report was read, and that was then extended to n seeds because a
claim was not resolved, is a **two-stage design**: testing all n seeds at alpha with the single-stage
paired t is not the test it claims to be (the extension happened *because* the first test did not
reject, which inflates the false detections). The valid test here:

- **Each stage on its own.** Stage 1 is the first n1 seeds, stage 2 the n2 = n - n1 extension seeds
  alone. Each stage's per-seed differences (level - baseline, points) give a one-sided paired-t
  p-value, turned into a standard normal score (:func:`stage_z`): under no difference and normal
  per-seed differences, z1 and z2 are independent N(0, 1), whatever n2 was chosen from stage 1.
- **Inverse-normal combination** (Bauer and Koehne 1994, Lehmacher and Wassmer 1999):
  ``Z = w1 z1 + sqrt(1 - w1^2) z2``, with the weight ``w1`` fixed when the extension is committed,
  before its trials ran (:func:`default_w1`: ``sqrt(n1 / n)``, the weight the seeds would have had).
- **An interim look with O'Brien-Fleming-type spending** (Lan and DeMets 1983): the first stage's
  report was read, so stage 1 spends part of alpha. At information fraction ``t = w1^2`` it spends
  ``alpha1 = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` (little, early), the stage-1 boundary is
  ``c1 = z_{1-alpha/2} / sqrt(t)``, and the final boundary ``c2`` spends the rest
  (:func:`boundaries`): 2.772 and 1.979 at ``t = 1/2``, alpha 0.05 (the classical O'Brien-Fleming
  boundaries of two equally spaced looks, 2.797 and 1.977, spend 0.0052 at the first look instead of
  0.0056).
- **The p-value ordered by the standardized statistic at stopping** (:func:`two_stage`): two-sided,
  valid, <= alpha exactly when the boundary test rejects, and with no floor at the level spent at the
  interim look (the stage-wise ordering's). It replaces the claim's single-stage paired-t p in the
  report's Holm family.

Sign convention: positive differences and scores mean level > baseline; the test is two-sided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from scipy import integrate, optimize, special

from ablate.intervals import ALPHA, finite, t_interval

if TYPE_CHECKING:
    from ablate.inference import Contrast

__all__ = ["EXTENSION_W1", "TwoStage", "boundaries", "default_w1", "stage_z", "staged_contrasts", "two_stage"]

#: Scores beyond this many standard deviations are treated as infinite in the integrals (the normal
#: tail there is below 1e-300).
_Z_MAX = 40.0


def stage_z(differences: object) -> float:
    """The one-sided paired-t evidence of one stage as a standard normal score.

    ``t = mean(d) / (sd(d) / sqrt(n))`` on the stage's ``n`` per-seed differences, then
    ``z = Phi^{-1}(T_{n-1}(t))`` (computed from the nearer tail, so large ``|t|`` keep their precision).
    Under no difference, with normal per-seed differences, z ~ N(0, 1) exactly, at any n >= 2.

    Args:
        differences: [n] per-seed differences, level - baseline (points or any unit: z is unitless);
            non-finite values are dropped.

    Returns:
        z (unitless, signed like the mean difference). NaN below 2 differences (no t statistic). With
        zero spread (sd == 0, every difference equal) there is no t statistic either: z is 0 when every
        difference is 0 (identical samples carry no evidence either way) and ``+-inf`` otherwise (the
        limit of z as the spread falls to 0 around a non-zero mean). ``ablate.inference`` does not test
        a zero-spread contrast at all (``Contrast.degenerate``); a caller that follows it says so in
        words instead of combining such a stage.
    """
    d = np.asarray(differences, dtype=float).ravel()
    d = d[np.isfinite(d)]
    n = d.size
    if n < 2:
        return math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0:
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    t = mean / (sd / math.sqrt(n))
    tail = float(special.stdtr(n - 1, -abs(t)))  # P(T <= -|t|) = P(T >= |t|)
    return math.copysign(float(-special.ndtri(tail)), t) if tail > 0 else math.copysign(math.inf, t)


def _continue_tail(c1: float, w1: float, q: float) -> float:
    """``P(|Z1| < c1, |Z| >= q)`` for ``Z = w1 Z1 + sqrt(1 - w1^2) Z2``, Z1, Z2 independent N(0, 1):
    the probability of continuing past stage 1 and then reaching ``|Z| >= q`` under no difference.

    ``2 int_0^c1 phi(x) [Phi((-q - w1 x) / s) + Phi((-q + w1 x) / s)] dx`` with ``s = sqrt(1 - w1^2)``
    (scipy's ``quad``, absolute error below 1e-13)."""
    hi = min(c1, _Z_MAX)
    if hi <= 0:
        return 0.0
    if w1 >= 1.0:  # Z = Z1: inside the continuation region |Z| < c1
        return float(max(0.0, 2 * (special.ndtr(hi) - special.ndtr(min(q, hi)))))
    s = math.sqrt(1.0 - w1 * w1)

    def f(x: float) -> float:
        return float(math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
                     * (special.ndtr((-q - w1 * x) / s) + special.ndtr((-q + w1 * x) / s)))

    value, _ = integrate.quad(f, 0.0, hi, epsabs=1e-14, epsrel=1e-12, limit=200)
    return float(2 * value)


def _check_w1(w1: float, alpha: float) -> None:
    if not 0.0 <= w1 <= 1.0:  # NaN fails too
        raise ValueError(f"w1={w1!r}: the stage-1 weight is a number in [0, 1] (sqrt(n1 / n): default_w1)")
    if not 0.0 < alpha < 1.0:  # NaN fails too
        raise ValueError(f"alpha={alpha!r}: a level in (0, 1), e.g. 0.05")


@lru_cache(maxsize=4096)
def boundaries(w1: float, alpha: float = ALPHA) -> tuple[float, float, float]:
    """Two-sided group-sequential boundaries of a two-stage inverse-normal design.

    The information fraction at the interim look is ``t = w1^2``. An O'Brien-Fleming-type Lan-DeMets
    spending function ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` spends ``alpha1 = alpha(t)`` at
    stage 1, whose boundary is ``c1 = Phi^{-1}(1 - alpha1 / 2) = z_{1-alpha/2} / sqrt(t)``; the final
    boundary ``c2`` solves ``alpha1 + P(|Z1| < c1, |Z| >= c2) = alpha``, with (Z1, Z) bivariate standard
    normal of correlation ``w1`` (a 1-D integral, scipy's ``quad``, solved by Brent's method to 1e-12).

    Args:
        w1: the stage-1 weight in [0, 1] (unitless; :func:`default_w1`).
        alpha: the two-sided level of the whole design.

    Returns:
        ``(c1, c2, alpha1)``: boundaries on the z scale (unitless) and the level spent at stage 1. At
        ``t = 1/2``, alpha 0.05: (2.7718, 1.9793, 0.00557); the classical O'Brien-Fleming boundaries
        (a constant times ``sqrt(2 / k)`` at look k; Jennison and Turnbull 2000, Table 2.3) are
        (2.797, 1.977), which the same integral reproduces (tests/test_sequential.py). Limits:
        ``w1 = 0`` (stage 1 carries no weight) gives ``(inf, z_{1-alpha/2}, 0)``, the single-stage test
        of stage 2; ``w1 = 1`` gives ``(z_{1-alpha/2}, inf, alpha)``, the single-stage test of stage 1;
        as ``w1 -> 0``, ``c2 -> z_{1-alpha/2}`` (1.95996 at alpha 0.05) and ``c1 -> inf``.

    Raises:
        ValueError: ``w1`` outside [0, 1] or ``alpha`` outside (0, 1).
    """
    _check_w1(w1, alpha)
    z = float(special.ndtri(1 - alpha / 2))
    if w1 == 0.0:
        return math.inf, z, 0.0
    c1 = z / w1  # z / sqrt(t)
    alpha1 = float(2 * special.ndtr(-c1))
    if w1 == 1.0:
        return c1, math.inf, alpha
    rest = alpha - alpha1
    c2 = optimize.brentq(lambda c: _continue_tail(c1, w1, c) - rest, 0.0, _Z_MAX, xtol=1e-12, rtol=1e-12)
    return float(c1), float(c2), alpha1


def default_w1(n1: int, n: int) -> float:
    """The stage-1 weight ``sqrt(n1 / n)`` (unitless): the share of the seeds' information stage 1
    would hold in a single test of all ``n`` seeds. Fix it when the extension to ``n`` seeds is
    committed, before its trials run, and keep it whatever the extension then shows.

    Raises:
        ValueError: unless ``0 < n1 <= n``.
    """
    if not 0 < n1 <= n:
        raise ValueError(f"n1={n1}, n={n}: the first stage's seeds n1 and the extended total n need 0 < n1 <= n")
    return math.sqrt(n1 / n)


@dataclass(frozen=True)
class TwoStage:
    """The two-stage test of one claim (see the module docstring).

    Attributes:
        n1, n2: seeds in stage 1 and in the extension alone.
        w1: the stage-1 weight (unitless); alpha: the design's two-sided level.
        mean1, ci1_low, ci1_high: stage 1's mean per-seed difference and its 95% paired-t interval
            (the differences' units; NaN interval below 3 seeds).
        mean2, ci2_low, ci2_high: the same for the extension's seeds alone (NaN without them).
        z1, z2: each stage's normal score (:func:`stage_z`; z2 NaN without an extension).
        z: the combined score ``w1 z1 + sqrt(1 - w1^2) z2``.
        c1, c2, alpha1: the boundaries and the level spent at stage 1 (:func:`boundaries`).
        stopped: ``|z1| >= c1``: stage 1 alone rejects, and the design stops there (the extension's
            seeds, if any ran, do not enter the test).
        p: the two-sided p-value that orders outcomes by the standardized statistic at the stage the
            design stopped (``q = |z1|`` when stopped, else ``|z|``): ``P(|Z1| >= max(c1, q)) + P(|Z1| < c1,
            |Z| >= q)`` under no difference, uniform under it (valid), ``p <= alpha`` exactly when
            :attr:`rejected` (since ``c1 > c2``), and with no floor: the stage-wise ordering would add
            all of ``alpha1`` to every outcome that continued, so no extended claim could go below it. NaN
            when the design has not stopped and there is no extension yet (nothing to test), or a stage
            has fewer than 2 seeds.
    """

    n1: int
    n2: int
    w1: float
    alpha: float
    mean1: float
    ci1_low: float
    ci1_high: float
    mean2: float
    ci2_low: float
    ci2_high: float
    z1: float
    z2: float
    z: float
    c1: float
    c2: float
    alpha1: float
    stopped: bool
    p: float

    @property
    def rejected(self) -> bool:
        """The boundary test rejects no difference: ``|z1| >= c1``, or it continued and ``|z| >= c2``."""
        return self.stopped or (math.isfinite(self.z) and abs(self.z) >= self.c2)


def two_stage(d1: object, d2: object, *, w1: float, alpha: float = ALPHA) -> TwoStage:
    """The two-stage test of one claim from its per-seed differences.

    Args:
        d1: [n1] stage 1's per-seed differences (level - baseline; points or the objective's units).
        d2: [n2] the extension's per-seed differences alone (may be empty: the interim analysis).
        w1: the stage-1 weight, fixed when the extension was committed (:func:`default_w1`).
        alpha: the design's two-sided level.

    Returns:
        A :class:`TwoStage`; its ``p`` is the claim's p-value in the report's Holm family.
    """
    a, b = finite(d1), finite(d2)
    c1, c2, alpha1 = boundaries(float(w1), alpha)
    z1, z2 = stage_z(a), stage_z(b)
    if w1 == 0.0 or w1 == 1.0:  # one stage carries all the weight
        z = z2 if w1 == 0.0 else z1
    else:
        z = w1 * z1 + math.sqrt(1.0 - w1 * w1) * z2
    stopped = math.isfinite(c1) and not math.isnan(z1) and abs(z1) >= c1
    q = abs(z1) if stopped else abs(z)  # the standardized statistic at the stage the design stopped
    p = math.nan if math.isnan(q) else float(min(1.0, 2 * special.ndtr(-max(c1, q)) + _continue_tail(c1, w1, q)))
    lo1, hi1 = t_interval(a)
    lo2, hi2 = t_interval(b)
    return TwoStage(
        n1=int(a.size), n2=int(b.size), w1=float(w1), alpha=float(alpha),
        mean1=float(a.mean()) if a.size else math.nan, ci1_low=lo1, ci1_high=hi1,
        mean2=float(b.mean()) if b.size else math.nan, ci2_low=lo2, ci2_high=hi2,
        z1=z1, z2=z2, z=float(z), c1=c1, c2=c2, alpha1=alpha1, stopped=stopped, p=p,
    )



#: The stage-1 weight ablate uses for every extension: equal weights, fixed before any stage's data are
#: seen. ``sqrt(n1 / n)`` with ``n`` planned from stage 1's own spread (what a report's planner does) makes
#: the weight depend on stage 1 and lifted false detections to 5.4% in benchmarks/bench_calibration.py
#: --two-stage (20,000 draws); equal weights kept them at 3.7-4.8% (docs/statistics.md).
EXTENSION_W1 = math.sqrt(0.5)


def staged_contrasts(contrasts: Sequence[Contrast], n1: int, *, w1: float = EXTENSION_W1,
                     ) -> tuple[list[Contrast], dict[str, TwoStage]]:
    """The contrasts of a study extended after its ``n1``-seed report was read, each tested as a
    two-stage design: stage 1 is seeds ``0..n1-1``, the extension the seeds after them, combined with the
    stage-1 weight ``w1`` (:data:`EXTENSION_W1`, fixed before any stage's data). Each contrast's ``p``
    becomes the two-stage p (:func:`two_stage`), which the family's Holm correction then uses;
    estimates, intervals and TOST stay those of all seeds. A contrast without seeds beyond ``n1`` (the
    first stage alone, a smoke budget) is left as it is.

    Returns:
        ``(contrasts, tests)``: the contrasts in order, and claim name -> its :class:`TwoStage`.
    """
    from dataclasses import replace

    out: list[Contrast] = []
    tests: dict[str, TwoStage] = {}
    for c in contrasts:
        seeds = np.asarray(c.seeds, dtype=int)
        d = np.asarray(c.per_seed, dtype=float)
        first, later = d[seeds < n1], d[seeds >= n1]
        if later.size == 0 or first.size < 2 or c.degenerate:
            out.append(c)
            continue
        test = two_stage(first, later, w1=w1)
        tests[c.name] = test
        out.append(replace(c, p=test.p))
    return out, tests
