"""Build a study's report: read the results, run the statistics, draw the figures, write the pages.

:func:`build_report` is what ``ablate report`` and the end of ``ablate run`` call: results from
MLflow (:func:`ablate.results.load_results`), then :func:`write_report`, then the report folder is
logged as artifacts of the study's parent MLflow run. :func:`write_report` works on any
:class:`ablate.results.Results` (tests give it synthetic ones) and writes into ``out_dir``:

    index.html                 one self-contained page (figures embedded as PNG data URIs)
    README.md                  the same findings in Markdown (figures as the PNG files beside it)
    results.csv                one row per trial: arm, seed, levels, state, objective, final metrics
    tidy.csv.gz                the full tidy table (trial x step x metric), gzip-compressed
    <figure>.png, <figure>.svg every figure
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate import analysis
from ablate.report import figures as figs
from ablate.results import Results, count_states

#: Default folder of reports: ``reports/<study>/``.
REPORTS_DIR = "reports"
#: Sample completions shown per arm.
SAMPLES_PER_ARM = 3
#: Level of significance the sentences use.
ALPHA = 0.05


# ------------------------------------------------------------------------------------------ data


@dataclass
class Table:
    """A table of the report: a title, a caption and a frame of already formatted strings."""

    title: str
    frame: pd.DataFrame
    caption: str = ""
    anchor: str = ""


@dataclass
class FigureRef:
    """A figure of the report and its files (``png`` is embedded in the HTML page)."""

    name: str
    title: str
    caption: str
    files: dict[str, Path]


@dataclass
class ReportData:
    """Everything the HTML and Markdown renderers show (strings are raw: the renderers escape them)."""

    study: str
    description: str
    budget: str
    objective: str
    generated: str
    counts: dict[str, int]
    findings: list[str] = field(default_factory=list)
    interaction_findings: list[str] = field(default_factory=list)
    compute_findings: list[str] = field(default_factory=list)
    secondary_findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[FigureRef] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    missing: Table | None = None
    samples: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    design: Table | None = None
    alias_lines: list[str] = field(default_factory=list)
    study_yaml: str = ""
    baseline_config: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """The statistics of a report (see :func:`analyse`) and the findings phrased from them."""

    data: ReportData
    per_trial: pd.DataFrame
    arms: pd.DataFrame
    comparisons: pd.DataFrame
    anova: pd.DataFrame | None
    points: pd.DataFrame
    fits: pd.DataFrame
    factors: dict[str, str]
    levels: dict[str, list[str]]
    labels: dict[str, str]
    unit: str | None


# ------------------------------------------------------------------------------------- formatting


@functools.lru_cache(maxsize=1)
def _glossary() -> list[tuple[re.Pattern[str], str, str]]:
    try:
        from ablate.metrics import METRICS
    except Exception:  # noqa: BLE001 - the report must not fail on the trainer's imports
        return []
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


def num(x: Any, digits: int = 3) -> str:
    """A number for people: ``digits`` significant digits, ``–`` for NaN / None."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "∞" if isinstance(x, float) and math.isinf(x) and x > 0 else "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}g}"


def signed(x: float, digits: int = 3) -> str:
    """``+3.1`` / ``-0.42``."""
    return f"{x:+.{digits}g}" if math.isfinite(x) else "–"


def p_text(p: float) -> str:
    """``p = 0.021``, ``p < 0.001``, ``p = –``."""
    if not math.isfinite(p):
        return "p = –"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def ci_text(lo: float, hi: float, scale: float = 1.0) -> str:
    """``[0.4, 5.9]``."""
    return f"[{num(lo * scale)}, {num(hi * scale)}]"


def arm_label(levels: Mapping[str, str], factors: Sequence[str]) -> str:
    """An arm's short label: its level names joined by `` / `` in factor order."""
    return " / ".join(str(levels[f]) for f in factors)


# --------------------------------------------------------------------------------------- findings


