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

**One-sided tests: equivalence and interactions** (issue 54). The same two stages, weights and spending
cover the two tests of an extended study that reject in one direction only:

- **Equivalence** (:func:`two_stage_tost`): each of the TOST's two one-sided tests at ``+-bound`` is a
  two-stage test of its own. The lower test (no difference at or below ``-bound``) scores each stage by
  ``stage_z(d + bound)``, the upper (at or above ``+bound``) by ``-stage_z(d - bound)``: exactly the stage's
  one-sided paired-t p ``p_k`` as ``z_k = Phi^{-1}(1 - p_k)``, N(0, 1) when the true difference lies on that
  bound. Each pair is combined as above and judged by :func:`one_sided`; the TOST p is the larger of the two
  combined p-values (an intersection-union test: valid at alpha when each one-sided test is).
- **Interactions** (``ablate.stats.inference.staged_interaction``): the paired interaction test (Hotelling's T² on
  the per-seed interaction contrasts) on stage 1's seeds and on the extension's alone; each stage's p-value
  ``p_k`` becomes ``z_k = Phi^{-1}(1 - p_k)`` (:func:`p_score`: N(0, 1) under no interaction; large z, evidence
  of one), combined and judged by :func:`one_sided`.
- **One-sided boundaries** (:func:`one_sided_boundaries`): a one-sided test at alpha is one tail of the
  two-sided design at ``2 alpha`` (the TOST at alpha is the ``1 - 2 alpha`` interval inside the bounds), so
  stage 1 spends ``alpha1 = Phi(-z_{1-alpha} / sqrt(t))``, half of that design's O'Brien-Fleming-type spending,
  with ``c1 = z_{1-alpha} / w1``, and ``c2`` spends the rest exactly: 2.326 and 1.685 at ``t = 1/2``, alpha 0.05.
  The p-value is ordered by the score where the design stopped, as above, in one tail:
  ``p = P(Z1 >= max(c1, q)) + P(Z1 < c1, Z >= q)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import integrate, optimize, special

from ablate.stats.contrast import Contrast
from ablate.stats.intervals import ALPHA, finite, t_interval

