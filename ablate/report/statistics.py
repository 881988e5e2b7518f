"""Step 1 of a report: every statistic of a study's results, as one typed value.

:func:`compute_statistics` reduces the tidy results table to one objective value per trial
(:func:`ablate.stats.analysis.trial_objectives`), runs the study's inference on it
(:func:`ablate.stats.inference.infer`: paired t or the study's linear model, one Holm family of claims),
summarises each arm, compares the study's ``report.metrics`` diagnostics level by level, and fits
the compute-efficiency curves. Nothing here phrases a sentence or draws a figure: step 2
(:mod:`ablate.report.findings`) phrases, step 3 (:mod:`ablate.report.build`) draws and renders.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ablate.stats import analysis, inference
from ablate.tracking.results import Results, count_states

if TYPE_CHECKING:
    from ablate.study import Study


@functools.lru_cache(maxsize=1)
def _glossary() -> list[tuple[re.Pattern[str], str, str]]:
    from ablate.metrics import METRICS
    from ablate.tracking import metric_name

    out = []
    for name, (meaning, unit) in METRICS.items():
        pattern = re.escape(metric_name(name.replace("{c}", "C").replace("{k}", "K")))
        pattern = pattern.replace("C", r"[^/]+", 1) if "{c}" in name else pattern
        pattern = pattern.replace("K", r"\d+") if "{k}" in name else pattern
        out.append((re.compile(pattern + r"\Z"), meaning, unit))
    return out


def metric_unit(metric: str) -> str | None:
    """The unit of a logged metric from the glossary (``ablate.metrics.METRICS``), None if unknown."""
    exact = [u for p, _, u in _glossary() if p.match(metric) and "[^/]+" not in p.pattern]
    if exact:
        return exact[0]
    for p, _, u in _glossary():
        if p.match(metric):
            return u
    return None


@dataclass(frozen=True)
class Scale:
    """How objective values are shown: fractions as percentage points, other units as they are."""

    factor: float
    unit: str

    @staticmethod
    def of(metric: str) -> Scale:
        """The scale of a metric: ``Scale(100, "points")`` for a fraction, else its glossary unit."""
        unit = metric_unit(metric)
        if unit == "fraction":
            return Scale(100.0, "points")
        return Scale(1.0, unit or "")


@dataclass(frozen=True)
class Diagnostic:
    """A ``report.metrics`` diagnostic compared level by level (its own family: no claim of the report)."""

    metric: str
    inference: inference.StudyInference


@dataclass(frozen=True)
class SpeedRatio:
    """A timing metric's level-vs-baseline speed ratio (baseline time / level time: > 1 is faster),
    paired by seed over matched cells (:func:`ablate.stats.inference.paired_ratio`). Descriptive."""

    metric: str
    factor: str
    level: str
    baseline: str
    ratio: inference.Ratio


def is_timing(metric: str) -> bool:
    """A per-step time in seconds (``perf/*_s``), whose level-vs-baseline ratio the report gives."""
    return metric.startswith("perf/") and metric.endswith("_s")


def speed_ratios(table: pd.DataFrame, metric: str, factors: Mapping[str, str], levels: Mapping[str, Sequence[str]],
                 baseline: Mapping[str, str]) -> list[SpeedRatio]:
    """Per level-vs-baseline contrast, ``metric``'s speed ratio: per trial the median of its positive
    logged values (seconds; steps that skip the timed part log 0), per seed the mean over matched
    cells, and the geometric mean over seeds of baseline / level with its 95% t-interval on the logs."""
    cols = list(factors.values())
    rows = table[(table["metric"] == metric) & (table["value"].astype(float) > 0)]
    if rows.empty:
        return []
    per = rows.groupby([*analysis.ID_COLUMNS, *cols], sort=False, dropna=False)["value"].median().reset_index()
    per["seed"] = per["seed"].astype(int)
    for c in cols:
        per[c] = per[c].astype(str)
    out = []
    for f, lv in inference.contrast_keys(levels, baseline):
        frame, _ = inference.paired_values(per, factors[f], lv, str(baseline[f]), cols, value="value")
        if not frame.empty:
            out.append(SpeedRatio(metric, f, lv, str(baseline[f]), inference.paired_ratio(frame["x"], frame["y"])))
    return out


@dataclass(frozen=True)
class ReportStatistics:
    """Every number a report shows, before any of it is phrased.

    Attributes:
        factors: factor name -> column; levels: factor -> level order; baseline: factor -> level.
        labels: arm name -> short label (levels joined by `` / ``).
        per_trial: one row per trial (``key, arm, seed, <levels>, objective``).
        arms: :func:`ablate.stats.inference.arm_table` in design order.
        inference: the objective's contrasts, model and family of claims.
        diagnostics: the ``report.metrics`` comparisons.
        points, fits: compute-efficiency points and per-arm saturating fits.
        eval_problems: problems per evaluation of the baseline arm (None when unknown).
        eval_se: the binomial standard error of one trial's accuracy at the study's mean accuracy
            (objective units; NaN when the objective is not a fraction).
        warm_start: ``shared``, ``trial`` or ``none``.
        seed_rule: how the seed count was decided, for an adaptive study (the parent run's
            ``ablate.adaptive_seeds`` tag); empty for a fixed seed count.
        eval_sd: contrast name -> the evaluation's own share of the noise: the SD of one seed's
            difference that sampling the evaluation problems alone gives (paired by problem on each
            trial's last evaluation, :func:`eval_noise`); empty without per-problem records.
        contexts: for a study with ``contexts:``, every compared contrast per context and pooled.
        evidence: the study's ``evidence:``; false for a demo, whose report is never a ledger input.
        controls: the positive control, did the baseline learn (:func:`ablate.report.learning.study_controls`,
            one per context); an *equivalent* verdict where it did not is *uninformative* in ``inference``'s
            family and in ``contexts`` (:func:`ablate.report.learning.judged`).
        entry_warning: a study with contexts whose file commits no learning threshold: the line its report
            opens with (:attr:`ablate.study.Study.entry_warning`).
    """

    study: str
    budget: str
    description: str
    metric: str
    mode: str
    summary_text: str
    scale: Scale
    unit: str | None
    design: str
    factors: dict[str, str]
    levels: dict[str, list[str]]
    baseline: dict[str, str]
    labels: dict[str, str]
    counts: dict[str, int]
    seeds: tuple[int, ...]
    min_effect: float | None
    primary: tuple[str, ...]
    per_trial: pd.DataFrame
    arms: pd.DataFrame
    inference: inference.StudyInference
    diagnostics: tuple[Diagnostic, ...]
    points: pd.DataFrame
    fits: pd.DataFrame
    eval_problems: int | None
    eval_se: float
    warm_start: str
    seed_rule: str = ""
    eval_sd: dict[str, float] = field(default_factory=dict)
    speed: tuple[SpeedRatio, ...] = ()
    contexts: tuple[AcrossContexts, ...] = ()
    evidence: bool = True
    controls: tuple[Any, ...] = ()
    entry_warning: str | None = None

    @property
    def legend_title(self) -> str:
        return " / ".join(self.factors)


def arm_label(levels: Mapping[str, str], factors: Sequence[str]) -> str:
    """An arm's short label: its level names joined by `` / `` in factor order."""
    return " / ".join(str(levels[f]) for f in factors)


def summary_text(objective: object, unit: str | None) -> str:
    """``maximize eval/accuracy (fraction), summarised per trial as ...``."""
    o = objective
    how = {"last": f"the mean of its last {o.last_n} logged value(s)", "mean": "the mean over training",  # type: ignore[attr-defined]
           "max": "its maximum", "min": "its minimum", "auc": "the area under its curve divided by the steps"}
    return f"{o.mode}imize {o.metric} ({unit or 'unit unknown'}), summarised per trial as {how[o.summary]}"  # type: ignore[attr-defined]


def in_arm_order(frame: pd.DataFrame, order: dict[str, int]) -> pd.DataFrame:
    """``frame``'s rows by their ``arm``'s position in ``order`` (arm -> index: the design's order)."""
    if frame.empty:
        return frame
    return frame.sort_values("arm", key=lambda s: s.map(order).fillna(len(order)), kind="stable").reset_index(drop=True)


def warm_start_of(study: Study, budget: str) -> tuple[str, int | None]:
    """``(mode, eval problems)``: the study's warm start (``shared``, ``trial`` or ``none``) and its evaluation's
    problems at ``budget``."""
    if not study.arms:
        return "none", None
    cfg = study.config(study.arms[0], budget if budget in study.budgets else "default")
    ws = getattr(cfg, "warmstart", None)
    # warmstart.seed: an integer = one warm start shared by every trial seed; null = one per trial seed
    mode = "none" if ws is None or not getattr(ws, "enabled", False) else (
        "trial" if getattr(ws, "seed", 0) is None else "shared")
    return mode, int(cfg.eval.n_problems)


def eval_noise(problems: pd.DataFrame, per_trial: pd.DataFrame, run: inference.StudyInference,
               factors: dict[str, str]) -> dict[str, float]:
    """Per contrast, the SD of one seed's difference that the evaluation's problem sampling alone
    explains (objective units): for every matched pair of trials (the level and the baseline at the
    same seed and the same other levels), :func:`ablate.stats.inference.paired_eval_variance` of their
    last evaluations, paired by problem; a seed's variance is the sum over its c matched cells
    divided by c^2 (its difference is their mean); the seeds' variances are averaged.

    Valid when the objective is one evaluation's accuracy (``summary: last``, ``last_n: 1``); the
    caller checks that. Empty when there are no per-problem records."""
    if problems.empty or per_trial.empty:
        return {}
    last = problems[problems["step"] == problems.groupby("key")["step"].transform("max")]
    outcomes = {k: g.sort_values("problem")["correct"].to_numpy(float) for k, g in last.groupby("key")}
    cols = list(factors.values())
    trials = per_trial.assign(**{c: per_trial[c].astype(str) for c in cols})
    out: dict[str, float] = {}
    for c in run.contrasts:
        col = factors[c.factor]
        others = [x for x in cols if x != col]
        xs = trials[trials[col] == c.level][["key", "seed", *others]]
        ys = trials[trials[col] == c.baseline][["key", "seed", *others]]
        pairs = xs.merge(ys, on=["seed", *others], suffixes=("_x", "_y"))
        per_seed = []
        for _, g in pairs.groupby("seed"):
            v = [inference.paired_eval_variance(outcomes[kx], outcomes[ky]) for kx, ky in zip(g["key_x"], g["key_y"])
                 if kx in outcomes and ky in outcomes]
            if v and len(v) == len(g):
                per_seed.append(sum(v) / len(v) ** 2)
        if per_seed:
            out[c.name] = math.sqrt(float(np.mean(per_seed)))
    return out


@dataclass(frozen=True)
class AcrossContexts:
    """One contrast of a study with ``contexts:``, estimated within each context and pooled across them.

    Attributes:
        claim: ``factor: level vs base``; primary: the study names it in ``primary:``.
        contexts: one row per context: ``context, estimate, se, df, ci_low, ci_high, n`` (objective units;
            the report's paired t within the context).
        pooled: the random-effects pooling (:class:`ablate.stats.meta.Pooled`); None when fewer than 2 contexts
            have a spread (:func:`unpooled_reason`: verdict "not resolved").
        verdict, reason: :func:`ablate.stats.meta.verdict`'s answer and why (what would resolve it), its tests at
            the family's Holm-adjusted p values: the report's claim for this contrast.
        trend: its trend in log10(parameters) over a size ladder (:func:`ablate.stats.meta.scale_trend`), or None;
            trend_note: why a size ladder got none (fewer than :data:`ablate.stats.meta.MIN_TREND_SIZES` sizes), else "".
        p_holm, p_tost_holm: the pooled test's and the pooled TOST's p, Holm-adjusted over the family (the
            pooled tests of every contrast and the family's interaction tests); NaN when not pooled.
    """

    claim: str
    primary: bool
    contexts: pd.DataFrame
    pooled: Any
    verdict: str
    reason: str
    trend: Any = None
    p_holm: float = math.nan
    p_tost_holm: float = math.nan
    trend_note: str = ""


#: The metric a trial logs its policy's parameter count in (at step 0): a scale trend's x.
PARAMS_METRIC = "model/params"
#: Where a scale trend is extrapolated to: SmolLM2-135M-Instruct's parameters, the next model ablate runs.
EXTRAPOLATE_PARAMS = 134.5e6


def context_sizes(study: Study, table: pd.DataFrame, factors: Mapping[str, str]) -> dict[str, float]:
    """Context -> its policy's parameters (:data:`PARAMS_METRIC`), when the study's one context factor sets
    ``model.name`` and its contexts span at least 3 sizes: a size ladder, whose contrasts get a scale trend.
    Empty otherwise."""
    if len(study.contexts) != 1 or table.empty:
        return {}
    rows = table[table["metric"] == PARAMS_METRIC]
    return ladder_sizes(study, rows.groupby(factors[study.contexts[0]])["value"].first().to_dict())


def ladder_sizes(study: Study, params: Mapping[Any, float]) -> dict[str, float]:
    """:func:`context_sizes` from ``params`` (level of the study's one context factor -> parameters): only when
    every level of that factor sets ``model.name`` and nothing else (a size ladder; a context that also sets
    the task or the steps confounds them with the size, so its contexts get no trend)."""
    if len(study.contexts) != 1 or any(set(lv.overrides) != {"model.name"}
                                       for lv in study.factor(study.contexts[0]).levels):
        return {}
    sizes = {str(level): float(v) for level, v in params.items() if v == v}
    if len(set(sizes.values())) < 3:
        return {}
    return {study.context_of({study.contexts[0]: level}): v for level, v in sizes.items()}


def unpooled_reason(usable: int, k: int) -> str:
    """Why a contrast was not pooled: fewer than 2 of its ``k`` contexts have a per-seed spread (a paired t
    needs 3 or more seeds whose differences are not all equal)."""
    return (f"{usable} of its {k} contexts {'has' if usable == 1 else 'have'} a spread between seeds (3 or more "
            "seeds whose differences are not all equal); pooling needs 2 or more: more seeds per context would "
            "resolve it")


def across_contexts(study: Study, per_trial: pd.DataFrame, factors: Mapping[str, str],
                    sizes: Mapping[str, float] | None = None, *,
                    terms: Sequence[float] = ()) -> tuple[AcrossContexts, ...]:
    """Every compared contrast of a study with ``contexts:``, per context and pooled (:mod:`ablate.stats.meta`),
    with its trend in log10(parameters) when ``sizes`` (context -> parameters, :func:`context_sizes`)
    is given; empty without contexts. Each verdict reads the pooled tests Holm-adjusted over the family:
    every contrast's pooled test, and ``terms`` (the family's interaction tests' p values)."""
    if not study.contexts or per_trial.empty:
        return ()
    from ablate.stats import meta

    scale = Scale.of(study.objective.metric)
    unit = f" {scale.unit}" if scale.unit else ""
    levels = {f.name: f.level_names() for f in study.factors}
    by_claim = inference.context_contrasts(per_trial, factors, levels, study.baseline_levels, study.contexts,
                                           mode=study.objective.mode, min_effect=study.min_effect)
    rows_of, pooled_of = {}, {}
    for claim, rows in by_claim.items():
        frame = pd.DataFrame([{"context": ctx, "estimate": c.estimate, "se": c.se, "df": c.df, "ci_low": c.ci_low,
                               "ci_high": c.ci_high, "n": c.n_seeds} for ctx, c in rows])
        usable = frame[np.isfinite(frame["se"]) & (frame["se"] > 0)]
        rows_of[claim] = (frame, usable, inference.is_primary(rows[0][1].factor, rows[0][1].level, study.primary))
        if len(usable) >= 2:
            pooled_of[claim] = meta.pool(usable["estimate"].to_numpy(float), usable["se"].to_numpy(float),
                                         usable["df"].to_numpy(float), min_effect=study.min_effect,
                                         labels=list(usable["context"]))
    names = list(rows_of)
    nan = math.nan
    p_holm = inference.holm([pooled_of[c].p if c in pooled_of else nan for c in names] + list(terms))
    tost_holm = inference.holm([pooled_of[c].p_tost if c in pooled_of else nan for c in names])
    out = []
    for i, claim in enumerate(names):
        frame, usable, primary = rows_of[claim]
        if claim not in pooled_of:  # nothing to pool: said, not skipped
            out.append(AcrossContexts(claim, primary, frame, None, "not resolved", unpooled_reason(len(usable), len(frame))))
            continue
        pooled = pooled_of[claim]
        # the verdict's tests at the family's adjusted p (the report's family is these pooled tests)
        tested = replace(pooled, p=float(p_holm[i]), p_tost=float(tost_holm[i]))
        verdict, reason = meta.verdict(tested, min_effect=study.min_effect, factor=scale.factor, unit=unit)
        trend, note = None, ""
        if sizes and set(usable["context"]) <= set(sizes) and len(usable) >= meta.MIN_TREND_SIZES:
            trend = meta.scale_trend([math.log10(sizes[c]) for c in usable["context"]],
                                     usable["estimate"].to_numpy(float), usable["se"].to_numpy(float))
        elif sizes and len(usable) >= 2:
            note = (f"No trend with model size is fitted: {len(usable)} sizes leave a line {len(usable) - 2} residual "
                    f"df; it needs at least {meta.MIN_TREND_SIZES} sizes.")
        out.append(AcrossContexts(claim, primary, frame, pooled, verdict, reason, trend, float(p_holm[i]),
                                  float(tost_holm[i]), note))
    return tuple(out)


def context_family(family: inference.Family, across: Sequence[AcrossContexts]) -> inference.Family:
    """The family of a study with contexts: each contrast's claim is its verdict across contexts (``across``:
    the pooled estimate, its Holm-adjusted tests and verdict), not the equal-weight average over contexts,
    which stays on the claim as a description (:attr:`ablate.stats.inference.Claim.contrast`); interaction terms
    are adjusted together with the pooled tests. One verdict per contrast, wherever the family is read."""
    by = {a.claim: a for a in across}
    terms = [c for c in family.claims if c.term is not None]
    adjusted = inference.holm([by[c.name].pooled.p if c.name in by and by[c.name].pooled is not None else math.nan
                               for c in family.claims if c.term is None] + [t.term.p for t in terms])
    k = len(family.claims) - len(terms)
    out, j = [], 0
    for c in family.claims:
        if c.term is not None:
            out.append(replace(c, p_holm=float(adjusted[k + j]),
                               verdict=inference.DETECTED if adjusted[k + j] < family.alpha else inference.NOT_RESOLVED))
            j += 1
        elif c.name in by:
            a = by[c.name]
            out.append(replace(c, verdict=a.verdict, reason=a.reason, p_holm=a.p_holm, p_tost_holm=a.p_tost_holm,
                               pooled=a.pooled, seeds_needed=math.nan))
        else:
            out.append(c)
    return replace(family, claims=tuple(out), size=int(np.isfinite(np.asarray(adjusted, dtype=float)).sum()))


def judge(study: Study, per_trial: pd.DataFrame, factors: Mapping[str, str], run: inference.StudyInference,
          curves: pd.DataFrame | None, sizes: Mapping[str, float] | None = None) -> inference.StudyInference:
    """The study's verdicts, as every reader prints them: the positive control (did the baseline learn, from
    ``curves``: ``key, arm, seed, step, value``; None: not known) makes an equivalence where it did not
    *uninformative* (:mod:`ablate.report.learning`), and in a study with ``contexts:`` each contrast's claim
    is its verdict across contexts (:func:`across_contexts`, :func:`context_family`; ``run.across``).
    :func:`compute_statistics` and :func:`ablate.report.folder.read_report_pilot` (``ablate.load``, the ledger,
    ``ablate plan --from``) both call it, so a claim has one verdict wherever it appears."""
    from ablate.report import learning

    controls = learning.study_controls(study, curves) if curves is not None else None
    dropped: tuple[str, ...] = ()
    if study.contexts and study.entry is not None and controls:
        lo, hi = study.entry.band
        out = {c.context: c for c in controls if c.n and not lo <= c.start <= hi}
        if out:  # the entry rule: a context whose baseline starts outside the band is never pooled
            where = per_trial[[factors[f] for f in study.contexts]].astype(str).agg(
                lambda r: ",".join(f"{f}={v}" for f, v in zip(study.contexts, r)), axis=1)
            per_trial = per_trial[~where.isin(list(out))]
            run = inference.infer_study(study, per_trial, factors)
            controls = tuple(c for c in controls if c.context not in out)
            dropped = tuple(f"{c.context} (the baseline's step-0 {study.objective.metric} {c.start:.3g} over {c.n} "
                            f"seeds, outside the entry band [{lo:g}, {hi:g}])" for c in out.values())
    family = learning.judged(run.family, controls)
    if not study.contexts:
        return replace(run, family=family)
    terms = [c.term.p for c in run.family.claims if c.term is not None]
    across = learning.judged_across(across_contexts(study, per_trial, factors, sizes, terms=terms), controls)
    return replace(run, family=context_family(family, across), across=across, dropped=dropped)


def compute_statistics(study: Study, results: Results, *, fit_boot: int = 200, seed: int = 0) -> ReportStatistics:
    """Step 1: the statistics of ``results`` under ``study``'s design, objective, ``primary:`` and
    ``min_effect:``.

    Args:
        study: the loaded study.
        results: its results at one budget.
        fit_boot: bootstrap refits of the compute-efficiency fits' intervals.
        seed: the generator of those refits (a report is reproducible).
    """
    obj = study.objective
    scale = Scale.of(obj.metric)
    unit = metric_unit(obj.metric)
    factors = {f: results.columns[f] for f in results.factors}
    levels = {f.name: f.level_names() for f in study.factors}
    baseline = study.baseline_levels
    labels = {a.name: arm_label(a.levels, results.factors) for a in study.arms}
    table = results.table
    per_trial, run = inference.study_inference(study, results)
    # one verdict per claim: the positive control, and a context study's verdicts across contexts (issue 54)
    from ablate.report import learning

    curves = learning.objective_curves(table, obj.metric)
    run = judge(study, per_trial, factors, run, curves, context_sizes(study, table, factors))
    order = {a.name: i for i, a in enumerate(study.arms)}
    arms = in_arm_order(inference.arm_table(per_trial, list(factors.values())), order)
    diagnostics = []
    speed: list[SpeedRatio] = []
    for metric in study.report_metrics:
        if table.empty:
            break
        values = analysis.final_values(table, metric, level_columns=list(factors.values()))
        if values.empty:
            continue
        diagnostics.append(Diagnostic(metric, inference.infer(values, factors, levels, baseline,
                                                              design=study.design_name, value="value",
                                                              contexts=study.contexts)))
        if is_timing(metric):
            speed.extend(speed_ratios(table, metric, factors, levels, baseline))
    value_range = (0.0, 1.0) if unit == "fraction" else None
    points = analysis.compute_points(table, obj.metric) if not table.empty else pd.DataFrame()
    fits = in_arm_order(analysis.compute_efficiency(points, n_boot=fit_boot, seed=seed, value_range=value_range), order) \
        if not points.empty else pd.DataFrame()
    warm, n_problems = warm_start_of(study, results.budget)
    single_eval = obj.summary == "last" and obj.last_n == 1 and obj.metric == "eval/accuracy"
    eval_sd = eval_noise(results.problems, per_trial, run, factors) if single_eval else {}
    mean_acc = float(per_trial["objective"].mean()) if not per_trial.empty else math.nan
    eval_se = (math.sqrt(mean_acc * (1 - mean_acc) / n_problems) if unit == "fraction" and n_problems
               and np.isfinite(mean_acc) else math.nan)
    return ReportStatistics(
        study=results.study, budget=results.budget, description=study.description or "", metric=obj.metric,
        mode=obj.mode, summary_text=summary_text(obj, unit), scale=scale, unit=unit, design=study.design_name,
        factors=factors, levels=levels, baseline=baseline, labels=labels, counts=count_states(results.trials),
        seeds=tuple(sorted(int(s) for s in set(per_trial["seed"]))) if not per_trial.empty else (),
        min_effect=study.min_effect, primary=study.primary, per_trial=per_trial, arms=arms, inference=run,
        diagnostics=tuple(diagnostics), points=points, fits=fits, eval_problems=n_problems, eval_se=eval_se,
        warm_start=warm, seed_rule=results.parent.get("ablate.adaptive_seeds", ""), eval_sd=eval_sd,
        speed=tuple(speed), contexts=run.across, evidence=study.evidence,
        controls=learning.study_controls(study, curves), entry_warning=study.entry_warning,
    )
