"""Verdicts that travel: one contrast replicated over contexts (tasks, architectures, model sizes), pooled.

A study may replicate its comparisons over **contexts**: every compared arm runs in every context at the same
seeds, and each context gets its own paired estimate (the report's paired t within that context: the mean
per-seed difference, its standard error ``sd / sqrt(n)``, ``n - 1`` degrees of freedom). This module pools
those per-context estimates for one contrast and says whether its verdict travels:

- **Random-effects pooling** (:func:`pool`): the contexts' true effects are taken to vary around a mean
  ``mu`` with a between-context SD ``tau``; ``mu`` is the pooled effect. statsmodels'
  ``meta_analysis.combine_effects`` with ``method_re="iterated"``: the **Paule-Mandel** tau² (the estimating
  equation ``sum w_i (e_i - m)^2 = k - 1``, ``w_i = 1 / (v_i + tau^2)``), which with equal weights equals the
  DerSimonian-Laird one (both ``s_e^2 - v``). The interval is **Hartung-Knapp(-Sidik-Jonkman)**: the variance
  ``sum w_i (e_i - m)^2 / ((k - 1) sum w_i)`` with a t quantile on ``k - 1`` df, the fourth interval of
  ``CombineResults.conf_int(use_t=True)`` ("random effect wls"). ``use_t=True`` alone only swaps the normal
  quantile for t(k - 1) on the unscaled random-effects variance; the HKSJ scaling is that separate interval.
- **Sample-size weights when the SEs are estimated.** A per-context SE from 8 seeds is itself an estimate on
  7 df (``se^2`` has a coefficient of variation of sqrt(2/7) = 53%), and inverse-variance weights built from
  such SEs make the HKSJ interval too narrow: benchmarks/bench_calibration.py --contexts (section vii of
  benchmarks/RESULTS.md) measured 92.6-94.8% coverage with the A/A noise in every context and down to 91.8%
  with one context three times noisier, about 1.5 points under nominal; Knapp and Hartung's ad hoc floor
  (never narrower than the random-effects interval) overshoots to 99-100% at 3 contexts. So when the SEs
  come with their degrees of freedom (``dfs``), each context's variance is a **pooled within-context
  variance over its seeds**, ``v_i = s_p^2 / n_i`` with ``s_p^2 = sum df_i n_i se_i^2 / sum df_i`` and
  ``n_i = df_i + 1``: weights proportional to the seeds (Bakbergenuly, Hoaglin and Kulinskaya 2020 study
  such sample-size weights for mean differences). With equal seeds per context, which the design guarantees,
  the HKSJ interval is then the t-interval on the k context estimates, exact for normal data with equal
  within-context noise whatever tau (94.4-96.2% in every scenario), and 95.6-97.0% with one context three
  times noisier than the rest. Without ``dfs`` the SEs are taken as known: inverse-variance weights.
- **Heterogeneity**: Cochran's Q with inverse-variance weights (``q``), ``I^2 = max(0, (Q - (k - 1)) / Q)``
  (Higgins and Thompson 2002), and its p-value: against chi2(k - 1) when the SEs are known; by a **parametric
  bootstrap** that redraws every context's estimate and SE under no heterogeneity when they are estimated
  (Krishnamoorthy, Lu and Mathew 2007), because chi2(k - 1) assumes known SEs and rejected 8.6-18.9% of the
  time at tau = 0 with 8 seeds per context; the bootstrap 4.3-5.4%, Welch's heteroscedastic F
  (``statsmodels.stats.oneway.anova_generic``) 4.3-6.0% (benchmarks/RESULTS.md, section vii).
- **The prediction interval** for the true effect in a new context (Higgins, Thompson and Spiegelhalter 2009):
  ``mu_hat +- t_{k-2, 1-alpha/2} sqrt(tau^2 + se^2)`` with the pooled (HKSJ) se; none below 3 contexts.
- **Four verdicts** (:func:`verdict`), and a **scale trend** (:func:`scale_trend`): the per-context estimates
  against log(parameters) by weighted least squares, whose value beyond the measured sizes is an
  extrapolation, never a result.

Units: estimates, SEs, tau, the intervals and min_effect are in the objective's units (an accuracy difference
of 0.05 is 5 points); tau² in their square; I² and p-values are unitless.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.stats.inference import holm, tost_p
from ablate.stats.intervals import ALPHA

__all__ = ["CONTEXT_DEPENDENT", "EQUIVALENT", "HOLDS", "NOT_RESOLVED", "VERDICTS", "Context", "Pooled",
           "Trend", "TrendPoint", "new_context_text", "pool", "scale_trend", "verdict", "what_resolves"]

#: The four verdicts of a contrast across contexts (no other verdict words are used).
#: *Equivalent on average*: what its test controls is the contexts' mean effect inside ±min_effect (at most 5%
#: declared when the mean lies on the bound); it does not say every context is inside (with tau 2.55 points,
#: 5% of contexts outside ±5, it is declared 21-24% of the time at 6-12 contexts of 6 seeds: benchmarks/RESULTS.md (viii), 1,000 draws each).
HOLDS, EQUIVALENT = "holds across contexts", "equivalent on average across contexts"
CONTEXT_DEPENDENT, NOT_RESOLVED = "context-dependent", "not resolved"
VERDICTS = (HOLDS, EQUIVALENT, CONTEXT_DEPENDENT, NOT_RESOLVED)
#: Fewer contexts than this give no prediction interval (it has k - 2 degrees of freedom).
MIN_CONTEXTS_PI = 3
#: Fewer sizes than this give no scale trend: 3 leave the line 1 residual df, and intervals of hundreds of
#: points when carried to another size (issue 54: generalization_scale's [-320, 292]).
MIN_TREND_SIZES = 4
#: Draws of the parametric bootstrap behind the heterogeneity p-value when the SEs are estimated (MC SE of a
#: p near 0.05: 0.0022), from a fixed seed so that the same inputs give the same p.
HET_BOOTSTRAP = 10_000
_HET_SEED = 0


@dataclass(frozen=True)
class Context:
    """One context's own estimate of the contrast.

    Attributes:
        label: the context (a task, an architecture, a model size).
        estimate, se: its paired estimate and standard error (objective units).
        df: the SE's degrees of freedom (seeds - 1); ``inf`` when the SE was given as known.
        ci_low, ci_high: its own interval, ``estimate +- t_{df} se`` (normal quantile at ``df = inf``).
        p: its two-sided p-value of no difference; p_holm: Holm-adjusted over the k contexts.
        weight: its share of the pooled estimate (the random-effects weights, summing to 1).
    """

    label: str
    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float
    weight: float


@dataclass(frozen=True)
class Pooled:
    """One contrast pooled over its contexts (see the module docstring and :func:`pool`).

    Attributes:
        k: contexts pooled.
        estimate: the pooled effect, the estimated mean of the contexts' true effects (objective units).
        se: its Hartung-Knapp standard error; df: the interval's degrees of freedom (k - 1).
        ci_low, ci_high: its ``1 - alpha`` interval, ``estimate +- t_{k-1} se``.
        p: two-sided p-value of a pooled effect of 0 (t on k - 1 df); NaN when se is 0.
        p_tost: TOST p-value of the pooled effect within ``+-min_effect`` (NaN without one).
        min_effect: the study's smallest effect that matters (objective units), or None; alpha: the level.
        tau2, tau: the between-context variance (Paule-Mandel, truncated at 0) and its square root.
        i2: ``max(0, (q - q_df) / q)``: the share of the estimates' spread beyond what their SEs explain.
        q, q_df, q_p: Cochran's Q (inverse-variance weights ``1 / se^2``), its k - 1 df and its p-value
            (:attr:`heterogeneity` says how it was computed).
        pi_low, pi_high: the ``1 - alpha`` prediction interval of the true effect in a new context,
            ``estimate +- t_{k-2} sqrt(tau2 + se^2)``; NaN below :data:`MIN_CONTEXTS_PI` contexts.
        method: the pooling, named (weights, tau² estimator, interval).
        heterogeneity: the heterogeneity test, named.
        contexts: the per-context rows, in input order.
    """

    k: int
    estimate: float
    se: float
    ci_low: float
    ci_high: float
    df: float
    p: float
    p_tost: float
    min_effect: float | None
    alpha: float
    tau2: float
    tau: float
    i2: float
    q: float
    q_df: int
    q_p: float
    pi_low: float
    pi_high: float
    method: str
    heterogeneity: str
    contexts: tuple[Context, ...]


def _cochran_q(e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Cochran's Q over the last axis: ``sum w (e - m)^2`` with ``w = 1 / v`` and m the w-weighted mean.
    [..., k] -> [...]."""
    w = 1.0 / v
    m = (w * e).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)
    return (w * (e - m) ** 2).sum(-1)


