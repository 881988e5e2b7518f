"""Inference on a study's per-trial objectives: intervals that are right at 3-10 seeds, one linear
model per factorial study, one family of claims with Holm's correction, and seeds planned by power.

The unit of replication is the **seed**: every arm runs the same seeds, so the data are one number
per trial (arm x seed) and every comparison is paired by seed. What is computed, and why:

- **Every contrast is paired by seed** (the default, ``contrasts="paired"``): level - baseline,
  seed by seed, each seed's difference averaged over the *matched cells* (the combinations of the other
  factors at which both levels ran; a one-factor or one-at-a-time study has one). The 95% interval is
  the paired t-interval on the n per-seed differences, ``mean(d) +- t_{n-1, 0.975} sd(d) / sqrt(n)``,
  with n - 1 degrees of freedom. It estimates the spread of *this* contrast from its own differences,
  so it stays right when the arms' variances differ (the percentile bootstrap collapses onto
  ``[min, max]`` at 2-4 seeds and covers 52-87%). Fractional and random designs have no matched
  cells: a seed's difference is then the mean over the arms with the level minus the mean over the
  arms with the baseline level, and the two-factor interactions are assumed negligible (the report
  lists their aliases).
- **The linear model** of a factorial study (full with or without excluded cells, fractional,
  random), fitted with ``statsmodels``: seed as a block, every main effect, and (full designs) every
  two-factor interaction. It gives the interactions' F-tests under ``contrasts="model"``, and the
  analysis of variance table the report prints either way. Its analysis of variance uses
  **Type II** sums of squares computed by model comparison (each term against the model of every term
  that does not contain it), with degrees of freedom from matrix ranks, so it stays right with empty
  cells, excluded combinations and aliasing (``statsmodels``' own ``anova_lm(typ=2)`` assumes a
  full-rank design: on an earlier 12-arm reward_granularity table with excluded cells it reported the
  reward factor with F = 868, where the model comparison gives 49.1). With ``contrasts="model"`` the
  contrasts come from it too (the estimated marginal mean difference over the matched cells,
  ``fit.t_test``, with the residual df): more df, but one pooled residual variance for every arm, so
  its intervals against a baseline noisier than the other arms are too narrow (88-89% coverage at the
  SDs reward_granularity showed; benchmarks/RESULTS.md). It was the default before issue 26.
- **Every interaction is tested paired by seed** too (the default): per seed, the interaction
  contrasts ``(y[i, j] - y[i, b0]) - (y[a0, j] - y[a0, b0])`` over matched cells, and Hotelling's T²
  that their means are all 0 (an F(m, n - m) test, the paired t-test at m = 1;
  :func:`paired_interaction`). Like the contrasts, it estimates its own covariance instead of one
  pooled residual variance, so an arm noisier than the rest does not inflate its false detections
  (the pooled F-test reached 6.3% family-wise at nominal 5% in benchmarks/RESULTS.md). It needs
  m + 1 seeds for m = (levels of a - 1)(levels of b - 1) degrees of freedom.
- **An extended study** (``extended_after:``, its seeds extended after a report of its first ones was
  read) tests every claim as a two-stage design (:mod:`ablate.stats.sequential`): each contrast, each TOST
  and each interaction on stage 1's seeds and on the extension's alone, combined with fixed weights.
- **Below 3 seeds no interval** is given: the per-seed values are shown and the claim is "not
  resolved at n seeds".
- **One family of claims per report**: every contrast of the objective and every testable
  two-factor interaction; Holm's step-down correction over the whole family
  (``statsmodels.stats.multitest.multipletests``). A claim is *detected* (Holm-adjusted p < alpha:
  its 95% interval excludes 0), *equivalent* (the study's ``min_effect`` is set and the two
  one-sided tests against +-min_effect, Holm-adjusted, reject: no effect as large as
  ``min_effect``; Schuirmann 1987, Lakens 2017), or *not resolved at n seeds* (with the seeds a
  test at the family's Bonferroni level would need for 80% power at ``min_effect``).
- **Effect sizes**: d_z = mean(d) / sd(d) of the per-seed differences (paired data); the
  probability of improvement is the fraction of seeds (ties left out) on which the level beat the
  baseline, with its exact Clopper-Pearson interval.

Sign convention: a difference is ``level - baseline`` in the objective's units; it is an improvement
when it is positive for ``mode: max`` and negative for ``mode: min``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats

from ablate.stats.contrast import Contrast, Improvement
from ablate.stats.intervals import ALPHA, CONFIDENCE, MIN_SEEDS, t_interval
from ablate.stats.intervals import finite as _finite

if TYPE_CHECKING:
    from ablate.stats.sequential import OneSided, TwoStageTost
    from ablate.study import Study
    from ablate.tracking.results import Results

#: Power that the seed planning aims for.
POWER = 0.8
#: The largest seed count the planner looks at.
MAX_SEEDS = 1000
#: Verdicts a claim can carry (no other verdict words are used). *Uninformative* is an equivalence measured
#: where the study's positive control says the baseline did not learn (:func:`ablate.report.learning.judged`):
#: no choice had anything to change there, so it is not evidence that the choice does not matter.
DETECTED, EQUIVALENT, NOT_RESOLVED = "detected", "equivalent", "not resolved"
UNINFORMATIVE = "uninformative"
#: Inference methods.
PAIRED, MODEL = "paired t", "linear model"


# ------------------------------------------------------------------------------------- one sample


def d_z(differences: object) -> float:
    """Cohen's d_z of paired data: ``mean(d) / sd(d)`` of the per-seed differences (NaN with fewer
    than two or when sd = 0)."""
    d = _finite(differences)
    if d.size < 2 or d.std(ddof=1) == 0:
        return math.nan
    return float(d.mean() / d.std(ddof=1))


def seeds_improved(differences: object, mode: str = "max", confidence: float = CONFIDENCE) -> Improvement:
    """The fraction of seeds whose difference (level - baseline) is an improvement (> 0 for ``max``,
    < 0 for ``min``), ties (difference 0) left out, with the exact binomial interval
    (``scipy.stats.binomtest(...).proportion_ci(method="exact")``)."""
    d = _finite(differences)
    sign = -1.0 if mode == "min" else 1.0
    untied = d[d != 0] * sign
    n, k = int(untied.size), int((untied > 0).sum())
    if n == 0:
        return Improvement(0, 0, math.nan, math.nan, math.nan)
    ci = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    return Improvement(k, n, k / n, float(ci.low), float(ci.high))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979) via ``statsmodels.stats.multitest.multipletests``;
    NaN entries are not tests: they stay NaN and do not count in the family's size.

    statsmodels' Holm ends with ``gc.collect()``, a full collection of the process's heap (0.1 s a call in
    ``ablate ledger``, 79 calls); the heap is frozen around the call (``gc.freeze``, undone after) so that it
    only scans what the call made, unless the caller froze objects itself (then nothing is touched)."""
    import gc

    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            out[ok] = multipletests(p[ok], method="holm")[1]
        finally:
            if freeze:
                gc.unfreeze()
    return out


