"""ablate.stats.inference: hand-computed values of every public function, the linear model against statsmodels'
own model comparisons, model contrasts against cell means, and small calibration checks (coverage of the
95% intervals, family-wise false detections) on a realistic seed-level generator."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from tolerance import EXACT, assert_close, is_close

from ablate.stats import inference as inf
from ablate.stats.contrast import Contrast

ROOT = Path(__file__).resolve().parents[1]
NAN = math.nan


def t3_cdf(t: float) -> float:
    """CDF of Student's t with 3 df in closed form: 1/2 + (x / (1 + x^2) + atan x) / pi, x = t / sqrt(3)."""
    x = t / math.sqrt(3)
    return 0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi


def t2_cdf(t: float) -> float:
    """CDF of Student's t with 2 df in closed form: 1/2 + t / (2 sqrt(2 + t^2))."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


#: t_{2, 0.975} in closed form (2 df: t = (2p - 1) / sqrt(2 p (1 - p))); t_{3, 0.975} from tables.
T2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
T3 = 3.182446305


# ------------------------------------------------------------------------------------ one sample


def test_t_interval_hand_values():
    lo, hi = inf.t_interval([1, 2, 3])  # mean 2, sd 1, n 3: 2 +- 4.3027 / sqrt(3)
    assert T2 == pytest.approx(4.302652730, abs=1e-9)
    assert (lo, hi) == pytest.approx((2 - T2 / math.sqrt(3), 2 + T2 / math.sqrt(3)), abs=1e-12)
    assert inf.t_interval([1, 2, 3, NAN, math.inf]) == pytest.approx((lo, hi))  # non-finite values dropped
    assert inf.t_interval([5, 5, 5]) == (5.0, 5.0)  # zero width when every value is equal
    # 1 df: t_{1, 0.975} = tan(0.475 pi) (Cauchy); [1, 3]: mean 2, sd sqrt(2), half = t sqrt(2) / sqrt(2)
    assert inf.t_interval([1, 3], min_n=2) == pytest.approx((2 - math.tan(0.475 * math.pi), 2 + math.tan(0.475 * math.pi)))
    # 90%: t_{2, 0.95} = 0.9 / sqrt(2 * 0.95 * 0.05)
    assert inf.t_interval([1, 2, 3], confidence=0.9)[1] == pytest.approx(2 + 0.9 / math.sqrt(0.095) / math.sqrt(3))


@pytest.mark.parametrize("values", [[], [1.0], [1.0, 2.0], [1.0, 2.0, NAN], [1.0, NAN, NAN]])
def test_t_interval_none_below_three_values(values):
    lo, hi = inf.t_interval(values)
    assert math.isnan(lo) and math.isnan(hi)


def test_d_z_hand_values():
    assert inf.d_z([2, 3, 3, 2]) == pytest.approx(2.5 * math.sqrt(3))  # mean 2.5, sd sqrt(1/3)
    assert inf.d_z([-1, NAN, -3]) == pytest.approx(-2 / math.sqrt(2))  # NaN dropped: mean -2, sd sqrt(2)
    for d in ([1.0, 1.0, 1.0], [1.0], [], [NAN, 2.0]):
        assert math.isnan(inf.d_z(d))


def test_seeds_improved_counts_ties_and_mode():
    d = [0.1, -0.2, 0.0, 0.3, NAN]  # the tie (0) and the NaN are left out: 2 of 3 improve when maximising
    up, down = inf.seeds_improved(d), inf.seeds_improved(d, mode="min")
    assert (up.k, up.n, up.fraction) == (2, 3, pytest.approx(2 / 3))
    assert (down.k, down.n, down.fraction) == (1, 3, pytest.approx(1 / 3))
    none = inf.seeds_improved([0.0, 0.0])
    assert (none.k, none.n) == (0, 0) and math.isnan(none.fraction) and math.isnan(none.low)


def test_seeds_improved_clopper_pearson_hand_values():
    # k = n: lower bound solves p^n = 0.025; k = 0: the upper bound solves (1 - p)^n = 0.025
    four = inf.seeds_improved([1, 2, 3, 4])
    assert four.low == pytest.approx(0.025 ** 0.25, abs=1e-9) and four.low == pytest.approx(0.3976, abs=1e-4)
    assert four.high == 1.0
    zero = inf.seeds_improved([-1, -2, -3, -4])
    assert zero.low == 0.0 and zero.high == pytest.approx(1 - 0.025 ** 0.25, abs=1e-9)
    # k = 1 of 3: lower solves 1 - (1 - p)^3 = 0.025; upper is Beta(2, 2)'s 0.975 quantile: 3p^2 - 2p^3 = 0.975
    one = inf.seeds_improved([1, -1, -2])
    assert one.low == pytest.approx(1 - 0.975 ** (1 / 3), abs=1e-9)
    assert 3 * one.high ** 2 - 2 * one.high ** 3 == pytest.approx(0.975, abs=1e-9)


def test_holm_hand_values_and_nan():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(2 * 0.03, .) = 0.06, max(1 * 0.04, 0.06) = 0.06
    assert_close(inf.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06], EXACT)
    out = inf.holm([0.01, NAN, 0.04])  # NaN is not a test: m = 2
    assert_close(out[[0, 2]], [0.02, 0.04], EXACT)
    assert math.isnan(out[1])
    assert_close(inf.holm([0.5, 0.6]), [1.0, 1.0], EXACT)  # capped at 1
    assert np.isnan(inf.holm([NAN, NAN])).all() and inf.holm([]).size == 0


def test_tost_p_hand_values():
    # est 0.5, se 1, 2 df, bound 2: max(P(T >= 2.5), P(T <= -1.5)) = P(T <= -1.5) = 1/2 - 1.5 / (2 sqrt(4.25))
    hand = 0.5 - 1.5 / (2 * math.sqrt(4.25))
    assert hand == pytest.approx(1 - t2_cdf(1.5))
    assert inf.tost_p(0.5, 1.0, 2, 2.0) == pytest.approx(hand, abs=1e-12)
    assert inf.tost_p(-0.5, 1.0, 2, 2.0) == pytest.approx(hand, abs=1e-12)  # symmetric
    assert inf.tost_p(0.5, 0.0, 2, 2.0) == 0.0 and inf.tost_p(3.0, 0.0, 2, 2.0) == 1.0  # se 0: inside or not
    assert inf.tost_p(0.0, 1.0, 2, 2.0) < inf.tost_p(1.0, 1.0, 2, 2.0) < inf.tost_p(2.0, 1.0, 2, 2.0)
    assert inf.tost_p(2.0, 1.0, 2, 2.0) == pytest.approx(0.5)  # exactly at the bound
    for args in ((0.5, 1.0, 2, 0.0), (0.5, 1.0, 2, NAN), (0.5, NAN, 2, 2.0), (0.5, 1.0, 0, 2.0), (NAN, 1.0, 2, 2.0)):
        assert math.isnan(inf.tost_p(*args))


def _power(d: float, n: int, alpha: float) -> float:
    """Two-sided paired t power from the noncentral t (scipy), independent of statsmodels."""
    crit = stats.t.ppf(1 - alpha / 2, n - 1)
    nc = d * math.sqrt(n)
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))


def test_seeds_for_power_hand_values():
    assert inf.seeds_for_power(1.0, 1.0) == 10  # d = 1 at alpha 0.05, 80% power
    assert inf.seeds_for_power(2.0, 1.0) == 34  # d = 0.5
    assert inf.seeds_for_power(2.0, -1.0) == 34  # the sign does not matter
    for d, n in ((1.0, 10), (0.5, 34)):
        assert _power(d, n, 0.05) >= 0.8 > _power(d, n - 1, 0.05)
    n = inf.seeds_for_power(1.0, 0.5, alpha=0.05 / 3)  # Bonferroni over 3 claims needs more
    assert n > 34 and _power(0.5, int(n), 0.05 / 3) >= 0.8 > _power(0.5, int(n) - 1, 0.05 / 3)
    assert inf.seeds_for_power(1.0, 0.0) == math.inf
    assert inf.seeds_for_power(0.0, 1.0) == 2
    assert inf.seeds_for_power(1.0, 0.01, max_n=100) == math.inf
    assert math.isnan(inf.seeds_for_power(NAN, 1.0))


def test_seeds_for_power_where_statsmodels_power_is_nan():
    """behaviour_logp's claim (reports/behaviour_logp: SD of one seed's difference 1.073 points, min_effect
    5 points, d = 4.66, alpha 0.05): 3 seeds have power 0.96, 2 seeds 0.39, so 3 are needed. statsmodels'
    TTestPower.power is NaN at 3-6 seeds there (and 8), and the report said 5. By hand from scipy's
    noncentral t: at n = 3 its upper tail alone (the lower tail is NaN in scipy, and below 1e-12) is 0.960."""
    from ablate.report.folder import read_report_pilot
    from ablate.study import load_study

    pilot = read_report_pilot(load_study(ROOT / "studies" / "behaviour_logp.yaml"), ROOT / "reports" / "behaviour_logp")
    (claim,) = pilot.inference.family.claims
    sd, effect = claim.contrast.sd_per_seed, 0.05
    assert sd == pytest.approx(0.010730, abs=1e-6)
    d = effect / sd
    assert stats.nct.sf(stats.t.ppf(0.975, 2), 2, d * math.sqrt(3)) == pytest.approx(0.9603, abs=1e-4)  # n = 3
    assert _power(d, 2, 0.05) == pytest.approx(0.3949, abs=1e-4)  # n = 2: both tails finite, below 0.8
    assert inf.paired_t_power(d, 3) == pytest.approx(0.9603, abs=1e-4)
    assert inf.seeds_for_power(sd, effect) == 3
    assert claim.seeds_needed == 3
    # the z-test's n is a lower bound; where both differ from it the search still lands on the exact n
    for d, alpha in ((3.805, 0.05 / 3), (6.0, 0.01), (30.0, 0.05), (0.2, 0.05 / 6)):
        n = int(inf.seeds_for_power(1.0, d, alpha=alpha))
        assert inf.paired_t_power(d, n, alpha) >= 0.8 and (n == 2 or inf.paired_t_power(d, n - 1, alpha) < 0.8)


def test_resolvable_effect_is_the_effect_at_which_n_seeds_reach_the_power():
    """The minimum detectable effect inverts the power: at that effect the power (noncentral t, written
    out above, independently of statsmodels) is 0.8; it scales with the SD and shrinks with n."""
    for n, alpha in ((4, 0.05), (8, 0.05), (6, 0.05 / 3)):
        e = inf.resolvable_effect(1.0, n, alpha=alpha)
        assert abs(_power(e, n, alpha) - 0.8) < 1e-6, (n, alpha)
    assert inf.resolvable_effect(3.0, 8) == 3.0 * inf.resolvable_effect(1.0, 8)
    assert inf.resolvable_effect(1.0, 16) < inf.resolvable_effect(1.0, 8)
    assert 1.1 < inf.resolvable_effect(1.0, 8) < 1.2  # d ~ 1.15 at 8 seeds (7 df), alpha 0.05
    assert inf.seeds_for_power(1.0, inf.resolvable_effect(1.0, 10) + 1e-9) == 10
    assert inf.resolvable_effect(0.0, 5) == 0.0
    # a contrast's own test: a paired contrast (df = n - 1) gives the same as its SD per seed at n seeds;
    # a model contrast with more residual df resolves a smaller effect at the same standard error
    paired = inf.paired_contrast([0.5, 0.6, 0.55, 0.7], [0.5, 0.52, 0.5, 0.6], [0, 1, 2, 3], factor="f", level="b",
                                 baseline="a")
    assert inf.contrast_resolvable_effect(paired) == pytest.approx(inf.resolvable_effect(paired.sd_per_seed, 4))
    model_like = replace(paired, df=15.0)
    assert inf.contrast_resolvable_effect(model_like) < inf.contrast_resolvable_effect(paired)
    assert abs(_power(inf.contrast_resolvable_effect(model_like) / (paired.se * 4), 16, 0.05) - 0.8) < 1e-6
    assert math.isnan(inf.resolvable_effect(NAN, 5)) and math.isnan(inf.resolvable_effect(1.0, 1))


@pytest.mark.parametrize(("n", "alpha"), [(2, 0.05), (2, 0.05 / 3), (3, 0.05), (4, 0.05 / 3), (30, 0.05)])
def test_resolvable_effect_holds_up_in_a_monte_carlo_check(n, alpha):
    """At the resolvable effect, 200,000 simulated paired t-tests (n normal differences, SD 1) reject in
    80% of draws (Monte Carlo SE 0.0009; tolerance 0.005). At n = 2 statsmodels' solve_power stopped at
    10 SDs (power 0.29 at alpha 0.05 / 3); the answer is ~34.5."""
    e = inf.resolvable_effect(1.0, n, alpha=alpha)
    rng = np.random.default_rng(n)
    x = rng.normal(e, 1.0, size=(200_000, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    rejected = float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)))
    assert abs(rejected - 0.8) < 0.005, (n, alpha, e, rejected)
    if (n, alpha) == (2, 0.05 / 3):
        assert 34 < e < 35  # quickstart's 2 seeds at SD 4.2 points resolve ~145 points, not 42
    assert inf.paired_t_power(e, n, alpha) == pytest.approx(0.8, abs=1e-6)


def test_paired_t_power_by_hand_and_against_statsmodels():
    from statsmodels.stats.power import TTestPower

    assert inf.paired_t_power(0.0, 5, 0.05) == pytest.approx(0.05, abs=1e-9)  # no effect: the test's size
    for d, n in ((0.5, 10), (1.0, 4), (3.0, 3)):
        assert inf.paired_t_power(d, n, 0.05) == pytest.approx(
            TTestPower().power(effect_size=d, nobs=n, alpha=0.05, alternative="two-sided"), abs=1e-7)
    assert inf.paired_t_power(-1.0, 4, 0.05) == inf.paired_t_power(1.0, 4, 0.05)
    assert math.isnan(inf.paired_t_power(1.0, 1))


# -------------------------------------------------------------------------------------- contrasts


def test_paired_contrast_hand_values():
    c = inf.paired_contrast([3, 5, 7, 6], [1, 2, 4, 4], [0, 1, 2, 3], factor="f", level="b", baseline="a",
                            min_effect=3.0)
    # d = [2, 3, 3, 2]: mean 2.5, sd sqrt(1/3), se sqrt(1/3) / 2, 3 df, t = 5 sqrt(3)
    se = math.sqrt(1 / 3) / 2
    assert (c.estimate, c.se, c.df, c.n_seeds, c.method) == (2.5, pytest.approx(se), 3.0, 4, inf.PAIRED)
    assert (c.level_mean, c.baseline_mean) == (5.25, 2.75)
    assert (c.ci_low, c.ci_high) == (pytest.approx(2.5 - T3 * se, abs=1e-8), pytest.approx(2.5 + T3 * se, abs=1e-8))
    assert c.p == pytest.approx(2 * (1 - t3_cdf(5 * math.sqrt(3))), rel=1e-9)  # = 0.00324
    assert c.p == pytest.approx(0.003239, abs=1e-6)
    # TOST at +-3: max(P(T >= 5.5 / se), P(T <= -0.5 / se = -sqrt(3))) = t3_cdf(-sqrt(3)) = 1/4 - 1/(2 pi)
    assert c.p_tost == pytest.approx(0.25 - 0.5 / math.pi, rel=1e-9)
    assert c.d_z == pytest.approx(2.5 * math.sqrt(3)) and c.sd_per_seed == pytest.approx(math.sqrt(1 / 3))
    assert (c.improved.k, c.improved.n) == (4, 4) and c.per_seed == (2, 3, 3, 2) and c.seeds == (0, 1, 2, 3)
    assert c.name == "f: b vs a"
    assert math.isnan(inf.paired_contrast([3, 5, 7], [1, 2, 4], [0, 1, 2], factor="f", level="b",
                                          baseline="a").p_tost)  # no min_effect: no TOST
    low = inf.paired_contrast([3, 5, 7, 6], [1, 2, 4, 4], [0, 1, 2, 3], factor="f", level="b", baseline="a",
                              mode="min")
    assert low.improved.k == 0


def test_paired_contrast_below_three_seeds_and_constant_differences():
    c = inf.paired_contrast([1, 2], [0, 0], [0, 1], factor="f", level="b", baseline="a", min_effect=1.0)
    assert c.estimate == 1.5 and c.per_seed == (1, 2) and c.n_seeds == 2
    assert math.isnan(c.ci_low) and math.isnan(c.ci_high) and math.isnan(c.p) and math.isnan(c.p_tost)
    one = inf.paired_contrast([1], [0], [0], factor="f", level="b", baseline="a")
    assert one.estimate == 1 and math.isnan(one.se) and math.isnan(one.p)
    same = inf.paired_contrast([2, 3, 4], [1, 2, 3], [0, 1, 2], factor="f", level="b", baseline="a", min_effect=5.0)
    assert (same.ci_low, same.ci_high) == (1.0, 1.0) and math.isnan(same.p) and math.isnan(same.p_tost)
    assert same.degenerate and not same.identical
    assert same.degenerate_text(100, "points") == ("every one of the 3 seeds differs by exactly +100 points: with "
                                                   "zero spread no interval or test applies")
    zero = inf.paired_contrast([1, 2, 3], [1, 2, 3], [0, 1, 2], factor="f", level="b", baseline="a", min_effect=5.0)
    assert zero.identical and math.isnan(zero.p) and math.isnan(zero.p_tost)
    assert inf.contrast_resolvable_effect(zero) != inf.contrast_resolvable_effect(zero)  # NaN: no test


def test_a_degenerate_contrast_is_said_in_words_and_not_tested():
    """Identical samples (behaviour_logp: the same completions in all 8 seeds) once read "equivalent, TOST
    p < 0.001" from se = 0; now the claim is left out of the family and its sentence says what happened."""
    from ablate.report.findings import answer_sentence, claim_sentence
    from ablate.report.statistics import Scale

    zero = _contrast([0.0] * 8, "sampler", min_effect=0.05)
    noisy = _contrast([0.01, -0.02, 0.03], "other", min_effect=0.05)
    fam = inf.make_family([zero, noisy], min_effect=0.05)
    assert fam.size == 1  # only the testable claim
    (claim,) = [c for c in fam.claims if c.name == "f: sampler vs base"]
    assert claim.verdict == inf.NOT_RESOLVED and math.isnan(claim.p_holm) and math.isnan(claim.seeds_needed)
    assert claim.reason.startswith("identical in all 8 seeds")
    scale = Scale(100.0, "points")
    assert answer_sentence(claim, fam, scale, "max") == (
        "f: sampler vs base: identical in all 8 seeds (every per-seed difference is exactly 0 points): no test "
        "applies to identical samples; the two arms reached the same values.")
    assert claim_sentence(claim, fam, scale, "max").startswith(
        "f: sampler vs base: not resolved (not tested, not in the family): identical in all 8 seeds")