__all__ = ["EXTENSION_W1", "OneSided", "TwoStage", "TwoStageTost", "boundaries", "default_w1", "one_sided",
           "one_sided_boundaries", "p_score", "stage_z", "staged_contrasts", "staged_equivalence", "two_stage",
           "two_stage_tost"]

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
        limit of z as the spread falls to 0 around a non-zero mean). ``ablate.stats.inference`` does not test
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
    estimates and intervals stay those of all seeds (the TOST: :func:`staged_equivalence`). A contrast without seeds beyond ``n1`` (the
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


# ------------------------------------------------------------------ one-sided tests: equivalence, interactions


def p_score(p: float) -> float:
    """A one-sided (or direction-free) p-value as a standard normal score: ``z = Phi^{-1}(1 - p)``, computed as
    ``-Phi^{-1}(p)`` so that small p keep their precision. Uniform p (the test's null) gives z ~ N(0, 1); large
    z is evidence against the null. ``+inf`` at p = 0, ``-inf`` at p = 1, NaN for NaN."""
    if math.isnan(p):
        return math.nan
    return float(-special.ndtri(min(1.0, max(0.0, float(p)))))


def _continue_above(c1: float, w1: float, q: float) -> float:
    """``P(Z1 < c1, Z >= q)`` for ``Z = w1 Z1 + sqrt(1 - w1^2) Z2``, Z1, Z2 independent N(0, 1): the probability
    of continuing past a one-sided stage-1 boundary and then reaching ``Z >= q`` under the null.

    ``int_{-inf}^{c1} phi(x) Phi((w1 x - q) / s) dx`` with ``s = sqrt(1 - w1^2)`` (scipy's ``quad``, absolute
    error below 1e-13; ``q`` may be negative)."""
    hi = min(c1, _Z_MAX)
    if w1 >= 1.0:  # Z = Z1: q <= Z1 < c1
        return float(max(0.0, special.ndtr(hi) - special.ndtr(q)))
    if w1 <= 0.0:  # Z = Z2, independent of Z1
        return float(special.ndtr(hi) * special.ndtr(-q))
    s = math.sqrt(1.0 - w1 * w1)

    def f(x: float) -> float:
        return float(math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * special.ndtr((w1 * x - q) / s))

    peak = min(max(w1 * q, -_Z_MAX + 1.0), hi - 1e-9)  # where the integrand's mass lies for a large q
    value, _ = integrate.quad(f, -_Z_MAX, hi, points=[peak], epsabs=1e-14, epsrel=1e-12, limit=200)
    return float(value)


@lru_cache(maxsize=4096)
def one_sided_boundaries(w1: float, alpha: float = ALPHA) -> tuple[float, float, float]:
    """One-sided group-sequential boundaries of a two-stage inverse-normal design at level ``alpha``.

    The one tail of :func:`boundaries` at ``2 alpha``: stage 1 spends ``alpha1 = Phi(-c1)`` with
    ``c1 = z_{1-alpha} / w1`` (half the O'Brien-Fleming-type spending ``2 - 2 Phi(z_{1-alpha} / sqrt(t))`` at
    information fraction ``t = w1^2``), and the final boundary ``c2`` solves ``alpha1 + P(Z1 < c1, Z >= c2) =
    alpha`` exactly (:func:`_continue_above`, Brent's method to 1e-12). It differs from the upper half of
    ``boundaries(w1, 2 alpha)`` only by ``P(Z1 <= -c1, Z >= c2)``, below 1e-8 here.

    Args:
        w1: the stage-1 weight in [0, 1] (unitless; :data:`EXTENSION_W1`).
        alpha: the one-sided level of the whole design, in (0, 1/2).

    Returns:
        ``(c1, c2, alpha1)``: (2.3262, 1.6845, 0.0100) at ``t = 1/2``, alpha 0.05. Limits: ``w1 = 0`` gives
        ``(inf, z_{1-alpha}, 0)``, the single-stage test of stage 2; ``w1 = 1`` gives ``(z_{1-alpha}, inf, alpha)``.

    Raises:
        ValueError: ``w1`` outside [0, 1] or ``alpha`` outside (0, 1/2).
    """
    _check_w1(w1, alpha)
    if not alpha < 0.5:
        raise ValueError(f"alpha={alpha!r}: a one-sided level in (0, 0.5), e.g. 0.05")
    z = float(-special.ndtri(alpha))
    if w1 == 0.0:
        return math.inf, z, 0.0
    c1 = z / w1
    alpha1 = float(special.ndtr(-c1))
    if w1 == 1.0:
        return c1, math.inf, alpha
    rest = alpha - alpha1
    c2 = optimize.brentq(lambda c: _continue_above(c1, w1, c) - rest, -_Z_MAX, _Z_MAX, xtol=1e-12, rtol=1e-12)
    return float(c1), float(c2), alpha1


@dataclass(frozen=True)
class OneSided:
    """The two-stage test of one one-sided hypothesis (see the module docstring).

    Attributes:
        w1: the stage-1 weight; alpha: the one-sided level.
        z1, z2: each stage's score (large: evidence against the null; z2 NaN without an extension).
        z: ``w1 z1 + sqrt(1 - w1^2) z2``.
        c1, c2, alpha1: :func:`one_sided_boundaries`.
        stopped: ``z1 >= c1``: stage 1 alone rejects, and the test stops there.
        p: ``P(Z1 >= max(c1, q)) + P(Z1 < c1, Z >= q)`` under the null, ``q = z1`` when stopped, else ``z``:
            uniform under the null on its boundary, ``p <= alpha`` exactly when :attr:`rejected` wherever
            ``c1 > c2`` (every ``w1`` up to 0.9, :data:`EXTENSION_W1` among them).
            NaN when the test has not stopped and has no combined score (no extension, or a stage untested).
    """

    w1: float
    alpha: float
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
        """``z1 >= c1``, or the test continued and ``z >= c2``."""
        return self.stopped or (not math.isnan(self.z) and self.z >= self.c2)


def one_sided(z1: float, z2: float, *, w1: float, alpha: float = ALPHA) -> OneSided:
    """The two-stage test of one one-sided hypothesis from its stages' scores.

    Args:
        z1, z2: stage 1's and the extension's scores, each N(0, 1) on the null's boundary and larger under
            the alternative (:func:`stage_z` of shifted differences, or :func:`p_score` of a stage's p);
            ``z2`` NaN for the interim analysis.
        w1: the stage-1 weight, fixed before stage 2 (:data:`EXTENSION_W1`); alpha: the one-sided level.
    """
    c1, c2, alpha1 = one_sided_boundaries(float(w1), alpha)
    z = z2 if w1 == 0.0 else z1 if w1 == 1.0 else w1 * z1 + math.sqrt(1.0 - w1 * w1) * z2
    stopped = not math.isnan(z1) and math.isfinite(c1) and z1 >= c1
    q = z1 if stopped else z
    if math.isnan(q):
        p = math.nan
    elif q == math.inf:
        p = 0.0
    else:
        p = float(min(1.0, special.ndtr(-max(c1, q)) + _continue_above(c1, w1, q)))
    return OneSided(w1=float(w1), alpha=float(alpha), z1=float(z1), z2=float(z2), z=float(z), c1=c1, c2=c2,
                    alpha1=alpha1, stopped=bool(stopped), p=p)


@dataclass(frozen=True)
class TwoStageTost:
    """The two-stage TOST of one claim at ``+-bound`` (see the module docstring).

    Attributes:
        bound: the equivalence margin (the study's ``min_effect``, the differences' units).
        lower: the test of "the difference is at or below -bound" (scores ``stage_z(d + bound)``).
        upper: the test of "the difference is at or above +bound" (scores ``-stage_z(d - bound)``).
    """

    bound: float
    lower: OneSided
    upper: OneSided

    @property
    def p(self) -> float:
        """The TOST p: the larger of the two one-sided two-stage p-values (NaN when either is)."""
        a, b = self.lower.p, self.upper.p
        return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)

    @property
    def rejected(self) -> bool:
        """Both one-sided tests reject: equivalent within ``+-bound`` at the design's level."""
        return self.lower.rejected and self.upper.rejected