def tost_p(estimate: float, se: float, df: float, bound: float | None) -> float:
    """p-value of the two one-sided tests (TOST) that the true difference lies within
    ``(-bound, +bound)``: ``max(P(T >= (est + bound) / se), P(T <= (est - bound) / se))`` flipped to
    the rejecting tails, T ~ t(df). Small p: equivalent. NaN without a bound, se or df."""
    if not (bound is not None and bound > 0 and math.isfinite(se) and se >= 0 and df > 0 and math.isfinite(estimate)):
        return math.nan
    if se == 0:
        return 0.0 if abs(estimate) < bound else 1.0
    p_low = stats.t.sf((estimate + bound) / se, df)   # H0: diff <= -bound
    p_high = stats.t.cdf((estimate - bound) / se, df)  # H0: diff >= +bound
    return float(max(p_low, p_high))


def seeds_for_power(sd: float, effect: float, *, alpha: float = ALPHA, power: float = POWER,
                    max_n: int = MAX_SEEDS) -> float:
    """The smallest number of seeds n >= 2 at which a two-sided paired t-test at ``alpha`` detects a
    true mean difference ``effect`` with probability ``power``, when the per-seed differences have
    standard deviation ``sd``: :func:`paired_t_power`, which rises with n, searched from the z-test's n
    (statsmodels' ``TTestPower.power`` returned NaN at large effects and few seeds, which skipped
    those n: behaviour_logp's d = 4.7 read 5 seeds where 3 have power 0.96).

    Returns:
        n; ``inf`` when ``max_n`` is not enough or ``effect`` is 0; NaN when sd is unknown; 2 when
        sd is 0 and the effect is not.
    """
    if not (math.isfinite(sd) and math.isfinite(effect)):
        return math.nan
    if effect == 0:
        return math.inf
    if sd == 0:
        return 2.0
    es = abs(effect) / sd
    if es == 0:  # an effect too small for a float against sd
        return math.inf

    def enough(n: int) -> bool:
        return paired_t_power(es, n, alpha) >= power

    # bracket (lo, hi]: lo is not enough (or below 2), hi is; start at the z-test's n, then bisect
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    guess = int(min(max_n, max(2, math.ceil(min((z / es) ** 2, 1e12)))))
    step = 1
    if enough(guess):
        lo, hi = guess - 1, guess
        while lo >= 2 and enough(lo):
            hi, step = lo, step * 2
            lo = max(1, hi - step)
    else:
        lo, hi = guess, guess + 1
        while hi <= max_n and not enough(hi):
            lo, step = hi, step * 2
            hi = lo + step
        if hi > max_n:
            if lo >= max_n or not enough(max_n):
                return math.inf
            hi = max_n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return float(hi)


def paired_t_power(effect: float, n: int, alpha: float = ALPHA) -> float:
    """The power of a two-sided one-sample (paired) t-test at ``alpha`` with ``n`` observations when
    the true mean is ``effect`` standard deviations from 0 (Cohen's d; unitless).

    With ``c`` the t critical value on ``n - 1`` df and ``S = sqrt(V / df)``, ``V ~ chi2(df)``, the test
    statistic is ``(Z + d sqrt(n)) / S``, so the power is ``E[Phi(d sqrt(n) - c S) + Phi(-d sqrt(n) - c
    S)]``, integrated over S (scipy's ``quad``). The same value as the noncentral t's tails
    (statsmodels' ``TTestPower.power``), which return NaN for large noncentralities at few df; this
    integral stays finite there. NaN for n < 2.
    """
    if n < 2 or not math.isfinite(effect):
        return math.nan
    from scipy import integrate, special

    df = n - 1
    nc = abs(effect) * math.sqrt(n)
    c = float(stats.t.ppf(1 - alpha / 2, df))
    root = math.sqrt(df)
    # the chi(df) density of s * sqrt(df), times sqrt(df), in logs (scipy.special: ~50x faster per point
    # than scipy.stats' scalar pdf and cdf calls, which made the planner the report's slowest step)
    log_norm = math.log(root) - (df / 2 - 1) * math.log(2.0) - float(special.gammaln(df / 2))

    def integrand(s: float) -> float:
        if s <= 0.0:
            return 0.0
        x = s * root
        density = math.exp(log_norm + (df - 1) * math.log(x) - 0.5 * x * x)
        return float((special.ndtr(nc - c * s) + special.ndtr(-nc - c * s)) * density)

    value, _ = integrate.quad(integrand, 0.0, np.inf, limit=200)
    return float(min(1.0, max(0.0, value)))


#: The largest effect (in standard deviations) :func:`resolvable_effect` searches; beyond it: inf.
MAX_RESOLVABLE_SD = 1e6


def resolvable_effect(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference that ``n`` seeds detect with probability ``power`` in a
    two-sided paired t-test at ``alpha``, when the per-seed differences have standard deviation ``sd``
    (the minimum detectable effect), in the units of ``sd``.

    Solved by bracketing and Brent's method on :func:`paired_t_power` (statsmodels'
    ``TTestPower.solve_power`` does not converge at n = 2, where it returned 10 SDs for ~34.5).

    Returns:
        The effect (>= 0); NaN when sd is unknown or n < 2 (no test); 0 when sd is 0; inf when no
        effect up to :data:`MAX_RESOLVABLE_SD` standard deviations reaches ``power``.
    """
    if not math.isfinite(sd) or n < 2:
        return math.nan
    if sd == 0:
        return 0.0
    from scipy.optimize import brentq

    def gap(d: float) -> float:
        return paired_t_power(d, int(n), alpha) - power

    hi = 1.0
    while gap(hi) < 0:
        if hi >= MAX_RESOLVABLE_SD:
            return math.inf
        hi *= 4
    es = brentq(gap, 0.0, hi, xtol=1e-10, rtol=1e-10)
    return float(es) * float(sd)


def contrast_resolvable_effect(contrast: Contrast, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference ``contrast``'s own test detects with probability ``power`` at
    ``alpha``: a t-test with the contrast's standard error and degrees of freedom (``n - 1`` for a
    paired contrast, the model's residual df for a model contrast), i.e. :func:`resolvable_effect` at
    ``nobs = df + 1`` with ``sd = se * sqrt(nobs)``. NaN when the contrast has no interval or fewer
    than :data:`MIN_SEEDS` seeds (its claim is not tested, so no difference is resolvable at that n)."""
    if (not (math.isfinite(contrast.se) and math.isfinite(contrast.df)) or contrast.df < 1
            or contrast.n_seeds < MIN_SEEDS or contrast.se == 0):
        return math.nan
    nobs = int(round(contrast.df)) + 1
    return resolvable_effect(contrast.se * math.sqrt(nobs), nobs, alpha=alpha, power=power)


def paired_eval_variance(x: Sequence[float], y: Sequence[float]) -> float:
    """The sampling variance of an accuracy difference measured on the same problems: ``x`` and ``y``
    are [P] 0/1 outcomes of two policies on the same P problems (paired by problem). With b the
    problems only ``x`` solved and c those only ``y`` solved, the difference of the two accuracies is
    ``(b - c) / P`` and its variance is estimated by ``((b + c) - (b - c)^2 / P) / P^2`` (the
    variance behind McNemar's test). Units: squared fraction. NaN for no problem."""
    a, b_ = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = a.size
    if n == 0 or b_.size != n:
        return math.nan
    b = float(((a == 1) & (b_ == 0)).sum())
    c = float(((a == 0) & (b_ == 1)).sum())
    return ((b + c) - (b - c) ** 2 / n) / n**2