def test_a_single_untied_seed_is_said():
    from ablate.report.findings import claim_sentence
    from ablate.report.statistics import Scale

    one = _contrast([0.0, 0.0, 0.0, 0.0, 0.02], "one", min_effect=0.05)
    fam = inf.make_family([one], min_effect=0.05)
    text = claim_sentence(fam.claims[0], fam, Scale(100.0, "points"), "max")
    assert "only 1 of the 5 seeds differs at all, so the interval rests on that one seed" in text


def _contrast(d, name: str, min_effect: float | None = None) -> Contrast:
    d = np.asarray(d, float)
    return inf.paired_contrast(d, np.zeros_like(d), range(d.size), factor="f", level=name, baseline="base",
                               min_effect=min_effect)


def _term(p: float, note: str = "") -> inf.TermTest:
    return inf.TermTest("f:g", "interaction", 1, 10, 1.0, 1.0, p, note)


def test_make_family_verdicts_size_and_order():
    me = 1.0
    big = _contrast([10.1, 10.2, 9.9, 10.0, 10.3], "big", me)           # far from 0: detected
    tiny = _contrast([0.01, -0.02, 0.0, 0.015, -0.005], "tiny", me)     # well inside +-1: equivalent
    wide = _contrast([1.0, -1.0, 2.0, -2.0, 0.5], "wide", me)           # includes 0 and +-1: not resolved
    two = _contrast([5.0, 6.0], "two", me)                              # 2 seeds: not tested
    wide = replace(wide, primary=True)
    fam = inf.make_family([big, tiny, wide, two], [_term(1e-4), _term(NAN, "not estimable")], min_effect=me)
    by = {c.name: c for c in fam.claims}
    assert fam.size == 4  # big, tiny, wide and the testable term; neither "two" nor the NaN term
    assert [c.name for c in fam.claims][0] == "f: wide vs base" and fam.primary == (by["f: wide vs base"],)
    assert by["f: big vs base"].verdict == inf.DETECTED
    assert by["f: tiny vs base"].verdict == inf.EQUIVALENT
    assert by["f: wide vs base"].verdict == inf.NOT_RESOLVED
    assert by["f: wide vs base"].reason == "the interval includes 0 and reaches beyond the ±min_effect band"
    assert by["f: two vs base"].verdict == inf.NOT_RESOLVED and "no interval below 3" in by["f: two vs base"].reason
    assert math.isnan(by["f: two vs base"].p_holm)
    terms = [c for c in fam.claims if c.term is not None]
    assert [t.verdict for t in terms] == [inf.DETECTED, inf.NOT_RESOLVED] and terms[1].reason == "not estimable"
    assert terms[0].name == "interaction f × g"
    # Holm over the 4 testable p-values; TOST Holm over the 3 testable contrasts
    p = [big.p, tiny.p, wide.p, 1e-4]
    assert_close([by[n].p_holm for n in ("f: big vs base", "f: tiny vs base", "f: wide vs base")]
                 + [terms[0].p_holm], inf.holm(p), EXACT)
    assert_close([by["f: big vs base"].p_tost_holm, by["f: tiny vs base"].p_tost_holm],
                 inf.holm([big.p_tost, tiny.p_tost, wide.p_tost])[:2], EXACT)
    # seeds needed: at min_effect, from the contrast's per-seed SD, at the family's Bonferroni alpha
    assert by["f: wide vs base"].seeds_needed == inf.seeds_for_power(wide.sd_per_seed, me, alpha=0.05 / 4)
    assert (fam.n_seeds, fam.method, fam.alpha, fam.min_effect) == (2, inf.PAIRED, 0.05, me)


