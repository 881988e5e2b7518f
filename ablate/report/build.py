"""Build a study's report in three steps, one typed value between each:

1. statistics (:func:`ablate.report.statistics.compute_statistics` -> ``ReportStatistics``),
2. findings (:func:`ablate.report.findings.phrase` -> ``Findings``),
3. rendering (here): the figures are drawn, one :class:`ablate.report.page.ReportPage` is built and
   rendered to HTML and Markdown.

:func:`write_report` works on any :class:`ablate.tracking.results.Results` (tests give it synthetic ones) and
writes into ``out_dir``:

    index.html                 one self-contained page (figures embedded as PNG data URIs)
    README.md                  the same findings in Markdown (figures as the PNG files beside it); both open
                               with the answer and the positive control under it: did the baseline learn
                               (:mod:`ablate.report.control`)
    results.csv                one row per trial: arm, seed, levels, state, objective, final metrics
    curves.csv                 the objective metric's history per trial (key, arm, seed, step, value): small,
                               committed with the report, so that another summary of it can be re-analysed
    tidy.csv.gz                the full tidy table (trial x step x metric), gzip-compressed
    problems.csv.gz            per-problem evaluation records, when the trials logged them
    samples.json               the sample completions shown, per trial key
    <figure>.png               every figure (and <figure>.svg with ``formats`` / ``ablate report --svg``)

The pages link the files a committed report keeps; :data:`ablate.report.page.NOT_COMMITTED` (tidy.csv.gz,
problems.csv.gz, samples.json) and the SVG copies, which the repository's .gitignore leaves out of a
committed report, are named without a link, with where else they are (the study's MLflow parent run).

:func:`build_report` reads the results from MLflow first; uploading the report to the study's
parent run is the caller's job (:func:`ablate.tracking.log_report`).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ablate.errors import UnloggedObjectiveError
from ablate.metrics import content_fingerprint
from ablate.paths import report_dir_for
from ablate.report import control, verdicts
from ablate.report import figures as figs
from ablate.report.control import CURVES_FILE, objective_curves
from ablate.report.findings import Findings, num, phrase
from ablate.report.folder import TUNED_FILE
from ablate.report.html import render_html
from ablate.report.ledger import report_block, spliced_report
from ablate.report.markdown import render_markdown
from ablate.report.page import FigureRef, ReportPage, Table, split_files
from ablate.report.statistics import ReportStatistics, arm_label, compute_statistics
from ablate.stats import analysis
from ablate.study.model import DEFAULT_BUDGET
from ablate.tracking.results import Results

if TYPE_CHECKING:
    from ablate.study import Study
    from ablate.study.plan import Plan

#: Sample completions shown per arm.
SAMPLES_PER_ARM = 3


def _design_table(study: Study, results: Results) -> Table:
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


def commit_text(tags: Mapping[str, str]) -> str:
    """The git commit that code-version ``tags`` record, as reports print it: ``<sha>`` plus
    `` (with uncommitted changes)`` when the checkout was dirty, which names the diff's hash when the run
    logged the diff (tag ``ablate.git_diff_sha256``): `` (with uncommitted changes, diff sha256
    <12 hex digits> logged as diff.patch)``; ``""`` without a commit. ``ablate.report.folder.parent_tags``
    reads it back."""
    commit = tags.get("ablate.git_commit", "")
    if not commit:
        return ""
    if tags.get("ablate.git_dirty") != "true":
        return commit
    diff = tags.get("ablate.git_diff_sha256", "")
    return commit + (f" (with uncommitted changes, diff sha256 {diff} logged as diff.patch)" if diff
                     else " (with uncommitted changes)")


def _versions(results: Results) -> dict[str, str]:
    tags = dict(results.parent)
    if not any(k.startswith("ablate.version.") for k in tags):
        from ablate.tracking import code_version

        tags.update(code_version())
    out = {k.removeprefix("ablate.version."): v for k, v in sorted(tags.items()) if k.startswith("ablate.version.")}
    # the processor: float rounding, so a trajectory, can differ between processor models
    out.update({k.removeprefix("ablate."): v for k, v in sorted(tags.items()) if k.startswith("ablate.machine.")})
    if "ablate.git_commit" in tags:
        out["git commit"] = commit_text(tags)
    return out


def provenance(study: Study, results: Results) -> dict[str, str]:
    """What produced the results, for the top of the report: the command line of the study's last
    ``ablate run`` (tag ``ablate.command``) and the git commit it ran at."""
    tags = dict(results.parent)
    out: dict[str, str] = {}
    command = tags.get("ablate.command")
    out["produced by"] = command or (f"ablate run {study.path} --budget {results.budget} "
                                     "(the exact command was not recorded)")
    if tags.get("ablate.git_commit"):
        out["at commit"] = commit_text(tags)
    if tags.get("ablate.rendered_by"):
        out["analysed by"] = tags["ablate.rendered_by"]
    trials = trials_provenance(results.trials)
    if trials:
        out["trials"] = trials
    return out


def trials_provenance(trials: pd.DataFrame) -> str:
    """The processors and code commits the finished trials ran on, with their counts (``results.csv``'s
    ``cpu`` and ``commit`` columns); ``""`` when the trials do not say (logged before those columns)."""
    from collections import Counter

    if "cpu" not in trials or "commit" not in trials:
        return ""
    done = trials[trials["state"] == "done"]
    parts = []
    for column, what in (("cpu", "ran on"), ("commit", "at commit")):
        counts = Counter(str(v) for v in done[column] if isinstance(v, str) and v)
        if counts:
            parts.append(f"{what} " + "; ".join(f"{k} ({n} trial{'s' if n != 1 else ''})"
                                                for k, n in sorted(counts.items())))
    return ", ".join(parts)


def trial_summary(results: Results, per_trial: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: ``key, arm, seed, <levels>, state, objective`` and the last logged value of
    every metric (the content of ``results.csv``)."""
    base = results.trials.drop(columns=["error"]).merge(per_trial[["key", "objective"]], on="key", how="left")
    if results.table.empty:
        return base
    last = (results.table.sort_values("step", kind="stable").groupby(["key", "metric"])["value"].last()
            .unstack("metric").reset_index())
    last.columns.name = None
    metrics = [c for c in last.columns if c != "key"]
    last.insert(1, "fingerprint", [content_fingerprint(row) for row in last[metrics].to_dict("records")])
    return base.merge(last, on="key", how="left")


