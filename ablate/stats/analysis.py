"""Reductions of a study's results table, and the compute-efficiency fits: pure functions over pandas
DataFrames and numpy arrays. The inference on the reduced values (intervals, the linear model,
claims) is :mod:`ablate.stats.inference`.

- :func:`trial_objectives`: one objective value per trial, as the study's ``objective:`` says
  (:func:`ablate.objective.summarize`, the one implementation of the summaries).
- :func:`final_values`: per trial, the mean of a metric over its last logged values (diagnostics).
- :func:`seed_level_means`: per (level, seed), the mean over the arms with that level.
- :func:`fit_saturating`, :func:`compute_efficiency`: the objective against generated tokens with
  the saturating curve of ScaleRL (Khatri et al. 2025, "The Art of Scaling Reinforcement Learning
  Compute for LLMs"): ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)``, the asymptote bounded to the
  metric's range (an accuracy cannot pass 100%), with bootstrap intervals over seeds for A and B
  only from :data:`MIN_FIT_SEEDS` seeds on (fewer seeds give too few distinct resamples).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from ablate.objective import summarize

#: Confidence level of the fits' intervals.
CONFIDENCE = 0.95
#: Fewer seeds than this give a fit but no interval for A and B.
MIN_FIT_SEEDS = 5
#: Fewer evaluations after step 0 in every seed give no saturating fit: one seed's points must trace a
#: curve in compute (issue 54: generalization's 60 arms, evaluated at step 0 and the last step only, were
#: listed as 54 failed fits and 6 without a trend, fitted across seeds' token counts).
MIN_CURVE_EVALS = 3
#: Columns of the tidy results table (see :mod:`ablate.tracking.results`).
ID_COLUMNS = ("key", "arm", "seed")


def expanded_alpha(n: int, confidence: float = CONFIDENCE) -> float:
    """The tail probability of the expanded percentile bootstrap for ``n`` resampled groups:
    ``2 Phi(-sqrt(n / (n - 1)) t_{n-1, 1 - alpha/2})`` (Hesterberg 2015, section 4.5). For n=5 and
    95%: 0.0019; it tends to 0.05 as n grows."""
    alpha = 1.0 - confidence
    if n < 2:
        return alpha
    return float(2 * stats.norm.cdf(-math.sqrt(n / (n - 1)) * stats.t.ppf(1 - alpha / 2, n - 1)))


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(0 if seed is None else seed)


def _finite(values: Any) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


# ------------------------------------------------------------------------------- trial summaries


def trial_objectives(table: pd.DataFrame, metric: str, summary: str = "last", last_n: int = 1,
                     level_columns: Sequence[str] = ()) -> pd.DataFrame:
    """One row per trial with its objective: ``key, arm, seed, <level columns>, objective``.

    Args:
        table: the tidy results table (columns ``key, arm, seed, step, metric, value`` and the level
            columns).
        metric: the objective metric (its MLflow name).
        summary, last_n: as in :func:`ablate.objective.summarize`.
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


# ------------------------------------------------------------------------------------- per level


def seed_level_means(per_trial: pd.DataFrame, column: str, *, value: str = "objective") -> pd.DataFrame:
    """One value per (level, seed): the mean over the arms that have that level, at that seed.
    Columns ``level, seed, value``. This is what every per-level CI resamples."""
    g = per_trial.groupby([column, "seed"], sort=False)[value].mean().reset_index()
    return g.rename(columns={column: "level", value: "value"})


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
            parameters are NaN; when True, ``reason`` is empty or says why A and B have no interval.
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
              p0: tuple[float, float, float] | None = None,
              value_range: tuple[float, float] | None = None) -> tuple[float, float, float, float]:
    """Least-squares fit; returns (r0, a, b, c_mid). Raises RuntimeError/ValueError on failure."""
    lo_v, hi_v = float(v.min()), float(v.max())
    span = max(hi_v - lo_v, 1e-9, 1e-6 * max(abs(lo_v), abs(hi_v)))
    lc_lo, lc_hi = math.log(c.min()) - 5, math.log(c.max()) + 5
    a_lo, a_hi = lo_v - 10 * span, hi_v + 10 * span
    if value_range is not None:  # the metric's own range: an accuracy's asymptote lies in [0, 1]
        a_lo, a_hi = max(a_lo, value_range[0]), min(a_hi, value_range[1])
        if not a_lo < a_hi:
            raise ValueError("the data lie outside the metric's range")
    if p0 is None:
        top = v[c >= np.quantile(c, 0.75)].mean()
        p0 = (float(np.clip(top, a_lo, a_hi)), 1.0, float(np.median(c)))
    a0, b0, cm0 = p0
    x0 = [a0, float(np.clip(b0, *B_BOUNDS)), float(np.clip(math.log(cm0), lc_lo, lc_hi))]
    lower, upper = [a_lo, B_BOUNDS[0], lc_lo], [a_hi, B_BOUNDS[1], lc_hi]
    if r0 is None:
        x0.insert(0, float(v[np.argmin(c)]))
        lower.insert(0, a_lo if value_range is not None else lo_v - 10 * span)
        upper.insert(0, a_hi if value_range is not None else hi_v + 10 * span)

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


def _too_few_points(c: np.ndarray, seeds: np.ndarray | None, min_points: int) -> str:
    """Why points at compute ``c`` > 0 ([n]; ``seeds`` [n] or None) cannot determine a saturating curve, or
    ``""``: fewer than ``min_points``, fewer than 3 distinct compute values, or (with seeds) fewer than
    :data:`MIN_CURVE_EVALS` evaluations in every seed: points of different seeds at one evaluation each
    (``eval.every: 0``) spread in C only by how many tokens each seed generated, which is not a curve."""
    if c.size < min_points or len(np.unique(c)) < 3:
        return f"too few points with compute > 0 ({c.size}; need {min_points} at 3 or more distinct compute values)"
    per_seed = int(pd.Series(seeds).value_counts(dropna=False).max()) if seeds is not None else MIN_CURVE_EVALS
    if per_seed < MIN_CURVE_EVALS:
        return (f"too few evaluations per seed: {per_seed} after step 0 (a curve in compute needs "
                f"{MIN_CURVE_EVALS}; eval.every sets them)")
    return ""