def test_make_family_without_min_effect_claims_no_equivalence():
    tiny = _contrast([0.01, -0.02, 0.0, 0.015, -0.005], "tiny")
    fam = inf.make_family([tiny])
    (c,) = fam.claims
    assert c.verdict == inf.NOT_RESOLVED and "no min_effect" in c.reason and fam.size == 1
    assert c.seeds_needed == inf.seeds_for_power(tiny.sd_per_seed, abs(tiny.estimate), alpha=0.05)


def test_make_family_says_when_only_holm_keeps_a_claim_unresolved():
    # unadjusted p = 0.047 (its 95% interval excludes 0); Holm over 3 claims: 3 * 0.047 > 0.05
    near = _contrast([1.0, 1.2, 0.9, 1.1, -0.3], "near")
    wide = _contrast([1.0, -1.0, 2.0, -2.0, 0.5], "wide")
    assert near.p < 0.05 and near.ci_low > 0
    c = inf.make_family([near, wide, replace(wide, level="wide2")]).claims[0]
    assert c.p_holm == pytest.approx(3 * near.p) and c.verdict == inf.NOT_RESOLVED
    assert c.reason.startswith("the 95% interval excludes 0 but the test does not survive Holm's correction")


def test_contrast_keys_is_primary_uses_model():
    levels = {"r": ["a", "b", "c"], "s": ["x", "y"]}
    assert inf.contrast_keys(levels, {"r": "a", "s": "y"}) == [("r", "b"), ("r", "c"), ("s", "x")]
    assert inf.is_primary("r", "b", ["r"]) and inf.is_primary("r", "b", ["r=b"])
    assert not inf.is_primary("r", "c", ["r=b", "s"])
    assert inf.uses_model("full", 2) and inf.uses_model("fractional", 3) and inf.uses_model("random", 2)
    assert not inf.uses_model("one_at_a_time", 3) and not inf.uses_model("full", 1)


