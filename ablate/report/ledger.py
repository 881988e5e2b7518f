"""Evidence across the committed reports: one ledger of shared trials, found by content, and one
correction over every claim the project states side by side.

Each committed report (``reports/<study>/`` with README.md and results.csv) is read from its files
alone. Two trials are one piece of evidence when they computed the same thing: the same content
fingerprint (:func:`ablate.metrics.content_fingerprint`: the final losses, gradient norm, rewards, lengths
and evaluation to the last bit), whatever
their keys. The ledger (:func:`shared_pairs`) lists every such pair across reports, and the trials with
one key but other content (another processor model or code version). Every tested claim of every
committed report is corrected once more, together (Holm over all of them: :func:`project_claims`).

``ablate ledger`` writes what is generated from these (:func:`write_all`): ``reports/SHARED.md``, the
block of every committed report between :data:`BEGIN` and :data:`END` (its shared trials and its claims'
project-wide p), its positive control between :data:`ablate.report.control.BEGIN` and its end marker (did
the baseline learn, from its curves.csv: :func:`ablate.report.control.committed_block`, the block a new
report gets from the same function), and the claims table of ``docs/findings.md``. ``ablate ledger --check`` (and the test
suite) fails when any of them is stale, so these notes cannot drift from the reports they describe.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ablate.metrics import CONTENT_METRICS, content_fingerprint
from ablate.report import control, scope, verdicts
from ablate.report.page import replace_marked
from ablate.report.shared import seed_ranges

if TYPE_CHECKING:
    from ablate.stats.inference import Family, StudyInference

__all__ = ["BEGIN", "END", "LEDGER_FILE", "committed_trials", "evidence_block", "project_claims", "report_block",
           "shared_pairs", "spliced_report", "stale_files", "write_all"]

#: The ledger's file, in the reports folder.
LEDGER_FILE = "SHARED.md"
#: Markers of the generated block in a report's README.md and index.html, and in docs/findings.md.
BEGIN, END = "<!-- ablate:evidence:begin -->", "<!-- ablate:evidence:end -->"
CLAIMS_BEGIN, CLAIMS_END = "<!-- ablate:claims:begin -->", "<!-- ablate:claims:end -->"
README_BEGIN, README_END = "<!-- ablate:leads:begin -->", "<!-- ablate:leads:end -->"
#: The family-wise error rate of the project-wide correction.
ALPHA = 0.05
#: The verdicts that claim an effect: a report's detection, and a context study's "holds across contexts"
#: (its pooled test, the study's claim: :func:`ablate.report.statistics.context_family`).
DETECTIONS = ("detected", "holds across contexts")
#: Where the generated block goes in a report written before it had one: before the first of these.
_MD_ANCHORS = ("\n## Figures\n", "\n## Tables\n", "\n## Sample completions\n", "\n## Configuration\n")
_HTML_ANCHORS = ("<h2>Figures</h2>", "<h2>Tables</h2>", "<h2>Sample completions</h2>", "<h2>Configuration</h2>")
#: The per-report copies of shared trials that reports carried before the ledger (removed by write_all).
_OLD_NOTE_MD = re.compile(r"^> Shared trials: .*\n\n?", re.M)
_OLD_TABLE_MD = re.compile(r"^### Trials shared with other committed reports\n.*?(?=^## |\Z)", re.M | re.S)
_OLD_NOTE_HTML = re.compile(r'<p class="note">Shared trials: .*?</p>\n?', re.S)
_OLD_TABLE_HTML = re.compile(r"<details><summary>Trials shared with other committed reports</summary>.*?</details>\n?",
                             re.S)


def report_folders(reports: Path) -> list[Path]:
    """The committed report folders under ``reports`` (README.md and results.csv), by name: reports of a
    study's default budget only (a smoke run's report, ``reports/<study>-smoke/``, is no evidence), and not a
    demo's (``evidence: false``, the quickstart: the reader's own run, which opens with DEMO_LINE)."""
    from ablate.report.findings import DEMO_LINE
    from ablate.report.folder import PRODUCED, command_budget

    def default_budget(folder: Path) -> bool:
        text = (folder / "README.md").read_text(encoding="utf-8")
        m = PRODUCED.search(text)
        return command_budget(shlex.split(m["command"]) if m else []) == "default" and DEMO_LINE not in text

    return sorted(p for p in reports.iterdir()
                  if (p / "README.md").is_file() and (p / "results.csv").is_file() and default_budget(p))


def committed_trials(reports: Path) -> pd.DataFrame:
    """Every finished trial of every committed report under ``reports``: ``report, key, arm, seed,
    fingerprint, objective, cpu``, by report then arm then seed. The fingerprint is results.csv's
    ``fingerprint`` column where the report recorded one, else computed from the row's metric columns
    (the same function; a test checks that both agree on a report that records it)."""
    frames = [_trials_of(folder) for folder in report_folders(reports)]
    if not frames:
        return pd.DataFrame(columns=_TRIAL_COLUMNS)
    return pd.concat(frames, ignore_index=True)


_TRIAL_COLUMNS = ["report", "key", "arm", "seed", "fingerprint", "objective", "cpu"]


def _trials_of(folder: Path) -> pd.DataFrame:
    """The finished trials of the report folder's results.csv (see :func:`committed_trials`)."""
    t = pd.read_csv(folder / "results.csv", dtype={"key": str, "arm": str})
    t = t[t["state"] == "done"] if "state" in t else t
    if "fingerprint" in t:
        fp = t["fingerprint"].astype(str).to_numpy()
    else:
        metrics = [c for c in t.columns if "/" in c]
        fp = [content_fingerprint(r) for r in t[metrics].to_dict("records")]
    if "cpu" in t:
        cpu: object = t["cpu"].astype(str)
    else:  # a report logged before results.csv had the column: its run's record (as `ablate report --from` reads it)
        from ablate.report.folder import parent_tags

        readme = folder / "README.md"
        tags = parent_tags(readme.read_text(encoding="utf-8")) if readme.is_file() else {}
        cpu = tags.get("ablate.version.machine.cpu", "")
    return pd.DataFrame({
        "report": folder.name, "key": t["key"], "arm": t["arm"], "seed": t["seed"].astype(int), "fingerprint": fp,
        "objective": t["objective"] if "objective" in t else math.nan, "cpu": cpu,
    })[_TRIAL_COLUMNS]