# -------------------------------------------------------------------------------------- contrasts


def paired_values(per_trial: pd.DataFrame, column: str, level: str, base: str, level_columns: Sequence[str],
                  *, value: str = "objective") -> tuple[pd.DataFrame, int]:
    """Per seed, the value of ``level`` and of ``base`` of one factor, matched cell by cell.

    Arms with ``level`` are paired with the arm that differs only in this factor (set to ``base``)
    at the same seed; each seed's pairs are averaged (a full factorial averages over the other
    factors' matched cells; a one-at-a-time design compares with the baseline arm). Without any
    matched cell (fractional, random designs) the mean over the arms with each level is used.

    Returns:
        ``(frame, cells)``: columns ``seed, x`` (level), ``y`` (base), one row per seed with both;
        ``cells`` is the number of matched cells (0: marginal means).
    """
    others = [c for c in level_columns if c != column]
    xs = per_trial[per_trial[column] == level]
    ys = per_trial[per_trial[column] == base]
    pairs = xs.merge(ys, on=[*others, "seed"], suffixes=("_x", "_y"))
    pairs = pairs[np.isfinite(pairs[f"{value}_x"].astype(float)) & np.isfinite(pairs[f"{value}_y"].astype(float))]
    if not pairs.empty:
        cells = int(pairs[others].drop_duplicates().shape[0]) if others else 1
        g = pairs.groupby("seed")[[f"{value}_x", f"{value}_y"]].mean().reset_index()
        return g.rename(columns={f"{value}_x": "x", f"{value}_y": "y"}), cells
    x = xs.groupby("seed")[value].mean().rename("x")
    y = ys.groupby("seed")[value].mean().rename("y")
    df = pd.concat([x, y], axis=1, join="inner").reset_index()
    return df[np.isfinite(df["x"]) & np.isfinite(df["y"])].reset_index(drop=True), 0


def paired_contrast(x: Sequence[float], y: Sequence[float], seeds: Sequence[int], *, factor: str, level: str,
                    baseline: str, mode: str = "max", min_effect: float | None = None, cells: int = 1,
                    confidence: float = CONFIDENCE) -> Contrast:
    """The paired t comparison of per-seed values ``x`` (level) and ``y`` (baseline): estimate
    mean(x - y), se sd(d)/sqrt(n), n - 1 degrees of freedom, the t-interval (none below
    :data:`MIN_SEEDS` seeds), the two-sided p-value and the TOST p-value at ``min_effect``.

    When every difference is equal (sd 0: identical samples, or a constant shift) the interval has zero
    width and there is no test: p and the TOST p are NaN (:attr:`Contrast.degenerate`; the report says
    it in words)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    d = x - y
    n = int(d.size)
    est = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    se = sd / math.sqrt(n) if n > 1 else math.nan
    df = float(n - 1)
    if n >= 2 and sd == 0:
        p = math.nan  # no test applies to a zero-spread sample
    elif n >= 2:
        p = float(2 * stats.t.sf(abs(est) / se, df))
    else:
        p = math.nan
    lo, hi = t_interval(d, confidence)
    return Contrast(
        factor=factor, level=level, baseline=baseline, method=PAIRED, n_seeds=n, cells=cells,
        level_mean=float(x.mean()) if n else math.nan, baseline_mean=float(y.mean()) if n else math.nan,
        estimate=est, se=se, df=df, ci_low=lo, ci_high=hi,
        p=p if n >= MIN_SEEDS else math.nan,
        p_tost=tost_p(est, se, df, min_effect) if (min_effect and n >= MIN_SEEDS and sd != 0) else math.nan,
        seeds=tuple(int(s) for s in seeds), per_seed=tuple(float(v) for v in d), d_z=d_z(d),
        improved=seeds_improved(d, mode, confidence),
    )


@dataclass(frozen=True)
class Ratio:
    """A paired ratio ``y / x`` over seeds (e.g. baseline time / level time: how many times faster).

    Attributes:
        ratio: the geometric mean of the per-seed ratios; ci_low, ci_high: its 95% interval, the
            exponentiated t-interval of the per-seed log ratios (n - 1 df; NaN below :data:`MIN_SEEDS`).
        n_seeds: seeds with both values positive.
    """

    ratio: float
    ci_low: float
    ci_high: float
    n_seeds: int


def paired_ratio(x: Sequence[float], y: Sequence[float], confidence: float = CONFIDENCE) -> Ratio:
    """The paired ratio ``y / x`` of per-seed positive values (seconds, tokens ...): the geometric mean of
    the ratios with the exponentiated paired t-interval of ``log y - log x``; pairs with a non-positive or
    non-finite value are left out."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    d = np.log(y[keep]) - np.log(x[keep])
    if d.size == 0:
        return Ratio(math.nan, math.nan, math.nan, 0)
    lo, hi = t_interval(d, confidence)
    return Ratio(float(np.exp(d.mean())), float(np.exp(lo)), float(np.exp(hi)), int(d.size))


# ---------------------------------------------------------------------------------- linear model


def _q(column: str) -> str:
    return f"C(Q({column!r}), Sum)"


@dataclass(frozen=True)
class TermTest:
    """One row of the Type II analysis of variance.

    Attributes:
        term: ``factor`` or ``a:b``; kind: ``block``, ``main``, ``interaction`` or ``residual``.
        df: numerator degrees of freedom (rank gained by the term); df_resid: the full model's.
        sum_sq: Type II sum of squares (objective units squared); F, p: against the full model's
            residual mean square. note: why a term could not be tested.
        method: :data:`MODEL` (the pooled model's F-test) or :data:`PAIRED` (:func:`paired_interaction`:
            Hotelling's T² on the per-seed interaction contrasts, as F; sum_sq is NaN then).
    """

    term: str
    kind: str
    df: int
    df_resid: int
    sum_sq: float
    F: float
    p: float
    note: str = ""
    method: str = MODEL


@dataclass(frozen=True)
class LinearModel:
    """The study's fitted model (see :func:`fit_model`).

    Attributes:
        formula: the statsmodels formula, in the table's column names.
        n: trials used; df_resid: residual degrees of freedom (n - rank); sigma: residual SD.
        interactions: two-factor interactions are in the model.
        anova: the Type II table, one :class:`TermTest` per term and one for the residual.
        fit: the statsmodels results object (for contrasts).
        data: the rows it was fitted on.
    """

    formula: str
    n: int
    df_resid: int
    sigma: float
    interactions: bool
    anova: tuple[TermTest, ...]
    fit: object = field(repr=False, compare=False)
    data: pd.DataFrame = field(repr=False, compare=False)
    factors: dict[str, str] = field(default_factory=dict)

    def anova_frame(self) -> pd.DataFrame:
        """The Type II table as a DataFrame (``term, kind, df, df_resid, sum_sq, F, p, note``)."""
        cols = ["term", "kind", "df", "df_resid", "sum_sq", "F", "p", "note"]
        return pd.DataFrame([{c: getattr(t, c) for c in cols} for t in self.anova], columns=cols)


def _ols(formula: str, data: pd.DataFrame) -> object:
    import statsmodels.formula.api as smf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank-deficient designs (empty cells) are handled by rank below
        return smf.ols(formula, data).fit()