def test_paired_values_matched_cells_and_marginal_means():
    rows = [("a0", "b0", 0, 1.0), ("a1", "b0", 0, 3.0), ("a0", "b1", 0, 2.0), ("a1", "b1", 0, 6.0),
            ("a0", "b0", 1, 0.0), ("a1", "b0", 1, 1.0), ("a0", "b1", 1, 1.0)]  # seed 1 lacks (a1, b1)
    df = pd.DataFrame(rows, columns=["a", "b", "seed", "objective"])
    frame, cells = inf.paired_values(df, "a", "a1", "a0", ["a", "b"])
    assert cells == 2  # (b0) and (b1) both matched somewhere
    assert frame["x"].tolist() == [4.5, 1.0] and frame["y"].tolist() == [1.5, 0.0]  # seed 1: only b0 matched
    # fractional: a0 only with b0, a1 only with b1 -> no matched cell: marginal means, cells 0
    frac = df[(df.a + df.b).isin(["a0b0", "a1b1"])]
    frame, cells = inf.paired_values(frac, "a", "a1", "a0", ["a", "b"])
    assert cells == 0 and frame["x"].tolist() == [6.0] and frame["y"].tolist() == [1.0] and frame["seed"].tolist() == [0]


def test_arm_table_hand_values():
    df = pd.DataFrame({"arm": ["x"] * 4 + ["y"] * 2, "lr": ["1"] * 4 + ["2"] * 2, "seed": [0, 1, 2, 3, 0, 1],
                       "objective": [1.0, 2.0, 3.0, 10.0, 5.0, 7.0]})
    t = inf.arm_table(df, ["lr"]).set_index("arm")
    assert t.loc["x", "n_seeds"] == 4 and t.loc["x", "mean"] == 4.0 and t.loc["x", "iqm"] == 2.5  # mean(2, 3)
    assert t.loc["x", "ci_low"] == pytest.approx(4.0 - T3 * t.loc["x", "std"] / 2)
    assert t.loc["y", "n_seeds"] == 2 and math.isnan(t.loc["y", "ci_low"]) and t.loc["y", "lr"] == "2"


