"""Statistics on a study's results table: pure functions over pandas DataFrames and numpy arrays.

The unit of replication is the **seed**: every arm runs the same seeds, so two arms (or two levels of
a factor) are compared seed by seed, and every confidence interval resamples seeds, after the data
have been reduced to one value per seed (Henderson et al. 2018, "Deep RL that Matters"; Agarwal et
al. 2021, "Deep RL at the Edge of the Statistical Precipice").

What is here, and where it comes from:

- :func:`trial_objectives`: one objective value per trial, as the study's ``objective:`` says
  (the same summaries as :func:`ablate.store.summarize_objective`).
- :func:`bootstrap_ci`: percentile bootstrap over seeds, *expanded* for small samples (Hesterberg
  2015, "What Teachers Should Know About the Bootstrap", section 4.5): with 5-10 seeds the plain
  95% percentile interval covers the mean only ~81-86% of the time, the expanded one ~91% (measured
  in the tests; resampling cannot reach beyond the range of the data, so it stays a little short).
- :func:`iqm`: the interquartile mean (rliable: Agarwal et al. 2021).
- :func:`arm_summary`: per arm the mean, IQM and their 95% CIs over seeds.
- :func:`marginal_means`, :func:`compare_levels`: per factor the mean of each level and the
  difference of each level to the baseline level, paired by seed, with a bootstrap CI, a paired
  t-test p-value, Holm's correction across all comparisons (:func:`holm`, Holm 1979), the
  probability of improvement (the Mann-Whitney U statistic over seeds, as in rliable), Hedges' g
  (:func:`hedges_g`, Hedges 1981) and the seeds a paired t-test would need to resolve the observed
  difference (:func:`seeds_needed`).
- :func:`anova`: main effects and two-factor interactions of a factorial design, with seeds as
  blocks: sums of squares, F and p; effects that the design cannot separate are marked (from the
  alias structure of a fractional design, see :class:`ablate.designs.AliasStructure`).
- :func:`fit_saturating`, :func:`compute_efficiency`: the objective against generated tokens with
  the saturating curve of ScaleRL (Khatri et al. 2025, "The Art of Scaling Reinforcement Learning
  Compute for LLMs"): ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)``, with bootstrap CIs over seeds
  for the asymptote A and the efficiency exponent B.

Sign convention: a difference is ``level - baseline`` in the objective's units; it is an improvement
when it is positive for ``mode: max`` and negative for ``mode: min``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

#: Bootstrap resamples used unless a caller says otherwise.
DEFAULT_N_BOOT = 2000
#: Confidence level of every interval.
CONFIDENCE = 0.95
#: Significance level and power of the seeds-needed estimate.
ALPHA = 0.05
POWER = 0.8
#: The largest seed count :func:`seeds_needed` looks at.
MAX_SEEDS = 1000
#: Columns of the tidy results table (see :mod:`ablate.results`).
ID_COLUMNS = ("key", "arm", "seed")


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(0 if seed is None else seed)


def _finite(values: Any) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


# ------------------------------------------------------------------------------- trial summaries


def summarize(steps: Sequence[float], values: Sequence[float], summary: str = "last", last_n: int = 1) -> float:
    """One number from one trial's metric history (the study's ``objective.summary``).

    Args:
        steps: the steps of the values (any order; sorted here).
        values: the metric's values; non-finite ones are skipped.
        summary: ``last`` (mean of the last ``last_n`` values), ``mean``, ``max``, ``min``, or
            ``auc`` (trapezoid area under value-over-step divided by the step range; one point: its
            value).
        last_n: values averaged by ``last``.

    Returns:
        The summary, NaN when there is no finite value. Agrees with
        :func:`ablate.store.summarize_objective` (a test checks it).
    """
    s = np.asarray(steps, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    s, v = s[keep], v[keep]
    if v.size == 0:
        return math.nan
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    if summary == "last":
        return float(v[-max(1, int(last_n)):].mean())
    if summary == "mean":
        return float(v.mean())
    if summary == "max":
        return float(v.max())
    if summary == "min":
        return float(v.min())
    if summary == "auc":
        if v.size == 1 or s[-1] == s[0]:
            return float(v[-1])
        return float(np.sum((s[1:] - s[:-1]) * (v[1:] + v[:-1]) / 2) / (s[-1] - s[0]))
    raise ValueError(f"unknown objective summary {summary!r}; allowed: last, mean, max, min, auc")


def trial_objectives(table: pd.DataFrame, metric: str, summary: str = "last", last_n: int = 1,
                     level_columns: Sequence[str] = ()) -> pd.DataFrame:
    """One row per trial with its objective: ``key, arm, seed, <level columns>, objective``.

    Args:
        table: the tidy results table (columns ``key, arm, seed, step, metric, value`` and the level
            columns).
        metric: the objective metric (its MLflow name).
        summary, last_n: as in :func:`summarize`.
        level_columns: the factor-level columns to carry along.

    Returns:
        Every trial of ``table`` that logged ``metric`` (NaN objective when no value is finite),
        ordered by arm then seed.
    """
    cols = [*ID_COLUMNS, *level_columns]
    rows = table[table["metric"] == metric]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols} | {"objective": pd.Series(dtype=float)})
    out = []
    for ids, g in rows.groupby(cols, sort=False, dropna=False):
        out.append((*ids, summarize(g["step"].to_numpy(), g["value"].to_numpy(), summary, last_n)))
    df = pd.DataFrame(out, columns=[*cols, "objective"])
    df["seed"] = df["seed"].astype(int)
    return df.sort_values(["arm", "seed"], kind="stable").reset_index(drop=True)


def final_values(table: pd.DataFrame, metric: str, fraction: float = 0.1,
                 level_columns: Sequence[str] = ()) -> pd.DataFrame:
    """Per trial, the mean of ``metric`` over the last ``fraction`` of its logged values (at least one):
    ``key, arm, seed, <level columns>, value``. Used for metrics other than the objective (KL,
    reward) where a single final step is noisy."""
    cols = [*ID_COLUMNS, *level_columns]
    rows = table[(table["metric"] == metric) & np.isfinite(table["value"].astype(float))]
    out = []
    for ids, g in rows.groupby(cols, sort=False, dropna=False):
        v = g.sort_values("step")["value"].to_numpy(dtype=float)
        n = max(1, int(math.ceil(fraction * v.size)))
        out.append((*ids, float(v[-n:].mean())))
    df = pd.DataFrame(out, columns=[*cols, "value"])
    if not df.empty:
        df["seed"] = df["seed"].astype(int)
    return df


# ------------------------------------------------------------------------------------- statistics


def iqm(values: Any, axis: int | None = None) -> Any:
    """Interquartile mean: the mean of the middle 50% of values (``scipy.stats.trim_mean(x, 0.25)``),
    robust to outlier seeds yet more efficient than the median (Agarwal et al. 2021)."""
    if axis is None:
        x = _finite(values)
        return float(stats.trim_mean(x, 0.25)) if x.size else math.nan
    return stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


def _mean(x: np.ndarray, axis: int | None = None) -> Any:
    return np.mean(x, axis=axis)


STATISTICS: dict[str, Callable[..., Any]] = {"mean": _mean, "iqm": iqm}


def expanded_alpha(n: int, confidence: float = CONFIDENCE) -> float:
    """The tail probability that the expanded percentile bootstrap uses for ``n`` values:
    ``2 Phi(-sqrt(n / (n - 1)) t_{n-1, 1 - alpha/2})`` (Hesterberg 2015). For n=5 and 95%: 0.0019;
    it tends to 0.05 as n grows."""
    alpha = 1.0 - confidence
    if n < 2:
        return alpha
    return float(2 * stats.norm.cdf(-math.sqrt(n / (n - 1)) * stats.t.ppf(1 - alpha / 2, n - 1)))


def bootstrap_ci(values: Any, statistic: str | Callable[..., Any] = "mean", *, n_boot: int = DEFAULT_N_BOOT,
                 confidence: float = CONFIDENCE, seed: int | np.random.Generator | None = 0,
                 expanded: bool = True) -> tuple[float, float]:
    """A bootstrap confidence interval of ``statistic`` over ``values`` (one value per seed).

    Args:
        values: one value per seed, [n]; non-finite values are dropped.
        statistic: ``mean``, ``iqm``, or a function ``f(x, axis=1)`` of an [n_boot, n] array.
        n_boot: resamples.
        confidence: the interval's level.
        seed: the resampling generator (fixed by default: a report is reproducible).
        expanded: use the expanded percentile interval (Hesterberg 2015), which corrects most of
            the narrowness of the plain percentile interval with few seeds.

    Returns:
        ``(low, high)``; ``(nan, nan)`` with fewer than two values (one seed gives no interval).
    """
    x = _finite(values)
    if x.size < 2:
        return math.nan, math.nan
    stat = STATISTICS[statistic] if isinstance(statistic, str) else statistic
    idx = _rng(seed).integers(0, x.size, size=(n_boot, x.size))
    boot = np.asarray(stat(x[idx], axis=1), dtype=float)
    alpha = expanded_alpha(x.size, confidence) if expanded else 1.0 - confidence
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment of p-values for multiple comparisons (Holm 1979).

    The i-th smallest of m p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``. NaN entries
    are not comparisons: they stay NaN and do not count in m.

    Example: ``holm([0.01, 0.04, 0.03])`` = ``[0.03, 0.06, 0.06]``.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adjusted)
    return out


def hedges_g(x: Any, y: Any) -> float:
    """Hedges' g of ``x`` against ``y``: ``(mean x - mean y) / s_pooled`` times the small-sample
    correction ``J = 1 - 3 / (4 (n_x + n_y) - 9)`` (Hedges 1981). NaN when either group has fewer
    than two values or the pooled standard deviation is 0."""
    a, b = _finite(x), _finite(y)
    if a.size < 2 or b.size < 2:
        return math.nan
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
    if pooled == 0:
        return math.nan
    return float((a.mean() - b.mean()) / pooled * (1 - 3 / (4 * (a.size + b.size) - 9)))


def probability_of_improvement(x: Any, y: Any, mode: str = "max") -> float:
    """P(X improves on Y) for one seed of each: the Mann-Whitney U statistic over all pairs, divided
    by the number of pairs, ties counting one half (rliable, Agarwal et al. 2021). For ``mode: min``
    an improvement is a smaller value. 0.5 means no tendency either way."""
    a, b = _finite(x), _finite(y)
    if a.size == 0 or b.size == 0:
        return math.nan
    if mode == "min":
        a, b = -a, -b
    u = stats.mannwhitneyu(a, b, alternative="two-sided").statistic
    return float(u / (a.size * b.size))


def _poi_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(improvement) for each bootstrap row: a [R, n], b [R, m] -> [R]."""
    diff = a[:, :, None] - b[:, None, :]
    return ((diff > 0).astype(float) + 0.5 * (diff == 0)).mean(axis=(1, 2))