def comparison_sentence(row: Mapping[str, Any], scale: Scale, metric: str, mode: str, neutral: bool = False) -> str:
    """One comparison as a sentence with its numbers, e.g. ``loss_norm: token vs sequence: +3.1
    points [0.4, 5.9], p = 0.02 (Holm) ...``; "no detectable effect" when the CI covers zero;
    "inconclusive" when the CI excludes zero but the Holm-corrected p does not agree. ``neutral``:
    a detected difference reads "higher" / "lower" instead of "better" / "worse" (diagnostics)."""
    head = f"{row['factor']}: {row['level']} vs {row['baseline']}"
    unit = f" {scale.unit}" if scale.unit else ""
    diff = f"{signed(row['diff'] * scale.factor)}{unit}"
    n = int(row["n_seeds"])
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if row["diff"] == 0 and row["ci_low"] == 0 and row["ci_high"] == 0:
        return f"{head}: no detectable effect: {metric} was identical on all {seeds}."
    if not math.isfinite(row["ci_low"]):
        return (f"{head}: {diff} in {metric} from {seeds}: no interval can be computed from one seed; "
                "run more seeds before reading anything into it.")
    ci = ci_text(row["ci_low"], row["ci_high"], scale.factor)
    stats_text = (f"{p_text(row['p_holm'])} (Holm), P(improvement) = {num(row['prob_improvement'], 2)}, "
                  f"Hedges' g = {num(row['hedges_g'], 2)}, {seeds}")
    if row["detected"]:
        if neutral:
            direction = "higher" if row["diff"] > 0 else "lower"
        else:
            direction = "better" if row["improved"] else "worse"
        return f"{head}: {diff} {ci} in {metric} ({direction}), {stats_text}."
    need = row["seeds_needed"]
    if math.isfinite(need) and need > n:
        more = f"; about {int(need)} seeds would resolve a difference of this size"
    elif not math.isfinite(need):
        more = f"; not resolvable with up to {analysis.MAX_SEEDS} seeds at this size"
    else:
        more = ""
    if row["ci_excludes_zero"]:
        return (f"{head}: inconclusive: {diff} {ci} in {metric}; the interval excludes 0 but the difference is not "
                f"significant after Holm's correction ({stats_text}){more}.")
    return f"{head}: no detectable effect ({diff} {ci} in {metric}, {stats_text}){more}."


def interaction_sentences(table: pd.DataFrame) -> list[str]:
    """Sentences on the two-factor interactions of an ANOVA table (Holm across them)."""
    inter = table[(table["kind"] == "interaction") & np.isfinite(table["p"].astype(float))]
    if inter.empty:
        untestable = table[(table["kind"] == "interaction")]
        if untestable.empty:
            return []
        return ["Two-factor interactions could not be tested: " + "; ".join(
            f"{r.term}: {r.note}" for r in untestable.itertuples() if r.note) + "."]
    adjusted = analysis.holm(inter["p"].to_numpy(float))
    res = table[table["kind"] == "residual"].iloc[0]
    out = []
    for (_, r), p_adj in zip(inter.iterrows(), adjusted):
        term = r["term"].replace(":", " × ")
        fstat = f"F({int(r['df'])}, {int(res['df'])}) = {num(r['F'])}"
        alias = f" (aliased with {r['aliases']})" if r["aliases"] else ""
        if p_adj < ALPHA:
            out.append(f"interaction {term}{alias}: {fstat}, {p_text(p_adj)} (Holm over {len(inter)}): the effect of "
                       "one factor depends on the level of the other; read the interaction plot.")
        else:
            out.append(f"interaction {term}{alias}: no detectable interaction ({fstat}, {p_text(p_adj)} (Holm over "
                       f"{len(inter)})).")
    return out


def compute_sentences(fits: pd.DataFrame, labels: Mapping[str, str], scale: Scale) -> list[str]:
    """One sentence per arm's saturating fit (or why it failed)."""
    out = []
    unit = f" {scale.unit}" if scale.unit else ""
    for r in fits.itertuples():
        name = labels.get(r.arm, r.arm)
        if not r.ok:
            out.append(f"{name}: no compute-efficiency fit ({r.reason}).")
            continue
        extra = "; C_mid lies beyond the compute used, so A is an extrapolation" if r.extrapolated else ""
        out.append(
            f"{name}: asymptote A = {num(r.a * scale.factor)}{unit} {ci_text(r.a_low, r.a_high, scale.factor)}, "
            f"efficiency exponent B = {num(r.b)} {ci_text(r.b_low, r.b_high)}, midpoint C_mid = {num(r.c_mid)} tokens, "
            f"from R0 = {num(r.r0 * scale.factor)}{unit} (R² = {num(r.r2, 2)}){extra}."
        )
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


