"""How far each verdict travels: the across-context verdicts of the committed reports whose studies
replicate over contexts (``contexts:``), by mission factor, and the one context every other report was
tested in.

``ablate ledger`` writes :func:`findings_scope` into docs/findings.md (between :data:`SCOPE_BEGIN` and
:data:`SCOPE_END`) and :func:`readme_scope` into README.md (between :data:`README_SCOPE_BEGIN` and
:data:`README_SCOPE_END`). Everything here is recomputed from the committed reports' results.csv and their
study files by the report's own statistics (:func:`ablate.report.statistics.judge`), so the
text cannot drift from the reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["README_SCOPE_BEGIN", "README_SCOPE_END", "SCOPE_BEGIN", "SCOPE_END", "context_verdicts",
           "findings_scope", "mission_factor", "readme_scope", "tested_contexts"]

SCOPE_BEGIN, SCOPE_END = "<!-- ablate:scope:begin -->", "<!-- ablate:scope:end -->"
README_SCOPE_BEGIN, README_SCOPE_END = "<!-- ablate:travels:begin -->", "<!-- ablate:travels:end -->"

#: The mission's factors, each with the option paths whose contrasts belong to it (the first match wins).
MISSION: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward granularity", ("reward.components", "reward.prm", "kl.placement")),
    ("loss normalization", ("loss.aggregation",)),
    ("ratio level", ("loss.ratio_level",)),
)


def mission_factor(paths: Sequence[str]) -> str:
    """The mission factor a study factor setting ``paths`` belongs to ("other" when none)."""
    for label, prefixes in MISSION:
        if any(p == q or p.startswith(q + ".") for p in paths for q in prefixes):
            return label
    return "other"


def tested_contexts(plan) -> tuple[str, ...]:
    """The ``task / model`` contexts a plan's trials ran in, sorted."""
    return tuple(sorted({f"{s.config.task.name} / {s.config.model.name}" for s in plan.specs}))


def _detected(rows: pd.DataFrame, sign: int) -> list[str]:
    """The contexts whose own 95% interval lies entirely on the side ``sign`` of 0."""
    side = rows["ci_low"] > 0 if sign > 0 else rows["ci_high"] < 0
    return [str(c) for c in rows.loc[side, "context"]]


def _present(study, factor: str, per_trial: pd.DataFrame) -> list[str]:
    """The levels of context ``factor`` that finished trials ran at, in the study's order."""
    ran = set(per_trial[factor].astype(str))
    return [name for name in study.factor(factor).level_names() if name in ran]


def context_verdicts(folder: Path, root: Path) -> pd.DataFrame:
    """One row per contrast of the committed report in ``folder`` when its study has ``contexts:``
    (empty otherwise): ``report, claim, mission, primary, verdict, k, contexts, estimate, ci_low,
    ci_high, pi_low, pi_high, tau, i2, up, down, trend, factor`` (estimates in objective units; ``factor``
    converts them to printed units; ``up``/``down``: contexts whose own 95% interval excludes 0)."""
    from ablate.errors import AblateError
    from ablate.report.findings import trend_sentence
    from ablate.report.folder import read_report_pilot, report_trials
    from ablate.report.shared import committed_report
    from ablate.report.statistics import Scale

    rep = committed_report(folder, root)
    if rep is None or not rep.plan.study.contexts:
        return pd.DataFrame()
    study = rep.plan.study
    try:
        done = report_trials(study, folder)
        # the report's own verdicts across contexts: the ones its claims carry (one computation)
        across = read_report_pilot(study, folder).inference.across
    except AblateError:
        return pd.DataFrame()
    names = [f.name for f in study.factors]
    per_trial = done[["key", "arm", "seed", *names, "objective"]]
    scale = Scale.of(study.objective.metric)
    rows = []
    for a in across:
        pooled = {k: float(getattr(a.pooled, k)) if a.pooled is not None else np.nan
                  for k in ("estimate", "ci_low", "ci_high", "pi_low", "pi_high", "tau", "i2")}
        rows.append({
            "report": folder.name, "claim": a.claim, "mission": mission_factor(study.factor(a.claim.split(":")[0]).paths()),
            "primary": a.primary, "verdict": a.verdict, "k": len(a.contexts),
            "contexts": " × ".join(f"{c} ∈ {{{', '.join(_present(study, c, per_trial))}}}" for c in study.contexts),
            **pooled,
            "up": _detected(a.contexts, +1), "down": _detected(a.contexts, -1),
            "trend": trend_sentence(a.trend, scale) if a.trend is not None else a.trend_note, "factor": scale.factor})
    return pd.DataFrame(rows)


def _num(v: float, factor: float) -> str:
    return f"{v * factor:+.3g}".replace("-", "−") if np.isfinite(v) else "–"


def _span(lo: float, hi: float, factor: float) -> str:
    return f"[{_num(lo, factor)}, {_num(hi, factor)}]" if np.isfinite(lo) else "–"