def paired_p_value(differences: Any) -> float:
    """Two-sided p-value of a paired t-test that the mean of the per-seed ``differences`` is 0.
    NaN with fewer than two seeds; when every difference is equal, 1.0 if they are 0, else 0.0."""
    d = _finite(differences)
    if d.size < 2:
        return math.nan
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def seeds_needed(differences: Any, *, alpha: float = ALPHA, power: float = POWER, max_n: int = MAX_SEEDS) -> float:
    """How many seeds a paired two-sided t-test at ``alpha`` needs to detect the observed mean
    difference with probability ``power``, if the true difference and spread were the observed ones.

    Power of n seeds: ``P(|T| > t_{n-1, 1-alpha/2})`` with T noncentral t, ``n - 1`` degrees of
    freedom and noncentrality ``sqrt(n) mean / sd`` (the observed per-seed differences).

    Returns:
        The smallest n in [2, max_n] with enough power; ``inf`` when even ``max_n`` is not enough (or
        the mean difference is 0); NaN with fewer than two seeds; 2 when every difference is equal
        and not 0.
    """
    d = _finite(differences)
    if d.size < 2:
        return math.nan
    delta, sd = abs(float(d.mean())), float(d.std(ddof=1))
    if delta == 0:
        return math.inf
    if sd == 0:
        return 2.0
    for lo, hi in ((2, 32), (33, 256), (257, max_n)):  # most effects resolve early: look there first
        if lo > max_n:
            break
        n = np.arange(lo, min(hi, max_n) + 1)
        crit = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = np.sqrt(n) * delta / sd
        with np.errstate(all="ignore"):  # the lower tail is ~0 and scipy may return NaN for it
            pw = stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(stats.nct.cdf(-crit, n - 1, nc))
        hit = np.flatnonzero(pw >= power)
        if hit.size:
            return float(n[hit[0]])
    return math.inf