def shared_pairs(trials: pd.DataFrame) -> pd.DataFrame:
    """The content-identical trials of two different reports (or two arms of one), one row per
    (report, arm, other report, other arm), in both directions: ``report, arm, seeds, other, other_arm,
    other_seeds, n, keys`` (``same key``, ``other keys`` or ``same and other keys``)."""
    cols = ["report", "arm", "seeds", "other", "other_arm", "other_seeds", "n", "keys"]
    if trials.empty:
        return pd.DataFrame(columns=cols)
    t = trials[["report", "arm", "seed", "key", "fingerprint"]]
    pairs = t.merge(t, on="fingerprint", suffixes=("", "_o"))
    pairs = pairs[(pairs["report"] != pairs["report_o"]) | (pairs["arm"] != pairs["arm_o"])]
    rows = []
    for (rep, arm, other, other_arm), g in pairs.groupby(["report", "arm", "report_o", "arm_o"], sort=True):
        same = g["key"] == g["key_o"]
        keys = "same key" if same.all() else "other keys" if not same.any() else "same and other keys"
        rows.append({"report": rep, "arm": arm, "seeds": seed_ranges(g["seed"]), "other": other, "other_arm": other_arm,
                     "other_seeds": seed_ranges(g["seed_o"]), "n": len(g), "keys": keys})
    return pd.DataFrame(rows, columns=cols)