def _bootstrap_q_p(q: float, ses: np.ndarray, dfs: np.ndarray, draws: int = HET_BOOTSTRAP) -> float:
    """The parametric-bootstrap p-value of Cochran's Q when each SE is estimated on its df
    (Krishnamoorthy, Lu and Mathew 2007): under no heterogeneity every context's estimate is
    ``N(0, se_i^2)`` and its squared SE ``se_i^2 chi2(df_i) / df_i``; p is the share of the ``draws``
    bootstrap Q's at least the observed ``q``, counted as ``(1 + hits) / (1 + draws)`` (Davison and Hinkley
    1997: valid, never 0), from a fixed seed (the same inputs give the same p). The contexts are drawn in
    one canonical order (by SE, then df), so the p of a set of contexts does not depend on the order they
    are listed in: Q is symmetric in the contexts, and its bootstrap p is made so (issue 54: the report
    written at run time and the ledger's re-render listed generalization's 15 contexts in two orders and
    printed heterogeneity p 0.266 and 0.265, the Monte Carlo error of one draw against another)."""
    order = np.lexsort((dfs, ses))
    ses, dfs = ses[order], dfs[order]
    rng = np.random.default_rng(_HET_SEED)
    v = ses ** 2
    e_star = rng.standard_normal((draws, v.size)) * np.sqrt(v)    # [draws, k]
    v_star = v * rng.chisquare(dfs, (draws, v.size)) / dfs         # [draws, k]
    hits = int(np.count_nonzero(_cochran_q(e_star, v_star) >= q * (1 - 1e-12)))
    return (1 + hits) / (1 + draws)


