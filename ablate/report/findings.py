"""Step 2 of a report: the statistics (:class:`ablate.report.statistics.ReportStatistics`) phrased as
findings and formatted tables, with nothing computed here that step 1 did not.

Every number carries its n and the kind of interval it is; a claim's verdict is one of *detected*,
*equivalent*, *uninformative* (an equivalence where the baseline did not learn: :mod:`ablate.report.learning`)
or *not resolved at n seeds* (:mod:`ablate.stats.inference`), and no other verdict word is
used. When the study cannot answer its primary question, the findings say so and say what would
(the seeds a paired test would need).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from ablate.report.page import Section, Table
from ablate.report.statistics import AcrossContexts, ReportStatistics, Scale
from ablate.stats import inference
from ablate.stats.contrast import Contrast
from ablate.stats.meta import MIN_CONTEXTS_PI

# ------------------------------------------------------------------------------------- formatting


def num(x: Any, digits: int = 3) -> str:
    """A number for people: ``digits`` significant digits, ``–`` for NaN / None, ``∞`` for +inf."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "∞" if isinstance(x, float) and math.isinf(x) and x > 0 else "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return _grouped(float(x), digits, "") or f"{float(x):.{digits}g}"


def _grouped(x: float, digits: int, sign: str) -> str | None:
    """``x`` at ``digits`` significant digits with thousands separators (``1,120``, ``+25,700``) where the g
    format would print a positive exponent (|x| rounds to >= 10**digits, |x| < 1e15); None elsewhere."""
    if not (math.isfinite(x) and abs(x) < 1e15) or "e+" not in f"{x:.{digits}g}":
        return None
    return f"{round(x, digits - 1 - math.floor(math.log10(abs(x)))):{sign},.0f}"


def signed(x: float, digits: int = 3) -> str:
    """``+3.1`` / ``-0.42``; a float's rounding residue of an exact 0 (|x| < 1e-12) is ``+0``."""
    if math.isfinite(x) and abs(x) < 1e-12:
        x = 0.0
    return (_grouped(x, digits, "+") or f"{x:+.{digits}g}") if math.isfinite(x) else "–"


def p_text(p: float) -> str:
    """``p = 0.021``, ``p < 0.001``, ``p = –``."""
    if not math.isfinite(p):
        return "p = –"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def ci_text(lo: float, hi: float, scale: float = 1.0) -> str:
    """``[0.4, 5.9]``."""
    return f"[{num(lo * scale)}, {num(hi * scale)}]"