def same_key_other_content(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials with one key in two reports whose content differs (another processor model or code
    version: RL amplifies float rounding), one row per (report, arm, other report, other arm) with
    ``report < other``: ``report, arm, other, other_arm, seeds, n, cpu, other_cpu``."""
    cols = ["report", "arm", "other", "other_arm", "seeds", "n", "cpu", "other_cpu"]
    t = trials[["report", "arm", "seed", "key", "fingerprint", "cpu"]]
    pairs = t.merge(t, on="key", suffixes=("", "_o"))
    pairs = pairs[(pairs["report"] < pairs["report_o"]) & (pairs["fingerprint"] != pairs["fingerprint_o"])]
    rows = [{"report": rep, "arm": arm, "other": other, "other_arm": other_arm, "seeds": seed_ranges(g["seed"]),
             "n": len(g), "cpu": ", ".join(sorted(set(g["cpu"]))), "other_cpu": ", ".join(sorted(set(g["cpu_o"])))}
            for (rep, arm, other, other_arm), g in pairs.groupby(["report", "arm", "report_o", "arm_o"], sort=True)]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------ project-wide claims


@dataclass(frozen=True)
class ReportClaims:
    """One committed report's claims: ``claims`` with columns ``report, claim, primary, n, estimate,
    ci_low, ci_high, p, p_report, verdict`` (estimates in the objective's units; ``p`` the claim's test:
    the two-stage test's for an extended study); ``unit_factor`` (100 for a fraction: points); ``staged``:
    for an extended study (``extended_after:``), one row per contrast of its two-stage test."""

    report: str
    claims: pd.DataFrame
    unit_factor: float
    staged: pd.DataFrame


def report_claims(folder: Path, root: Path) -> ReportClaims | None:
    """The family of claims of the committed report in ``folder``, recomputed from its results.csv by
    today's statistics (what ``ablate plan --from`` reads); None when its study file cannot be read or its
    results.csv does not hold the study's trials."""
    from ablate.errors import AblateError
    from ablate.report.folder import read_report_pilot
    from ablate.report.shared import committed_report

    rep = committed_report(folder, root)
    if rep is None:
        return None
    study = rep.plan.study
    try:
        inference = read_report_pilot(study, folder).inference
    except AblateError:  # its results.csv does not hold the study's level columns (another study's folder)
        return None
    family = inference.family
    claims = family.table().drop(columns="method").rename(columns={"p_holm": "p_report"})
    claims.insert(0, "report", folder.name)
    from ablate.report.statistics import Scale

    factor = Scale.of(study.objective.metric).factor
    return ReportClaims(folder.name, claims, factor,
                        staged_frame(inference, family, factor))


def staged_frame(inference: StudyInference, family: Family, factor: float) -> pd.DataFrame:
    """The two-stage test of each contrast of an extended study, as printed (points for a fraction)."""
    from scipy import stats

    rows = []
    verdicts = {c.name: c for c in family.claims}
    for c in inference.contrasts:
        t = inference.staged.get(c.name)
        if t is None:
            continue
        one = float(stats.ttest_1samp(np.asarray(c.per_seed, float), 0.0).pvalue)
        claim = verdicts[c.name]
        rows.append({
            "claim": c.name + (" ★" if claim.primary else ""),
            f"first stage (seeds 0-{t.n1 - 1})": _ci(t.mean1, t.ci1_low, t.ci1_high, factor),
            f"extension alone ({t.n2} seeds)": _ci(t.mean2, t.ci2_low, t.ci2_high, factor),
            "all seeds as one stage: p": _p(one),
            "z1, z2 → Z": f"{t.z1:+.2f}, {t.z2:+.2f} → {t.z:+.2f}".replace("-", "−"),
            "boundaries c1 / c2": f"{t.c1:.2f} / {t.c2:.2f}",
            "two-stage p": _p(t.p), "p (Holm)": _p(claim.p_holm), "verdict": claim.verdict,
        })
    return pd.DataFrame(rows)


def _ci(mean: float, lo: float, hi: float, factor: float) -> str:
    if not np.isfinite(mean):
        return "–"
    ci = f" [{lo * factor:+.3g}, {hi * factor:+.3g}]" if np.isfinite(lo) else ""
    return f"{mean * factor:+.3g}{ci}".replace("-", "−")


@dataclass(frozen=True)
class ProjectClaims:
    """Every claim of every committed report (``claims``: :class:`ReportClaims` columns and ``scale``,
    ``p_project``, ``holds``), and the two-stage tables of the extended studies (report -> frame)."""

    claims: pd.DataFrame
    staged: dict[str, pd.DataFrame]


def project_claims(reports: Path, root: Path) -> ProjectClaims:
    """Every claim of every committed report, with ``p_project``: Holm over every *tested* claim of
    all of them together (a claim with a finite p: an extended study's two-stage p), and ``holds``:
    whether a claim detected in its report is still detected project-wide (p_project < :data:`ALPHA`);
    ``scale`` converts estimates to the report's printed units (points for a fraction)."""
    from ablate.stats.inference import holm

    frames, staged = [], {}
    for folder in report_folders(reports):
        rc = report_claims(folder, root)
        if rc is not None and not rc.claims.empty:
            frames.append(rc.claims.assign(scale=rc.unit_factor))
            if not rc.staged.empty:
                staged[rc.report] = rc.staged
    if not frames:
        return ProjectClaims(pd.DataFrame(), staged)
    claims = pd.concat(frames, ignore_index=True)
    claims["p_project"] = holm(claims["p"].to_numpy(dtype=float))
    claims["holds"] = claims["verdict"].isin(DETECTIONS) & (claims["p_project"] < ALPHA)
    return ProjectClaims(claims, staged)


# ------------------------------------------------------------------------------------------ rendering


def _p(value: float) -> str:
    if not np.isfinite(value):
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3g}"


def _interval(row: pd.Series) -> str:
    return _ci(row["estimate"], row["ci_low"], row["ci_high"], float(row["scale"]))


def _verdict_here(row: pd.Series) -> str:
    """The verdict cell: a detection (:data:`DETECTIONS`) says whether it holds under the project-wide Holm; a
    context study's "holds across contexts" that holds is its own word alone (its claim, not a second verdict)."""
    verdict = str(row["verdict"])
    if verdict not in DETECTIONS:
        return verdict
    if not row["holds"]:
        return f"{verdict} here; a lead project-wide"
    return "detected; holds project-wide" if verdict == "detected" else verdict


def claims_frame(claims: pd.DataFrame, shared: dict[str, str]) -> pd.DataFrame:
    """The claims as printed: one row per claim."""
    return pd.DataFrame({
        "report": claims["report"], "claim": claims["claim"] + np.where(claims["primary"], " ★", ""),
        "seeds": [f"{int(r['n'])} × {int(r['contexts'])} contexts" if np.isfinite(r["contexts"]) else str(int(r["n"]))
                  for _, r in claims.iterrows()],
        "estimate [95% CI]": [_interval(r) for _, r in claims.iterrows()],
        "p": claims["p"].map(_p), "p (Holm, report)": claims["p_report"].map(_p),
        "p (Holm, project)": claims["p_project"].map(_p),
        "verdict": [_verdict_here(r) for _, r in claims.iterrows()],
        "seeds needed": claims["seeds_needed"].map(lambda n: f"{n:.0f}" if np.isfinite(n) else "–"),
        "shares trials with": claims["report"].map(lambda r: shared.get(r, "")),
    })


def _shared_with(pairs: pd.DataFrame) -> dict[str, str]:
    out: dict[str, str] = {}
    for rep, g in pairs[pairs["report"] != pairs["other"]].groupby("report"):
        out[str(rep)] = ", ".join(sorted(set(g["other"])))
    return out


def _md_table(frame: pd.DataFrame) -> str:
    from ablate.report.markdown import frame_md

    return frame_md(frame.astype(str))


def _tested_summary(claims: pd.DataFrame) -> str:
    tested = claims[np.isfinite(claims["p"].astype(float))]
    det = tested[tested["verdict"].isin(DETECTIONS)]
    prim = det[det["primary"]]
    return (f"{len(tested)} tested claims in {claims['report'].nunique()} committed reports; of the "
            f"{len(det)} detected in their own report, {int(det['holds'].sum())} hold under Holm over all "
            f"{len(tested)} (of the {len(prim)} detected primary claims, {int(prim['holds'].sum())})")


def ledger_markdown(trials: pd.DataFrame, pairs: pd.DataFrame, mismatch: pd.DataFrame) -> str:
    """reports/SHARED.md."""
    across = pairs[pairs["report"] != pairs["other"]]
    fp_reports = trials.groupby("fingerprint")["report"].nunique()
    multi = trials[trials["fingerprint"].map(fp_reports) > 1]
    lines = [
        "# Shared trials: one ledger, found by content", "",
        "<!-- Generated by `ablate ledger` from reports/*/results.csv; do not edit by hand. "
        "`ablate ledger --check` and tests/test_ledger.py fail when it is stale. -->", "",
        "Two trials are one piece of evidence when they computed the same thing: the same *content "
        "fingerprint*, a hash of the last logged value of the metrics that pin a computation down to the last bit "
        f"({', '.join(f'`{m}`' for m in CONTENT_METRICS)}), recorded with each trial (MLflow tag `ablate.fingerprint`, results.csv column `fingerprint`). Found "
        "by content, not by key: two keys can name one computation (a setting that resolves alike on a CPU, "
        "another study's name for the same arm), and one key can give other content on another processor "
        "model or code version (RL amplifies float rounding).", "",
        f"{len(trials)} finished trials in {trials['report'].nunique()} committed reports; {len(multi)} of them "
        f"({multi['fingerprint'].nunique()} distinct computations) are content-identical to a trial of another "
        f"report. A claim that rests on shared trials is not independent evidence beside the claims of the "
        f"reports it shares them with.", "",
        "## Content-identical trials across reports", "",
    ]
    if across.empty:
        lines += ["None.", ""]
    else:
        view = across[across["report"] < across["other"]]
        lines += [_md_table(view.rename(columns={"other": "= report", "other_arm": "its arm",
                                                 "other_seeds": "its seeds", "n": "trials"})), ""]
    within = pairs[(pairs["report"] == pairs["other"]) & (pairs["arm"] < pairs["other_arm"])]
    if not within.empty:
        lines += ["## Content-identical trials of two arms of one report", "",
                  _md_table(within.drop(columns=["other"]).rename(columns={
                      "other_arm": "= arm", "other_seeds": "its seeds", "n": "trials"})), ""]
    lines += ["## One key, other content", "",
              "The same trial key in two reports with different content: another processor model or code version "
              "computed it. These are two runs of one configuration, not one piece of evidence.", ""]
    lines += [_md_table(mismatch.rename(columns={"other": "report 2", "other_arm": "its arm", "n": "trials",
                                                 "cpu": "processor", "other_cpu": "processor 2"})) if not
              mismatch.empty else "None.", ""]
    lines += ["## By report", ""]
    for rep in sorted(trials["report"].unique()):
        mine = across[across["report"] == rep]
        n = int((trials["report"] == rep).sum())
        k = int((multi["report"] == rep).sum())
        lines += [f"### {rep}", ""]
        if mine.empty:
            lines += [f"None of its {n} finished trials is content-identical to a trial of another committed "
                      "report: its evidence is its own.", ""]
        else:
            lines += [f"{k} of its {n} finished trials are content-identical to trials of other committed reports:", ""]
            lines += [f"- {r.arm} at seeds {r.seeds} = {r.other}'s {r.other_arm} at seeds {r.other_seeds} "
                      f"({r.n} trials, {r.keys})" for r in mine.itertuples()]
            lines += [""]
    return "\n".join(lines).rstrip() + "\n"


@dataclass(frozen=True)
class Block:
    """The generated block of one report: paragraphs, each with an optional table under it, rendered to
    Markdown and HTML alike; the first paragraph ends with a link to the report's ledger entry."""

    parts: tuple[tuple[str, pd.DataFrame | None], ...]
    ledger_link: str

    def markdown(self) -> str:
        from ablate.report.markdown import md

        out = [BEGIN, "## Evidence across the committed reports", ""]
        for i, (text, table) in enumerate(self.parts):
            out += [md(text) + (f" [The ledger]({self.ledger_link})." if i == 0 else ""), ""]
            if table is not None:
                out += [_md_table(table), ""]
        return "\n".join(out) + END

    def html(self) -> str:
        from ablate.report.html import e, frame_html

        out = [BEGIN, "<h2>Evidence across the committed reports</h2>"]
        for i, (text, table) in enumerate(self.parts):
            link = f' <a href="{e(self.ledger_link)}">The ledger</a>.' if i == 0 else ""
            out.append(f"<p>{e(text)}{link}</p>")
            if table is not None:
                out.append(frame_html(table.astype(str)))
        return "\n".join(out) + END


def evidence_block(report: str, trials: pd.DataFrame, pairs: pd.DataFrame, project: ProjectClaims) -> Block:
    """The generated block of ``report``: the trials it shares with other committed reports (by
    content), its claims' project-wide adjusted p, and, for a study extended after a report was read,
    the two-stage test of each contrast."""
    claims = project.claims
    mine = pairs[(pairs["report"] == report) & (pairs["other"] != report)]
    own = trials[trials["report"] == report]
    head = ("Generated by `ablate ledger` from every committed report's results.csv, and regenerated whenever "
            "one of them changes. ")
    if mine.empty:
        shared = head + (f"Shared trials: none of this report's {len(own)} finished trials is content-identical to a "
                         "trial of another committed report (same content fingerprint): its evidence is its own.")
    else:
        k = int(own["fingerprint"].isin(set(trials.loc[trials["report"] != report, "fingerprint"])).sum())
        shared = head + (f"Shared trials: {k} of this report's {len(own)} finished trials are content-identical to "
                         "trials of other committed reports (the same content fingerprint): " + "; ".join(
                             f"{r.arm} at seeds {r.seeds} = {r.other}'s {r.other_arm} ({r.keys})"
                             for r in mine.itertuples()) + ". Shared trials are one piece of evidence, not several.")
    parts: list[tuple[str, pd.DataFrame | None]] = [(shared, None)]
    here = claims[claims["report"] == report] if not claims.empty else claims
    if not here.empty:
        parts.append((
            "Error control across the project: each claim of this report beside the Holm correction over every "
            f"tested claim of every committed report ({_tested_summary(claims)}); docs/findings.md lists them "
            "all. A claim detected here that does not hold project-wide reads as a lead, not a finding. 'seeds "
            "needed': for 80% power at the study's min_effect at the report's Bonferroni level, from this "
            "report's per-seed SD (today's planner).",
            claims_frame(here, {}).drop(columns=["report", "shares trials with"])))
    staged = project.staged.get(report)
    if staged is not None:
        parts.append((
            "Extended seeds: the two-stage test. This study's seeds were extended after a report of its first "
            "seeds was read (extended_after in the study file), so testing all seeds as one stage is not the test "
            "the design ran. Each contrast is "
            "tested as two stages: the first stage, the extension alone, and their inverse-normal combination Z "
            "with equal weights (fixed before any stage's data; a weight planned from the first stage's spread "
            "exceeds 5% false detections in benchmarks/bench_calibration.py), against "
            "O'Brien-Fleming-type boundaries for the interim look (c1 at the first stage, c2 at the end; earlier "
            "looks at fewer seeds spend no alpha to 3 decimals and are folded into the first stage). The two-stage "
            "p enters the Holm correction above and decides the verdict; estimates and intervals stay those of all "
            "seeds. Equivalence (each one-sided test of the TOST) and the interaction tests are combined over the "
            "two stages the same way (docs/statistics.md).", staged))
    return Block(tuple(parts), f"../{LEDGER_FILE}#{report}")


def readme_block(project: ProjectClaims) -> str:
    """README's sentence under the studies table: how many detections hold project-wide, and which are
    leads (between :data:`README_BEGIN` and :data:`README_END`)."""
    claims = project.claims
    tested = claims[np.isfinite(claims["p"].astype(float))]
    det = tested[tested["verdict"].isin(DETECTIONS)]
    held = ", ".join(f"{rep} {n}" for rep, n in det[det["holds"]].groupby("report").size().items())
    return (f"{README_BEGIN}\nVerdicts are each report's own (Holm within it; a study extended after reading its "
            f"report: its two-stage test). Under Holm over all {len(tested)} tested claims of the "
            f"{claims['report'].nunique()} reports, {int(det['holds'].sum())} of the {len(det)} detections hold ({held}); "
            f"the others read as leads: [every claim](docs/findings.md#every-claim-with-project-wide-error-control)."
            f"\n{README_END}")


def findings_block(project: ProjectClaims, pairs: pd.DataFrame) -> str:
    """The claims table of docs/findings.md, between :data:`CLAIMS_BEGIN` and :data:`CLAIMS_END`."""
    claims = project.claims
    lines = [CLAIMS_BEGIN, "",
             "<!-- Generated by `ablate ledger` from the committed reports; do not edit by hand. -->", "",
             f"{_tested_summary(claims)}. Project-wide p: Holm over every tested claim of every committed report, "
             "family-wise alpha 0.05; per-report p: Holm within the report's own family, as the report prints it. "
             "Estimates in points of the objective (a fraction x 100) against the study's baseline, 95% paired "
             "t-intervals over the seeds column; ★ primary. A detection that does not hold project-wide reads as a "
             "lead. 'shares trials with': reports holding content-identical trials "
             "([reports/SHARED.md](../reports/SHARED.md)).", "",
             _md_table(claims_frame(claims, _shared_with(pairs))), "", CLAIMS_END]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ files


def _splice(text: str, block: str, anchors: Sequence[str]) -> str:
    """``text`` with its generated block replaced by ``block`` (or inserted before the first anchor,
    else appended)."""
    replaced = replace_marked(text, BEGIN, END, block)
    if replaced is not None:
        return replaced
    for a in anchors:
        k = text.find(a)
        if k >= 0:
            k += 1 if a.startswith("\n") else 0
            return text[:k] + block + "\n\n" + text[k:]
    return text.rstrip() + "\n\n" + block + "\n"


def spliced_report(md_text: str, html_text: str, block: Block) -> tuple[str, str]:
    """A report's README.md and index.html with ``block`` in place and the per-report copies of shared
    trials that reports carried before the ledger removed."""
    md_text = _OLD_TABLE_MD.sub("", _OLD_NOTE_MD.sub("", md_text))
    html_text = _OLD_TABLE_HTML.sub("", _OLD_NOTE_HTML.sub("", html_text))
    return _splice(md_text, block.markdown(), _MD_ANCHORS), _splice(html_text, block.html(), _HTML_ANCHORS)


def report_block(folder: Path) -> Block:
    """The generated block of the report in ``folder`` (its README.md and results.csv written), computed
    over the committed reports beside it (``folder``'s parent) and itself."""
    reports = folder.parent
    trials = committed_trials(reports)
    return evidence_block(folder.name, trials, shared_pairs(trials), project_claims(reports, reports.resolve().parent))


def generated_files(reports: Path, root: Path, findings: Path | None = None, *,
                    claims: ProjectClaims | None = None, draw: bool = False) -> dict[Path, str]:
    """Every file ``ablate ledger`` writes, with its text: SHARED.md, each committed report's README.md and
    index.html with its block, its positive control (:mod:`ablate.report.control`) and its verdicts (its answer,
    claims figure, sections and tables of claims, from its results.csv: :mod:`ablate.report.verdicts`), and
    docs/findings.md with its claims table (when ``findings`` exists). ``claims``: :func:`project_claims` of
    ``reports`` when the caller has it already. ``draw``: first redraw a report's claims.png whose data changed
    (:func:`ablate.report.verdicts.redraw_claims`; without it, index.html embeds the claims.png on disk)."""
    trials = committed_trials(reports)
    pairs = shared_pairs(trials)
    claims = project_claims(reports, root) if claims is None else claims
    out = {reports / LEDGER_FILE: ledger_markdown(trials, pairs, same_key_other_content(trials))}
    for folder in report_folders(reports):
        out.update(report_files(folder, root, evidence_block(folder.name, trials, pairs, claims), draw=draw))
    if findings is not None and findings.is_file() and not claims.claims.empty:
        out[findings] = _replace_marked(findings.read_text(encoding="utf-8"), findings_block(claims, pairs),
                                        CLAIMS_BEGIN, CLAIMS_END)
    folders = report_folders(reports)
    across, single = scope.all_context_verdicts(folders, root), scope.one_context_reports(folders, root)
    if findings is not None and findings.is_file() and scope.SCOPE_BEGIN in out.get(findings, findings.read_text(
            encoding="utf-8")):
        out[findings] = _replace_marked(out.get(findings, findings.read_text(encoding="utf-8")),
                                        scope.findings_scope(across, single), scope.SCOPE_BEGIN, scope.SCOPE_END)
    readme = root / "README.md"
    if readme.is_file() and not claims.claims.empty and README_BEGIN in readme.read_text(encoding="utf-8"):
        text = _replace_marked(readme.read_text(encoding="utf-8"), readme_block(claims), README_BEGIN, README_END)
        if scope.README_SCOPE_BEGIN in text:
            text = _replace_marked(text, scope.readme_scope(across, single), scope.README_SCOPE_BEGIN,
                                   scope.README_SCOPE_END)
        out[readme] = text
    return out


def report_files(folder: Path, root: Path, block: Block, *, draw: bool = False) -> dict[Path, str]:
    """The committed report in ``folder``'s README.md and index.html (when it has one) as ``ablate ledger`` writes
    them: its evidence ``block``, its positive control and its verdicts (its answer, claims figure, sections and
    tables of claims, re-rendered from its results.csv by today's statistics: :mod:`ablate.report.verdicts`), each
    in its marked place; ``draw``: redraw its claims.png first where the claims it shows changed."""
    md_path, html_path = folder / "README.md", folder / "index.html"
    html_text = html_path.read_text(encoding="utf-8") if html_path.is_file() else ""
    md_text = md_path.read_text(encoding="utf-8")
    md_new, html_new = spliced_report(md_text, html_text, block)
    md_new, html_new = control.spliced(md_new, html_new, control.committed_block(folder, root))
    found = verdicts.committed_verdicts(folder, root)
    if found is not None:
        if draw:
            verdicts.redraw_claims(folder, found[1], md_text)
        md_new, html_new = verdicts.spliced(md_new, html_new, found[0], verdicts.claims_figures(folder, found[1]))
    return {md_path: md_new, **({html_path: html_new} if html_path.is_file() else {})}


def _replace_marked(text: str, block: str, begin: str, end: str) -> str:
    """``text`` with the span from ``begin`` to ``end`` replaced by ``block`` (appended when absent)."""
    replaced = replace_marked(text, begin, end, block)
    return text.rstrip() + "\n\n" + block + "\n" if replaced is None else replaced


def stale_files(reports: Path, root: Path, findings: Path | None = None, *,
                claims: ProjectClaims | None = None) -> list[Path]:
    """The generated files whose text on disk differs from what :func:`generated_files` gives."""
    return [p for p, text in generated_files(reports, root, findings, claims=claims).items()
            if not p.is_file() or p.read_text(encoding="utf-8") != text]


def write_all(reports: Path, root: Path, findings: Path | None = None) -> list[Path]:
    """Write every generated file that changed; returns those written."""
    written = []
    for p, text in generated_files(reports, root, findings, draw=True).items():
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            written.append(p)
    return written