# ---------------------------------------------------------------------------------- linear model


def test_fit_model_reward_granularity_matches_statsmodels_model_comparison():
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    df = pd.read_csv(ROOT / "reports" / "reward_granularity" / "results.csv")
    df = df[np.isfinite(df["objective"])]
    model = inf.fit_model(df, {"reward": "reward", "advantage": "advantage"})
    rows = {t.term: t for t in model.anova}
    reward = rows["reward"]
    # 5 arms x n seeds: 4 rewards under grpo, final+prm also under grpo_process; 5n observations less
    # n seed blocks (the intercept among them), 3 reward and 1 advantage parameters: 4n - 4 residual df
    n = df["seed"].nunique()
    assert n == 48 and (reward.df, reward.df_resid, model.df_resid) == (3, 4 * n - 4, 4 * n - 4)
    assert rows["advantage"].df == 1 and rows["reward:advantage"].df == 0  # 5 cells - 1 - 3 - 1: not estimable
    reduced = smf.ols("objective ~ C(seed) + C(advantage, Sum)", df).fit()
    with_reward = smf.ols("objective ~ C(seed) + C(advantage, Sum) + C(reward, Sum)", df).fit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank-deficient on purpose: grpo_process only at 1 of 4 rewards
        full = smf.ols("objective ~ C(seed) + C(reward, Sum) * C(advantage, Sum)", df).fit()
    cmp = anova_lm(reduced, with_reward).iloc[1]
    assert full.df_resid == 4 * n - 4
    assert reward.sum_sq == pytest.approx(cmp["ss_diff"], abs=1e-8) and reward.df == cmp["df_diff"]
    f = cmp["ss_diff"] / cmp["df_diff"] / full.mse_resid  # against the full model's residual mean square
    assert reward.F == pytest.approx(f, abs=1e-8)
    assert reward.p == pytest.approx(stats.f.sf(f, 3, 4 * n - 4), abs=1e-8)
    assert model.sigma == pytest.approx(math.sqrt(full.mse_resid), abs=1e-10)


def _balanced(rng: np.random.Generator, levels: dict[str, list[str]], n: int) -> pd.DataFrame:
    import itertools

    rows = [{**dict(zip(levels, combo)), "seed": s} for s in range(n) for combo in itertools.product(*levels.values())]
    df = pd.DataFrame(rows)
    return df.assign(objective=rng.normal(0.5, 0.05, len(df)) + 0.02 * df["seed"])


def test_fit_model_balanced_equals_anova_lm_type2():
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    df = _balanced(np.random.default_rng(3), {"a": ["p", "q"], "b": ["x", "y", "z"]}, 4)
    model = inf.fit_model(df, {"a": "a", "b": "b"})
    ref = anova_lm(smf.ols("objective ~ C(seed) + C(a, Sum) * C(b, Sum)", df).fit(), typ=2)
    names = {"seed (block)": "C(seed)", "a": "C(a, Sum)", "b": "C(b, Sum)", "a:b": "C(a, Sum):C(b, Sum)",
             "residual": "Residual"}
    for t in model.anova:
        r = ref.loc[names[t.term]]
        assert t.sum_sq == pytest.approx(r["sum_sq"], abs=1e-8) and t.df == r["df"]
        if t.kind != "residual":
            assert t.F == pytest.approx(r["F"], abs=1e-8) and t.p == pytest.approx(r["PR(>F)"], abs=1e-8)
    assert model.df_resid == 3 * 5  # 24 trials - (4 seeds + 5 cell parameters)


def _two_by_two_hand(y: np.ndarray) -> tuple[float, float]:
    """[n, 4] objectives of cells (a0,b0), (a0,b1), (a1,b0), (a1,b1) -> the hand estimate of a1 - a0 (mean
    over b of the cell-mean differences) and the residual variance of the seed-block + cell-means model
    (two-way seed x cell residual, (n - 1)(4 - 1) df)."""
    n = y.shape[0]
    m = y.mean(axis=0)
    est = ((m[2] - m[0]) + (m[3] - m[1])) / 2
    r = y - y.mean(axis=1, keepdims=True) - m + y.mean()
    return est, float((r ** 2).sum() / ((n - 1) * 3))