def _check(estimates: object, ses: object, dfs: object, labels: Sequence[str] | None,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list[str]]:
    """The inputs as arrays, with one ValueError that lists every problem."""
    e = np.asarray(estimates, dtype=float).ravel()
    s = np.asarray(ses, dtype=float).ravel()
    d = None if dfs is None else np.asarray(dfs, dtype=float).ravel()
    problems = []
    if e.size != s.size or (d is not None and d.size != e.size) or (labels is not None and len(labels) != e.size):
        problems.append(f"{e.size} estimates, {s.size} ses" + ("" if d is None else f", {d.size} dfs")
                        + ("" if labels is None else f", {len(labels)} labels") + ": give one of each per context")
    if e.size < 2:
        problems.append(f"{e.size} context(s): pooling needs at least 2 (a prediction interval 3)")
    if not np.isfinite(e).all():
        problems.append("an estimate is not finite: leave that context out")
    if not (np.isfinite(s).all() and (s > 0).all()):
        problems.append("every se must be positive and finite: a context whose per-seed differences are all "
                        "equal (se 0) has no test; leave it out and say so")
    if d is not None and not (np.isfinite(d).all() and (d >= 1).all()):
        problems.append("every df must be a finite number >= 1 (seeds - 1 of the context's paired t)")
    if problems:
        raise ValueError("pool: " + "; ".join(problems))
    names = [str(x) for x in labels] if labels is not None else [f"context {i + 1}" for i in range(e.size)]
    return e, s, d, names