def _design_table(study: Any, results: Results) -> Table:
    done = results.trials.groupby("arm")["state"].apply(lambda s: int((s == "done").sum())).to_dict()
    rows = []
    for arm in study.arms:
        rows.append({"arm": arm_label(arm.levels, results.factors), **{f: arm.levels[f] for f in results.factors},
                     "baseline": "yes" if arm.baseline else "", "seeds done": f"{done.get(arm.name, 0)}/{len(study.seeds)}"})
    for arm in getattr(study, "excluded", ()):
        rows.append({"arm": arm_label(arm.levels, results.factors), **{f: arm.levels[f] for f in results.factors},
                     "baseline": "excluded", "seeds done": "–"})
    frame = pd.DataFrame(rows, columns=["arm", *results.factors, "baseline", "seeds done"])
    caption = (f"design: {study.design_name}; seeds: {', '.join(map(str, study.seeds))}; "
               f"{len(study.arms)} arms × {len(study.seeds)} seeds = {study.n_trials} trials")
    return Table("Design", frame, caption, "design")


def _samples(results: Results, labels: Mapping[str, str]) -> list[tuple[str, pd.DataFrame]]:
    out = []
    done = results.trials[results.trials["state"] == "done"].sort_values(["seed"], kind="stable")
    for arm, g in done.groupby("arm", sort=False):
        for key, seed in zip(g["key"], g["seed"]):
            rows = results.samples.get(key)
            if rows:
                frame = pd.DataFrame(rows[:SAMPLES_PER_ARM])
                if "correct" in frame:
                    frame["correct"] = frame["correct"].map(lambda v: "yes" if v else "no")
                for c in frame.columns:
                    if c.startswith("reward/"):
                        frame[c] = frame[c].map(lambda v: num(v) if isinstance(v, (int, float)) else str(v))
                out.append((f"{labels.get(arm, arm)} (seed {seed})", frame.astype(str)))
                break
    return out


def _versions(results: Results) -> dict[str, str]:
    tags = dict(results.parent)
    if not any(k.startswith("ablate.version.") for k in tags):
        from ablate.tracking import code_version

        tags.update(code_version())
    out = {k.removeprefix("ablate.version."): v for k, v in sorted(tags.items()) if k.startswith("ablate.version.")}
    if "ablate.git_commit" in tags:
        out["git commit"] = tags["ablate.git_commit"] + (" (with uncommitted changes)"
                                                          if tags.get("ablate.git_dirty") == "true" else "")
    return out


def secondary_comparisons(study: Any, table: pd.DataFrame, factors: Mapping[str, str], baseline: Mapping[str, str],
                          levels: Mapping[str, Sequence[str]], *, n_boot: int, seed: int
                          ) -> list[tuple[str, pd.DataFrame]]:
    """Level-vs-baseline comparisons of each of the study's ``report.metrics`` (per trial: the mean of
    its last 10% of logged values), as ``(metric, comparisons)``; metrics no trial logged are left out."""
    out = []
    for metric in getattr(study, "report_metrics", ()):
        if table.empty:
            break
        values = analysis.final_values(table, metric, level_columns=list(factors.values()))
        if values.empty:
            continue
        frame = analysis.compare_levels(values, factors, baseline, levels=levels, mode="max", value="value",
                                        n_boot=n_boot, seed=seed)
        if not frame.empty:
            out.append((metric, frame))
    return out


def provenance(study: Any, results: Results) -> dict[str, str]:
    """What produced the results, for the top of the report: the command line of the study's last
    ``ablate run`` (tag ``ablate.command``) and the git commit it ran at."""
    tags = dict(results.parent)
    out: dict[str, str] = {}
    command = tags.get("ablate.command")
    out["produced by"] = command or (f"ablate run {study.path} --budget {results.budget} "
                                     "(the exact command was not recorded)")
    commit = tags.get("ablate.git_commit")
    if commit:
        out["at commit"] = commit + (" (with uncommitted changes)" if tags.get("ablate.git_dirty") == "true" else "")
    return out