def test_model_contrast_equals_cell_mean_difference_and_hand_se():
    # Balanced 2 x 2 with seed blocks: the model's fitted cell means are the raw ones, so the contrast is
    # mean_b(ybar[a1, b] - ybar[a0, b]) = sum_c w_c ybar_c with w = +-1/2 on 4 cells, and
    # Var = sigma^2 sum_c w_c^2 / n = sigma^2 / n = 2 sigma^2 / (n * cells) with cells = 2 matched cells.
    n = 5
    df = _balanced(np.random.default_rng(7), {"a": ["a0", "a1"], "b": ["b0", "b1"]}, n)
    model = inf.fit_model(df, {"a": "a", "b": "b"})
    c = inf.model_contrast(model, df, "a", "a1", "a0")
    y = df.pivot_table(index="seed", columns=["a", "b"], values="objective").to_numpy()  # [n, 4]
    est, s2 = _two_by_two_hand(y)
    assert c.cells == 2 and c.n_seeds == n and c.method == inf.MODEL and c.df == 3 * (n - 1)
    assert c.estimate == pytest.approx(est, abs=1e-12)
    assert s2 == pytest.approx(model.sigma ** 2, rel=1e-10)
    assert c.se == pytest.approx(math.sqrt(2 * s2 / (n * c.cells)), rel=1e-10)
    half = stats.t.ppf(0.975, 3 * (n - 1)) * c.se
    assert (c.ci_low, c.ci_high) == (pytest.approx(est - half, abs=1e-12), pytest.approx(est + half, abs=1e-12))


def test_model_contrast_of_a_saturated_model_has_no_standard_error():
    df = _balanced(np.random.default_rng(5), {"a": ["a0", "a1"], "b": ["b0", "b1"]}, 1)  # 4 trials, 4 parameters
    model = inf.fit_model(df, {"a": "a", "b": "b"})
    c = inf.model_contrast(model, df, "a", "a1", "a0")
    y = df.set_index(["a", "b"])["objective"]
    assert model.df_resid == 0 and math.isnan(model.sigma)
    assert c.estimate == pytest.approx((y["a1", "b0"] - y["a0", "b0"] + y["a1", "b1"] - y["a0", "b1"]) / 2)
    assert math.isnan(c.se) and math.isnan(c.ci_low) and math.isnan(c.p)


def test_infer_paired_and_model_paths():
    rng = np.random.default_rng(11)
    one = _balanced(rng, {"r": ["a", "b", "c"]}, 4)
    res = inf.infer(one, {"r": "r"}, {"r": ["a", "b", "c"]}, {"r": "a"}, min_effect=0.1, primary=["r=c"])
    assert res.method == inf.PAIRED and res.model is None and [c.level for c in res.contrasts] == ["b", "c"]
    x = one[one.r == "c"].objective.to_numpy()
    y = one[one.r == "a"].objective.to_numpy()
    ref = inf.paired_contrast(x, y, range(4), factor="r", level="c", baseline="a", min_effect=0.1)
    c = res.contrasts[1]
    assert (c.estimate, c.ci_low, c.ci_high, c.p, c.primary) == (pytest.approx(ref.estimate), pytest.approx(ref.ci_low),
                                                                 pytest.approx(ref.ci_high), pytest.approx(ref.p), True)
    assert res.family.claims[0].name == "r: c vs a" and res.family.size == 2
    two = _balanced(rng, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, 2)  # 2 seeds: nothing is tested
    res = inf.infer(two, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, {"a": "a0", "b": "b0"})
    assert res.method == inf.PAIRED and res.model is not None and res.family.size == 0  # the model: for interactions
    assert all(c.verdict == inf.NOT_RESOLVED for c in res.family.claims) and len(res.family.claims) == 3
    old = inf.infer(two, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, {"a": "a0", "b": "b0"},
                    contrasts="model")
    assert old.method == inf.MODEL and {c.method for c in old.contrasts} == {inf.MODEL}
    with pytest.raises(ValueError, match="contrasts='pooled': one of paired, model"):
        inf.infer(two, {"a": "a"}, {"a": ["a0", "a1"]}, {"a": "a0"}, contrasts="pooled")


def _two_by_two_noisy_baseline(rng: np.random.Generator, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A 2 x 2 at ``n`` seeds whose baseline arm (a0, b0) is 3x noisier; and its seed x (a, b) pivot."""
    df = _balanced(rng, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, n)
    noisy = (df["a"] == "a0") & (df["b"] == "b0")
    df.loc[noisy, "objective"] += rng.normal(0, 0.15, int(noisy.sum()))
    return df, df.pivot_table(index="seed", columns=["a", "b"], values="objective")


def test_a_factorial_contrast_is_a_paired_t_on_per_seed_differences_over_matched_cells():
    """2 x 2, 5 seeds, the baseline arm 3x noisier than the others: each seed's a1 - a0 difference is the
    mean of its two matched cells' differences, d_s = ((y[a1,b0] - y[a0,b0]) + (y[a1,b1] - y[a0,b1])) / 2;
    the interval is mean(d) +- t(0.975, 4) sd(d) / sqrt(5), by hand; the pooled model's differs."""
    n = 5
    df, y = _two_by_two_noisy_baseline(np.random.default_rng(3), n)
    d = (((y["a1", "b0"] - y["a0", "b0"]) + (y["a1", "b1"] - y["a0", "b1"])) / 2).to_numpy()
    half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
    res = inf.infer(df, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, {"a": "a0", "b": "b0"})
    c = {x.factor: x for x in res.contrasts}["a"]
    assert (c.method, c.df, c.cells, c.n_seeds) == (inf.PAIRED, n - 1, 2, n)
    assert c.estimate == pytest.approx(d.mean(), abs=1e-12) and c.se == pytest.approx(d.std(ddof=1) / math.sqrt(n))
    assert (c.ci_low, c.ci_high) == (pytest.approx(d.mean() - half, abs=1e-12), pytest.approx(d.mean() + half, abs=1e-12))
    assert c.p == pytest.approx(2 * stats.t.sf(abs(d.mean()) / (d.std(ddof=1) / math.sqrt(n)), n - 1))
    pooled = {x.factor: x for x in inf.infer(df, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]},
                                              {"a": "a0", "b": "b0"}, contrasts="model").contrasts}["a"]
    assert pooled.estimate == pytest.approx(c.estimate, abs=1e-12) and pooled.df == 3 * (n - 1) and pooled.se != c.se