def two_stage_tost(d1: object, d2: object, bound: float, *, w1: float, alpha: float = ALPHA) -> TwoStageTost:
    """The two-stage TOST of one claim from its per-seed differences: each one-sided test of the TOST at
    ``+-bound`` on stage 1 (``d1``) and on the extension alone (``d2``, may be empty: the interim analysis),
    combined with the fixed weight ``w1`` (:func:`one_sided`).

    Raises:
        ValueError: ``bound`` not a positive number.
    """
    if not bound > 0:  # NaN fails too
        raise ValueError(f"bound={bound!r}: the equivalence margin is a positive number (the study's min_effect)")
    a, b = finite(d1), finite(d2)
    lower = one_sided(stage_z(a + bound), stage_z(b + bound), w1=w1, alpha=alpha)
    upper = one_sided(-stage_z(a - bound), -stage_z(b - bound), w1=w1, alpha=alpha)
    return TwoStageTost(float(bound), lower, upper)


def staged_equivalence(contrasts: Sequence[Contrast], n1: int, min_effect: float | None, *,
                       w1: float = EXTENSION_W1) -> tuple[list[Contrast], dict[str, TwoStageTost]]:
    """The equivalence tests of an extended study, two-stage: each contrast with a TOST (``p_tost`` finite:
    ``min_effect`` set, enough seeds, some spread) gets :func:`two_stage_tost`'s p at ``+-min_effect`` as its
    ``p_tost`` (stage 1 seeds ``0..n1-1``, the extension the seeds after them, weight ``w1``), which the
    family's Holm correction of the TOSTs then uses. A contrast without seeds beyond ``n1``, or with fewer than
    2 in stage 1, is left as it is (as :func:`staged_contrasts` leaves it).

    Returns:
        ``(contrasts, tests)``: the contrasts in order, and claim name -> its :class:`TwoStageTost`.
    """
    from dataclasses import replace

    out: list[Contrast] = []
    tests: dict[str, TwoStageTost] = {}
    for c in contrasts:
        seeds = np.asarray(c.seeds, dtype=int)
        d = np.asarray(c.per_seed, dtype=float)
        first, later = d[seeds < n1], d[seeds >= n1]
        if not min_effect or not math.isfinite(c.p_tost) or later.size == 0 or first.size < 2:
            out.append(c)
            continue
        test = two_stage_tost(first, later, float(min_effect), w1=w1)
        tests[c.name] = test
        out.append(replace(c, p_tost=test.p))
    return out, tests