def _where(r: pd.Series) -> str:
    up, down = r["up"], r["down"]
    parts = [f"up in {', '.join(up)}" if up else "", f"down in {', '.join(down)}" if down else ""]
    said = "; ".join(p for p in parts if p)
    return said or f"in none of the {r['k']}"


def _scope_table(rows: pd.DataFrame) -> str:
    head = ("| mission factor | contrast | report | contexts | across contexts | pooled [95% CI] | a new context "
            "(95% PI) | τ | I² | contexts whose own 95% CI excludes 0 |")
    lines = [head, "|" + "---|" * 10]
    for _, r in rows.sort_values(["mission", "report"], kind="stable").iterrows():
        f = r["factor"]
        tau = f"{r['tau'] * f:.3g}" if np.isfinite(r["tau"]) else "–"
        i2 = f"{100 * r['i2']:.0f}%" if np.isfinite(r["i2"]) else "–"
        lines.append(f"| {r['mission']} | {r['claim']}{' ★' if r['primary'] else ''} | {r['report']} | {r['k']}: "
                     f"{r['contexts']} | **{r['verdict']}** | {_num(r['estimate'], f)} {_span(r['ci_low'], r['ci_high'], f)} | "
                     f"{_span(r['pi_low'], r['pi_high'], f)} | {tau} | {i2} | {_where(r)} |")
    return "\n".join(lines)


def one_context_reports(folders: Sequence[Path], root: Path) -> dict[str, list[str]]:
    """``task / model`` -> the committed reports (of ``folders``) without ``contexts:`` whose every trial
    ran there."""
    from ablate.report.shared import committed_report

    out: dict[str, list[str]] = {}
    for folder in folders:
        rep = committed_report(folder, root)
        if rep is None or rep.plan.study.contexts:
            continue
        ctx = tested_contexts(rep.plan)
        if len(ctx) == 1:
            out.setdefault(ctx[0], []).append(folder.name)
    return out


def all_context_verdicts(folders: Sequence[Path], root: Path) -> pd.DataFrame:
    """:func:`context_verdicts` of every committed report of ``folders``, together."""
    frames = [f for f in (context_verdicts(folder, root) for folder in folders) if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def findings_scope(verdicts: pd.DataFrame, single: dict[str, list[str]]) -> str:
    """docs/findings.md's scope block: the across-context table, the scale trends, and the reports tested
    in one context."""
    lines = [SCOPE_BEGIN, "", "<!-- Generated by `ablate ledger` from the committed reports; do not edit by hand. -->", ""]
    if verdicts.empty:
        lines.append("No committed report replicates its contrasts over contexts yet: every claim below was tested "
                     "in one context.")
    else:
        lines += ["Each contrast estimated within each context (the paired t over that context's seeds) and pooled "
                  "across contexts by random effects (ablate.meta: Paule-Mandel τ², Hartung-Knapp t interval on k − 1 "
                  "df, prediction interval for a new context on k − 2 df); points of accuracy against the baseline; "
                  "★ primary. 'Contexts whose own 95% CI excludes 0' reads each context alone, unadjusted: where the "
                  "effect showed, not a verdict.", "", _scope_table(verdicts)]
        trends = verdicts[verdicts["trend"] != ""]
        if not trends.empty:
            lines += ["", "Scale trends (" + ", ".join(sorted(set(trends["report"]))) + "):", ""]
            lines += [f"- {r['claim']}: {r['trend']}" for _, r in trends.iterrows()]
    for ctx, names in sorted(single.items()):
        lines += ["", f"Tested in one context only ({ctx}): the claims of {len(names)} reports, {', '.join(names)}; "
                  "their verdicts say nothing yet about another task, architecture or size."]
    lines += ["", SCOPE_END]
    return "\n".join(lines)


def readme_scope(verdicts: pd.DataFrame, single: dict[str, list[str]]) -> str:
    """README's sentence per mission factor: whether its primary verdict travels across contexts."""
    if verdicts.empty:
        return f"{README_SCOPE_BEGIN}\nNo verdict has been tested beyond one context yet.\n{README_SCOPE_END}"
    prim = verdicts[verdicts["primary"]]
    parts = []
    for mission, rows in prim.groupby("mission", sort=False):
        said = "; ".join(f"{r['verdict']} ({r['k']} contexts, {r['report']})" for _, r in rows.iterrows())
        parts.append(f"**{mission}** ({rows.iloc[0]['claim'].split(': ', 1)[1]}): {said}")
    n_single = sum(len(v) for v in single.values())
    where = " or ".join(sorted(single))
    return (f"{README_SCOPE_BEGIN}\nDoes a verdict travel? {'. '.join(parts)} "
            f"([contexts](docs/findings.md#how-far-each-verdict-travels)). The other {n_single} reports ran on "
            f"{where} only.\n{README_SCOPE_END}")