def test_a_2x2_interaction_is_the_paired_t_on_per_seed_interaction_contrasts():
    """2 x 2, 6 seeds, the baseline arm 3x noisier: d_s = y[a1,b1] - y[a1,b0] - y[a0,b1] + y[a0,b0];
    the term's F is t² of the paired t on d, df (1, 5), and its p the two-sided t p-value, by hand."""
    n = 6
    df, y = _two_by_two_noisy_baseline(np.random.default_rng(5), n)
    d = (y["a1", "b1"] - y["a1", "b0"] - y["a0", "b1"] + y["a0", "b0"]).to_numpy()
    t = d.mean() / (d.std(ddof=1) / math.sqrt(n))
    res = inf.infer(df, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]}, {"a": "a0", "b": "b0"})
    (claim,) = [c for c in res.family.claims if c.term is not None]
    term = claim.term
    assert (term.method, term.df, term.df_resid, claim.name) == (inf.PAIRED, 1, n - 1, "interaction a × b")
    assert term.F == pytest.approx(t * t, rel=1e-10) and term.p == pytest.approx(2 * stats.t.sf(abs(t), n - 1))
    assert math.isnan(term.sum_sq) and res.family.size == 3
    pooled = [t for t in inf.infer(df, {"a": "a", "b": "b"}, {"a": ["a0", "a1"], "b": ["b0", "b1"]},
                                   {"a": "a0", "b": "b0"}, contrasts="model").family.claims if t.term is not None]
    assert pooled[0].term.method == inf.MODEL and pooled[0].term.df_resid == 3 * (n - 1)


def test_a_3x2_interaction_is_hotellings_t2_by_hand_and_does_not_depend_on_the_baselines():
    """3 x 2 with a third factor c (2 levels), 5 seeds: per seed the 2 interaction contrasts of a x b,
    each averaged over c's 2 matched cells; T² = n mean' S^-1 mean, F = (n - m) T² / (m (n - 1)) with
    m = 2, df (2, 3), computed here with numpy. Other baseline levels give the same F and p."""
    rng = np.random.default_rng(8)
    n, levels = 5, {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"], "c": ["c0", "c1"]}
    df = _balanced(rng, levels, n)
    df.loc[(df["a"] == "a2") & (df["b"] == "b1"), "objective"] += 0.05  # a planted a x b interaction
    y = df.groupby(["seed", "a", "b"])["objective"].mean().unstack(["a", "b"])  # mean over c: the matched cells
    cols = [(y[i, "b1"] - y[i, "b0"] - y["a0", "b1"] + y["a0", "b0"]).to_numpy() for i in ("a1", "a2")]
    d = np.column_stack(cols)
    mean, cov = d.mean(axis=0), np.cov(d, rowvar=False)
    t2 = n * mean @ np.linalg.inv(cov) @ mean
    f = (n - 2) * t2 / (2 * (n - 1))
    factors = {k: k for k in levels}

    def term(baseline):
        run = inf.infer(df, factors, levels, baseline)
        return {c.name: c.term for c in run.family.claims if c.term is not None}["interaction a × b"]

    got = term({"a": "a0", "b": "b0", "c": "c0"})
    assert (got.df, got.df_resid) == (2, n - 2) and got.F == pytest.approx(f, rel=1e-10)
    assert got.p == pytest.approx(stats.f.sf(f, 2, n - 2), rel=1e-10)
    other = term({"a": "a2", "b": "b1", "c": "c1"})
    assert (other.F, other.p) == (pytest.approx(got.F, rel=1e-9), pytest.approx(got.p, rel=1e-9))
    contrasts = inf.interaction_contrasts(df, "a", "b", levels["a"], levels["b"], "a0", "b0", ["a", "b", "c"])
    assert list(contrasts.columns) == ["a1 × b1", "a2 × b1"] and is_close(contrasts.to_numpy(), d, EXACT)


def test_a_paired_interaction_says_why_it_is_not_tested():
    rng = np.random.default_rng(2)
    three = pd.DataFrame(rng.normal(size=(2, 2)))  # m = 2 contrasts need 3 seeds
    t = inf.paired_interaction(three, "a:b")
    assert math.isnan(t.p) and t.note == "2 seeds: the paired test of a 2-df interaction needs at least 3"
    same = inf.paired_interaction(pd.DataFrame({"x": [0.1, 0.1, 0.1, 0.1]}), "a:b")
    assert math.isnan(same.F) and same.note == "identical interaction contrasts in every seed: no test applies"
    none = inf.paired_interaction(pd.DataFrame(index=pd.Index([], name="seed")), "a:b")
    assert none.df == 0 and none.note.startswith("not estimable")
    levels = {"a": ["a0", "a1"], "b": ["b0", "b1"]}
    df = _balanced(rng, levels, 4)
    df = df[~((df["a"] == "a1") & (df["b"] == "b1"))]  # an excluded cell: no complete quartet
    run = inf.infer(df, {"a": "a", "b": "b"}, levels, {"a": "a0", "b": "b0"})
    assert all(c.term is None or c.term.note.startswith("not estimable") for c in run.family.claims)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_paired_interaction_keeps_its_size_when_one_arm_is_three_times_noisier(n):
    """No interaction, 3 x 2 arms, the baseline arm's SD 3x the others' (and a seed effect): the paired
    test rejects at 5% in 3.6-6.4% of 4,000 draws (+-4 Monte Carlo SE); the pooled F-test's rate beside it
    is printed, not asserted (it exceeds 5% here: its one residual variance averages the noisy arm away)."""
    rng = np.random.default_rng(100 + n)
    draws, arms = 4000, (3, 2)
    sd = np.ones(arms)
    sd[0, 0] = 3.0
    y = rng.normal(0, 1, (draws, n, 1, 1)) + rng.normal(0, 1, (draws, n, *arms)) * sd  # seed effect + arm noise
    d = np.stack([y[..., i, 1] - y[..., i, 0] - y[..., 0, 1] + y[..., 0, 0] for i in (1, 2)], axis=-1)
    m = d.shape[-1]
    if n <= m:
        pytest.skip("too few seeds")
    rejected = np.mean([inf.paired_interaction(pd.DataFrame(x), "a:b").p < 0.05 for x in d])
    assert 0.036 <= rejected <= 0.064, rejected


# ------------------------------------------------------------------------------------- calibration
#
# A realistic generator of one study's per-trial accuracies: a per-seed random effect shared by every
# arm, an arm x seed RL-run noise, and the binomial noise of an accuracy measured on P eval problems.
# 2000 draws: Monte-Carlo SE of a 95% coverage is 0.49 points, so [93%, 97%] is +-4 SE.

DRAWS = 2000


def simulate(rng: np.random.Generator, means: np.ndarray, n: int, draws: int = DRAWS) -> np.ndarray:
    """[draws, n, arms] accuracies: Binomial(P, clip(m + u_seed + e_arm,seed)) / P, P in 100..500 per study."""
    problems = rng.choice([100, 200, 300, 500], size=(draws, 1, 1))
    u = rng.normal(0.0, 0.05, (draws, n, 1))
    e = rng.normal(0.0, 0.03, (draws, n, means.size))
    return rng.binomial(problems, np.clip(means + u + e, 0, 1)) / problems


@pytest.mark.parametrize("n", [3, 5, 10])
def test_paired_t_interval_coverage(n):
    rng = np.random.default_rng(100 + n)
    v = simulate(rng, np.array([0.5, 0.54]), n)
    d = v[:, :, 1] - v[:, :, 0]
    ci = np.array([inf.t_interval(x) for x in d])
    coverage = np.mean((ci[:, 0] <= 0.04) & (0.04 <= ci[:, 1]))
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.parametrize("n", [3, 5, 10])
def test_linear_model_contrast_coverage(n):
    # The model contrast of a balanced full 2 x 2 is the hand formula above (checked against
    # model_contrast on the first draw); its coverage over draws, vectorised.
    rng = np.random.default_rng(200 + n)
    means = np.array([0.5, 0.52, 0.55, 0.53])  # a1 - a0 = (0.05 + 0.01) / 2 = 0.03, with an interaction
    v = simulate(rng, means, n)
    df = pd.DataFrame([{"a": a, "b": b, "seed": s} for s in range(n) for a in ("a0", "a1") for b in ("b0", "b1")])
    first = df.assign(objective=v[0].reshape(-1))
    c = inf.model_contrast(inf.fit_model(first, {"a": "a", "b": "b"}), first, "a", "a1", "a0")
    est, s2 = _two_by_two_hand(v[0])
    assert c.estimate == pytest.approx(est, abs=1e-12) and c.se == pytest.approx(math.sqrt(s2 / n), rel=1e-9)
    m = v.mean(axis=1)  # [draws, 4]
    est = ((m[:, 2] - m[:, 0]) + (m[:, 3] - m[:, 1])) / 2
    r = v - v.mean(axis=2, keepdims=True) - m[:, None, :] + v.mean(axis=(1, 2))[:, None, None]
    se = np.sqrt((r ** 2).sum(axis=(1, 2)) / ((n - 1) * 3) / n)
    half = stats.t.ppf(0.975, 3 * (n - 1)) * se
    coverage = np.mean(np.abs(est - 0.03) <= half)
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.parametrize("n", [3, 5, 10])
def test_family_wise_false_detections_under_the_global_null(n):
    # One factor, 3 levels, all equal: two paired t-tests, Holm at 0.05: any detected iff 2 min(p) < 0.05.
    rng = np.random.default_rng(300 + n)
    v = simulate(rng, np.full(3, 0.5), n)
    d = v[:, :, 1:] - v[:, :, :1]  # [draws, n, 2]
    with np.errstate(divide="ignore", invalid="ignore"):  # all-equal differences (P = 100): t = +-inf or NaN
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    p = 2 * stats.t.sf(np.abs(t), n - 1)
    assert_close(p[0], [inf.paired_contrast(d[0, :, k], np.zeros(n), range(n), factor="f", level="x",
                                            baseline="b").p for k in range(2)], EXACT)
    fwer = np.mean(2 * p.min(axis=1) < 0.05)
    assert fwer <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / DRAWS), fwer