def trial_summary(results: Results, per_trial: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: ``key, arm, seed, <levels>, state, objective`` and the last logged value of
    every metric (the content of ``results.csv``)."""
    base = results.trials.drop(columns=["error"]).merge(per_trial[["key", "objective"]], on="key", how="left")
    if results.table.empty:
        return base
    last = (results.table.sort_values("step", kind="stable").groupby(["key", "metric"])["value"].last()
            .unstack("metric").reset_index())
    return base.merge(last, on="key", how="left")


# -------------------------------------------------------------------------------------------- build


def analyse(study: Any, results: Results, *, n_boot: int = analysis.DEFAULT_N_BOOT, fit_boot: int = 200,
            seed: int = 0) -> Analysis:
    """Run every statistic of the report on ``results`` and phrase the findings (no figure, no file).

    Args:
        study: the loaded Study (factors, baseline, objective, design, file).
        results: its results (:func:`ablate.results.load_results`, or built by hand).
        n_boot: bootstrap resamples of the tables' CIs; fit_boot: of the compute fits.
        seed: the bootstrap generator's seed (a report is reproducible).
    """
    obj = study.objective
    scale = Scale.of(obj.metric)
    unit = metric_unit(obj.metric)
    factors = {f: results.columns[f] for f in results.factors}
    levels = {f.name: f.level_names() for f in study.factors}
    baseline = dict(study.baseline) if study.baseline else {f.name: f.levels[0].name for f in study.factors}
    labels = {a.name: arm_label(a.levels, results.factors) for a in study.arms}
    legend_title = " / ".join(results.factors)
    table = results.table
    per_trial = analysis.trial_objectives(table, obj.metric, obj.summary, obj.last_n, list(factors.values()))
    counts = count_states(results.trials)
    summary_line = (f"{obj.mode}imize {obj.metric} ({unit or 'unit unknown'}), summarised per trial as "
                    + {"last": f"the mean of its last {obj.last_n} logged value(s)", "mean": "the mean over training",
                       "max": "its maximum", "min": "its minimum",
                       "auc": "the area under its curve divided by the steps"}[obj.summary])
    data = ReportData(
        study=results.study, description=study.description or "", budget=results.budget, objective=summary_line,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), counts=counts,
        notes=list(results.notes),
    )
    if scale.factor != 1:
        data.notes.append(f"{obj.metric} is a fraction; differences are shown in percentage points (× 100).")

    # ---- statistics
    comparisons = analysis.compare_levels(per_trial, factors, baseline, levels=levels, mode=obj.mode,
                                          n_boot=n_boot, seed=seed) if not per_trial.empty else pd.DataFrame()
    arm_order = {a.name: i for i, a in enumerate(study.arms)}

    def in_design_order(frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty:
            return frame
        return frame.sort_values("arm", key=lambda s: s.map(arm_order).fillna(len(arm_order)),
                                 kind="stable").reset_index(drop=True)

    arms = in_design_order(analysis.arm_summary(per_trial, list(factors.values()), n_boot=n_boot, seed=seed))
    if per_trial.empty:
        data.findings.append("No trial has finished yet: there is nothing to compare.")
    for _, row in comparisons.iterrows():
        data.findings.append(comparison_sentence(row, scale, obj.metric, obj.mode))
    aov = analysis.anova(per_trial, factors, levels=levels, aliasing=study.aliasing) if len(per_trial) > 1 else None
    if aov is not None and len(factors) > 1:
        data.interaction_findings = interaction_sentences(aov)
    points = analysis.compute_points(table, obj.metric) if not table.empty else pd.DataFrame()
    fits = in_design_order(analysis.compute_efficiency(points, n_boot=fit_boot, seed=seed)) if not points.empty \
        else pd.DataFrame()
    if not fits.empty:
        data.compute_findings = compute_sentences(fits, labels, scale)

    secondary = secondary_comparisons(study, table, factors, baseline, levels, n_boot=n_boot, seed=seed)
    for metric, frame in secondary:
        data.secondary_findings.extend(comparison_sentence(row, Scale.of(metric), metric, "max", neutral=True)
                                       for _, row in frame.iterrows())

    # ---- tables
    if not arms.empty:
        arms_view = arms.assign(arm=arms["arm"].map(lambda a: labels.get(a, a)))
        data.tables.append(Table(
            "Objective per arm", _fmt_frame(arms_view, {"arm": f"arm ({legend_title})", "n_seeds": "seeds",
                                                        "mean": "mean", "ci_low": "CI low", "ci_high": "CI high",
                                                        "iqm": "IQM", "iqm_low": "IQM CI low", "iqm_high": "IQM CI high",
                                                        "std": "std"},
                                        scaled=["mean", "ci_low", "ci_high", "iqm", "iqm_low", "iqm_high", "std"],
                                        scale=scale.factor),
            f"{obj.metric} per arm in {scale.unit or 'its units'}: mean, interquartile mean (IQM) and their 95% "
            "bootstrap CIs over seeds.", "arms"))
    if not comparisons.empty:
        data.tables.append(Table(
            "Levels against the baseline level", _fmt_frame(
                comparisons, {"factor": "factor", "level": "level", "baseline": "baseline", "n_seeds": "seeds",
                              "method": "pairing", "diff": "difference", "ci_low": "CI low", "ci_high": "CI high",
                              "p": "p", "p_holm": "p (Holm)", "prob_improvement": "P(improvement)",
                              "hedges_g": "Hedges' g", "seeds_needed": "seeds needed"},
                scaled=["diff", "ci_low", "ci_high"], scale=scale.factor, digits={"p": 2, "p_holm": 2}),
            "Difference level − baseline (paired by seed; matched: against the arm that differs only in this "
            "factor; marginal: mean over arms) with its 95% paired bootstrap CI, the paired t-test p-value and "
            "its Holm correction over all comparisons, the probability that a seed of the level beats a seed of "
            "the baseline, Hedges' g, and the seeds a paired t-test would need for 80% power at this difference.",
            "comparisons"))
        marg = []
        for f, col in factors.items():
            m = analysis.marginal_means(per_trial, col, levels[f], n_boot=n_boot, seed=seed)
            marg.append(m.assign(factor=f))
        mm = pd.concat(marg, ignore_index=True)
        data.tables.append(Table("Marginal means per level", _fmt_frame(
            mm, {"factor": "factor", "level": "level", "n_seeds": "seeds", "mean": "mean", "ci_low": "CI low",
                 "ci_high": "CI high"}, scaled=["mean", "ci_low", "ci_high"], scale=scale.factor),
            "Mean over seeds of each seed's mean over the arms with that level, with 95% CIs.", "marginal"))
    if secondary:
        frame = pd.concat([f.assign(metric=m, **{c: f[c] * Scale.of(m).factor for c in ("diff", "ci_low", "ci_high")})
                           for m, f in secondary], ignore_index=True)
        data.tables.append(Table("Secondary metrics against the baseline level", _fmt_frame(
            frame, {"metric": "metric", "factor": "factor", "level": "level", "baseline": "baseline",
                    "n_seeds": "seeds", "diff": "difference", "ci_low": "CI low", "ci_high": "CI high",
                    "p_holm": "p (Holm)", "hedges_g": "Hedges' g"}, digits={"p_holm": 2}),
            "The study's report.metrics, each summarised per trial as the mean of its last 10% of logged values; "
            "difference level − baseline (fractions in percentage points) with its 95% paired bootstrap CI; Holm's "
            "correction runs within each metric.", "secondary"))
    if aov is not None:
        data.tables.append(Table("Analysis of variance", _fmt_frame(
            aov, {"term": "term", "kind": "kind", "df": "df", "sum_sq": "sum of squares", "mean_sq": "mean square",
                  "F": "F", "p": "p", "aliases": "aliases", "note": "note"}, digits={"p": 2}),
            "Linear model with seeds as blocks, main effects and two-factor interactions (type III sums of "
            "squares, in the objective's own units squared); p-values are not corrected here.", "anova"))
    if not fits.empty:
        fv = fits.assign(arm=fits["arm"].map(lambda a: labels.get(a, a)))
        fv["status"] = [("fitted" if ok else f"failed: {reason}") for ok, reason in zip(fv["ok"], fv["reason"])]
        data.tables.append(Table("Compute efficiency (saturating fits)", _fmt_frame(
            fv, {"arm": f"arm ({legend_title})", "status": "fit", "r0": "R0", "a": "A", "a_low": "A low",
                 "a_high": "A high", "b": "B", "b_low": "B low", "b_high": "B high", "c_mid": "C_mid (tokens)",
                 "r2": "R²", "n_seeds": "seeds"}, scaled=["r0", "a", "a_low", "a_high"], scale=scale.factor),
            "R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) fitted to the objective against generated tokens (Khatri "
            "et al. 2025), 95% bootstrap CIs over seeds for A and B.", "compute"))
    missing = results.missing
    if not missing.empty:
        mv = missing.assign(arm=missing["arm"].map(lambda a: labels.get(a, a)))
        data.missing = Table("Missing trials", mv[["arm", "seed", "state", "key", "error"]].astype(str).reset_index(drop=True),
                             "Trials of the design without results; run the study again to complete them.", "missing")
    data.design = _design_table(study, results)
    if study.aliasing is not None:
        data.alias_lines = list(study.aliasing.lines())
    data.samples = _samples(results, labels)
    try:
        data.study_yaml = Path(study.path).read_text(encoding="utf-8")
    except OSError:
        data.study_yaml = ""
    baseline_arm = next((a for a in study.arms if a.baseline), study.arms[0] if study.arms else None)
    if baseline_arm is not None:
        data.baseline_config = (f"# arm {baseline_arm.name} at budget {results.budget}\n"
                                + study.config(baseline_arm, results.budget).to_yaml())
    data.versions = _versions(results)
    data.provenance = provenance(study, results)
    return Analysis(data=data, per_trial=per_trial, arms=arms, comparisons=comparisons, anova=aov, points=points,
                    fits=fits, factors=factors, levels=levels, labels=labels, unit=unit)


def write_report(study: Any, results: Results, out_dir: str | Path, *, n_boot: int = analysis.DEFAULT_N_BOOT,
                 fit_boot: int = 200, figure_boot: int = 1000, formats: Sequence[str] = ("png", "svg"),
                 seed: int = 0) -> Path:
    """Analyse ``results`` (:func:`analyse`), draw the figures and write the report files into
    ``out_dir`` (created; figures of an earlier report there are removed).

    Args:
        study, results, n_boot, fit_boot, seed: as :func:`analyse`.
        out_dir: the report folder.
        figure_boot: bootstrap resamples of the figures' CIs.
        formats: figure file formats (``png`` is required: the pages show it).

    Returns:
        The path of ``index.html``.
    """
    from ablate.report.html import render_html
    from ablate.report.markdown import render_markdown

    if "png" not in formats:
        raise ValueError(f"formats must include 'png' (the pages embed it), got {list(formats)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        if old.is_file() and old.suffix in (".png", ".svg"):
            old.unlink()
    an = analyse(study, results, n_boot=n_boot, fit_boot=fit_boot, seed=seed)
    data, per_trial, arms, points, fits = an.data, an.per_trial, an.arms, an.points, an.fits
    factors, levels, labels, unit = an.factors, an.levels, an.labels, an.unit
    obj = study.objective
    legend_title = " / ".join(results.factors)
    table = results.table

    # ---- figures
    def add(name: str, title: str, caption: str, draw: Callable[[], Any], needs: str = "") -> None:
        """Draw and save one figure; a figure without data, or one that fails, becomes a note."""
        try:
            fig = draw()
            if fig is not None:
                data.figures.append(FigureRef(name, title, caption, figs.save(fig, out, name, formats)))
        except Exception as exc:  # noqa: BLE001 - one figure must not cost the whole report
            data.notes.append(f"the '{title}' figure could not be drawn: {type(exc).__name__}: {exc}")
            return
        if fig is None and needs:
            data.notes.append(f"no '{title}' figure: {needs}")

    if not table.empty:
        add("learning_curves", "Learning curves", f"{obj.metric} over training per factor; one line per level "
            "(mean over seeds of each seed's mean over the arms with that level), 95% CI band over seeds.",
            lambda: figs.learning_curves(table, obj.metric, factors, levels=levels, unit=unit, n_boot=figure_boot))
        add("final_by_level", "Objective per level", "The trial objective per level with 95% CIs over seeds.",
            lambda: figs.final_by_level(per_trial, factors, metric=obj.metric, levels=levels, unit=unit,
                                        n_boot=figure_boot))
        add("interactions", "Interactions", "Cell means of each pair of factors; lines that are not parallel show "
            "an interaction.", lambda: figs.interaction_plots(per_trial, factors, metric=obj.metric, levels=levels,
                                                              unit=unit, n_boot=figure_boot))
        add("arm_heatmap", "Arm means", "Mean objective of every arm.",
            lambda: figs.arm_heatmap(arms, factors, metric=obj.metric, unit=unit))
        add("response_length", "Response length", "Mean length of correct and of incorrect completions over "
            "training; a level whose incorrect completions grow longer shows the length bias of per-sequence "
            "normalization (Liu et al. 2025, Dr. GRPO).",
            lambda: figs.response_length(table, factors, levels=levels, n_boot=figure_boot),
            needs="the trials logged no response/length_correct or response/length_incorrect")
        kl = analysis.final_values(table, figs.KL_METRIC)
        rw = analysis.final_values(table, figs.REWARD_METRIC)
        finals = None
        if not kl.empty and not rw.empty:
            finals = kl.rename(columns={"value": "kl"}).merge(rw[["key", "value"]].rename(columns={"value": "reward"}),
                                                             on="key")
        add("reward_vs_kl", "Reward against KL", "Final total reward against final KL to the reference policy "
            "(means of the last 10% of steps; 95% CIs over seeds); dashed: the Pareto front.",
            lambda: figs.reward_vs_kl(finals, labels, legend_title=legend_title, n_boot=figure_boot)
            if finals is not None else None,
            needs="the trials logged no " + " and no ".join(
                m for m, f in ((figs.KL_METRIC, kl), (figs.REWARD_METRIC, rw)) if f.empty))
        add("diagnostics", "Diagnostics", "Policy entropy, clipped fraction of ratios and gradient norm over "
            "training.", lambda: figs.diagnostics(table, factors, levels=levels, n_boot=figure_boot),
            needs="the trials logged no policy/entropy, policy/clip_frac_* or optim/grad_norm")
        add("compute_efficiency", "Compute efficiency", "The objective against generated training tokens per "
            "arm with its saturating fit (dashed; none where the fit failed).",
            lambda: figs.compute_efficiency(points, fits, labels, metric=obj.metric, unit=unit,
                                            legend_title=legend_title, n_boot=figure_boot),
            needs=f"no trial logged {obj.metric} together with compute/tokens")

    # ---- files
    summary = trial_summary(results, per_trial)
    summary.to_csv(out / "results.csv", index=False)
    table.to_csv(out / "tidy.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    data.files = ["results.csv", "tidy.csv.gz", *[p.name for f in data.figures for p in f.files.values()]]
    (out / "README.md").write_text(render_markdown(data), encoding="utf-8")
    index = out / "index.html"
    index.write_text(render_html(data), encoding="utf-8")
    return index


def default_out_dir(study_name: str) -> Path:
    """``reports/<study>/``."""
    return Path(REPORTS_DIR) / study_name


def build_report(study: Any, *, budget: str = "default", tracking_uri: str | None = None,
                 out_dir: str | Path | None = None, log_artifacts: bool = True, **options: Any) -> Path:
    """Read a study's results from MLflow, write its report, and log the report to the study's parent run.

    Args:
        study: the loaded :class:`ablate.study.Study`.
        budget: the budget whose trials to report.
        tracking_uri: the MLflow tracking URI (default: ``$MLFLOW_TRACKING_URI``, else sqlite:///mlflow.db).
        out_dir: the report folder (default ``reports/<study>/``).
        log_artifacts: upload the report folder to the parent run (under ``report/``).
        options: passed to :func:`write_report` (``n_boot``, ``formats`` ...).

    Returns:
        The path of ``index.html``.

    Raises:
        AblateError: the study never ran at ``budget`` in that tracking store.
    """
    from ablate.errors import AblateError
    from ablate.results import load_results
    from ablate.tracking import Tracker, log_report

    folder = Path(out_dir) if out_dir is not None else default_out_dir(study.name)
    results = load_results(study, budget, tracking_uri=tracking_uri, cache_dir=folder / ".cache")
    if not results.parent:
        raise AblateError(
            f"study {study.name!r} has no runs at budget {budget!r} in MLflow {Tracker(tracking_uri).uri}; run "
            f"`ablate run {study.path} --budget {budget}` first, or pass the --tracking-uri / --budget it ran with"
        )
    index = write_report(study, results, folder, **options)
    if log_artifacts:
        tracker = Tracker(tracking_uri)
        parent = tracker.find_parent(study.name, budget)
        if parent is not None:
            log_report(tracker, parent, folder)
    return index