def seeds_text(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def interval_kind(c: Contrast) -> str:
    """What a contrast's interval is, in words, with its n and df."""
    if c.method == inference.MODEL:
        return (f"95% t-interval from the study's linear model ({int(c.df)} residual df; {seeds_text(c.n_seeds)}, "
                f"{c.cells or 'all'} matched cell{'s' if c.cells != 1 else ''})")
    cells = (f", each seed's difference averaged over {c.cells} matched cells" if c.cells > 1 else
             ", each seed's difference between the means of the arms at each level (no matched cells)"
             if c.cells == 0 else "")
    return f"95% paired t-interval over {seeds_text(c.n_seeds)} ({int(c.df)} df{cells})"


def term_test_name(t: inference.TermTest) -> str:
    """How an interaction was tested, in words."""
    if t.method == inference.PAIRED:
        return ("paired t-test of the per-seed interaction contrast (F = t²)" if t.df == 1 else
                f"Hotelling's T² on the {t.df} per-seed interaction contrasts")
    return "the linear model's Type II F-test"


#: The claims frame's ``interval`` of an interaction (a term, not a contrast).
TERM_INTERVALS = ("F-test", "Hotelling T²")


# --------------------------------------------------------------------------------------- sentences


def claim_sentence(claim: inference.Claim, family: inference.Family, scale: Scale, mode: str, *,
                   staged: bool = False) -> str:
    """One claim as a sentence: its verdict first, then the numbers that carry it (``staged``: its p values are
    an extended study's two-stage tests, :func:`staged_claim`, and say so)."""
    unit = f" {scale.unit}" if scale.unit else ""
    fam = f"Holm over a family of {family.size}"
    two = "two-stage " if staged else ""
    if claim.term is not None:
        t = claim.term
        fstat = (f"{term_test_name(t)}: F({t.df}, {t.df_resid}) = {num(t.F)}" if math.isfinite(t.F) else
                 "no F-test")
        if claim.verdict == inference.DETECTED:
            return (f"{claim.name}: detected: {fstat}, {two}{p_text(claim.p_holm)} ({fam}); the effect of one factor "
                    "depends on the level of the other (read the interaction plot).")
        if not math.isfinite(t.p):
            return f"{claim.name}: not resolved: not tested ({t.note or 'no F-test'})."
        why = f"; {claim.reason}" if claim.reason else ""
        return f"{claim.name}: not resolved: {fstat}, {two}{p_text(claim.p_holm)} ({fam}){why}."
    c = claim.contrast
    assert c is not None
    if claim.pooled is not None:  # a context study: the claim is its verdict across contexts
        return average_sentence(claim, scale)
    est = f"{signed(c.estimate * scale.factor)}{unit}"
    imp = c.improved
    improved = (f"{'lower' if mode == 'min' else 'higher'} on {imp.k} of {imp.n} untied seeds"
                + (f" (exact 95% interval of the fraction {ci_text(imp.low, imp.high, 100)}%)" if imp.n else ""))
    need = claim.seeds_needed
    target = (f"a difference of {num(family.min_effect * scale.factor)}{unit} (the study's min_effect)"
              if family.min_effect else f"a difference of the observed size ({est})")
    rough = f", a rough guide from the spread of {seeds_text(c.n_seeds)}" if c.n_seeds < 5 else ""
    plan = (f"about {int(need)} seeds would give 80% power for {target}{rough}" if math.isfinite(need)
            else f"no seed count up to {inference.MAX_SEEDS} gives 80% power for {target}"
            if not math.isnan(need) else "")
    if c.n_seeds < inference.MIN_SEEDS:
        per_seed = ", ".join(signed(d * scale.factor) for d in c.per_seed)
        return (f"{claim.name}: not resolved at {seeds_text(c.n_seeds)}: per-seed differences {per_seed}{unit}; no "
                f"interval is given below {inference.MIN_SEEDS} seeds" + (f"; {plan}" if plan else "") + ".")
    if c.degenerate:
        return (f"{claim.name}: not resolved (not tested, not in the family): "
                f"{c.degenerate_text(scale.factor, scale.unit)}.")
    lone = (f"; only 1 of the {c.n_seeds} seeds differs at all, so the interval rests on that one seed"
            if imp.n == 1 else "")
    ci = ci_text(c.ci_low, c.ci_high, scale.factor)
    stats_text = (f"{interval_kind(c)}; {two}{p_text(claim.p_holm)} ({fam}); d_z = {num(c.d_z, 2)}; {improved}")
    if claim.verdict == inference.DETECTED:
        small = ""
        if family.min_effect and abs(c.estimate) < family.min_effect:
            small = f"; smaller than the min_effect of {num(family.min_effect * scale.factor)}{unit}"
        return f"{claim.name}: detected: {est} {ci} ({stats_text}){small}{lone}."
    if claim.verdict == inference.EQUIVALENT:
        return (f"{claim.name}: equivalent: no effect as large as ±{num(family.min_effect * scale.factor)}{unit} "
                f"({est} {ci}; {two}TOST {p_text(claim.p_tost_holm)}, {fam}; {interval_kind(c)}){lone}.")
    if claim.verdict == inference.UNINFORMATIVE:
        return (f"{claim.name}: uninformative: no effect as large as ±{num(family.min_effect * scale.factor)}{unit} "
                f"({est} {ci}; {two}TOST {p_text(claim.p_tost_holm)}, {fam}; {interval_kind(c)}), but {claim.reason}: no "
                f"choice had anything to change, so this is no evidence that the choice does not matter{lone}.")
    return (f"{claim.name}: not resolved at {seeds_text(c.n_seeds)}: {est} {ci} ({stats_text}); {claim.reason}"
            + (f"; {plan}" if plan else "") + f"{lone}.")


def average_sentence(claim: inference.Claim, scale: Scale) -> str:
    """A contrast of a study with contexts, in the claims' sections: its verdict across contexts (the claim),
    then the equal-weight average over the contexts, said as a description that carries no verdict of its own."""
    c, p = claim.contrast, claim.pooled
    assert c is not None and p is not None
    unit = f" {scale.unit}" if scale.unit else ""
    return (f"{claim.name}: {claim.verdict} across its {p.k} contexts (pooled {signed(p.estimate * scale.factor)}{unit} "
            f"{ci_text(p.ci_low, p.ci_high, scale.factor)}, {p_text(claim.p_holm)} Holm; the claim, in 'Across "
            f"contexts' above). Described, not judged: averaged over the {c.cells} contexts with equal weight, "
            f"{signed(c.estimate * scale.factor)}{unit} {ci_text(c.ci_low, c.ci_high, scale.factor)} (95% paired t "
            f"over {seeds_text(c.n_seeds)}).")


def answer_sentence(claim: inference.Claim, family: inference.Family, scale: Scale, mode: str) -> str:
    """One plain sentence for the top of a report: the claim, its verdict word, the estimate with its
    interval and n, and what that means for the study's question (the full statistics are in
    :func:`claim_sentence`)."""
    c = claim.contrast
    if c is None:  # an interaction: its full sentence is already short
        return claim_sentence(claim, family, scale, mode)
    unit = f" {scale.unit}" if scale.unit else ""
    est = f"{signed(c.estimate * scale.factor)}{unit}"
    size = num(family.min_effect * scale.factor) if family.min_effect else ""
    target = ("a difference of this size" if not family.min_effect else f"a {size}-point difference"
              if scale.unit == "points" else f"a difference of {size}{unit}")
    need = claim.seeds_needed
    # no seed count from a spread of zero (identical per-seed differences), nor one the study already has
    plannable = math.isfinite(c.sd_per_seed) and c.sd_per_seed > 0 and not (math.isfinite(need) and need <= c.n_seeds)
    would = ("" if not plannable or math.isnan(need) else f"about {int(need)} seeds per arm would"
             if math.isfinite(need) else f"more than {inference.MAX_SEEDS} seeds per arm would be needed")
    if c.n_seeds < inference.MIN_SEEDS:
        per_seed = ", ".join(signed(d * scale.factor) for d in c.per_seed)
        return (f"{claim.name}: not resolved at {seeds_text(c.n_seeds)} (per-seed differences {per_seed}{unit}; "
                f"no interval below {inference.MIN_SEEDS} seeds): {seeds_text(c.n_seeds)} cannot tell {target} "
                "from noise" + (f"; {would}." if would else "."))
    if c.degenerate:
        return f"{claim.name}: {c.degenerate_text(scale.factor, scale.unit)}."
    kind = "model t" if c.method == inference.MODEL else "paired t"
    where = f"{est} {ci_text(c.ci_low, c.ci_high, scale.factor)} (95% {kind}, {seeds_text(c.n_seeds)})"
    if claim.verdict == inference.DETECTED:
        better = (c.estimate < 0) if mode == "min" else (c.estimate > 0)
        return (f"{claim.name}: detected, {where}: at this scale the level does {'better' if better else 'worse'} "
                "than the baseline, by more than seed noise explains.")
    if claim.verdict == inference.EQUIVALENT:
        return (f"{claim.name}: equivalent, {where}: no difference as large as "
                f"±{num(family.min_effect * scale.factor)}{unit}; at this scale the choice does not matter at that size.")
    if claim.verdict == inference.UNINFORMATIVE:
        return (f"{claim.name}: uninformative, {where}: inside ±{num(family.min_effect * scale.factor)}{unit}, but "
                f"{claim.reason}, so this is no evidence that the choice does not matter.")
    apart = " tell them apart" if math.isfinite(need) else " to tell them apart"
    return (f"{claim.name}: not resolved at {seeds_text(c.n_seeds)}, {where}: the interval holds both no "
            f"difference and {target}" + (f"; {would}{apart}." if would else "."))


#: More failed fits than this are said in one sentence per reason rather than one per arm.
MAX_FAILED_FITS = 4


def _failed_fits(failed: pd.DataFrame, labels: Mapping[str, str], total: int) -> list[str]:
    """The arms without a fit: one sentence each, or, beyond :data:`MAX_FAILED_FITS`, one per kind of reason
    (its words before the first colon: "the fit failed", "no saturating trend") naming its arms."""
    if len(failed) <= MAX_FAILED_FITS:
        return [f"{labels.get(r.arm, r.arm)}: no compute-efficiency fit ({r.reason})." for r in failed.itertuples()]
    kinds: dict[str, list[str]] = {}
    for r in failed.itertuples():
        kinds.setdefault(str(r.reason).split(":")[0], []).append(labels.get(r.arm, r.arm))
    return [f"No compute-efficiency fit for {len(arms)} of the {total} arms ({kind}): {'; '.join(arms)}."
            for kind, arms in kinds.items()]


def compute_sentences(fits: pd.DataFrame, labels: Mapping[str, str], scale: Scale) -> list[str]:
    """One sentence per arm's saturating fit; the arms without one, said together when there are many."""
    unit = f" {scale.unit}" if scale.unit else ""
    out = _failed_fits(fits[~fits["ok"].astype(bool)], labels, len(fits))
    for r in fits.itertuples():
        if not r.ok:
            continue
        name = labels.get(r.arm, r.arm)
        extra = "; C_mid lies beyond the compute used, so A is an extrapolation" if r.extrapolated else ""
        ci_a = ci_text(r.a_low, r.a_high, scale.factor) if math.isfinite(r.a_low) else ""
        ci_b = ci_text(r.b_low, r.b_high) if math.isfinite(r.b_low) else ""
        why = f"; {r.reason}" if r.reason else " (95% bootstrap intervals over seeds)"
        out.append(
            f"{name}: asymptote A = {num(r.a * scale.factor)}{unit} {ci_a}, efficiency exponent B = {num(r.b)} {ci_b}, "
            f"midpoint C_mid = {num(r.c_mid)} tokens, from R0 = {num(r.r0 * scale.factor)}{unit} (R² = {num(r.r2, 2)}, "
            f"{seeds_text(int(r.n_seeds))}){why}{extra}.".replace("  ", " ").replace(" ,", ","))
    return out


def method_sentence(stats: ReportStatistics) -> str:
    """How the claims were computed: the model (or paired t), the family, the verdict rules."""
    run = stats.inference
    fam = run.family
    if run.model is not None and fam.method == inference.PAIRED:
        how = ("paired comparisons: each level minus the baseline level, seed by seed, each seed's difference "
               "averaged over the matched cells (the combinations of the other factors at which both levels ran), "
               "with the paired t-interval on the per-seed differences (n - 1 df)"
               + ("; each two-factor interaction tested on its own per-seed interaction contrasts (Hotelling's T², "
                  "the paired t-test for one contrast)" if run.model.interactions else "")
               + ". Nothing is pooled across arms, so arms with unequal variances keep their intervals right. The "
               "linear model (statsmodels OLS: seed as a block, every main effect"
               + (", every two-factor interaction" if run.model.interactions else "; two-factor interactions assumed "
                  "negligible (see the alias structure)")
               + f"; {run.model.n} trials, {run.model.df_resid} residual df) gives the analysis of variance table, "
               "with Type II sums of squares, for reference")
    elif run.model is not None:
        how = ("one linear model of the objective per trial (statsmodels OLS: seed as a block, every main effect"
               + (", every two-factor interaction" if run.model.interactions else "; two-factor interactions assumed "
                  "negligible (see the alias structure)")
               + f"; {run.model.n} trials, {run.model.df_resid} residual df); its analysis of variance uses Type II "
               "sums of squares (each term against the model of the terms that do not contain it, df by rank, so "
               "empty cells and excluded combinations are handled); every level-vs-baseline contrast is the model's "
               "estimated marginal mean difference over the matched cells (the combinations of the other factors at "
               "which both levels ran), with a t-interval on the model's residual df")
    else:
        how = ("paired comparisons: each level minus the baseline level, seed by seed, with the paired t-interval on "
               "the per-seed differences (n - 1 df)")
    eq = (f"equivalent (the two one-sided tests at ±{num(fam.min_effect * stats.scale.factor)} "
          f"{stats.scale.unit or ''} reject after Holm: no effect as large as the study's min_effect)"
          if fam.min_effect else "equivalent (not available: the study declares no min_effect)")
    family = (f"Every claim below belongs to one family of {fam.size} test{'s' if fam.size != 1 else ''} corrected "
              f"with Holm's method at a family-wise {fam.alpha:g}" if fam.size else
              f"No claim below could be tested (every contrast has fewer than {inference.MIN_SEEDS} seeds)")
    return (f"Inference: {how}. The unit of replication is the seed. {family}; a claim is detected (Holm-adjusted p < {fam.alpha:g}: its interval excludes 0), {eq}, "
            f"or not resolved at n seeds. Below {inference.MIN_SEEDS} seeds no interval is given.")


def scope_sentences(stats: ReportStatistics) -> list[str]:
    """What the conclusions generalize over: the warm start, the evaluation's noise."""
    out = []
    if stats.warm_start == "shared":
        out.append("Every seed started from one shared warm start and was evaluated on the same problems: the "
                   "intervals cover the RL run's sampling noise and the evaluation's, not the start policy; the "
                   "conclusions hold for this warm start (warmstart.seed: null gives each seed its own).")
    elif stats.warm_start == "trial":
        out.append("Each seed started from its own warm start (warmstart.seed: null): the intervals cover the "
                   "start policy's variation as well as the RL run's.")
    if stats.seed_rule:
        out.append(f"Adaptive seeds ({stats.seed_rule}): the seed count was re-estimated from the variance alone, "
                   "never from the observed effect (internal pilot: Wittes & Brittain 1990; Kieser & Friede 2003), "
                   "so the intervals and tests are computed as for a fixed n.")
    shares = [(name, sd, c.sd_per_seed) for c in stats.inference.contrasts
              if (name := c.name) in stats.eval_sd and math.isfinite(sd := stats.eval_sd[name])
              and c.n_seeds >= 2 and c.sd_per_seed > 0]
    if shares:
        f = stats.scale.factor
        frac = sorted(min(1.0, (e / o) ** 2) for _, e, o in shares)

        def span(values: list[float], fmt: Any) -> str:
            lo, hi = fmt(min(values)), fmt(max(values))
            return lo if lo == hi else f"{lo}-{hi}"

        n = min(c.n_seeds for c in stats.inference.contrasts if c.name in stats.eval_sd)
        out.append(f"Evaluation noise, from the per-problem records (paired by problem on each trial's last "
                   f"evaluation): sampling the problems alone gives one seed's difference an SD of "
                   f"{span([e for _, e, _ in shares], lambda v: num(v * f, 2))} {stats.scale.unit}, against an "
                   f"SD between seeds of {span([o for _, _, o in shares], lambda v: num(v * f, 2))} "
                   f"{stats.scale.unit} (estimated from {seeds_text(n)}): the evaluation accounts for about "
                   f"{span(frac, lambda v: f'{v:.0%}')} of that variance ({len(shares)} contrast"
                   f"{'s' if len(shares) != 1 else ''}); where it is most of it, more evaluation problems narrow the "
                   "intervals more cheaply than more seeds.")
    if math.isfinite(stats.eval_se) and stats.eval_problems:
        out.append(f"One evaluation on {stats.eval_problems} problems has a binomial standard error of about "
                   f"{num(stats.eval_se * stats.scale.factor, 2)} {stats.scale.unit} at the study's mean accuracy; "
                   "it is part of every seed's noise.")
    return out


def resolvable_text(claims: Sequence[inference.Claim], family: inference.Family, scale: Scale) -> str:
    """What the study's seeds can resolve, for the unresolved ``claims``: the smallest true difference
    each would detect with 80% power at its seed count (paired t at the family's Bonferroni level, from
    its observed SD per seed: :func:`ablate.stats.inference.resolvable_effect`); "" when none has an SD."""
    unit = f" {scale.unit}" if scale.unit else ""
    m = max(family.size or len(family.claims), 1)  # as ablate plan: untested claims (below 3 seeds) still count
    alpha = family.alpha / m
    parts = []
    for claim in claims:
        c = claim.contrast
        if c is None or c.n_seeds < 2:
            continue
        e = inference.contrast_resolvable_effect(c, alpha=alpha)
        if math.isfinite(e):
            parts.append(f"{claim.name}: {num(e * scale.factor)}{unit} at {seeds_text(c.n_seeds)} "
                         f"({int(c.df)} df; SD per seed {num(c.sd_per_seed * scale.factor)}{unit})")
    if not parts:
        return ""
    return ("What these seeds can resolve: the smallest true difference detected with 80% power (the claim's own "
            f"t-test, at alpha {num(family.alpha)} / {m}, from its observed standard error and df) is "
            + "; ".join(parts) + ".")


def resolution_sentences(stats: ReportStatistics) -> list[str]:
    """Whether the study answered its question, and what would."""
    fam = stats.inference.family
    out = []
    if not stats.primary:
        out.append("The study declares no primary contrast (primary:): every claim is exploratory.")
    prim = fam.primary
    if prim:
        unresolved = [c for c in prim if c.verdict == inference.NOT_RESOLVED]
        if unresolved and len(unresolved) == len(prim):
            need = [c.seeds_needed for c in unresolved if math.isfinite(c.seeds_needed)]
            more = (f"; about {int(max(need))} seeds per arm would resolve "
                    + ("the min_effect" if fam.min_effect else "differences of the observed sizes")
                    + " (ablate plan computes it from these trials)") if need else ""
            out.append(f"This study could not answer its primary question at {seeds_text(fam.n_seeds)}: no primary "
                       f"contrast is detected or equivalent{more}.")
        elif unresolved:
            out.append(f"{len(prim) - len(unresolved)} of {len(prim)} primary contrasts are resolved.")
        mde = resolvable_text(unresolved, fam, stats.scale)
        if mde:
            out.append(mde)
    if not stats.min_effect:
        out.append("The study declares no min_effect: equivalence cannot be claimed, and the seeds needed are "
                   "computed for the observed differences.")
    return out


# ------------------------------------------------------------------------------------------- tables


def _fmt_frame(df: pd.DataFrame, columns: Mapping[str, str], scaled: Sequence[str] = (), scale: float = 1.0,
               digits: Mapping[str, int] | None = None) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    for col, title in columns.items():
        values = df[col]
        if col in scaled:
            values = values.astype(float) * scale
        d = (digits or {}).get(col, 3)
        out[title] = [v if isinstance(v, str) else num(v, d) for v in values]
    return out.reset_index(drop=True)


def claims_frame(family: inference.Family) -> pd.DataFrame:
    """The family as a numeric frame: one row per claim."""
    rows = []
    for cl in family.claims:
        c = cl.contrast
        t = cl.term
        if cl.pooled is not None:  # a context study's claim: the pooled estimate and its test
            p = cl.pooled
            rows.append({
                "claim": cl.name, "role": "primary" if cl.primary else "exploratory", "verdict": cl.verdict,
                "seeds": f"{c.n_seeds if c else '–'} × {p.k} contexts", "estimate": p.estimate, "ci_low": p.ci_low,
                "ci_high": p.ci_high, "interval": "random effects (Hartung-Knapp)", "df": p.df, "p": p.p,
                "p_holm": cl.p_holm, "p_tost_holm": cl.p_tost_holm, "d_z": math.nan, "improved": "–",
                "seeds_needed": math.nan})
            continue
        rows.append({
            "claim": cl.name, "role": "primary" if cl.primary else "exploratory", "verdict": cl.verdict,
            "seeds": c.n_seeds if c else math.nan, "estimate": c.estimate if c else math.nan,
            "ci_low": c.ci_low if c else math.nan, "ci_high": c.ci_high if c else math.nan,
            "interval": (("model t" if c.method == inference.MODEL else "paired t") if c else
                         TERM_INTERVALS[t is not None and t.method == inference.PAIRED]),
            "df": c.df if c else (t.df_resid if t else math.nan), "p": c.p if c else (t.p if t else math.nan),
            "p_holm": cl.p_holm, "p_tost_holm": cl.p_tost_holm, "d_z": c.d_z if c else math.nan,
            "improved": f"{c.improved.k}/{c.improved.n}" if c and c.improved.n else "–",
            "seeds_needed": cl.seeds_needed,
        })
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Findings:
    """Step 2's result: the answer (one plain sentence per primary contrast, for the top of the page),
    the sections of findings, the notes and the formatted tables."""

    sections: tuple[Section, ...]
    notes: tuple[str, ...]
    tables: tuple[Table, ...]
    answer: tuple[str, ...] = ()


def context_sentence(a: AcrossContexts, scale: Scale) -> str:
    """One contrast across contexts: its verdict and :func:`ablate.stats.meta.verdict`'s reason (the pooled
    estimate with its interval, the prediction interval for a new context, τ, I² and the heterogeneity
    test, or what would resolve it), and the method."""
    p = a.pooled
    reason = a.reason[0].upper() + a.reason[1:] if a.reason else ""
    if p is None:  # fewer than 2 contexts with a spread: nothing pooled
        return f"{a.claim}: {a.verdict} ({len(a.contexts)} contexts). {reason}."
    if np.isfinite(p.estimate) and "pooled" not in reason.lower():
        reason += (f"; pooled {signed(p.estimate * scale.factor)} {ci_text(p.ci_low, p.ci_high, scale.factor)}, "
                   f"τ = {num(p.tau * scale.factor)}, I² = {num(100 * p.i2, 2)}%")
    elif np.isfinite(p.estimate) and "I²" not in reason:  # every verdict says the spread between contexts
        reason += f" (τ = {num(p.tau * scale.factor)}, I² = {num(100 * p.i2, 2)}%)"
    return f"{a.claim}: {a.verdict} ({p.k} contexts). {reason} (random effects: {p.method})." + (
        f" {trend_sentence(a.trend, scale)}" if a.trend is not None else f" {a.trend_note}" if a.trend_note else "")


#: What a context study whose file commits no learning threshold (``entry:``) opens with.
NO_ENTRY_RULE = ("This study commits no learning threshold for its contexts (no 'entry:' rule in its file): its "
                 "verdicts across contexts may rest on contexts where the baseline did not learn; the positive "
                 "control below says where it did.")


def entry_sentences(stats: ReportStatistics) -> list[str]:
    """A context study's entry rule at the top of its report: that it has none, and the contexts it dropped."""
    out = [NO_ENTRY_RULE] if stats.entry_warning else []
    if stats.inference.dropped:
        out.append("Dropped by the study's entry rule, never pooled: " + "; ".join(stats.inference.dropped) + ".")
    return out


def trend_sentence(trend: Any, scale: Scale) -> str:
    """A contrast's trend with model size (:func:`ablate.stats.meta.scale_trend` in log10 parameters) and where it
    would be at SmolLM2-135M's size, said as an extrapolation, never as a result."""
    from ablate.report.statistics import EXTRAPOLATE_PARAMS

    f, unit = scale.factor, f" {scale.unit}" if scale.unit else ""
    at = trend.at(math.log10(EXTRAPOLATE_PARAMS))
    return (f"With model size: {signed(trend.slope * f)}{unit} per tenfold parameters "
            f"{ci_text(trend.slope_low, trend.slope_high, f)} (weighted least squares over {trend.k} sizes, t on "
            f"{trend.df} df, {p_text(trend.p)}); extended to 135M parameters (SmolLM2) the line gives "
            f"{signed(at.value * f)}{unit}, a new measurement there {ci_text(at.pi_low, at.pi_high, f)}: an "
            "extrapolation beyond the sizes measured, not a result.")


def answer_sentences(stats: ReportStatistics) -> list[str]:
    """The top of the report: one plain sentence per primary contrast; without primary contrasts, one
    sentence saying so, then one per contrast of the family (at most 6). A study with ``contexts:``
    answers with each primary contrast's verdict across contexts."""
    scale, fam = stats.scale, stats.inference.family
    if stats.budget == SMOKE_BUDGET:
        return [SMOKE_LINE, *_answers(stats, scale, fam)]
    if not stats.evidence:
        return [DEMO_LINE, *_answers(stats, scale, fam)]
    return _answers(stats, scale, fam)


#: The budget every predefined study names for its plumbing check, and the line its report opens with.
SMOKE_BUDGET = "smoke"
SMOKE_LINE = ("Smoke run (budget smoke): it checks that every part of the study runs; its numbers are not "
              "evidence. Run the study at its default budget for the answer.")
#: The line a demo's report opens with (a study with ``evidence: false``, such as the quickstart).
DEMO_LINE = ("A demo (evidence: false): this report is your own run, on your processor; it is never committed, "
             "and ablate ledger never reads it. Its numbers show the pipeline at work, not an answer.")


def unlogged_objective_sentence(metric: str, done: int) -> str:
    """What a report says when none of its ``done`` finished trials logged the objective's ``metric``."""
    return (f"None of the {done} finished trial{'s' if done != 1 else ''} logged the objective's metric {metric} "
            "(objective.metric): there is nothing to compare. Name a metric these trials log (docs/metrics.md; "
            "some are logged only with the option that measures them) and run the study again: its finished "
            "trials are reused and this report is rebuilt.")


def _answers(stats: ReportStatistics, scale: Scale, fam: Any) -> list[str]:
    """:func:`answer_sentences` without the smoke line."""
    if stats.per_trial.empty:
        done = stats.counts.get("done", 0)
        return [unlogged_objective_sentence(stats.metric, done) if done else
                "No trial has finished yet: there is nothing to compare."]
    if stats.contexts:
        chosen = [a for a in stats.contexts if a.primary] or list(stats.contexts)
        return [*entry_sentences(stats), *(context_sentence(a, scale) for a in chosen)]
    if fam.primary:
        return [answer_sentence(c, fam, scale, stats.mode) for c in fam.primary]
    claims = [c for c in fam.claims if c.contrast is not None]
    out = ["The study declares no primary contrast (primary:): every claim below is exploratory."]
    out += [answer_sentence(c, fam, scale, stats.mode) for c in claims[:6]]
    if len(claims) > 6:
        out.append(f"... and {len(claims) - 6} more contrasts, in the claims figure and the sections below.")
    return out


def staged_claim(run: inference.StudyInference, claim: inference.Claim) -> bool:
    """Whether ``claim``'s test is an extended study's two-stage test (its contrast, its TOST or its
    interaction: :mod:`ablate.stats.sequential`)."""
    if claim.term is not None:
        return claim.term.term in run.staged_terms
    return claim.name in run.staged or claim.name in run.staged_tost


def staged_intro(run: inference.StudyInference) -> str:
    """What the claims' sections of an extended study say first: their p values are the two-stage tests'
    ("" for a study that was not extended)."""
    stages = [*run.staged.values(), *run.staged_terms.values()]
    if not stages:
        return ""
    n1 = stages[0].n1
    return (f"This study's seeds were extended after a report of its first {seeds_text(n1)} was read (extended_after "
            "in the study file): each p value below is the two-stage test's (stage 1 and the extension combined, "
            "O'Brien-Fleming-type boundaries; the TOST and the interactions alike), Holm over the family, and it "
            "decides the verdict; estimates and intervals are those of all seeds. Each contrast's two stages are in "
            "the table under 'Evidence across the committed reports'.")


def claim_sections(stats: ReportStatistics) -> list[Section]:
    """The report's sections of claims (each marked ``claims``): the study's question (primary contrasts),
    exploratory contrasts and interactions; a study with contexts, its verdicts across contexts first. Computed
    from the trials' objectives alone, as ``ablate ledger`` re-renders them (:mod:`ablate.report.verdicts`)."""
    scale, run = stats.scale, stats.inference
    fam = run.family

    def said(claims: Sequence[inference.Claim]) -> list[str]:
        return [claim_sentence(c, fam, scale, stats.mode, staged=staged_claim(run, c)) for c in claims]

    sections = []
    if not stats.per_trial.empty:  # (with nothing finished, the answer says so)
        head = resolution_sentences(stats)
        prim = said(fam.primary)
        sections.append(Section("Primary contrasts" if prim else "The study's question", tuple(head + prim),
                                staged_intro(run), claims=True))
        contrasts = said([c for c in fam.exploratory if c.contrast is not None])
        if contrasts:
            sections.append(Section("Exploratory contrasts", tuple(contrasts),
                                    "Each level against the baseline level; members of the same family.", claims=True))
        terms = said([c for c in fam.exploratory if c.term is not None])
        if terms:
            sections.append(Section("Interactions", tuple(terms), (
                "Each two-factor interaction tested on its per-seed interaction contrasts (Hotelling's T², the "
                "paired t-test for one contrast), members of the same family." if fam.method == inference.PAIRED
                else "Type II F-tests of the two-factor interactions, members of the same family."), claims=True))
    if stats.contexts:
        sections.insert(0, Section("Across contexts", tuple(context_sentence(a, scale) for a in stats.contexts), (
            "Each contrast estimated within each context (the paired t over that context's seeds) and pooled across "
            "contexts by a random-effects model (ablate.meta): the pooled estimate is the mean effect over contexts "
            "like these, τ the spread of the true effect between them, and the prediction interval where a new "
            "context's effect would fall. Verdicts: holds across contexts, equivalent on average across contexts, "
            "context-dependent, not resolved (docs/statistics.md), each at its pooled tests' Holm adjustment over the "
            "family; an equivalence where the baseline did not learn in every pooled context is uninformative. This "
            "verdict is each contrast's claim; the equal-weight averages below describe, they do not judge."),
            claims=True))
    return sections


def _sections(stats: ReportStatistics) -> list[Section]:
    """The report's sentences: its sections of claims (:func:`claim_sections`), compute efficiency and the
    method."""
    scale = stats.scale
    sections = claim_sections(stats)
    if not stats.fits.empty:
        sections.append(Section("Compute efficiency", tuple(compute_sentences(stats.fits, stats.labels, scale)),
                                "Descriptive fits per arm, not claims of the family."))
    if not stats.per_trial.empty:
        sections.append(Section("Method: model, family and verdicts", (),
                                " ".join([method_sentence(stats), *scope_sentences(stats)])))
    return sections


def _claim_tables(stats: ReportStatistics) -> list[Table]:
    """The objective per arm, the family of claims, and the analysis of variance."""
    scale, fam, run = stats.scale, stats.inference.family, stats.inference
    unit = scale.unit or "its units"
    tables = []
    if not stats.arms.empty:
        av = stats.arms.assign(arm=stats.arms["arm"].map(lambda a: stats.labels.get(a, a)))
        tables.append(Table("Objective per arm", _fmt_frame(
            av, {"arm": f"arm ({stats.legend_title})", "n_seeds": "seeds", "mean": "mean", "ci_low": "CI low",
                 "ci_high": "CI high", "std": "SD", "iqm": "IQM"},
            scaled=["mean", "ci_low", "ci_high", "std", "iqm"], scale=scale.factor),
            f"{stats.metric} per arm in {unit}: mean over seeds with its 95% t-interval (none below "
            f"{inference.MIN_SEEDS} seeds; an arm's own interval, not a comparison), SD over seeds and the "
            "interquartile mean (a point value).", "arms"))
    if fam.claims:
        cf = claims_frame(fam)
        tables.append(Table("Claims (one family)", _fmt_frame(
            cf, {"claim": "claim", "role": "role", "verdict": "verdict", "seeds": "seeds", "estimate": "difference",
                 "ci_low": "CI low", "ci_high": "CI high", "interval": "interval", "df": "df", "p": "p",
                 "p_holm": "p (Holm)", "p_tost_holm": "TOST p (Holm)", "d_z": "d_z", "improved": "seeds improved",
                 "seeds_needed": "seeds needed"},
            scaled=["estimate", "ci_low", "ci_high"], scale=scale.factor,
            digits={"p": 2, "p_holm": 2, "p_tost_holm": 2, "d_z": 2}),
            f"Every claim of the report: difference level − baseline in {unit} with its 95% interval (paired t: on "
            "the per-seed differences; model t: from the study's linear model), the two-sided p-value"
            + (" (the two-stage test's, this study's seeds extended after a report was read)" if run.staged else "")
            + ", its Holm "
            + (f"adjustment over the family of {fam.size}" if fam.size else
               "adjustment (none here: no claim could be tested, each has fewer than "
               f"{inference.MIN_SEEDS} seeds or no spread)")
            + f", the {'two-stage ' if run.staged_tost else ''}TOST p-value at ±min_effect (Holm), d_z (mean / SD of the "
            "per-seed differences), the seeds on which the level improved (ties left out), and the seeds a paired "
            "test at the family's Bonferroni level would need for 80% power at the min_effect (or, without one, at "
            "the observed difference).", "claims"))
    if run.model is not None:
        tables.append(Table("Analysis of variance (Type II)", _fmt_frame(
            run.model.anova_frame(), {"term": "term", "kind": "kind", "df": "df", "df_resid": "residual df",
                                      "sum_sq": "sum of squares", "F": "F", "p": "p", "note": "note"},
            digits={"p": 2}),
            f"Model: {run.model.formula} ({run.model.n} trials). Type II sums of squares by model comparison, in "
            "the objective's own units squared; p-values uncorrected here, from one residual variance pooled over "
            "every arm" + (" (the claims test the interactions paired by seed instead, robust to unequal arm "
                           "variances)." if fam.method == inference.PAIRED else
                           " (the interactions' Holm-adjusted values are in the claims)."), "anova"))
    return tables


def _descriptive_tables(stats: ReportStatistics) -> list[Table]:
    """The diagnostics against the baseline level and the compute-efficiency fits (not claims)."""
    scale = stats.scale
    tables = []
    frames = []
    if stats.diagnostics:
        for d in stats.diagnostics:
            f = claims_frame(d.inference.family)
            if f.empty:
                continue
            f = f[~f["interval"].isin(TERM_INTERVALS)]
            sc = Scale.of(d.metric).factor
            frames.append(f.assign(metric=d.metric, estimate=f["estimate"] * sc, ci_low=f["ci_low"] * sc,
                                   ci_high=f["ci_high"] * sc))
    if stats.diagnostics and frames:
        frame = pd.concat(frames, ignore_index=True)
        tables.append(Table("Diagnostics against the baseline level", _fmt_frame(
            frame, {"metric": "metric", "claim": "contrast", "seeds": "seeds", "estimate": "difference",
                    "ci_low": "CI low", "ci_high": "CI high", "p_holm": "p (Holm within metric)"},
            digits={"p_holm": 2}),
            "The study's report.metrics, each summarised per trial as the mean of its last 10% of logged values, "
            "compared level by level with the same method as the objective (fractions in percentage points). "
            "Descriptive: they have no preferred direction and are not claims of the family.", "diagnostics"))
    if stats.speed:
        frame = pd.DataFrame([{"metric": r.metric, "contrast": f"{r.factor}: {r.level} vs {r.baseline}",
                               "seeds": r.ratio.n_seeds, "ratio": r.ratio.ratio, "ci_low": r.ratio.ci_low,
                               "ci_high": r.ratio.ci_high} for r in stats.speed])
        tables.append(Table("Speed against the baseline level", _fmt_frame(
            frame, {"metric": "metric", "contrast": "contrast", "seeds": "seeds",
                    "ratio": "baseline / level time", "ci_low": "CI low", "ci_high": "CI high"},
            digits={"ratio": 3, "ci_low": 3, "ci_high": 3}),
            "Each timing metric of report.metrics as a speed ratio: above 1 the level is faster. Per trial the "
            "median of the metric's positive logged values (seconds); per seed the mean over the matched cells; the "
            "geometric mean over seeds with the 95% t-interval of the per-seed log ratios (none below 3 seeds). "
            "Times depend on the processor and on what else ran beside the trial: descriptive, not claims.",
            "speed"))
    if not stats.fits.empty and stats.fits["ok"].any():  # none fitted: the section's sentence says why, once
        fv = stats.fits.assign(arm=stats.fits["arm"].map(lambda a: stats.labels.get(a, a)))
        fv["status"] = [("fitted" + (f" ({reason})" if reason else "") if ok else f"failed: {reason}")
                        for ok, reason in zip(fv["ok"], fv["reason"])]
        tables.append(Table("Compute efficiency (saturating fits)", _fmt_frame(
            fv, {"arm": f"arm ({stats.legend_title})", "status": "fit", "r0": "R0", "a": "A", "a_low": "A low",
                 "a_high": "A high", "b": "B", "b_low": "B low", "b_high": "B high", "c_mid": "C_mid (tokens)",
                 "r2": "R²", "n_seeds": "seeds"}, scaled=["r0", "a", "a_low", "a_high"], scale=scale.factor),
            "R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) fitted to the objective against generated tokens (Khatri "
            "et al. 2025), A bounded to the metric's range; 95% bootstrap intervals over seeds for A and B only "
            "from 5 seeds on.", "compute"))
    return tables


def _context_tables(stats: ReportStatistics) -> list[Table]:
    """Per contrast of a study with ``contexts:``: each context's estimate and interval, and the pooled row."""
    f = stats.scale.factor
    tables = []
    for a in stats.contexts:
        rows = [{"context": r.context, "seeds": str(int(r.n)), "estimate": signed(r.estimate * f),
                 "95% CI": ci_text(r.ci_low, r.ci_high, f)} for r in a.contexts.itertuples()]
        p = a.pooled
        if p is not None and np.isfinite(p.estimate):
            rows.append({"context": f"pooled ({p.k} contexts)", "seeds": "", "estimate": signed(p.estimate * f),
                         "95% CI": ci_text(p.ci_low, p.ci_high, f)})
            rows.append({"context": "a new context (prediction interval)", "seeds": "", "estimate": "",
                         "95% CI": ci_text(p.pi_low, p.pi_high, f) if np.isfinite(p.pi_low)
                         else f"undefined with {p.k} contexts (needs {MIN_CONTEXTS_PI})"})
        reason = (a.reason[0].upper() + a.reason[1:]).rstrip(".") + "." if a.reason else ""
        tables.append(Table(f"{a.claim} across contexts", pd.DataFrame(rows),
                            f"{a.verdict[0].upper() + a.verdict[1:]}. {reason}".strip()
                            + (f" Method: {p.method}." if p is not None else ""), ""))
    return tables


def claim_tables(stats: ReportStatistics) -> list[Table]:
    """The report's tables of claims (each marked ``claims``): per contrast across contexts, the objective per
    arm, the family of claims and the analysis of variance. Computed from the trials' objectives alone, as
    ``ablate ledger`` re-renders them (:mod:`ablate.report.verdicts`)."""
    return [replace(t, claims=True) for t in (*_context_tables(stats), *_claim_tables(stats))]


def phrase(stats: ReportStatistics) -> Findings:
    """Step 2: phrase ``stats`` as findings and format its tables."""
    notes = []
    if stats.scale.factor != 1:
        notes.append(f"{stats.metric} is a fraction; differences are shown in percentage points (× 100).")
    tables = [*claim_tables(stats), *_descriptive_tables(stats)]
    return Findings(tuple(_sections(stats)), tuple(notes), tuple(tables), tuple(answer_sentences(stats)))