# --------------------------------------------------------------------------------------- per arm


def arm_summary(per_trial: pd.DataFrame, level_columns: Sequence[str] = (), *, value: str = "objective",
                n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Per arm: seeds, mean, standard deviation, IQM and 95% bootstrap CIs of mean and IQM over seeds.

    Args:
        per_trial: one row per trial (``arm, seed, <level columns>, <value>``), e.g. from
            :func:`trial_objectives`.
        level_columns: carried along (one value per arm).

    Returns:
        Columns ``arm, <levels>, n_seeds, mean, std, ci_low, ci_high, iqm, iqm_low, iqm_high``, in
        the order arms first appear.
    """
    rows = []
    for arm, g in per_trial.groupby("arm", sort=False):
        x = _finite(g.groupby("seed")[value].mean())
        lo, hi = bootstrap_ci(x, "mean", n_boot=n_boot, seed=seed)
        ilo, ihi = bootstrap_ci(x, "iqm", n_boot=n_boot, seed=seed)
        rows.append({
            "arm": arm, **{c: g[c].iloc[0] for c in level_columns},
            "n_seeds": int(x.size), "mean": float(x.mean()) if x.size else math.nan,
            "std": float(x.std(ddof=1)) if x.size > 1 else math.nan, "ci_low": lo, "ci_high": hi,
            "iqm": iqm(x), "iqm_low": ilo, "iqm_high": ihi,
        })
    return pd.DataFrame(rows, columns=["arm", *level_columns, "n_seeds", "mean", "std", "ci_low", "ci_high",
                                       "iqm", "iqm_low", "iqm_high"])


# ------------------------------------------------------------------------------------- per factor


def seed_level_means(per_trial: pd.DataFrame, column: str, *, value: str = "objective") -> pd.DataFrame:
    """One value per (level, seed): the mean over the arms that have that level, at that seed.
    Columns ``level, seed, value``. This is what every per-level CI resamples."""
    g = per_trial.groupby([column, "seed"], sort=False)[value].mean().reset_index()
    return g.rename(columns={column: "level", value: "value"})


def marginal_means(per_trial: pd.DataFrame, column: str, levels: Sequence[str] | None = None, *,
                   value: str = "objective", n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """The marginal mean of each level of a factor with a 95% bootstrap CI over seeds.

    Columns ``level, n_seeds, mean, ci_low, ci_high``; levels in ``levels`` order (default: as they
    appear), levels without data omitted.
    """
    per_seed = seed_level_means(per_trial, column, value=value)
    order = list(levels) if levels is not None else list(dict.fromkeys(per_seed["level"]))
    rows = []
    for lv in order:
        x = _finite(per_seed.loc[per_seed["level"] == lv, "value"])
        if x.size == 0:
            continue
        lo, hi = bootstrap_ci(x, n_boot=n_boot, seed=seed)
        rows.append({"level": lv, "n_seeds": int(x.size), "mean": float(x.mean()), "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=["level", "n_seeds", "mean", "ci_low", "ci_high"])


def paired_level_values(per_trial: pd.DataFrame, column: str, level: str, base: str,
                        level_columns: Sequence[str], *, value: str = "objective") -> tuple[pd.DataFrame, str]:
    """Per seed, the value of ``level`` and of ``base`` of one factor, compared like with like.

    ``matched``: arms with ``level`` are paired with the arm that differs only in this factor (set
    to ``base``) at the same seed, and each seed's pairs are averaged: in a full factorial this
    averages over the other factors, in a one-at-a-time design it compares with the baseline arm.
    ``marginal``: when no such pair exists (a fractional or random design), the mean over the arms
    with ``level`` minus the mean over the arms with ``base``, seed by seed; in a balanced fraction
    this is the main-effect estimate (aliased as the design's alias structure says).

    Returns:
        ``(frame, method)``: frame with columns ``seed, x`` (level) and ``y`` (base), one row per seed
        that has both.
    """
    others = [c for c in level_columns if c != column]
    xs = per_trial[per_trial[column] == level]
    ys = per_trial[per_trial[column] == base]
    pairs = xs.merge(ys, on=[*others, "seed"], suffixes=("_x", "_y"))
    pairs = pairs[np.isfinite(pairs[f"{value}_x"]) & np.isfinite(pairs[f"{value}_y"])]
    if not pairs.empty:
        g = pairs.groupby("seed")[[f"{value}_x", f"{value}_y"]].mean().reset_index()
        return g.rename(columns={f"{value}_x": "x", f"{value}_y": "y"}), "matched"
    x = xs.groupby("seed")[value].mean().rename("x")
    y = ys.groupby("seed")[value].mean().rename("y")
    df = pd.concat([x, y], axis=1, join="inner").reset_index()
    df = df[np.isfinite(df["x"]) & np.isfinite(df["y"])]
    return df, "marginal"


@dataclass(frozen=True)
class Comparison:
    """One level of one factor against the baseline level (see :func:`compare_levels`).

    Attributes:
        diff: mean over seeds of ``level - baseline`` (objective units).
        ci_low, ci_high: its 95% paired bootstrap CI (over seeds).
        p: two-sided paired t-test; p_holm: Holm-adjusted across every comparison of the report.
        prob_improvement: P(a seed of ``level`` beats a seed of ``baseline``), with its CI.
        hedges_g: standardized difference (level vs baseline per-seed values).
        seeds_needed: seeds for 80% power at the observed difference (inf: not resolvable).
        ci_excludes_zero: the CI excludes 0.
        detected: the CI excludes 0 and the Holm-adjusted p is below ``alpha`` (both say the same);
            improved: detected and in the objective's direction.
        method: ``matched`` or ``marginal`` (see :func:`paired_level_values`).
    """

    factor: str
    level: str
    baseline: str
    n_seeds: int
    method: str
    level_mean: float
    baseline_mean: float
    diff: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float
    prob_improvement: float
    pi_low: float
    pi_high: float
    hedges_g: float
    seeds_needed: float
    ci_excludes_zero: bool
    detected: bool
    improved: bool


def compare_levels(per_trial: pd.DataFrame, factors: Mapping[str, str], baseline: Mapping[str, str], *,
                   levels: Mapping[str, Sequence[str]] | None = None, mode: str = "max", value: str = "objective",
                   alpha: float = ALPHA, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Every non-baseline level of every factor against the factor's baseline level.

    Args:
        per_trial: one row per trial with the level columns, ``seed`` and ``value``.
        factors: factor name -> its column in ``per_trial``.
        baseline: factor name -> baseline level.
        levels: factor name -> level order (default: as they appear).
        mode: ``max`` or ``min`` (which direction is an improvement).
        alpha: the significance level a detected difference must also pass (after Holm).
        n_boot, seed: bootstrap resamples and generator seed.

    Returns:
        One row per comparison (the fields of :class:`Comparison`); Holm's correction runs over all
        rows together. A comparison with no common seed is left out.
    """
    rng = _rng(seed)
    cols = list(factors.values())
    rows: list[dict[str, Any]] = []
    for factor, col in factors.items():
        base = str(baseline[factor])
        order = list(levels[factor]) if levels is not None else list(dict.fromkeys(per_trial[col]))
        for lv in order:
            if lv == base:
                continue
            df, method = paired_level_values(per_trial, col, lv, base, cols, value=value)
            if df.empty:
                continue
            x, y = df["x"].to_numpy(float), df["y"].to_numpy(float)
            d = x - y
            lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=rng)
            pi = probability_of_improvement(x, y, mode)
            if x.size >= 2:
                sign = -1.0 if mode == "min" else 1.0
                bx = sign * x[rng.integers(0, x.size, (n_boot, x.size))]
                by = sign * y[rng.integers(0, y.size, (n_boot, y.size))]
                a = expanded_alpha(x.size)
                pi_lo, pi_hi = (float(q) for q in np.quantile(_poi_matrix(bx, by), [a / 2, 1 - a / 2]))
            else:
                pi_lo = pi_hi = math.nan
            excludes = bool(np.isfinite(lo) and (lo > 0 or hi < 0))
            mean_d = float(d.mean())
            rows.append(asdict(Comparison(
                factor=factor, level=lv, baseline=base, n_seeds=int(d.size), method=method,
                level_mean=float(x.mean()), baseline_mean=float(y.mean()), diff=mean_d, ci_low=lo, ci_high=hi,
                p=paired_p_value(d), p_holm=math.nan, prob_improvement=pi, pi_low=pi_lo, pi_high=pi_hi,
                hedges_g=hedges_g(x, y), seeds_needed=seeds_needed(d), ci_excludes_zero=excludes, detected=False,
                improved=False,
            )))
    out = pd.DataFrame(rows, columns=[f.name for f in Comparison.__dataclass_fields__.values()])
    if not out.empty:
        out["p_holm"] = holm(out["p"].to_numpy(float))
        out["detected"] = out["ci_excludes_zero"] & (out["p_holm"] < alpha)
        better = out["diff"] > 0 if mode == "max" else out["diff"] < 0
        out["improved"] = out["detected"] & better
    return out


# ------------------------------------------------------------------------------------------ ANOVA


def _effect_columns(values: pd.Series, order: Sequence[str]) -> np.ndarray:
    """Sum-to-zero (effect) coding of a categorical column: [n, k-1], the first level coded -1."""
    lv = [x for x in order if x in set(values)]
    out = np.zeros((len(values), max(0, len(lv) - 1)))
    v = values.to_numpy()
    for j, level in enumerate(lv[1:]):
        out[:, j] = (v == level).astype(float) - (v == lv[0]).astype(float)
    return out


def _rank(x: np.ndarray) -> int:
    return int(np.linalg.matrix_rank(x)) if x.size else 0


def _rss(x: np.ndarray, y: np.ndarray) -> float:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ beta
    return float(r @ r)


def anova(per_trial: pd.DataFrame, factors: Mapping[str, str], *, levels: Mapping[str, Sequence[str]] | None = None,
          value: str = "objective", interactions: bool = True, block: str | None = "seed",
          aliasing: Any = None) -> pd.DataFrame:
    """Analysis of variance of a factorial design: main effects, two-factor interactions, seeds as blocks.

    The model is a linear model with sum-to-zero coded factors: intercept, the seed block (when
    there are several seeds: seed-to-seed variation is taken out of the error, as the comparisons
    are paired by seed), every main effect, then every two-factor interaction. A term is added only
    if the design can estimate it (it raises the model's rank); otherwise it is listed as not
    estimable and, for a fractional design, the effect it is aliased with is named. Each term's sum
    of squares is the rise of the residual sum of squares when the term alone is dropped from the
    full model (type III; for a balanced design this equals the classical sums of squares), with
    F = MS(term) / MS(residual) and p from the F distribution.

    Args:
        per_trial: one row per trial: the level columns, ``seed``, ``value``.
        factors: factor name -> column.
        levels: factor name -> level order (the first level is the -1 of its coding).
        interactions: include two-factor interactions.
        block: the blocking column (None: no block).
        aliasing: the study's :class:`ablate.designs.AliasStructure` (fractional designs): every
            estimable effect lists its aliases up to order 3, and an effect aliased with one already in
            the model is marked.

    Returns:
        Columns ``term, kind, df, sum_sq, mean_sq, F, p, aliases, note``; ``kind`` is ``block``,
        ``main``, ``interaction`` or ``residual``. F and p are NaN without residual degrees of freedom.
    """
    data = per_trial[np.isfinite(per_trial[value].astype(float))].reset_index(drop=True)
    y = data[value].to_numpy(float)
    n = y.size
    names = list(factors)
    order = {f: (list(levels[f]) if levels is not None and f in levels else list(dict.fromkeys(data[c])))
             for f, c in factors.items()}
    coded = {f: _effect_columns(data[factors[f]].astype(str), [str(v) for v in order[f]]) for f in names}
    terms: list[tuple[str, str, tuple[str, ...], np.ndarray]] = []
    if block is not None and block in data and data[block].nunique() > 1:
        terms.append((f"{block} (block)", "block", (), _effect_columns(data[block].astype(str),
                                                                        sorted(map(str, set(data[block]))))))
    terms.extend((f, "main", (f,), coded[f]) for f in names)
    if interactions:
        for a, b in itertools.combinations(names, 2):
            prod = np.einsum("ni,nj->nij", coded[a], coded[b]).reshape(n, -1)
            terms.append((f"{a}:{b}", "interaction", (a, b), prod))

    def alias_names(effect: tuple[str, ...]) -> list[str]:
        if aliasing is None or not effect:
            return []
        try:
            return [aliasing.name(e) for e in aliasing.aliases(effect) if 0 < len(e) <= 3]
        except (KeyError, AttributeError):
            return []

    x = np.ones((n, 1))
    included: list[tuple[str, str, tuple[str, ...], slice]] = []
    skipped: list[dict[str, Any]] = []
    for name, kind, effect, cols in terms:
        if cols.shape[1] == 0:
            continue
        trial = np.hstack([x, cols])
        gain = _rank(trial) - _rank(x)
        if gain == 0:
            in_model = [t[0] for t in included]
            alias = [a for a in alias_names(effect) if a in in_model]
            note = (f"not estimable: aliased with {alias[0]}" if alias
                    else "not estimable: the design confounds it with the terms above")
            skipped.append({"term": name, "kind": kind, "df": 0, "sum_sq": math.nan, "mean_sq": math.nan,
                            "F": math.nan, "p": math.nan, "aliases": ", ".join(alias_names(effect)), "note": note})
            continue
        included.append((name, kind, effect, slice(x.shape[1], trial.shape[1])))
        x = trial
    rank_full = _rank(x)
    rss_full = _rss(x, y) if n else math.nan
    df_res = n - rank_full
    ms_res = rss_full / df_res if df_res > 0 else math.nan
    rows = []
    for name, kind, effect, sl in included:
        keep = np.ones(x.shape[1], bool)
        keep[sl] = False
        reduced = x[:, keep]
        df = rank_full - _rank(reduced)
        ss = max(0.0, _rss(reduced, y) - rss_full)
        ms = ss / df if df > 0 else math.nan
        f = ms / ms_res if df_res > 0 and ms_res > 0 else (math.inf if df_res > 0 and ss > 0 else math.nan)
        p = float(stats.f.sf(f, df, df_res)) if df_res > 0 and np.isfinite(f) else (0.0 if f == math.inf else math.nan)
        aliases = alias_names(effect)
        note = ""
        if df < sl.stop - sl.start:
            note = "partly confounded with other terms"
        if aliases:
            note = (note + "; " if note else "") + "estimate includes its aliases (assumed negligible)"
        rows.append({"term": name, "kind": kind, "df": df, "sum_sq": ss, "mean_sq": ms, "F": f, "p": p,
                     "aliases": ", ".join(aliases), "note": note})
    rows.extend(skipped)
    note = "" if df_res > 0 else "no residual degrees of freedom: add seeds to test effects"
    rows.append({"term": "residual", "kind": "residual", "df": df_res, "sum_sq": rss_full, "mean_sq": ms_res,
                 "F": math.nan, "p": math.nan, "aliases": "", "note": note})
    return pd.DataFrame(rows, columns=["term", "kind", "df", "sum_sq", "mean_sq", "F", "p", "aliases", "note"])


# ------------------------------------------------------------------------------ compute efficiency


def saturating_curve(c: Any, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """ScaleRL's sigmoidal compute-performance curve (Khatri et al. 2025):
    ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)``; R(0) = R0, R(C_mid) = (R0 + A) / 2, R(inf) = A.

    Args:
        c: compute (generated tokens), any shape, >= 0.
        r0: performance at no compute; a: the asymptote; b: the efficiency exponent (> 0);
        c_mid: the compute at which half of the gain A - R0 is reached.
    """
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        frac = 1.0 / (1.0 + np.power(c_mid / np.maximum(c, 1e-300), b))
    return r0 + (a - r0) * np.where(c > 0, frac, 0.0)


@dataclass
class FitResult:
    """A saturating fit of one arm (see :func:`fit_saturating`).

    Attributes:
        ok: the fit converged away from its bounds; when False, ``reason`` says why and the
            parameters are NaN.
        r0: performance at no compute (the mean of the step-0 values, or fitted when there are none).
        a, b, c_mid: asymptote, efficiency exponent, midpoint compute.
        a_ci, b_ci: 95% bootstrap CIs over seeds (NaN when too few resamples could be fitted).
        r2: the fit's coefficient of determination on the points it used.
        n_points, n_seeds: the data it used.
        extrapolated: C_mid lies beyond the largest observed compute, so A is an extrapolation.
        boot_ok: the fraction of bootstrap resamples that could be fitted.
    """

    ok: bool
    reason: str = ""
    r0: float = math.nan
    a: float = math.nan
    b: float = math.nan
    c_mid: float = math.nan
    a_ci: tuple[float, float] = (math.nan, math.nan)
    b_ci: tuple[float, float] = (math.nan, math.nan)
    r2: float = math.nan
    n_points: int = 0
    n_seeds: int = 0
    extrapolated: bool = False
    boot_ok: float = math.nan


B_BOUNDS = (0.05, 20.0)
#: Below this R^2 a saturating fit is reported as failed.
MIN_R2 = 0.3


def _fit_once(c: np.ndarray, v: np.ndarray, r0: float | None,
              p0: tuple[float, float, float] | None = None) -> tuple[float, float, float, float]:
    """Least-squares fit; returns (r0, a, b, c_mid). Raises RuntimeError/ValueError on failure."""
    lo_v, hi_v = float(v.min()), float(v.max())
    span = max(hi_v - lo_v, 1e-9, 1e-6 * max(abs(lo_v), abs(hi_v)))
    lc_lo, lc_hi = math.log(c.min()) - 5, math.log(c.max()) + 5
    a_lo, a_hi = lo_v - 10 * span, hi_v + 10 * span
    if p0 is None:
        top = v[c >= np.quantile(c, 0.75)].mean()
        p0 = (float(np.clip(top, a_lo, a_hi)), 1.0, float(np.median(c)))
    a0, b0, cm0 = p0
    x0 = [a0, float(np.clip(b0, *B_BOUNDS)), float(np.clip(math.log(cm0), lc_lo, lc_hi))]
    lower, upper = [a_lo, B_BOUNDS[0], lc_lo], [a_hi, B_BOUNDS[1], lc_hi]
    if r0 is None:
        x0.insert(0, float(v[np.argmin(c)]))
        lower.insert(0, lo_v - 10 * span)
        upper.insert(0, hi_v + 10 * span)

        def f(cc: np.ndarray, r: float, a: float, b: float, lcm: float) -> np.ndarray:
            return saturating_curve(cc, r, a, b, math.exp(lcm))
    else:
        def f(cc: np.ndarray, a: float, b: float, lcm: float) -> np.ndarray:  # type: ignore[misc]
            return saturating_curve(cc, r0, a, b, math.exp(lcm))
    x0 = [float(np.clip(p, lo + 1e-12 * abs(lo), hi - 1e-12 * abs(hi))) for p, lo, hi in zip(x0, lower, upper)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        popt, _ = optimize.curve_fit(f, c, v, p0=x0, bounds=(lower, upper), maxfev=5000)
    if not np.all(np.isfinite(popt)):
        raise RuntimeError("non-finite parameters")
    *rest, a, b, lcm = popt
    r = float(rest[0]) if rest else float(r0)  # type: ignore[arg-type]
    for val, lo, hi, name in ((a, a_lo, a_hi, "A"), (b, *B_BOUNDS, "B"), (lcm, lc_lo, lc_hi, "C_mid")):
        if min(val - lo, hi - val) <= 1e-3 * (hi - lo):
            raise RuntimeError(f"{name} ran into its bound ({'%.3g' % (math.exp(val) if name == 'C_mid' else val)})")
    return r, float(a), float(b), float(math.exp(lcm))


def fit_saturating(tokens: Any, values: Any, groups: Any = None, *, n_boot: int = 200,
                   seed: int | np.random.Generator | None = 0, min_points: int = 4,
                   min_r2: float = MIN_R2) -> FitResult:
    """Fit ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` to one arm's (compute, value) points.

    R0 is the mean of the values at zero compute (the start policy) when there are any, otherwise it
    is fitted too. A, B and log C_mid are fitted by bounded least squares on the points with C > 0
    (B in [0.05, 20], A within ten value-ranges of the data). The CIs resample whole seeds
    (``groups``) with replacement and refit (expanded percentile intervals, as :func:`bootstrap_ci`).

    Args:
        tokens: compute of each point (generated tokens so far), [n].
        values: the objective at each point, [n].
        groups: the seed of each point, [n] (None: every point its own group).
        n_boot: bootstrap refits for the CIs of A and B.
        min_points: fewer points with C > 0 (or fewer than 3 distinct C) make the fit fail.
        min_r2: a fit that explains less of the variance fails ("no saturating trend"): a flat or
            pure-noise curve does not determine B or C_mid.

    Returns:
        A :class:`FitResult`; ``ok`` is False, with the reason, when there are too few points, the
        optimizer fails, a parameter ends on its bound (the data do not determine it) or R^2 < min_r2.
    """
    c = np.asarray(tokens, dtype=float)
    v = np.asarray(values, dtype=float)
    gr = np.arange(c.size) if groups is None else np.asarray(groups)
    keep = np.isfinite(c) & np.isfinite(v) & (c >= 0)
    c, v, gr = c[keep], v[keep], gr[keep]
    zero = c == 0
    pos = ~zero
    n_seeds = len(set(gr.tolist()))
    if pos.sum() < min_points or len(np.unique(c[pos])) < 3:
        return FitResult(False, f"too few points with compute > 0 ({int(pos.sum())}; need {min_points} at "
                                "3 or more distinct compute values)", n_points=int(pos.sum()), n_seeds=n_seeds)
    r0 = float(v[zero].mean()) if zero.any() else None
    try:
        r, a, b, cm = _fit_once(c[pos], v[pos], r0)
    except (RuntimeError, ValueError, optimize.OptimizeWarning) as exc:
        return FitResult(False, f"the fit failed: {exc}", n_points=int(pos.sum()), n_seeds=n_seeds)
    pred = saturating_curve(c[pos], r, a, b, cm)
    ss_tot = float(((v[pos] - v[pos].mean()) ** 2).sum())
    r2 = 1 - float(((v[pos] - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    if not r2 >= min_r2:
        return FitResult(False, f"no saturating trend: the curve explains {r2:.0%} of the variance (R^2 < "
                                f"{min_r2:g})", n_points=int(pos.sum()), n_seeds=n_seeds, r2=r2)
    rng = _rng(seed)
    uniq = np.array(sorted(set(gr.tolist())))
    boot_a, boot_b, tried = [], [], 0
    if uniq.size >= 2:
        members = {g: np.flatnonzero(gr == g) for g in uniq}
        for _ in range(n_boot):
            pick = uniq[rng.integers(0, uniq.size, uniq.size)]
            idx = np.concatenate([members[g] for g in pick])
            cb, vb = c[idx], v[idx]
            pb = cb > 0
            tried += 1
            if pb.sum() < min_points or len(np.unique(cb[pb])) < 3:
                continue
            r0b = float(vb[~pb].mean()) if (~pb).any() else None
            try:
                _, ab, bb, _ = _fit_once(cb[pb], vb[pb], r0b, p0=(a, b, cm))
            except (RuntimeError, ValueError, optimize.OptimizeWarning):
                continue
            boot_a.append(ab)
            boot_b.append(bb)
    boot_ok = len(boot_a) / tried if tried else math.nan
    a_ci = b_ci = (math.nan, math.nan)
    if tried and boot_ok >= 0.5:
        alpha = expanded_alpha(uniq.size)
        a_ci = tuple(float(q) for q in np.quantile(boot_a, [alpha / 2, 1 - alpha / 2]))  # type: ignore[assignment]
        b_ci = tuple(float(q) for q in np.quantile(boot_b, [alpha / 2, 1 - alpha / 2]))  # type: ignore[assignment]
    return FitResult(True, "", r0=r, a=a, b=b, c_mid=cm, a_ci=a_ci, b_ci=b_ci, r2=r2, n_points=int(pos.sum()),
                     n_seeds=n_seeds, extrapolated=bool(cm > c.max()), boot_ok=boot_ok)


def compute_points(table: pd.DataFrame, metric: str, tokens_metric: str = "compute/tokens") -> pd.DataFrame:
    """The (compute, objective) points of every trial: rows of ``metric`` with the trial's generated
    tokens at that step. Columns ``arm, seed, step, tokens, value``. The tidy table already carries
    the tokens of each step in its ``tokens`` column (see :mod:`ablate.results`)."""
    rows = table[(table["metric"] == metric) & np.isfinite(table["value"].astype(float))]
    out = rows[["arm", "seed", "step", "tokens", "value"]].copy()
    out = out[np.isfinite(out["tokens"].astype(float))]
    return out.sort_values(["arm", "seed", "step"], kind="stable").reset_index(drop=True)


def compute_efficiency(points: pd.DataFrame, *, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """A saturating fit per arm of the objective against generated tokens (:func:`fit_saturating`).

    Args:
        points: from :func:`compute_points` (``arm, seed, tokens, value``).

    Returns:
        One row per arm: ``arm, ok, reason, r0, a, a_low, a_high, b, b_low, b_high, c_mid, r2,
        n_points, n_seeds, extrapolated``.
    """
    rows = []
    for arm, g in points.groupby("arm", sort=False):
        fit = fit_saturating(g["tokens"], g["value"], g["seed"], n_boot=n_boot, seed=seed)
        rows.append({"arm": arm, "ok": fit.ok, "reason": fit.reason, "r0": fit.r0, "a": fit.a, "a_low": fit.a_ci[0],
                     "a_high": fit.a_ci[1], "b": fit.b, "b_low": fit.b_ci[0], "b_high": fit.b_ci[1],
                     "c_mid": fit.c_mid, "r2": fit.r2, "n_points": fit.n_points, "n_seeds": fit.n_seeds,
                     "extrapolated": fit.extrapolated})
    return pd.DataFrame(rows, columns=["arm", "ok", "reason", "r0", "a", "a_low", "a_high", "b", "b_low", "b_high",
                                       "c_mid", "r2", "n_points", "n_seeds", "extrapolated"])