def _rank(fit: object) -> int:
    return int(np.linalg.matrix_rank(fit.model.exog))  # type: ignore[attr-defined]


def fit_model(per_trial: pd.DataFrame, factors: Mapping[str, str], *, value: str = "objective",
              interactions: bool = True, block: str = "seed") -> LinearModel:
    """Fit ``value ~ C(seed) + main effects [+ two-factor interactions]`` by OLS (``statsmodels``),
    sum-to-zero coded, and its Type II analysis of variance.

    Type II sum of squares of a term T: RSS(model of the terms not containing T) - RSS(that model
    + T); its df is the rank the term adds (so empty cells and aliased columns count right); F uses
    the full model's residual mean square and residual df (n - rank of the full model).

    Args:
        per_trial: one row per trial: the factor columns, ``seed``, ``value``.
        factors: factor name -> column.
        interactions: add every two-factor interaction (full designs).
        block: the blocking column; left out when it has one level.

    Raises:
        ValueError: no finite values.
    """
    data = per_trial[np.isfinite(per_trial[value].astype(float))].reset_index(drop=True).copy()
    if data.empty:
        raise ValueError("no finite objective values to fit")
    data["_y"] = data[value].astype(float)
    for c in factors.values():
        data[c] = data[c].astype(str)
    use_block = block in data and data[block].nunique() > 1
    if use_block:
        data["_block"] = data[block].astype(str)
    names = [f for f, c in factors.items() if data[c].nunique() > 1]
    terms: dict[str, tuple[str, tuple[str, ...]]] = {f: (_q(factors[f]), (f,)) for f in names}
    if interactions:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                terms[f"{a}:{b}"] = (f"{_q(factors[a])}:{_q(factors[b])}", (a, b))

    def formula(keep: Sequence[str], block: bool = use_block) -> str:
        rhs = ["1"] + (["C(_block)"] if block else []) + [terms[t][0] for t in keep]
        return "_y ~ " + " + ".join(rhs)

    full = _ols(formula(list(terms)), data)
    rank_full = _rank(full)
    df_res = int(len(data) - rank_full)
    rss_full = float(full.ssr)  # type: ignore[attr-defined]
    ms_res = rss_full / df_res if df_res > 0 else math.nan
    rows: list[TermTest] = []
    if use_block:
        without = _ols(formula(list(terms), block=False), data)
        rows.append(_term_row(f"{block} (block)", "block", without, full, full, df_res, ms_res))
    for t, (_, members) in terms.items():
        others = [u for u, (_, m) in terms.items() if u != t and not set(members) <= set(m)]
        reduced = _ols(formula(others), data)
        with_t = _ols(formula([*others, t]), data)
        rows.append(_term_row(t, "main" if len(members) == 1 else "interaction", reduced, with_t, full, df_res,
                              ms_res))
    rows.append(TermTest("residual", "residual", df_res, df_res, rss_full, math.nan, math.nan,
                         "" if df_res > 0 else "no residual degrees of freedom: add seeds to test effects"))
    return LinearModel(formula=formula(list(terms)), n=len(data), df_resid=df_res,
                       sigma=math.sqrt(ms_res) if df_res > 0 else math.nan, interactions=interactions,
                       anova=tuple(rows), fit=full, data=data, factors=dict(factors))


def _term_row(term: str, kind: str, reduced: object, with_t: object, full: object, df_res: int,
              ms_res: float) -> TermTest:
    df = _rank(with_t) - _rank(reduced)
    if df == 0:
        return TermTest(term, kind, 0, df_res, math.nan, math.nan, math.nan,
                        "not estimable: the design confounds it with the other terms")
    ss = max(0.0, float(reduced.ssr) - float(with_t.ssr))  # type: ignore[attr-defined]
    if not df_res > 0:
        return TermTest(term, kind, df, df_res, ss, math.nan, math.nan, "no residual degrees of freedom")
    if ms_res == 0:
        f = math.inf if ss > 0 else math.nan
        return TermTest(term, kind, df, df_res, ss, f, 0.0 if ss > 0 else math.nan)
    f = (ss / df) / ms_res
    return TermTest(term, kind, df, df_res, ss, float(f), float(stats.f.sf(f, df, df_res)))


def _exog(model: LinearModel, rows: pd.DataFrame) -> np.ndarray:
    spec = model.fit.model.data.model_spec  # type: ignore[attr-defined]
    try:
        from patsy import DesignInfo, build_design_matrices
    except ImportError:  # pragma: no cover - statsmodels with formulaic only
        DesignInfo = None  # noqa: N806
    if DesignInfo is not None and isinstance(spec, DesignInfo):
        return np.asarray(build_design_matrices([spec], rows)[0], dtype=float)
    return np.asarray(spec.get_model_matrix(rows), dtype=float)  # formulaic's ModelSpec


def model_contrast(model: LinearModel, per_trial: pd.DataFrame, factor: str, level: str, baseline: str, *,
                   mode: str = "max", min_effect: float | None = None, value: str = "objective",
                   confidence: float = CONFIDENCE) -> Contrast | None:
    """The estimated marginal mean difference ``level - baseline`` of one factor from the fitted
    model: the mean over the matched cells (combinations of the other factors at which both levels
    have data) of the model's predicted difference, or, without matched cells, the mean over the
    full grid of the other factors' levels present in the data. Its standard error, t-interval and
    p-value use the model's covariance and residual degrees of freedom (``fit.t_test``).

    Returns:
        The :class:`Contrast` (its per-seed differences are the matched cells' raw differences, for
        display), or None when no seed has both levels or the contrast is not estimable.
    """
    cols = model.factors
    col = cols[factor]
    others = [c for f, c in cols.items() if f != factor]
    data = model.data
    frame, cells = paired_values(per_trial.assign(**{c: per_trial[c].astype(str) for c in cols.values()}), col,
                                 str(level), str(baseline), list(cols.values()), value=value)
    if frame.empty:
        return None
    if cells:
        at_x = data[data[col] == str(level)][others].drop_duplicates()
        at_y = data[data[col] == str(baseline)][others].drop_duplicates()
        grid = at_x.merge(at_y, on=others) if others else pd.DataFrame(index=[0])
    else:
        grid = pd.DataFrame(index=[0])
        for c in others:
            grid = grid.merge(pd.DataFrame({c: sorted(data[c].unique())}), how="cross")
    seed_rows = data[["_block"]].drop_duplicates() if "_block" in data else pd.DataFrame(index=[0])
    base_grid = grid.merge(seed_rows, how="cross") if len(seed_rows.columns) else grid
    ex_x = _exog(model, base_grid.assign(**{col: str(level)}))
    ex_y = _exog(model, base_grid.assign(**{col: str(baseline)}))
    lvec = ex_x.mean(axis=0) - ex_y.mean(axis=0)
    x_full = np.asarray(model.fit.model.exog, dtype=float)  # type: ignore[attr-defined]
    proj = lvec @ np.linalg.pinv(x_full) @ x_full
    if not np.allclose(proj, lvec, atol=1e-8 * max(1.0, np.abs(lvec).max())):
        return None  # not estimable from this design
    est = float(lvec @ np.asarray(model.fit.params))  # type: ignore[attr-defined]
    if model.df_resid > 0:
        cov = np.asarray(model.fit.cov_params())  # type: ignore[attr-defined]
        se = float(math.sqrt(max(0.0, lvec @ cov @ lvec)))
    else:  # a saturated model has no residual variance to estimate a standard error from
        se = math.nan
    df = float(model.df_resid)
    n = int(len(frame))
    d = (frame["x"] - frame["y"]).to_numpy(float)
    ok = n >= MIN_SEEDS and df > 0 and math.isfinite(se)
    if ok and se > 0:
        half = stats.t.ppf(0.5 + confidence / 2, df) * se
        lo, hi = est - half, est + half
        p = float(2 * stats.t.sf(abs(est) / se, df))
    elif ok:  # no residual variance: no test (Contrast.degenerate)
        lo = hi = est
        p = math.nan
    else:
        lo = hi = p = math.nan
    return Contrast(
        factor=factor, level=str(level), baseline=str(baseline), method=MODEL, n_seeds=n, cells=cells,
        level_mean=float(frame["x"].mean()), baseline_mean=float(frame["y"].mean()), estimate=est, se=se, df=df,
        ci_low=float(lo), ci_high=float(hi), p=p,
        p_tost=tost_p(est, se, df, min_effect) if (min_effect and ok and se > 0) else math.nan,
        seeds=tuple(int(s) for s in frame["seed"]), per_seed=tuple(float(v) for v in d), d_z=d_z(d),
        improved=seeds_improved(d, mode, confidence),
    )