def pool(estimates: Sequence[float], ses: Sequence[float], dfs: Sequence[float] | None = None, *,
         min_effect: float | None = None, labels: Sequence[str] | None = None, alpha: float = ALPHA) -> Pooled:
    """Pool one contrast's per-context estimates by random effects (see the module docstring).

    Args:
        estimates: [k] each context's paired estimate, level - baseline (objective units).
        ses: [k] their standard errors (objective units), all positive.
        dfs: [k] the SEs' degrees of freedom (each context's seeds - 1). Given: the SEs are estimates, so the
            weights are the seeds' (a pooled within-context variance) and Q's p-value is bootstrapped. None:
            the SEs are taken as known (inverse-variance weights, Q against chi2(k - 1)).
        min_effect: the smallest effect that matters (objective units): the TOST of :attr:`Pooled.p_tost`.
        labels: [k] the contexts' names (default ``context 1`` ...).
        alpha: the level: ``1 - alpha`` intervals.

    Returns:
        A :class:`Pooled`.

    Raises:
        ValueError: fewer than 2 contexts, lengths that differ, a non-finite estimate, an SE that is not
            positive, a df below 1 (one message listing every problem).
    """
    from statsmodels.stats.meta_analysis import combine_effects

    e, s, d, names = _check(estimates, ses, dfs, labels)
    k = e.size
    if d is None:
        v, weights = s ** 2, "inverse-variance weights 1/se²"
    else:
        n = d + 1
        v = float((d * n * s ** 2).sum() / d.sum()) / n
        weights = "sample-size weights (a pooled within-context variance)"
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # statsmodels' own i2 divides by Q, 0 when all agree
        # statsmodels' Paule-Mandel iteration at its own tolerance (1e-5 on Q - (k - 1)): it sets tau2 to 0
        # whenever Q - (k - 1) turns negative, which a tighter tolerance lets rounding do at the root
        res = combine_effects(e, v, method_re="iterated", use_t=True, alpha=alpha)
        q_res = res if d is None else combine_effects(e, s ** 2, method_re="iterated", use_t=True, alpha=alpha)
    tau2 = max(0.0, float(res.tau2))
    est, se, df = float(res.mean_effect_re), float(np.sqrt(res.var_hksj_re)), float(k - 1)
    lo, hi = (float(x) for x in res.conf_int(alpha=alpha, use_t=True)[3])  # the HKSJ ("random effect wls") one
    p = float(2 * stats.t.sf(abs(est) / se, df)) if se > 0 else math.nan
    if k >= MIN_CONTEXTS_PI:
        half = float(stats.t.isf(alpha / 2, k - 2)) * math.sqrt(tau2 + se ** 2)
        pi_low, pi_high = est - half, est + half
    else:
        pi_low = pi_high = math.nan
    q = float(q_res.q)
    if d is None:
        q_p, het = float(q_res.test_homogeneity().pvalue), f"Cochran's Q against chi2({k - 1}) (known SEs)"
    else:
        q_p = _bootstrap_q_p(q, s, d)
        het = (f"Cochran's Q, parametric-bootstrap p over {HET_BOOTSTRAP} draws that redraw each context's "
               "estimate and SE (Krishnamoorthy-Lu-Mathew 2007; SEs estimated on their df)")
    w = np.asarray(res.weights_rel_re, dtype=float)
    own_df = np.full(k, math.inf) if d is None else d
    crit = stats.t.isf(alpha / 2, own_df)              # [k]; the normal quantile at df = inf
    own_p = 2 * stats.t.sf(np.abs(e / s), own_df)       # [k]
    p_holm = holm(own_p)
    rows = tuple(Context(label=names[i], estimate=float(e[i]), se=float(s[i]), df=float(own_df[i]),
                         ci_low=float(e[i] - crit[i] * s[i]), ci_high=float(e[i] + crit[i] * s[i]),
                         p=float(own_p[i]), p_holm=float(p_holm[i]), weight=float(w[i])) for i in range(k))
    return Pooled(
        k=k, estimate=est, se=se, ci_low=lo, ci_high=hi, df=df, p=p,
        p_tost=tost_p(est, se, df, min_effect) if min_effect else math.nan, min_effect=min_effect, alpha=alpha,
        tau2=tau2, tau=math.sqrt(tau2), i2=max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0, q=q, q_df=k - 1,
        q_p=q_p, pi_low=pi_low, pi_high=pi_high,
        method=f"Paule-Mandel τ², {weights}, Hartung-Knapp t interval ({k - 1} df)", heterogeneity=het,
        contexts=rows,
    )