def fit_saturating(tokens: Any, values: Any, groups: Any = None, *, n_boot: int = 200,
                   seed: int | np.random.Generator | None = 0, min_points: int = 4,
                   min_r2: float = MIN_R2, value_range: tuple[float, float] | None = None,
                   min_seeds: int = MIN_FIT_SEEDS) -> FitResult:
    """Fit ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` to one arm's (compute, value) points.

    R0 is the mean of the values at zero compute (the start policy) when there are any, otherwise it
    is fitted too. A, B and log C_mid are fitted by bounded least squares on the points with C > 0
    (B in [0.05, 20], A within ten value-ranges of the data). The CIs resample whole seeds
    (``groups``) with replacement and refit (expanded percentile intervals, :func:`expanded_alpha`), from ``min_seeds`` seeds on.

    Args:
        tokens: compute of each point (generated tokens so far), [n].
        values: the objective at each point, [n].
        groups: the seed of each point, [n] (None: every point its own group).
        n_boot: bootstrap refits for the CIs of A and B.
        min_points: too few points with C > 0 make the fit fail (:func:`_too_few_points`).
        min_r2: a fit that explains less of the variance fails ("no saturating trend"): a flat or
            pure-noise curve does not determine B or C_mid.
        value_range: the metric's range ((0, 1) for a fraction): A and R0 stay inside it, and an A
            on its edge fails the fit as any parameter on its bound does.
        min_seeds: fewer seeds give the fit without intervals (``reason`` says so).

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
    too_few = _too_few_points(c[pos], gr[pos] if groups is not None else None, min_points)
    if too_few:
        return FitResult(False, too_few, n_points=int(pos.sum()), n_seeds=n_seeds)
    r0 = float(v[zero].mean()) if zero.any() else None
    try:
        r, a, b, cm = _fit_once(c[pos], v[pos], r0, value_range=value_range)
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
    if uniq.size >= min_seeds:
        members = {g: np.flatnonzero(gr == g) for g in uniq}
        for _ in range(n_boot):
            pick = uniq[rng.integers(0, uniq.size, uniq.size)]
            idx = np.concatenate([members[g] for g in pick])
            cb, vb = c[idx], v[idx]
            pb = cb > 0
            tried += 1
            if _too_few_points(cb[pb], gr[idx][pb] if groups is not None else None, min_points):
                continue
            r0b = float(vb[~pb].mean()) if (~pb).any() else None
            try:
                _, ab, bb, _ = _fit_once(cb[pb], vb[pb], r0b, p0=(a, b, cm), value_range=value_range)
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
    note = (f"no interval for A and B from {uniq.size} seed{'s' if uniq.size != 1 else ''} (needs {min_seeds})"
            if uniq.size < min_seeds else "")
    return FitResult(True, note, r0=r, a=a, b=b, c_mid=cm, a_ci=a_ci, b_ci=b_ci, r2=r2, n_points=int(pos.sum()),
                     n_seeds=n_seeds, extrapolated=bool(cm > c.max()), boot_ok=boot_ok)


def compute_points(table: pd.DataFrame, metric: str, tokens_metric: str = "compute/tokens") -> pd.DataFrame:
    """The (compute, objective) points of every trial: rows of ``metric`` with the trial's generated
    tokens at that step. Columns ``arm, seed, step, tokens, value``. The tidy table already carries
    the tokens of each step in its ``tokens`` column (see :mod:`ablate.tracking.results`)."""
    rows = table[(table["metric"] == metric) & np.isfinite(table["value"].astype(float))]
    out = rows[["arm", "seed", "step", "tokens", "value"]].copy()
    out = out[np.isfinite(out["tokens"].astype(float))]
    return out.sort_values(["arm", "seed", "step"], kind="stable").reset_index(drop=True)


def compute_efficiency(points: pd.DataFrame, *, n_boot: int = 200, seed: int = 0,
                       value_range: tuple[float, float] | None = None) -> pd.DataFrame:
    """A saturating fit per arm of the objective against generated tokens (:func:`fit_saturating`).

    Args:
        points: from :func:`compute_points` (``arm, seed, tokens, value``).

    Returns:
        One row per arm: ``arm, ok, reason, r0, a, a_low, a_high, b, b_low, b_high, c_mid, r2,
        n_points, n_seeds, extrapolated``.
    """
    rows = []
    for arm, g in points.groupby("arm", sort=False):
        fit = fit_saturating(g["tokens"], g["value"], g["seed"], n_boot=n_boot, seed=seed, value_range=value_range)
        rows.append({"arm": arm, "ok": fit.ok, "reason": fit.reason, "r0": fit.r0, "a": fit.a, "a_low": fit.a_ci[0],
                     "a_high": fit.a_ci[1], "b": fit.b, "b_low": fit.b_ci[0], "b_high": fit.b_ci[1],
                     "c_mid": fit.c_mid, "r2": fit.r2, "n_points": fit.n_points, "n_seeds": fit.n_seeds,
                     "extrapolated": fit.extrapolated})
    return pd.DataFrame(rows, columns=["arm", "ok", "reason", "r0", "a", "a_low", "a_high", "b", "b_low", "b_high",
                                       "c_mid", "r2", "n_points", "n_seeds", "extrapolated"])