def interaction_contrasts(per_trial: pd.DataFrame, a: str, b: str, levels_a: Sequence[str], levels_b: Sequence[str],
                          base_a: str, base_b: str, level_columns: Sequence[str], *,
                          value: str = "objective") -> pd.DataFrame:
    """Per seed, the interaction contrasts of factors ``a`` and ``b`` (columns), matched cell by cell.

    For every level i of ``a`` and j of ``b`` other than the baselines, a seed's contrast is
    ``(y[i, j] - y[i, b0]) - (y[a0, j] - y[a0, b0])`` at each combination of the other factors where
    all four arms ran, averaged over those combinations (objective units). An (i, j) without any
    complete quartet is left out.

    Returns:
        One row per seed with every contrast finite (index ``seed``), one column ``"i × j"`` per
        estimable contrast: an n x m matrix, m <= (levels of a - 1)(levels of b - 1).
    """
    others = [c for c in level_columns if c not in (a, b)]
    keys = [*others, "seed"]
    frame = per_trial[np.isfinite(per_trial[value].astype(float))]

    def cell(la: str, lb: str) -> pd.DataFrame:
        g = frame[(frame[a] == la) & (frame[b] == lb)]
        return g.groupby(keys)[value].mean()

    columns = {}
    for i in (str(v) for v in levels_a if str(v) != str(base_a)):
        for j in (str(v) for v in levels_b if str(v) != str(base_b)):
            q = pd.concat([cell(i, j), cell(i, base_b), cell(base_a, j), cell(base_a, base_b)], axis=1,
                          join="inner", keys=["ij", "i0", "0j", "00"])
            if q.empty:
                continue
            d = (q["ij"] - q["i0"]) - (q["0j"] - q["00"])
            columns[f"{i} × {j}"] = d.groupby(level="seed").mean()
    if not columns:
        return pd.DataFrame(index=pd.Index([], name="seed"))
    return pd.concat(columns, axis=1, join="inner").dropna()


def paired_interaction(contrasts: pd.DataFrame, term: str) -> TermTest:
    """The robust test of one two-factor interaction: Hotelling's T² on the per-seed interaction
    contrasts (:func:`interaction_contrasts`, an n x m matrix D), as an F statistic.

    ``T² = n mean(D) S⁻¹ mean(D)ᵀ`` with S the sample covariance of D's rows (n - 1 denominator);
    ``F = (n - m) T² / (m (n - 1))`` ~ F(m, n - m) under no interaction (multivariate normal per-seed
    contrasts, any covariance: nothing pooled across arms, so unequal arm variances do not bias it;
    Hotelling 1931; ``statsmodels.stats.multivariate.test_mvmean``). At m = 1 it is the paired t-test
    of the one contrast: F = t², df (1, n - 1).
    The test is the same for any full-rank choice of contrasts, so the baseline levels do not matter.

    Returns:
        A :class:`TermTest` with ``method`` :data:`PAIRED`, ``df`` m, ``df_resid`` n - m and ``sum_sq``
        NaN; F and p NaN with a ``note`` when fewer than m + 1 seeds, or the contrasts have zero spread
        (identical per-seed contrasts: said in words, not tested).
    """
    d = contrasts.to_numpy(dtype=float)
    n, m = d.shape if d.ndim == 2 else (0, 0)
    if m == 0:
        return TermTest(term, "interaction", 0, 0, math.nan, math.nan, math.nan,
                        "not estimable: no seed ran all four arms of any pair of levels", PAIRED)
    if n <= m:
        return TermTest(term, "interaction", m, n - m, math.nan, math.nan, math.nan,
                        f"{n} seeds: the paired test of a {m}-df interaction needs at least {m + 1}", PAIRED)
    cov = np.atleast_2d(np.cov(d, rowvar=False, ddof=1))
    if np.linalg.matrix_rank(cov) < m:
        same = np.allclose(d, d[0])
        return TermTest(term, "interaction", m, n - m, math.nan, math.nan, math.nan,
                        "identical interaction contrasts in every seed: no test applies" if same else
                        "the per-seed interaction contrasts have no spread in some direction: no test applies",
                        PAIRED)
    if m == 1:  # the paired t-test (statsmodels' test_mvmean needs m >= 2)
        res = stats.ttest_1samp(d[:, 0], 0.0)
        return TermTest(term, "interaction", 1, n - 1, math.nan, float(res.statistic) ** 2, float(res.pvalue), "",
                        PAIRED)
    from statsmodels.stats.multivariate import test_mvmean

    res = test_mvmean(d, np.zeros(m))
    return TermTest(term, "interaction", m, n - m, math.nan, float(res.statistic), float(res.pvalue), "", PAIRED)


@dataclass(frozen=True)
class StagedTerm:
    """The two-stage test of one interaction of an extended study (:func:`staged_interaction`).

    Attributes:
        term: ``a:b``; n1, n2: seeds in stage 1 and in the extension alone.
        first, extension: the paired interaction test (:func:`paired_interaction`) on each stage's seeds alone.
        test: their combination (:class:`ablate.stats.sequential.OneSided`): ``z_k = Phi^{-1}(1 - p_k)`` of each
            stage's p, ``Z = w1 z1 + sqrt(1 - w1^2) z2``, one-sided boundaries and p.
    """

    term: str
    n1: int
    n2: int
    first: TermTest
    extension: TermTest
    test: OneSided

    def text(self) -> str:
        """The test in words (a not-detected term's reason in the report)."""
        t = self.test
        stages = "; ".join(f"{name} p = {x.p:.3g}" if math.isfinite(x.p) else f"{name} not tested ({x.note})"
                           for name, x in ((f"seeds 0-{self.n1 - 1}", self.first),
                                           (f"the extension's {self.n2} seeds alone", self.extension)))
        z = f"{t.z:+.2f}".replace("-", "\u2212")
        how = (f"stage 1 alone crossed its boundary {t.c1:.2f}" if t.stopped else
               f"combined Z = {z}, boundaries {t.c1:.2f} at stage 1 and {t.c2:.2f} at the end" if math.isfinite(t.z)
               else "no combined Z")
        head = f"p = {t.p:.3g} before Holm's correction" if math.isfinite(t.p) else "not tested"
        return f"two-stage test of the extended seeds: {head} ({stages}; {how})"