# ---------------------------------------------------------------------------------------------- verdict


def _num(x: float, factor: float, unit: str) -> str:
    """``x`` in the reader's unit (``x * factor``), 3 significant digits, signed."""
    return f"{x * factor:+.3g}{unit}"


def _span(lo: float, hi: float, factor: float) -> str:
    return f"[{lo * factor:.3g}, {hi * factor:.3g}]"


def new_context_text(pooled: Pooled, factor: float = 1.0) -> str:
    """The prediction interval for a new context in words: ``a new context [lo, hi]``, or, below
    :data:`MIN_CONTEXTS_PI` contexts where it is undefined (t on k - 2 df), that it is."""
    if math.isfinite(pooled.pi_low) and math.isfinite(pooled.pi_high):
        return f"a new context {_span(pooled.pi_low, pooled.pi_high, factor)}"
    return (f"no prediction interval for a new context (undefined with {pooled.k} contexts: it needs at least "
            f"{MIN_CONTEXTS_PI})")


def _pi_half(tau2: float, se2: float, k: int, alpha: float) -> float:
    """The prediction interval's half-width at k contexts, ``t_{k-2} sqrt(tau2 + se2)`` (NaN below 3)."""
    return float(stats.t.isf(alpha / 2, k - 2)) * math.sqrt(tau2 + se2) if k >= MIN_CONTEXTS_PI else math.nan


def what_resolves(pooled: Pooled, *, factor: float = 1.0, unit: str = "") -> str:
    """What would resolve a contrast that is not resolved across contexts: more contexts, or more seeds in
    each, whichever narrows the prediction interval more, with both projections.

    The projections hold tau and each context's per-seed noise at their estimates and approximate the
    pooled variance by ``(tau^2 + s^2) / k`` (equal weights), ``s^2`` the mean squared per-context SE, so
    that the half-width is about ``t_{k-2} sqrt(tau^2 + (tau^2 + s^2) / k)``; doubling the contexts makes it
    ``t_{2k-2} sqrt(tau^2 + (tau^2 + s^2) / 2k)``, four times the seeds in each context
    ``t_{k-2} sqrt(tau^2 + (tau^2 + s^2 / 4) / k)`` (more seeds shrink s, never tau). Each projection is
    the actual half-width times its ratio to the approximation at k, so the three numbers agree with each
    other. Below 3 contexts there is no prediction interval at all: more contexts, whatever the seeds.
    """
    k, a, tau2 = pooled.k, pooled.alpha, pooled.tau2
    s2 = float(np.mean([c.se ** 2 for c in pooled.contexts]))
    s_typ = float(np.median([c.se for c in pooled.contexts]))
    noise = (f"tau = {pooled.tau * factor:.3g}{unit} between contexts against a typical per-context SE of "
             f"{s_typ * factor:.3g}{unit}")
    more_contexts = _pi_half(tau2, (tau2 + s2) / (2 * k), 2 * k, a)
    if k < MIN_CONTEXTS_PI:
        return (f"more contexts: a prediction interval for a new context needs at least {MIN_CONTEXTS_PI} (k = {k}); "
                f"at {2 * k} contexts its half-width would be about {more_contexts * factor:.3g}{unit} ({noise})")
    now = pooled.pi_high - pooled.estimate
    approx = _pi_half(tau2, (tau2 + s2) / k, k, a)
    more_seeds = now * _pi_half(tau2, (tau2 + s2 / 4) / k, k, a) / approx
    more_contexts = now * more_contexts / approx
    if more_contexts <= more_seeds:
        why = (f"the between-context spread dominates ({noise})" if tau2 >= s2 else
               f"with {k} contexts the prediction interval's t quantile is {stats.t.isf(a / 2, k - 2):.3g} "
               f"(t on {k - 2} df; {noise})")
        return (f"more contexts: twice the contexts ({2 * k}) would narrow the prediction interval's half-width "
                f"from {now * factor:.3g}{unit} to about {more_contexts * factor:.3g}{unit}, 4x the seeds per "
                f"context only to about {more_seeds * factor:.3g}{unit}: {why}")
    return (f"more seeds per context: 4x the seeds in each context would narrow the prediction interval's "
            f"half-width from {now * factor:.3g}{unit} to about {more_seeds * factor:.3g}{unit}, twice the "
            f"contexts ({2 * k}) only to about {more_contexts * factor:.3g}{unit}: "
            + (f"the per-context SEs dominate ({noise})" if s2 > tau2 else noise))