# -------------------------------------------------------------------------------------------- figures


def _kl_and_reward(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """Each trial's final KL to the reference and final total reward (:func:`ablate.stats.analysis.final_values`),
    and the two merged by trial (None when either is missing)."""
    kl = analysis.final_values(table, figs.KL_METRIC)
    rw = analysis.final_values(table, figs.REWARD_METRIC)
    if kl.empty or rw.empty:
        return kl, rw, None
    return kl, rw, kl.rename(columns={"value": "kl"}).merge(rw[["key", "value"]].rename(columns={"value": "reward"}),
                                                            on="key")


def draw_figures(stats: ReportStatistics, results: Results, out: Path,
                 formats: Sequence[str] = ("png", "svg")) -> tuple[list[FigureRef], list[str]]:
    """Step 3a: draw every figure of ``stats`` into ``out``; returns the figures and notes (a figure
    without data, or one that failed, becomes a note, never a failed report)."""
    figures: list[FigureRef] = []
    notes: list[str] = []
    table = results.table
    factors, levels, unit, metric = stats.factors, stats.levels, stats.unit, stats.metric
    several = len(factors) > 1

    def add(name: str, title: str, caption: str, draw: Callable[[], Any], needs: str = "") -> None:
        try:
            fig = draw()
            if fig is not None:
                figures.append(FigureRef(name, title, caption, figs.save(fig, out, name, formats)))
        except Exception as exc:  # noqa: BLE001 - one figure must not cost the whole report
            notes.append(f"the '{title}' figure could not be drawn: {type(exc).__name__}: {exc}")
            return
        if fig is None and needs:
            notes.append(f"no '{title}' figure: {needs}")

    if table.empty:
        return figures, notes
    fam = stats.inference.family
    add("claims", "Claims", verdicts.claims_caption(fam.method), lambda: verdicts.draw_claims(stats))
    for i, a in enumerate(c for c in stats.contexts if c.pooled is not None):  # one forest per pooled contrast
        pooled = {k: getattr(a.pooled, k) for k in ("estimate", "ci_low", "ci_high", "pi_low", "pi_high", "tau", "i2")}
        add(f"contexts_{i + 1}", f"{a.claim} across contexts", "One row per context: its estimate (square) and 95% "
            "paired-t interval over its seeds; the pooled random-effects estimate (diamond: its 95% interval), the "
            "95% prediction interval for a new context (thin line) and the ±min_effect band (grey); on the right, the "
            "baseline's learning gain in each context (the positive control: a hollow square where it did not learn).",
            lambda a=a, pooled=pooled: figs.context_forest(a.claim, a.contexts, pooled, verdict=a.verdict,
                                                           scale=stats.scale.factor, unit=stats.scale.unit,
                                                           min_effect=stats.min_effect, method=a.pooled.method,
                                                           gains={c.context: c for c in stats.controls}))
    avg = " Each seed's value at a level is its mean over the arms with that level (averaged over the other " \
          "factors)." if several else ""
    add("paired_seeds", "Objective per level, seed by seed", "The trial objective per level: grey lines join each "
        "seed's values (paired), blue diamonds the mean over seeds with its 95% t-interval (none below 3 seeds)."
        + avg, lambda: figs.paired_seed_lines(stats.per_trial, factors, metric=metric, levels=levels, unit=unit))
    add("learning_curves", "Learning curves", f"{metric} over training per factor; one line per level (mean over "
        "seeds of each seed's mean over the arms with that level), with a 95% t-band over seeds from 3 seeds on, "
        "else one line per seed." + avg,
        lambda: figs.learning_curves(table, metric, factors, levels=levels, unit=unit))
    add("interactions", "Interactions", "Cell means of each pair of factors (over seeds"
        + (" and the other factors" if len(factors) > 2 else "") + "), 95% t-intervals from 3 seeds on; lines "
        "that are not parallel suggest an interaction (its test is in the claims).",
        lambda: figs.interaction_plots(stats.per_trial, factors, metric=metric, levels=levels, unit=unit))
    add("arm_heatmap", "Arm means", "Mean objective of every arm over its seeds (no interval: see the table).",
        lambda: figs.arm_heatmap(stats.arms, factors, metric=metric, unit=unit))
    add("response_length", "Response length", "Mean length of correct and of incorrect completions over "
        "training; a level whose incorrect completions grow longer shows the length bias of per-sequence "
        "normalization (Liu et al. 2025, Dr. GRPO)." + avg,
        lambda: figs.response_length(table, factors, levels=levels),
        needs="the trials logged no response/length_correct or response/length_incorrect")
    kl, rw, finals = _kl_and_reward(table)
    add("reward_vs_kl", "Reward against KL", "Final total reward against final KL to the reference policy "
        "(means of the last 10% of steps; 95% t-intervals over seeds from 3 seeds on); dashed: the Pareto front.",
        lambda: figs.reward_vs_kl(finals, stats.labels, legend_title=stats.legend_title) if finals is not None
        else None,
        needs="the trials logged no " + " and no ".join(
            m for m, f in ((figs.KL_METRIC, kl), (figs.REWARD_METRIC, rw)) if f.empty))
    add("diagnostics", "Diagnostics", "Policy entropy, clipped fraction of ratios and gradient norm over "
        "training." + avg, lambda: figs.diagnostics(table, factors, levels=levels),
        needs="the trials logged no policy/entropy, policy/clip_frac_* or optim/grad_norm")
    add("compute_efficiency", "Compute efficiency", "The objective against generated training tokens per "
        "arm with its saturating fit (dashed; none where the fit failed).",
        lambda: figs.compute_efficiency(stats.points, stats.fits, stats.labels, metric=metric, unit=unit,
                                        legend_title=stats.legend_title),
        needs=f"no trial logged {metric} together with compute/tokens")
    return figures, notes


# -------------------------------------------------------------------------------------------- build


def build_page(study: Study, results: Results, stats: ReportStatistics, findings: Findings,
               figures: Sequence[FigureRef], figure_notes: Sequence[str], files: Sequence[str]) -> ReportPage:
    """Step 3b: the page, built once from the three steps' results (``files``: the folder's files, linked or,
    when a committed report leaves them out, named: :func:`ablate.report.page.split_files`)."""
    linked, named = split_files(files)
    missing = None
    if not results.missing.empty:
        mv = results.missing.assign(arm=results.missing["arm"].map(lambda a: stats.labels.get(a, a)))
        missing = Table("Missing trials", mv[["arm", "seed", "state", "key", "error"]].astype(str).reset_index(drop=True),
                        "Trials of the design without results; run the study again to complete them.", "missing")
    try:
        study_yaml = Path(study.path).read_text(encoding="utf-8")
    except OSError:
        study_yaml = ""
    baseline_arm = next((a for a in study.arms if a.baseline), study.arms[0] if study.arms else None)
    baseline_config = ""
    if baseline_arm is not None:
        budget = results.budget if results.budget in study.budgets else "default"
        baseline_config = f"# arm {baseline_arm.name} at budget {budget}\n" + study.config(baseline_arm, budget).to_yaml()
    return ReportPage(
        study=results.study, description=study.description or "", budget=results.budget,
        objective=stats.summary_text, generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        counts=stats.counts, provenance=provenance(study, results), answer=findings.answer,
        acknowledged=study.acknowledged_line or "",
        notes=(*results.notes, *findings.notes, *figure_notes), sections=findings.sections, figures=tuple(figures),
        tables=findings.tables, missing=missing, samples=tuple(_samples(results, stats.labels)),
        design=_design_table(study, results),
        alias_lines=tuple(study.aliasing.lines()) if study.aliasing is not None else (),
        study_yaml=study_yaml, baseline_config=baseline_config, versions=_versions(results), files=linked, uncommitted=named,
        claims_digest=verdicts.stats_digest(stats),
    )




def write_report(plan: Plan, results: Results, out_dir: str | Path, *, fit_boot: int = 200,
                 formats: Sequence[str] = ("png",), seed: int = 0) -> Path:
    """Compute the statistics, phrase the findings, draw the figures and write the report files
    into ``out_dir`` (created; figures of an earlier report there are removed).

    Args:
        plan, results: the study's plan and its results at one budget (the plan that ran is rebuilt
            from the results' parent-run tags: :meth:`ablate.study.plan.Plan.recorded`).
        out_dir: the report folder.
        fit_boot, seed: bootstrap refits of the compute-efficiency fits, and their generator's seed.
        formats: figure file formats (``png`` is required: the pages show it; add ``svg`` for vector
            copies).

    Returns:
        The path of ``index.html``.
    """
    if "png" not in formats:
        raise ValueError(f"formats must include 'png' (the pages embed it), got {list(formats)}")
    ran = plan.recorded(results.parent)  # the plan that ran: an adaptive study's seeds, each arm's tuned values
    study = ran.study
    stats = compute_statistics(study, results, fit_boot=fit_boot, seed=seed)
    findings = phrase(stats)  # both before anything in out_dir is touched: a failure leaves the old report whole
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        if old.is_file() and old.suffix in (".png", ".svg"):
            old.unlink()
    figures, figure_notes = draw_figures(stats, results, out, formats)
    summary = trial_summary(results, stats.per_trial)
    summary.to_csv(out / "results.csv", index=False)
    curves = objective_curves(results.table, study.objective.metric)
    curves.to_csv(out / CURVES_FILE, index=False)
    results.table.to_csv(out / "tidy.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    files = ["results.csv", CURVES_FILE, "tidy.csv.gz"]
    tuned_notes: list[str] = []
    if ran.tuned:
        (out / TUNED_FILE).write_text(json.dumps(ran.tuned, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        files.append(TUNED_FILE)
        tuned_notes.append("each arm ran at its own tuned values (tune:, in tuned.json): " + "; ".join(
            f"{stats.labels.get(arm, arm)}: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                          for k, v in sorted(values.items()))
            for arm, values in ran.tuned.items()))
    problems = results.problems
    if not problems.empty:
        problems.to_csv(out / "problems.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
        files.append("problems.csv.gz")
    if results.samples:
        (out / "samples.json").write_text(json.dumps(results.samples, indent=1, default=str), encoding="utf-8")
        files.append("samples.json")
    files += [p.name for f in figures for p in f.files.values()]
    page = build_page(study, results, stats, findings, figures, [*tuned_notes, *figure_notes], files)
    # the evidence across the reports beside this one (reports/): its shared trials, by content, and its
    # claims' project-wide p; `ablate ledger` refreshes the other reports' blocks and reports/SHARED.md
    readme, index = out / "README.md", out / "index.html"
    readme.write_text(render_markdown(page), encoding="utf-8")  # first: the block reads this report as committed
    if plan.budget == DEFAULT_BUDGET and study.evidence:
        text_md, text_html = spliced_report(readme.read_text(encoding="utf-8"), render_html(page), report_block(out))
    else:  # another budget's report (a smoke run) or a demo's is no evidence: the ledger leaves it out, and so does
        # its page
        text_md, text_html = readme.read_text(encoding="utf-8"), render_html(page)
    # did the baseline learn: the positive control under the answer, from the curves.csv just written (the block
    # `ablate ledger` refreshes in a committed report, from the same function)
    text_md, text_html = control.spliced(text_md, text_html, control.study_block(study, curves))
    readme.write_text(text_md, encoding="utf-8")
    index.write_text(text_html, encoding="utf-8")
    return index


def default_out_dir(study_name: str, budget: str = DEFAULT_BUDGET) -> Path:
    """``reports/<study>/`` (:func:`ablate.paths.report_dir`) at the default budget; ``reports/<study>-<budget>/``
    at another, so that a smoke run never overwrites the study's report (committed or not)."""
    return report_dir_for(study_name, budget)


def build_report(plan: Plan, *, tracking_uri: str | None = None, out_dir: str | Path | None = None,
                 allow_fewer: bool = False, **options: Any) -> Path:
    """Read a study's results from MLflow and write its report (:func:`write_report`).

    Args:
        plan: the study's plan at the budget to report (:class:`ablate.study.plan.Plan`).
        tracking_uri: the MLflow tracking URI (default: ``$MLFLOW_TRACKING_URI``, else sqlite:///mlflow.db).
        out_dir: the report folder (default :func:`default_out_dir`: ``reports/<study>/``, or
            ``reports/<study>-<budget>/`` at a budget other than the default).
        allow_fewer: report the plan's trials even when the parent run holds finished trials the plan
            does not define (the study file was edited since it ran; :func:`ablate.tracking.results.load_results`).
        options: passed to :func:`write_report` (``formats`` ...).

    Returns:
        The path of ``index.html``. Uploading the folder to the study's parent run is the caller's
        job (:func:`ablate.tracking.log_report`).

    Raises:
        AblateError: the study never ran at ``budget`` in that tracking store.
    """
    from ablate.errors import AblateError
    from ablate.tracking import Tracker
    from ablate.tracking.results import load_results

    study, budget = plan.study, plan.budget
    folder = Path(out_dir) if out_dir is not None else default_out_dir(study.name, budget)
    Tracker(tracking_uri).check_identity(study)  # another study of this name: no report of its runs
    results = load_results(plan, tracking_uri=tracking_uri, cache_dir=folder / ".cache", allow_fewer=allow_fewer)
    if not results.parent:
        raise AblateError(
            f"study {study.name!r} has no runs at budget {budget!r} in MLflow {Tracker(tracking_uri).uri}; run "
            f"`ablate run {study.path} --budget {budget}` first, or pass the --tracking-uri / --budget it ran with"
        )
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):  # two runs of one study ending together
        index = write_report(plan, results, folder, **options)
    problem = unlogged_objective(study, results)
    if problem is not None:
        raise UnloggedObjectiveError(f"{problem}; its report says so: {index}", index)
    return index


def unlogged_objective(study: Study, results: Results) -> str | None:
    """None when a finished trial of ``results`` logged the study's objective metric, or none finished; else
    the problem in one line, ``FILE:LINE: objective.metric: ...`` with the fix (the report then compares
    nothing, and ``ablate run`` exits 1)."""
    from ablate.study import read_yaml
    from ablate.study.checker import line_of

    metric = study.objective.metric
    done = int((results.trials["state"] == "done").sum()) if not results.trials.empty else 0
    if not done or (not results.table.empty and bool((results.table["metric"] == metric).any())):
        return None
    try:
        doc = read_yaml(study.path)
        line = line_of(doc["objective"], "metric")
    except Exception:  # noqa: BLE001 - the file changed or went since: the message without its line
        line = None
    where = f"{study.path}:{line}" if line else str(study.path)
    return (f"{where}: objective.metric: none of the {done} finished trial{'s' if done != 1 else ''} of study "
            f"{study.name!r} ({results.budget}) logged {metric!r}, so the report compares nothing; name a metric "
            "they log (docs/metrics.md; some are logged only with the option that measures them, e.g. "
            "eval/pass_at_{k} with eval.pass_k) and run again: the finished trials are reused and the report rebuilt")