def staged_interaction(test: TermTest, contrasts: pd.DataFrame, n1: int, *, w1: float | None = None,
                       alpha: float = ALPHA) -> tuple[TermTest, StagedTerm | None]:
    """One interaction of a study extended after its ``n1``-seed report was read, tested as a two-stage design.

    The paired interaction test (:func:`paired_interaction`: Hotelling's T² on the per-seed interaction
    contrasts, the paired t at 1 df) runs on stage 1's seeds (``0..n1-1``) and on the extension's seeds alone;
    each stage's p-value ``p_k`` (direction-free, uniform under no interaction) becomes the normal score
    ``z_k = Phi^{-1}(1 - p_k)`` (:func:`ablate.stats.sequential.p_score`), and the two are combined as the contrasts
    are, ``Z = w1 z1 + sqrt(1 - w1^2) z2`` with the stage-1 weight fixed before stage 2
    (:data:`ablate.stats.sequential.EXTENSION_W1`), against one-sided O'Brien-Fleming-type boundaries at alpha
    (:func:`ablate.stats.sequential.one_sided`: 2.326 at stage 1 and 1.685 at the end at equal weights). That p replaces
    the test's.

    Args:
        test: the paired test of all seeds (its F and degrees of freedom are kept, for display).
        contrasts: [n, m] the per-seed interaction contrasts (:func:`interaction_contrasts`, index ``seed``).
        n1: the seeds of the first stage; w1: the stage-1 weight (default :data:`EXTENSION_W1`).

    Returns:
        ``(test, staged)``: the test with the two-stage p (NaN, with the reason in ``note``, when a stage cannot
        be tested and stage 1 did not cross its boundary) and its :class:`StagedTerm`; ``(test, None)``
        unchanged without seeds beyond ``n1`` or when all seeds give no test.
    """
    from ablate.stats.sequential import EXTENSION_W1, one_sided, p_score

    seeds = contrasts.index.to_numpy(dtype=int)
    first, later = contrasts[seeds < n1], contrasts[seeds >= n1]
    if later.empty or not math.isfinite(test.p):
        return test, None
    a, b = paired_interaction(first, test.term), paired_interaction(later, test.term)
    combined = one_sided(p_score(a.p), p_score(b.p), w1=EXTENSION_W1 if w1 is None else w1, alpha=alpha)
    staged = StagedTerm(test.term, len(first), len(later), a, b, combined)
    return replace(test, p=combined.p, note=staged.text()), staged


# ------------------------------------------------------------------------------------------ claims


@dataclass(frozen=True)
class Claim:
    """One member of the report's family: a contrast, or a model term (an interaction).

    Attributes:
        name: ``factor: level vs baseline`` or ``interaction a × b``.
        contrast: the contrast (None for a term); term: the ANOVA row (None for a contrast).
        p_holm, p_tost_holm: Holm-adjusted over the family (NaN when not testable).
        verdict: :data:`DETECTED`, :data:`EQUIVALENT`, :data:`NOT_RESOLVED`, or :data:`UNINFORMATIVE`
            (an equivalence where the baseline did not learn: :func:`ablate.report.learning.judged`).
        reason: for "not resolved": why (too few seeds, interval too wide ...); for "uninformative": where
            the baseline did not learn.
        seeds_needed: seeds a paired test at the family's Bonferroni level would need for 80% power
            at ``min_effect`` (or, without one, at the observed difference); NaN for terms.
        primary: the study's ``primary:`` names it.
        pooled: in a study with ``contexts:``, the contrast pooled across its contexts
            (:class:`ablate.stats.meta.Pooled`): the claim is then its verdict across contexts (one of
            :data:`ablate.stats.meta.VERDICTS`, or uninformative), with ``p_holm`` and ``p_tost_holm`` the pooled
            tests' Holm adjustments over the family; ``contrast`` stays the equal-weight average over the
            contexts, a description (:func:`ablate.report.statistics.judge`). None otherwise.
    """

    name: str
    contrast: Contrast | None
    term: TermTest | None
    p_holm: float
    p_tost_holm: float
    verdict: str
    reason: str
    seeds_needed: float
    primary: bool
    pooled: Any = None


@dataclass(frozen=True)
class Family:
    """The report's family of claims, corrected together (Holm, family-wise ``alpha``).

    Attributes:
        claims: primary claims first, then exploratory ones.
        size: the number of tests in the family (claims that could be tested).
        alpha: the family-wise error rate; min_effect: the study's minimum effect of interest.
        method: how the contrasts were estimated (:data:`PAIRED` or :data:`MODEL`).
        n_seeds: seeds per arm (the smallest over the claims).
    """

    claims: tuple[Claim, ...]
    size: int
    alpha: float
    min_effect: float | None
    method: str
    n_seeds: int

    @property
    def primary(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.primary)

    @property
    def exploratory(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if not c.primary)

    def table(self) -> pd.DataFrame:
        """One row per claim: ``claim, primary, n, contexts, estimate, ci_low, ci_high, p, p_holm, verdict,
        method, seeds_needed`` (estimate and interval in the objective's units; ``p`` the contrast's test or
        the term's; a term's estimate and interval NaN, its ``n`` the family's seeds). A claim pooled across
        contexts (:attr:`Claim.pooled`) gives the pooled estimate, interval and p, ``contexts`` its k
        (NaN otherwise) and ``n`` the seeds per context."""
        rows = []
        for c in self.claims:
            k, pooled = c.contrast, c.pooled
            est = pooled if pooled is not None else k
            rows.append({"claim": c.name, "primary": c.primary,
                         "n": k.n_seeds if k is not None else int(self.n_seeds),
                         "contexts": pooled.k if pooled is not None else math.nan,
                         "estimate": est.estimate if est is not None else math.nan,
                         "ci_low": est.ci_low if est is not None else math.nan,
                         "ci_high": est.ci_high if est is not None else math.nan,
                         "p": est.p if est is not None else (c.term.p if c.term is not None else math.nan),
                         "p_holm": c.p_holm, "verdict": c.verdict,
                         "method": pooled.method if pooled is not None else self.method,
                         "seeds_needed": c.seeds_needed})
        return pd.DataFrame(rows, columns=["claim", "primary", "n", "contexts", "estimate", "ci_low", "ci_high", "p",
                                           "p_holm", "verdict", "method", "seeds_needed"])