def verdict(pooled: Pooled, per_context: Sequence[Context] | None = None, min_effect: float | None = None,
            alpha: float | None = None, *, factor: float = 1.0, unit: str = "") -> tuple[str, str]:
    """The contrast's verdict across contexts, and its reason in words.

    Precedence (the first that applies):

    1. **holds across contexts**: the pooled effect is detected (``pooled.p < alpha``: its interval excludes
       0), the prediction interval for a new context lies on the same side of 0, and no two contexts are
       detected in opposite directions. Sizes may still differ between contexts (the reason reports the
       heterogeneity): the prediction interval already widens with tau, so a direction that survives it
       travels.
    2. **equivalent on average across contexts**: the pooled TOST at ``+-min_effect`` rejects (``p_tost < alpha``: the
       ``1 - 2 alpha`` interval inside, the report's equivalence) and the prediction interval lies inside
       ``+-min_effect``. Contexts may differ, even in sign, but by less than anything that matters.
    3. **context-dependent**: two contexts are each *detected* in opposite directions (each context's own
       paired-t p, Holm-adjusted over the k contexts, below alpha; the reason names them), or heterogeneity
       is detected (``pooled.q_p < alpha``; the reason gives tau, I² and the contexts' range): the effect
       differs between contexts by more than the verdicts above allow. Holm, because unadjusted opposite
       detections at tau = 0 add to the heterogeneity test's false alarms (benchmarks/RESULTS.md).
    4. **not resolved**, with what would resolve it (:func:`what_resolves`): more contexts or more seeds
       per context, whichever narrows the prediction interval more.

    Why this order: "holds" and "equivalent" are what a reader can carry to a new context, and each is
    decided by an interval that accounts for tau already; "context-dependent" is what is left when the
    differences between contexts are detected and neither travels. It keeps the calibration targets
    whatever else happens: "holds" is declared at most as often as the pooled interval misses 0 (one minus
    its coverage), and "context-dependent" at most as often as one of its two tests fires at tau = 0 (placing
    it after "holds" and "equivalent" can only lower that).

    Args:
        pooled: :func:`pool`'s result.
        per_context: the contexts whose own detections are read (default ``pooled.contexts``).
        min_effect: the bound of "equivalent" (objective units; default ``pooled.min_effect``; None: no
            equivalence verdict).
        alpha: the level of every test here (default ``pooled.alpha``, the level its intervals were
            computed at; "holds" reads ``pooled.p`` and the prediction interval at that level).
        factor, unit: how the reason shows numbers (e.g. 100 and " points" for accuracies).

    Returns:
        ``(verdict, reason)``, the verdict one of :data:`VERDICTS`.
    """
    rows = tuple(pooled.contexts if per_context is None else per_context)
    me = pooled.min_effect if min_effect is None else min_effect
    a = pooled.alpha if alpha is None else alpha
    adjusted = holm([c.p for c in rows])
    up = [c for c, p in zip(rows, adjusted) if p < a and c.estimate > 0]
    down = [c for c, p in zip(rows, adjusted) if p < a and c.estimate < 0]
    pooled_text = (f"pooled {_num(pooled.estimate, factor, unit)} {_span(pooled.ci_low, pooled.ci_high, factor)} "
                   f"over {pooled.k} contexts, {new_context_text(pooled, factor)}")
    spread = (f"tau = {pooled.tau * factor:.3g}{unit}, I² = {100 * pooled.i2:.0f}%, heterogeneity p = "
              f"{pooled.q_p:.3g}")
    opposite = ""
    if up and down:
        named = "; ".join(f"{c.label} {_num(c.estimate, factor, unit)} {_span(c.ci_low, c.ci_high, factor)}"
                          for c in (*up, *down))
        opposite = f"contexts detected in opposite directions (Holm over {len(rows)} contexts): {named}"
    pi_ok = math.isfinite(pooled.pi_low)
    if pooled.p < a and pi_ok and (pooled.pi_low > 0 or pooled.pi_high < 0) and not opposite:
        return HOLDS, f"{pooled_text}: the direction holds in a new context ({spread})"
    p_tost = pooled.p_tost if me == pooled.min_effect else tost_p(pooled.estimate, pooled.se, pooled.df, me)
    if me and p_tost < a and pi_ok and -me < pooled.pi_low and pooled.pi_high < me:
        return EQUIVALENT, (f"{pooled_text}: inside ±{me * factor:.3g}{unit} (TOST p = {p_tost:.3g}), and so is "
                            f"a new context's ({spread}{'; ' + opposite if opposite else ''})")
    if opposite:
        return CONTEXT_DEPENDENT, f"{opposite}; {pooled_text} ({spread})"
    if pooled.q_p < a:
        lo, hi = min(rows, key=lambda c: c.estimate), max(rows, key=lambda c: c.estimate)
        return CONTEXT_DEPENDENT, (f"the effect's size differs between contexts ({spread}): from "
                                   f"{_num(lo.estimate, factor, unit)} ({lo.label}) to "
                                   f"{_num(hi.estimate, factor, unit)} ({hi.label}); {pooled_text}")
    return NOT_RESOLVED, f"{pooled_text}; {what_resolves(pooled, factor=factor, unit=unit)}"


