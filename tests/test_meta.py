"""ablate.stats.meta: random-effects pooling by hand (Cochran's Q, I², the Paule-Mandel τ² in the cases where it has
a closed form, the Hartung-Knapp interval and the prediction interval from closed-form t quantiles), the
heterogeneity bootstrap against chi2 where the SEs are all but known, each verdict on constructed contexts,
and the scale trend against numpy's weighted polyfit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from ablate.stats import meta

#: t quantiles at 0.975 in closed form: 1 df tan(0.475 pi); 2 df (2p - 1) sqrt(2 / (4 p (1 - p))).
T1 = math.tan(0.475 * math.pi)                      # 12.7062
T2 = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))      # 4.30265


def test_closed_form_t_quantiles():
    assert T1 == pytest.approx(stats.t.isf(0.025, 1), rel=1e-12)
    assert T2 == pytest.approx(stats.t.isf(0.025, 2), rel=1e-12)


# ----------------------------------------------------------------------------------- known SEs (no dfs)


def test_cochran_q_i2_and_chi2_p_by_hand():
    # e = [1, 3, 8], v = [1, 2, 4]: w = [1, 1/2, 1/4], sum w = 7/4, sum w e = 9/2, sum w e^2 = 43/2
    # Q = 43/2 - (9/2)^2 / (7/4) = 139/14; I^2 = (Q - 2) / Q = 111/139; chi2(2) sf = exp(-Q/2)
    p = meta.pool([1.0, 3.0, 8.0], [1.0, math.sqrt(2), 2.0])
    assert p.q == pytest.approx(139 / 14, rel=1e-12)
    assert p.q_df == 2
    assert p.i2 == pytest.approx(111 / 139, rel=1e-12)
    assert p.q_p == pytest.approx(math.exp(-139 / 28), rel=1e-9)
    assert "chi2(2)" in p.heterogeneity and "inverse-variance" in p.method and "Paule-Mandel" in p.method


def test_paule_mandel_solves_its_equation_and_differs_from_dersimonian_laird():
    e, v = np.array([1.0, 3.0, 8.0]), np.array([1.0, 2.0, 4.0])
    p = meta.pool(e, np.sqrt(v))
    # Paule-Mandel: sum w (e - m)^2 = k - 1 with w = 1 / (v + tau^2), solved here by Brent's method
    def gap(tau2: float) -> float:
        w = 1 / (v + tau2)
        m = (w * e).sum() / w.sum()
        return float((w * (e - m) ** 2).sum() - 2)
    assert p.tau2 == pytest.approx(optimize.brentq(gap, 0, 100, xtol=1e-14), rel=1e-5)  # statsmodels stops at |Q - 2| < 1e-5
    # DerSimonian-Laird by hand: c = sum w - sum w^2 / sum w = 7/4 - (21/16) / (7/4) = 1, tau2 = Q - 2 = 111/14
    assert p.tau2 != pytest.approx(111 / 14, rel=1e-3)
    assert p.tau == pytest.approx(math.sqrt(p.tau2))


def test_two_contexts_paule_mandel_in_closed_form_and_no_prediction_interval():
    # k = 2: Q(tau2) = (e1 - e2)^2 / (v1 + v2 + 2 tau2) = 1  =>  tau2 = ((e1 - e2)^2 - v1 - v2) / 2 = (16 - 4) / 2
    p = meta.pool([0.0, 4.0], [1.0, math.sqrt(3.0)])
    assert p.tau2 == pytest.approx(6.0, rel=1e-6)
    # tau2 > 0 under Paule-Mandel: the HKSJ scale is 1, so se^2 = 1 / sum 1 / (v + tau2) = 1 / (1/7 + 1/9)
    assert p.se == pytest.approx(math.sqrt(63 / 16), rel=1e-6)
    assert p.estimate == pytest.approx((0 / 7 + 4 / 9) / (1 / 7 + 1 / 9), rel=1e-6)  # 1.75
    assert (p.ci_low, p.ci_high) == pytest.approx((1.75 - T1 * p.se, 1.75 + T1 * p.se), rel=1e-6)
    assert math.isnan(p.pi_low) and math.isnan(p.pi_high)


# ------------------------------------------------------------------------------- estimated SEs (dfs)


def test_sample_size_weights_equal_seeds_by_hand():
    # three contexts of 8 seeds, se 1 each: v = 1, tau2 = s_e^2 - v = 13 - 1 (Paule-Mandel = DerSimonian-Laird);
    # equal weights: estimate 5, HKSJ se^2 = s_e^2 / k = 13/3 (the t-interval on the context estimates)
    p = meta.pool([2.0, 4.0, 9.0], [1.0, 1.0, 1.0], [7, 7, 7], labels=["a", "b", "c"])
    assert p.k == 3 and p.df == 2
    assert p.estimate == pytest.approx(5.0, rel=1e-12)
    assert p.tau2 == pytest.approx(12.0, rel=1e-6)
    assert p.se == pytest.approx(math.sqrt(13 / 3), rel=1e-6)
    assert (p.ci_low, p.ci_high) == pytest.approx((5 - T2 * math.sqrt(13 / 3), 5 + T2 * math.sqrt(13 / 3)), rel=1e-6)
    half = T1 * math.sqrt(12 + 13 / 3)  # Higgins-Thompson-Spiegelhalter: t_{k-2} sqrt(tau2 + se^2)
    assert (p.pi_low, p.pi_high) == pytest.approx((5 - half, 5 + half), rel=1e-6)
    assert p.p == pytest.approx(2 * stats.t.sf(5 / math.sqrt(13 / 3), 2), rel=1e-6)
    assert p.q == pytest.approx(26.0) and p.i2 == pytest.approx(24 / 26)
    assert [c.weight for c in p.contexts] == pytest.approx([1 / 3] * 3)
    assert [c.label for c in p.contexts] == ["a", "b", "c"]
    assert "sample-size weights" in p.method and "Hartung-Knapp" in p.method and "bootstrap" in p.heterogeneity


def test_each_context_keeps_its_own_paired_t_interval():
    p = meta.pool([2.0, -1.0, 0.5], [1.0, 0.5, 2.0], [7, 3, 7])
    c = p.contexts[1]
    t3 = stats.t.isf(0.025, 3)
    assert (c.ci_low, c.ci_high) == pytest.approx((-1 - 0.5 * t3, -1 + 0.5 * t3))
    assert c.p == pytest.approx(2 * stats.t.sf(2.0, 3)) and c.df == 3
    assert [x.p_holm for x in p.contexts] == pytest.approx(list(meta.holm([x.p for x in p.contexts])))


def test_unequal_seeds_weight_by_seeds():
    # se = [1, 2], df = [3, 1]: n = [4, 2]; s_p^2 = (3 * 4 * 1 + 1 * 2 * 4) / 4 = 5; v = [5/4, 5/2]. The two
    # estimates agree within their SEs, so tau2 = 0 and the weights are the seeds', 2/3 and 1/3
    p = meta.pool([1.0, 1.1], [1.0, 2.0], [3, 1])
    assert p.tau2 == 0.0
    assert [c.weight for c in p.contexts] == pytest.approx([2 / 3, 1 / 3])
    assert p.estimate == pytest.approx((2 * 1.0 + 1.1) / 3)


def test_bootstrap_heterogeneity_p_does_not_depend_on_the_order_of_the_contexts():
    # issue 54: the run's report and the ledger listed the same 15 contexts in two orders and printed
    # heterogeneity p 0.266 and 0.265; the draws now follow one canonical order (by SE, then df)
    e = [0.03, -0.01, 0.05, 0.00, 0.02, -0.04]
    s = [0.011, 0.02, 0.015, 0.02, 0.009, 0.03]
    d = [4, 4, 5, 5, 4, 3]
    ref = meta.pool(e, s, d).q_p
    assert 0 < ref < 1
    for order in ([5, 4, 3, 2, 1, 0], [2, 0, 5, 1, 4, 3], [1, 3, 0, 2, 5, 4]):
        got = meta.pool([e[i] for i in order], [s[i] for i in order], [d[i] for i in order]).q_p
        assert got == ref   # bit for bit: the same draws meet the same contexts


def test_i2_is_zero_when_q_is_below_its_df():
    p = meta.pool([1.0, 1.1, 0.9, 1.05], [1.0, 1.0, 1.0, 1.0])
    assert p.q < p.q_df and p.i2 == 0.0 and p.tau2 == 0.0


def test_bootstrap_heterogeneity_p_matches_chi2_when_the_ses_are_all_but_known():
    e, s = [1.0, 3.0, 8.0], [1.0, math.sqrt(2), 2.0]
    known = meta.pool(e, s).q_p                         # exp(-139/28) = 0.0070
    boot = meta.pool(e, s, [1e6, 1e6, 1e6]).q_p         # SEs on a million df: the bootstrap is chi2's
    assert boot == pytest.approx(known, abs=0.003)      # MC SE at p = 0.007 over 10,000 draws: 0.0008
    assert boot == meta.pool(e, s, [1e6, 1e6, 1e6]).q_p  # a fixed seed: the same p every time
    # with 7 df the SEs are uncertain and the same Q is less surprising
    assert meta.pool(e, s, [7, 7, 7]).q_p > known
    # never exactly 0 ((1 + hits) / (1 + draws))
    assert meta.pool([0.0, 100.0, -100.0], [1.0, 1.0, 1.0], [7, 7, 7]).q_p == pytest.approx(1 / (1 + meta.HET_BOOTSTRAP))


def test_tost_of_the_pooled_effect():
    p = meta.pool([2.0, 4.0, 9.0], [1.0, 1.0, 1.0], [7, 7, 7], min_effect=10.0)
    assert p.p_tost == pytest.approx(meta.tost_p(5.0, math.sqrt(13 / 3), 2, 10.0))
    assert math.isnan(meta.pool([2.0, 4.0, 9.0], [1.0, 1.0, 1.0], [7, 7, 7]).p_tost)


@pytest.mark.parametrize("args, words", [
    (([1.0], [1.0]), "at least 2"),
    (([1.0, 2.0], [1.0, 0.0]), "se must be positive"),
    (([1.0, 2.0], [1.0]), "give one of each"),
    (([1.0, math.nan], [1.0, 1.0]), "not finite"),
    (([1.0, 2.0], [1.0, 1.0], [7, 0]), "df must be"),
])
def test_pool_rejects_what_it_cannot_pool(args, words):
    with pytest.raises(ValueError, match=words):
        meta.pool(*args)


# ------------------------------------------------------------------------------------------ verdicts


def test_holds_across_contexts_even_when_the_size_varies():
    # sizes 10-20 with SE 0.5: heterogeneity is certain, but a new context is predicted well above 0
    p = meta.pool([10.0, 12.0, 14.0, 16.0, 18.0, 20.0], [0.5] * 6, [7] * 6, min_effect=5.0)
    assert p.q_p < 0.05 and p.pi_low > 0
    v, reason = meta.verdict(p)
    assert v == meta.HOLDS
    assert "new context" in reason and "I²" in reason


def test_holds_needs_the_prediction_interval_not_only_the_pooled_interval():
    # three contexts: the pooled interval excludes 0 but the prediction interval (t on 1 df) does not
    p = meta.pool([6.0, 7.0, 8.0], [1.0] * 3, [7] * 3, min_effect=5.0)
    assert p.ci_low > 0 and p.pi_low < 0 and p.q_p > 0.05
    v, reason = meta.verdict(p)
    assert v == meta.NOT_RESOLVED
    assert "more contexts" in reason  # the prediction interval is wide because k is small


def test_equivalent_across_contexts_even_with_heterogeneity():
    e = [-0.5, 0.5] * 4
    p = meta.pool(e, [0.1] * 8, [7] * 8, min_effect=5.0)
    assert p.q_p < 0.05 and -5 < p.pi_low and p.pi_high < 5
    v, reason = meta.verdict(p)
    assert v == meta.EQUIVALENT  # even though contexts are detected in opposite directions, all by < 5
    assert "opposite directions" in reason
    assert p.tau2 == pytest.approx(2 / 7 - 0.01, rel=1e-6)  # s_e^2 - v, not statsmodels' rounding to 0
    assert meta.verdict(p, min_effect=0.5)[0] == meta.CONTEXT_DEPENDENT  # the PI is not inside +-0.5
    assert meta.verdict(meta.pool(e, [0.1] * 8, [7] * 8))[0] == meta.CONTEXT_DEPENDENT  # no min_effect


def test_context_dependent_when_two_contexts_point_opposite_ways():
    p = meta.pool([6.0, -7.0, 5.0, 8.0], [1.0, 1.2, 0.9, 1.0], [7] * 4, labels=["gsm8k", "countdown", "chain", "add"])
    v, reason = meta.verdict(p)
    assert v == meta.CONTEXT_DEPENDENT
    assert "opposite directions" in reason and "countdown" in reason and "gsm8k" in reason


def test_opposite_detections_veto_holds():
    # 24 contexts near +10 and one at -1, all precise: the pooled effect and even the prediction interval
    # clear 0, but a context detected in the other direction means the direction does not travel
    e = [10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 9.9, 10.0] * 3 + [-1.0]
    p = meta.pool(e, [0.3] * 25, [7] * 25, labels=[f"c{i}" for i in range(25)])
    assert p.p < 0.05 and p.pi_low > 0
    v, reason = meta.verdict(p)
    assert v == meta.CONTEXT_DEPENDENT and "c24 -1" in reason


def test_opposite_detections_are_holm_adjusted_over_the_contexts():
    # each context's own p is 0.03 (below alpha) but Holm over 3 contexts is not: no opposite detections
    t = stats.t.isf(0.015, 7)
    p = meta.pool([t, -t, t], [1.0, 1.0, 1.0], [7, 7, 7])
    assert all(c.p == pytest.approx(0.03) for c in p.contexts)
    assert all(c.p_holm > 0.05 for c in p.contexts)
    v, reason = meta.verdict(p)
    assert "opposite directions" not in reason


def test_context_dependent_by_size_names_the_range():
    p = meta.pool([2.0, 4.0, 9.0], [1.0, 1.0, 1.0], [7, 7, 7], min_effect=5.0, labels=["a", "b", "c"])
    v, reason = meta.verdict(p)
    assert v == meta.CONTEXT_DEPENDENT
    assert "(a)" in reason and "(c)" in reason and "tau = 3.46" in reason


def test_not_resolved_says_more_seeds_when_the_per_context_ses_dominate():
    p = meta.pool([3.0, -2.0, 5.0, 0.0, 4.0, -1.0, 6.0, 1.0, 2.0], [3.0] * 9, [7] * 9, min_effect=3.0)
    assert p.tau2 == 0.0 and p.ci_low < 0
    v, reason = meta.verdict(p, factor=1.0, unit=" points")
    assert v == meta.NOT_RESOLVED
    assert reason.split("; ", 1)[1].startswith("more seeds per context")
    assert "typical per-context SE of 3 points" in reason


def test_not_resolved_below_three_contexts_asks_for_contexts():
    p = meta.pool([1.0, 2.0], [1.0, 1.0], [7, 7], min_effect=5.0)
    v, reason = meta.verdict(p)
    assert v == meta.NOT_RESOLVED and "needs at least 3" in reason


def test_two_contexts_say_the_prediction_interval_is_undefined_not_nan():
    """With 2 contexts the prediction interval (t on k - 2 df) does not exist: the reason says so in words,
    never ``[nan, nan]``, whatever the verdict."""
    for estimates in ([1.0, 2.0], [10.0, -10.0], [0.1, 0.2]):
        p = meta.pool(estimates, [1.0, 0.5], [7, 7], min_effect=5.0)
        v, reason = meta.verdict(p, factor=100, unit=" points")
        assert "nan" not in reason.lower() and v in (meta.NOT_RESOLVED, meta.CONTEXT_DEPENDENT)
        assert "no prediction interval for a new context (undefined with 2 contexts: it needs at least 3)" in reason
    three = meta.pool([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [7, 7, 7])
    assert meta.new_context_text(three).startswith("a new context [")


def test_verdict_reason_in_the_readers_units():
    p = meta.pool([0.10, 0.12, 0.14, 0.16, 0.18, 0.20], [0.005] * 6, [7] * 6)
    assert "+15 points" in meta.verdict(p, factor=100, unit=" points")[1]


# --------------------------------------------------------------------------------------------- trend


def test_scale_trend_against_numpy_weighted_polyfit():
    x = np.log([1.35e8, 3.6e8, 1.7e9, 7e9, 1.3e10])
    y = np.array([0.01, 0.025, 0.03, 0.06, 0.055])
    se = np.array([0.01, 0.012, 0.008, 0.015, 0.02])
    tr = meta.scale_trend(x, y, se)
    # numpy's w multiplies the residuals: w = 1 / se is the weight 1 / se^2; cov=True scales by chi2 / (k - 2)
    (slope, intercept), cov = np.polyfit(x, y, 1, w=1 / se, cov=True)
    assert tr.slope == pytest.approx(slope, rel=1e-9) and tr.intercept == pytest.approx(intercept, rel=1e-6)
    assert tr.slope_se == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-9)
    t3 = stats.t.isf(0.025, 3)
    assert (tr.slope_low, tr.slope_high) == pytest.approx((slope - t3 * tr.slope_se, slope + t3 * tr.slope_se))
    assert tr.df == 3 and tr.k == 5
    assert tr.p == pytest.approx(2 * stats.t.sf(abs(slope) / tr.slope_se, 3), rel=1e-9)


def test_trend_at_a_size_and_beyond_the_measured_ones():
    x, y, se = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 2.0, 4.0]), np.ones(4)
    tr = meta.scale_trend(x, y, se)
    # ordinary least squares (equal weights): slope 0.9, intercept 0.9, residuals [0.1, 0.2, -0.7, 0.4]: s^2 = 0.7/2
    assert (tr.slope, tr.intercept, tr.scale) == pytest.approx((0.9, 0.9, 0.35))
    inside, beyond = tr.at(1.5), tr.at(5.0)
    assert not inside.extrapolated and beyond.extrapolated
    assert beyond.value == pytest.approx(0.9 + 0.9 * 5)
    # the line's variance at x0: s^2 (1/k + (x0 - xbar)^2 / Sxx), xbar 1.5, Sxx 5
    half = T2 * math.sqrt(0.35 * (1 / 4 + 3.5 ** 2 / 5))
    assert (beyond.ci_low, beyond.ci_high) == pytest.approx((beyond.value - half, beyond.value + half))
    pi = T2 * math.sqrt(0.35 * (1 / 4 + 3.5 ** 2 / 5) + 0.35 * 1.0)
    assert (beyond.pi_low, beyond.pi_high) == pytest.approx((beyond.value - pi, beyond.value + pi))
    assert "extrapolation" in meta.Trend.at.__doc__ and "not a result" in meta.Trend.at.__doc__


@pytest.mark.parametrize("args", [([0.0, 1.0], [1.0, 2.0], [1.0, 1.0]), ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], [1.0] * 3),
                                  ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [1.0, 0.0, 1.0])])
def test_scale_trend_rejects_what_it_cannot_fit(args):
    with pytest.raises(ValueError, match="scale_trend"):
        meta.scale_trend(*args)