def make_family(contrasts: Sequence[Contrast], terms: Sequence[TermTest] = (), *, min_effect: float | None = None,
                alpha: float = ALPHA, method: str = PAIRED, power: float = POWER) -> Family:
    """Correct every contrast and testable term together (Holm) and give each its verdict.

    A contrast is *detected* when its Holm-adjusted p < alpha, else *equivalent* when ``min_effect``
    is set and its Holm-adjusted TOST p < alpha, else *not resolved*. A term is *detected* or *not
    resolved*. Claims with fewer than :data:`MIN_SEEDS` seeds, and degenerate ones (zero spread:
    :attr:`Contrast.degenerate`), are not tested (they do not count in the family's size) and are *not
    resolved*, with the reason in words.
    """
    p = [c.p for c in contrasts] + [t.p for t in terms]
    p_holm = holm(p)
    tost = holm([c.p_tost for c in contrasts] + [math.nan] * len(terms))
    size = int(np.isfinite(np.asarray(p, dtype=float)).sum())
    plan_alpha = alpha / max(1, size or (len(contrasts) + len(terms)))
    claims: list[Claim] = []
    for i, c in enumerate(contrasts):
        sd = c.sd_per_seed
        effect = min_effect if min_effect else abs(c.estimate)
        need = seeds_for_power(sd, effect, alpha=plan_alpha, power=power) if c.n_seeds >= 2 and sd > 0 else math.nan
        if c.n_seeds < MIN_SEEDS:
            verdict, reason = NOT_RESOLVED, f"{c.n_seeds} seed{'s' if c.n_seeds != 1 else ''}: no interval below {MIN_SEEDS}"
        elif c.degenerate:  # not tested: said in words (it does not count in the family's size)
            verdict, reason = NOT_RESOLVED, c.degenerate_text()
        elif p_holm[i] < alpha:
            verdict, reason = DETECTED, ""
        elif min_effect and tost[i] < alpha:
            verdict, reason = EQUIVALENT, ""
        else:
            first = ("the 95% interval excludes 0 but the test does not survive Holm's correction over the family"
                     if c.p < alpha else "the interval includes 0")
            verdict, reason = NOT_RESOLVED, first + (
                " and reaches beyond the ±min_effect band" if min_effect else "; no min_effect declared, so "
                "equivalence cannot be claimed")
        claims.append(Claim(c.name, c, None, float(p_holm[i]), float(tost[i]), verdict, reason, need, c.primary))
    for j, t in enumerate(terms):
        ph = float(p_holm[len(contrasts) + j])
        verdict = DETECTED if ph < alpha else NOT_RESOLVED
        reason = "" if verdict == DETECTED else (t.note or "the test does not reject no interaction")
        claims.append(Claim(f"interaction {t.term.replace(':', ' × ')}", None, t, ph, math.nan, verdict, reason,
                            math.nan, False))
    claims.sort(key=lambda c: not c.primary)
    n_seeds = min((c.n_seeds for c in contrasts), default=0)
    return Family(tuple(claims), size, alpha, min_effect, method, n_seeds)


# ------------------------------------------------------------------------------------------- study