# ------------------------------------------------------------------------------------------------ trend


@dataclass(frozen=True)
class TrendPoint:
    """The fitted trend at one model size.

    Attributes:
        log_p: where (the fit's x: log parameters, as given to :func:`scale_trend`).
        value: the line there (objective units).
        ci_low, ci_high: the ``1 - alpha`` confidence interval of the line (t on k - 2 df).
        pi_low, pi_high: the prediction interval of one new context's estimate measured with SE ``se``
            (the line's variance plus ``scale * se^2``).
        extrapolated: ``log_p`` lies outside the measured sizes: the value is an extrapolation, not a result.
    """

    log_p: float
    value: float
    ci_low: float
    ci_high: float
    pi_low: float
    pi_high: float
    extrapolated: bool


@dataclass(frozen=True)
class Trend:
    """The per-context estimates against log(parameters), by weighted least squares (:func:`scale_trend`).

    Attributes:
        k: contexts (model sizes); df: the residual degrees of freedom, k - 2.
        intercept, slope: the line ``estimate = intercept + slope * log_p``; the slope in objective units per
            unit of log_p (per e-fold of parameters with natural logs, per decade with log10).
        slope_se, slope_low, slope_high, p: the slope's standard error, ``1 - alpha`` t interval and the
            two-sided p-value of no trend.
        scale: the weighted fit's residual mean square (1 when the contexts scatter as their SEs say;
            above 1 with between-context spread the line does not explain).
        cov: the 2 x 2 covariance of (intercept, slope), scale included.
        log_p_min, log_p_max: the measured range; se_typical: the median per-context SE; alpha: the level.
    """

    k: int
    df: int
    intercept: float
    slope: float
    slope_se: float
    slope_low: float
    slope_high: float
    p: float
    scale: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    log_p_min: float
    log_p_max: float
    se_typical: float
    alpha: float

    def at(self, log_p: float, se: float | None = None) -> TrendPoint:
        """The line at ``log_p`` with its confidence interval and the prediction interval of one new
        context's estimate measured with SE ``se`` (default :attr:`se_typical`).

        Beyond the measured sizes (``extrapolated``) the value is an **extrapolation, not a result**: it
        assumes the line continues where no context was measured, and its intervals cover only the
        uncertainty of the fitted line, not whether the trend is linear in log parameters at all.
        """
        x = np.array([1.0, float(log_p)])
        var_line = float(x @ np.asarray(self.cov) @ x)
        t = float(stats.t.isf(self.alpha / 2, self.df))
        value = self.intercept + self.slope * float(log_p)
        s = self.se_typical if se is None else float(se)
        ci, pi = t * math.sqrt(var_line), t * math.sqrt(var_line + self.scale * s ** 2)
        outside = not (self.log_p_min <= float(log_p) <= self.log_p_max)
        return TrendPoint(float(log_p), value, value - ci, value + ci, value - pi, value + pi, outside)