def test_contrasts_within_each_context_and_none_of_a_context_factor():
    """A study over 2 tasks x 2 models (contexts) comparing loss_norm: each context's contrast is the paired
    mean of its own seeds' differences (by hand), the family holds no 'task' or 'model' contrast and no
    interaction with a context, and the contrast over all contexts averages the matched cells."""
    from ablate.stats.inference import context_contrasts, infer

    rng = np.random.default_rng(0)
    effect = {("addition", "llama"): 0.02, ("addition", "gpt2"): 0.04, ("chain", "llama"): -0.01,
              ("chain", "gpt2"): 0.07}
    rows = []
    for (task, model), e in effect.items():
        for seed in range(5):
            base = 0.5 + rng.normal(0, 0.05)
            rows.append({"loss_norm": "seq", "task": task, "model": model, "seed": seed, "objective": base})
            rows.append({"loss_norm": "tok", "task": task, "model": model, "seed": seed,
                         "objective": base + e + rng.normal(0, 0.01)})
    per_trial = pd.DataFrame(rows)
    factors = {"loss_norm": "loss_norm", "task": "task", "model": "model"}
    levels = {"loss_norm": ["seq", "tok"], "task": ["addition", "chain"], "model": ["llama", "gpt2"]}
    baseline = {"loss_norm": "seq", "task": "addition", "model": "llama"}
    by_ctx = context_contrasts(per_trial, factors, levels, baseline, ("task", "model"))
    assert list(by_ctx) == ["loss_norm: tok vs seq"]
    got = dict(by_ctx["loss_norm: tok vs seq"])
    assert set(got) == {f"task={t},model={m}" for t, m in effect}
    # the contexts come in the study's level order whatever the rows' order (the report from MLflow and
    # the ledger from results.csv listed them in two orders; the heterogeneity bootstrap saw two orders)
    study_order = ["task=addition,model=llama", "task=addition,model=gpt2", "task=chain,model=llama",
                   "task=chain,model=gpt2"]
    assert [name for name, _ in by_ctx["loss_norm: tok vs seq"]] == study_order
    shuffled = per_trial.sort_values(["model", "task"], ascending=False)
    assert [n for n, _ in context_contrasts(shuffled, factors, levels, baseline, ("task", "model"))[
        "loss_norm: tok vs seq"]] == study_order
    for (task, model), _ in effect.items():
        frame = per_trial[(per_trial["task"] == task) & (per_trial["model"] == model)]
        d = (frame[frame["loss_norm"] == "tok"].set_index("seed")["objective"]
             - frame[frame["loss_norm"] == "seq"].set_index("seed")["objective"])
        c = got[f"task={task},model={model}"]
        assert c.n_seeds == 5 and c.estimate == pytest.approx(d.mean()) and c.se == pytest.approx(d.std(ddof=1) / 5 ** 0.5)
    inf = infer(per_trial, factors, levels, baseline, design="full", contexts=("task", "model"))
    assert [c.name for c in inf.contrasts] == ["loss_norm: tok vs seq"]
    assert not any("task" in c.name or "model" in c.name for c in inf.family.claims)
    assert inf.contrasts[0].estimate == pytest.approx(np.mean([got[k].estimate for k in got]))