def contrast_keys(factors: Mapping[str, Sequence[str]], baseline: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every ``(factor, level)`` that is compared with its factor's baseline, in factor order."""
    return [(f, str(lv)) for f, levels in factors.items() for lv in levels if str(lv) != str(baseline[f])]


def is_primary(factor: str, level: str, primary: Sequence[str]) -> bool:
    """Whether ``primary:`` (entries ``factor`` = every level of it, or ``factor=level``) names it."""
    return any(p == factor or p == f"{factor}={level}" for p in primary)


def uses_model(design: str, n_factors: int) -> bool:
    """A study that crosses factors (full with several factors, fractional, random) fits the linear
    model, for its interaction F-tests (and for its contrasts under ``contrasts="model"``); one factor
    and one-at-a-time designs fit none."""
    return n_factors > 1 and design != "one_at_a_time"


#: How :func:`infer` estimates contrasts: ``paired`` (the default) per seed over matched cells, robust to
#: unequal arm variances; ``model``: from the pooled linear model (one residual variance for every arm).
CONTRAST_METHODS = ("paired", "model")


@dataclass(frozen=True)
class StudyInference:
    """The inference of one study on its objective: the contrasts, the model (factorial studies),
    and the family of claims (see :func:`infer`)."""

    method: str
    contrasts: tuple[Contrast, ...]
    model: LinearModel | None
    family: Family
    staged: Mapping[str, Any] = field(default_factory=dict)  # claim name -> ablate.stats.sequential.TwoStage
    staged_tost: Mapping[str, TwoStageTost] = field(default_factory=dict)  # claim name -> its two-stage TOST
    staged_terms: Mapping[str, StagedTerm] = field(default_factory=dict)  # term ``a:b`` -> its two-stage test
    across: tuple[Any, ...] = ()  # a study with contexts: ablate.report.statistics.AcrossContexts per contrast
    dropped: tuple[str, ...] = ()  # contexts its entry rule dropped (step-0 objective outside the band), in words


def infer(per_trial: pd.DataFrame, factors: Mapping[str, str], levels: Mapping[str, Sequence[str]],
          baseline: Mapping[str, str], *, design: str = "full", mode: str = "max", min_effect: float | None = None,
          primary: Sequence[str] = (), alpha: float = ALPHA, value: str = "objective",
          contrasts: str = "paired", extended_after: int | None = None,
          contexts: Sequence[str] = ()) -> StudyInference:
    """Every level-vs-baseline contrast of a study and its family of claims.

    Args:
        per_trial: one row per trial: factor columns, ``seed``, ``value``.
        factors: factor name -> column; levels: factor name -> level order; baseline: factor -> level.
        design: the study's design name (``full``, ``one_at_a_time``, ``fractional``, ``random`` ...).
        mode: ``max`` or ``min``; min_effect: the study's minimum effect of interest (objective units).
        primary: the study's ``primary:`` entries.
        contrasts: ``paired`` (default): each contrast is a paired t-test on its own per-seed differences,
            averaged over the matched cells (:func:`paired_values`), with n - 1 df: it assumes nothing
            about the arms' variances. ``model``: from the pooled linear model, whose one residual
            variance for every arm makes its intervals too narrow for an arm noisier than the rest
            (docs/statistics.md). Interactions follow: ``paired`` tests each with Hotelling's T² on its
            per-seed interaction contrasts (:func:`paired_interaction`), ``model`` with the pooled F-test.
        extended_after: the seeds of the report that was read before the study's seeds were extended
            (the last of the study's ``extended_after:``): every test is then a two-stage design, stage 1 its
            first seeds and stage 2 the extension's alone: each contrast
            (:func:`ablate.stats.sequential.staged_contrasts`), its TOST (:func:`ablate.stats.sequential.staged_equivalence`)
            and each interaction, by the paired test of each stage whatever ``contrasts`` is
            (:func:`staged_interaction`). Estimates and intervals stay those of all seeds.
        contexts: the factors replicated over (``contexts:``): they are matched cells, never contrasted, and
            no interaction with them enters the family (how a contrast varies across contexts is
            :func:`context_contrasts`' question, pooled by :mod:`ablate.stats.meta`).
    """
    if contrasts not in CONTRAST_METHODS:
        raise ValueError(f"contrasts={contrasts!r}: one of {', '.join(CONTRAST_METHODS)}")
    data = per_trial[np.isfinite(per_trial[value].astype(float))].copy()
    for c in factors.values():
        data[c] = data[c].astype(str)
    cols = list(factors.values())
    model: LinearModel | None = None
    if uses_model(design, len(factors)) and len(data) > 1:
        model = fit_model(data, factors, value=value, interactions=design == "full")
    method = MODEL if contrasts == "model" and model is not None else PAIRED
    out: list[Contrast] = []
    for f, lv in contrast_keys({f: v for f, v in levels.items() if f not in contexts}, baseline):
        base = str(baseline[f])
        if method == MODEL:
            assert model is not None
            c = model_contrast(model, data, f, lv, base, mode=mode, min_effect=min_effect, value=value)
        else:
            frame, cells = paired_values(data, factors[f], lv, base, cols, value=value)
            c = None if frame.empty else paired_contrast(frame["x"], frame["y"], frame["seed"], factor=f, level=lv,
                                                         baseline=base, mode=mode, min_effect=min_effect,
                                                         cells=cells)
        if c is not None:
            out.append(replace(c, primary=is_primary(f, lv, primary)))
    terms = [t for t in (model.anova if model is not None else ()) if t.kind == "interaction"
             and not set(t.term.split(":")) & set(contexts)]
    frames = {t.term: interaction_contrasts(data, factors[fa], factors[fb], levels[fa], levels[fb], str(baseline[fa]),
                                            str(baseline[fb]), cols, value=value)
              for t in (terms if method == PAIRED or extended_after else ()) for fa, fb in [t.term.split(":")]}
    if method == PAIRED or extended_after:  # the robust test of each interaction, on its own per-seed contrasts
        terms = [paired_interaction(frames[t.term], t.term) for t in terms]
    staged: dict[str, Any] = {}
    staged_tost: dict[str, TwoStageTost] = {}
    staged_terms: dict[str, StagedTerm] = {}
    if extended_after:
        from ablate.stats.sequential import staged_contrasts, staged_equivalence

        out, staged = staged_contrasts(out, extended_after)
        out, staged_tost = staged_equivalence(out, extended_after, min_effect)
        pairs = [staged_interaction(t, frames[t.term], extended_after, alpha=alpha) for t in terms]
        terms = [t for t, _ in pairs]
        staged_terms = {s.term: s for _, s in pairs if s is not None}
    n_min = min((c.n_seeds for c in out), default=0)
    if n_min < MIN_SEEDS:
        terms = [replace(t, p=math.nan, note=f"{n_min} seeds: not tested below {MIN_SEEDS}") for t in terms]
    family = make_family(out, terms, min_effect=min_effect, alpha=alpha, method=method)
    return StudyInference(method, tuple(out), model, family, staged, staged_tost, staged_terms)


def study_inference(study: Study, results: Results) -> tuple[pd.DataFrame, StudyInference]:
    """A study's objective per trial (:func:`ablate.stats.analysis.trial_objectives`) and its inference
    (:func:`infer` with the study's factors, levels, baseline, design, mode, ``min_effect`` and
    ``primary:``): what the report (:mod:`ablate.report.statistics`) and the seed planner
    (:mod:`ablate.stats.planning`) both read.

    Returns:
        ``(per_trial, inference)``.
    """
    from ablate.stats.analysis import trial_objectives

    obj = study.objective
    factors = {f: results.columns[f] for f in results.factors}
    per_trial = trial_objectives(results.table, obj.metric, obj.summary, obj.last_n, list(factors.values()))
    return per_trial, infer_study(study, per_trial, factors)


def infer_study(study: Study, per_trial: pd.DataFrame, factors: Mapping[str, str]) -> StudyInference:
    """:func:`infer` with the study's levels, baseline, design, mode, ``min_effect`` and ``primary:``
    (``factors``: factor name -> its column in ``per_trial``)."""
    return infer(per_trial, factors, {f.name: f.level_names() for f in study.factors}, study.baseline_levels,
                 design=study.design_name, mode=study.objective.mode, min_effect=study.min_effect,
                 primary=study.primary, extended_after=study.extended_after[-1] if study.extended_after else None,
                 contexts=study.contexts)


def context_contrasts(per_trial: pd.DataFrame, factors: Mapping[str, str], levels: Mapping[str, Sequence[str]],
                      baseline: Mapping[str, str], contexts: Sequence[str], *, mode: str = "max",
                      min_effect: float | None = None, value: str = "objective") -> dict[str, list[tuple[str, Contrast]]]:
    """Every compared level-vs-baseline contrast, estimated within each context on its own: the report's
    paired method (:func:`paired_values`, :func:`paired_contrast`) on the trials of that context alone.

    Args:
        per_trial: one row per trial: factor columns, ``seed``, ``value``.
        factors: factor name -> column; levels: factor -> level order; baseline: factor -> baseline level.
        contexts: the context factors; a context is one combination of their levels
            (``task=chain,model=tiny-gpt2``).

    Returns:
        claim name (``factor: level vs base``) -> ``[(context, contrast), ...]`` in the study's order of the
        context levels (``levels``; a level it does not list after them, in order of appearance), whatever the
        rows' order: the report written from MLflow and the one re-rendered from results.csv list the contexts
        alike; a context where the contrast has no paired seed is left out.
    """
    data = per_trial[np.isfinite(per_trial[value].astype(float))].copy()
    for c in factors.values():
        data[c] = data[c].astype(str)
    cols = list(factors.values())
    ctx_cols = [factors[c] for c in contexts]
    out: dict[str, list[tuple[str, Contrast]]] = {}
    groups = [(k if isinstance(k, tuple) else (k,), frame) for k, frame in data.groupby(ctx_cols, sort=False)] \
        if ctx_cols else []

    order = [[str(lv) for lv in levels.get(f, ())] for f in contexts]

    def rank(key: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(o.index(k) if k in o else len(o) for o, k in zip(order, key))

    for key, frame in sorted(groups, key=lambda g: rank(g[0])):  # stable: unlisted levels keep their order
        name = ",".join(f"{f}={lv}" for f, lv in zip(contexts, key))
        for f, lv in contrast_keys({f: v for f, v in levels.items() if f not in contexts}, baseline):
            pv, cells = paired_values(frame, factors[f], lv, str(baseline[f]), cols, value=value)
            if pv.empty:
                continue
            c = paired_contrast(pv["x"], pv["y"], pv["seed"], factor=f, level=lv, baseline=str(baseline[f]),
                                mode=mode, min_effect=min_effect, cells=cells)
            out.setdefault(c.name, []).append((name, c))
    return out


# ------------------------------------------------------------------------------------------ per arm


def arm_table(per_trial: pd.DataFrame, level_columns: Sequence[str] = (), *, value: str = "objective") -> pd.DataFrame:
    """Per arm: seeds, mean, SD, the 95% t-interval of the mean over seeds (none below
    :data:`MIN_SEEDS` seeds) and the interquartile mean (a point value: no interval).

    Returns:
        Columns ``arm, <levels>, n_seeds, mean, std, ci_low, ci_high, iqm``, arms in order of appearance.
    """
    rows = []
    for arm, g in per_trial.groupby("arm", sort=False):
        x = _finite(g.groupby("seed")[value].mean())
        lo, hi = t_interval(x)
        rows.append({"arm": arm, **{c: g[c].iloc[0] for c in level_columns}, "n_seeds": int(x.size),
                     "mean": float(x.mean()) if x.size else math.nan,
                     "std": float(x.std(ddof=1)) if x.size > 1 else math.nan, "ci_low": lo, "ci_high": hi,
                     "iqm": float(stats.trim_mean(x, 0.25)) if x.size else math.nan})
    return pd.DataFrame(rows, columns=["arm", *level_columns, "n_seeds", "mean", "std", "ci_low", "ci_high", "iqm"])