def scale_trend(log_params: Sequence[float], estimates: Sequence[float], ses: Sequence[float], *,
                alpha: float = ALPHA) -> Trend:
    """The trend of a contrast's per-context estimates with model size: weighted least squares
    (``statsmodels`` WLS, weights ``1 / se^2``) of the estimates on log(parameters), the residual scale
    estimated (so between-context spread the line leaves widens the intervals), t intervals on k - 2 df.

    A slope describes the measured sizes; :meth:`Trend.at` beyond them is an extrapolation, never a result.

    Args:
        log_params: [k] log parameters of each context's model (natural log or log10: the slope's unit).
        estimates: [k] per-context estimates (objective units).
        ses: [k] their standard errors, all positive.
        alpha: the level of the intervals.

    Raises:
        ValueError: fewer than 3 contexts, fewer than 2 distinct sizes, lengths that differ, a non-finite
            value or an SE that is not positive.
    """
    import statsmodels.api as sm

    x = np.asarray(log_params, dtype=float).ravel()
    y = np.asarray(estimates, dtype=float).ravel()
    s = np.asarray(ses, dtype=float).ravel()
    if not (x.size == y.size == s.size) or x.size < 3:
        raise ValueError(f"scale_trend: {x.size} sizes, {y.size} estimates, {s.size} ses: give one of each per "
                         "context, at least 3 (the slope's interval has k - 2 df)")
    if not (np.isfinite(x).all() and np.isfinite(y).all() and np.isfinite(s).all() and (s > 0).all()):
        raise ValueError("scale_trend: every size and estimate must be finite and every se positive")
    if np.unique(x).size < 2:
        raise ValueError("scale_trend: the contexts need at least 2 different sizes for a slope")
    fit = sm.WLS(y, sm.add_constant(x), weights=1.0 / s ** 2).fit()
    lo, hi = fit.conf_int(alpha=alpha)[1]
    cov = np.asarray(fit.cov_params())
    return Trend(
        k=int(x.size), df=int(fit.df_resid), intercept=float(fit.params[0]), slope=float(fit.params[1]),
        slope_se=float(fit.bse[1]), slope_low=float(lo), slope_high=float(hi), p=float(fit.pvalues[1]),
        scale=float(fit.scale), cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        log_p_min=float(x.min()), log_p_max=float(x.max()), se_typical=float(np.median(s)), alpha=alpha,
    )
