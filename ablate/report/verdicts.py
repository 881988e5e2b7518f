"""A report's verdicts, from one computation wherever they are printed (issue 54).

A report's body carries its verdicts in four marked places (:data:`ablate.report.page.ANSWER`,
:data:`~ablate.report.page.CLAIMS_FIGURE`, :data:`~ablate.report.page.CLAIM_SECTIONS`,
:data:`~ablate.report.page.CLAIM_TABLES`): the answer at the top, the claims figure under it, the sections of
claims (across contexts, primary and exploratory contrasts, interactions) and the tables of claims (per
contrast across contexts, the objective per arm, the family, the analysis of variance). Everything in them is
computed from the trials' objectives alone: a new report from its results (:func:`verdicts_of` over
:func:`ablate.report.statistics.compute_statistics`), a committed one from its results.csv and curves.csv
(:func:`committed_statistics`, the inference ``ablate ledger`` reads for the evidence block:
:func:`ablate.report.folder.report_inference`). The same functions phrase both (:func:`ablate.report.findings.claim_sections`,
:func:`~ablate.report.findings.claim_tables`, :func:`~ablate.report.findings.answer_sentences`) and the same
renderers write them, so ``ablate ledger`` re-renders them in every committed report (:func:`spliced`) and a
report's body cannot disagree with its evidence block. The figures that need every logged step (learning
curves, diagnostics, compute efficiency) stay as the report drew them; the claims figure is redrawn from the
claims when the digest of the data it shows changes (:func:`claims_digest`, :func:`redraw_claims`).
"""

from __future__ import annotations

import hashlib
import html as _html
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ablate.report.page import (
    ANSWER,
    CLAIM_SECTIONS,
    CLAIM_TABLES,
    CLAIMS_FIGURE,
    FigureRef,
    Section,
    Table,
    digest_line,
    replace_marked,
)

if TYPE_CHECKING:
    from ablate.report.statistics import ReportStatistics
    from ablate.stats.inference import Family

__all__ = ["Verdicts", "claims_caption", "claims_digest", "committed_statistics", "committed_verdicts",
           "draw_claims", "redraw_claims", "spliced", "verdicts_of"]


def claims_caption(method: str) -> str:
    """The claims figure's caption (``method``: the family's, ``paired`` or ``linear model``)."""
    return ("Every contrast of the report's family: the estimate (diamond), the 95% interval the claim used "
            f"({'from the linear model' if method == 'linear model' else 'paired t'}; none below 3 seeds), the "
            "per-seed differences (grey dots), the ±min_effect band (grey, when the study declares one); colour: red "
            "detected, green equivalent, grey not resolved, orange uninformative (an equivalence where the baseline "
            "did not learn); ★ primary.")


def _g(x: float) -> str:
    """A number for the digest: 6 significant digits, so that the last bits of a float never change it."""
    return f"{float(x):.6g}" if x is not None and math.isfinite(float(x)) else "nan"


def claims_digest(family: Family, *, scale: float, unit: str, metric: str, min_effect: float | None) -> str:
    """12 hex digits of SHA-256 over everything the claims figure draws (:func:`ablate.report.figures.forest_plot`):
    each contrast's name, role, verdict, estimate, interval, seeds and dots, the family's size and method, and the
    scale, unit, metric and min_effect."""
    rows = []
    for cl in family.claims:
        c = cl.pooled if cl.pooled is not None else cl.contrast
        if c is None:
            continue
        dots = [x.estimate for x in c.contexts] if cl.pooled is not None else list(c.per_seed)
        rows.append([cl.name, bool(cl.primary), cl.verdict, _g(c.estimate), _g(c.ci_low), _g(c.ci_high),
                     int(getattr(c, "n_seeds", 0)), [_g(d) for d in dots]])
    data = [rows, int(family.size), family.method, _g(scale), unit, metric, _g(min_effect or math.nan)]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Verdicts:
    """The verdict-bearing parts of a report's body: the answer's sentences, the sections and tables of claims
    (already phrased), and the digest of the claims figure's data."""

    answer: tuple[str, ...]
    sections: tuple[Section, ...]
    tables: tuple[Table, ...]
    digest: str


def verdicts_of(stats: ReportStatistics) -> Verdicts:
    """The verdict-bearing parts of the report of ``stats``: what a new report prints and ``ablate ledger``
    re-renders."""
    from ablate.report.findings import answer_sentences, claim_sections, claim_tables

    return Verdicts(tuple(answer_sentences(stats)), tuple(claim_sections(stats)), tuple(claim_tables(stats)),
                    stats_digest(stats))


def stats_digest(stats: ReportStatistics) -> str:
    """:func:`claims_digest` of the claims figure of ``stats``."""
    return claims_digest(stats.inference.family, scale=stats.scale.factor, unit=stats.scale.unit,
                         metric=stats.metric, min_effect=stats.min_effect)


def draw_claims(stats: ReportStatistics) -> object | None:
    """The claims figure of ``stats`` (a matplotlib Figure; None without a contrast)."""
    from ablate.report import figures

    return figures.forest_plot(stats.inference.family, scale=stats.scale.factor, unit=stats.scale.unit,
                               metric=stats.metric, min_effect=stats.min_effect)


# ------------------------------------------------------------------------------------------ a committed report


def committed_statistics(folder: Path, root: Path) -> ReportStatistics | None:
    """The statistics of the committed report in ``folder`` that its verdicts need, from its results.csv and
    curves.csv alone (every logged step is not committed: no diagnostics, speed, compute-efficiency fits or
    evaluation noise); None when its study file cannot be read or its results.csv does not hold its trials."""
    from ablate.errors import AblateError
    from ablate.report.folder import report_inference, report_trials
    from ablate.report.shared import committed_report
    from ablate.report.statistics import (
        ReportStatistics,
        Scale,
        arm_label,
        in_arm_order,
        metric_unit,
        summary_text,
        warm_start_of,
    )
    from ablate.stats.inference import arm_table
    from ablate.tracking.results import count_states

    rep = committed_report(folder, root)
    if rep is None:
        return None
    study, budget = rep.plan.study, rep.plan.budget
    try:
        done = report_trials(study, folder)
        per_trial, run = report_inference(study, folder, done)
    except AblateError:
        return None
    names = [f.name for f in study.factors]
    obj, unit = study.objective, metric_unit(study.objective.metric)
    order = {a.name: i for i, a in enumerate(study.arms)}
    warm, n_problems = warm_start_of(study, budget)
    return ReportStatistics(
        study=study.name, budget=budget, description=study.description or "", metric=obj.metric, mode=obj.mode,
        summary_text=summary_text(obj, unit), scale=Scale.of(obj.metric), unit=unit, design=study.design_name,
        factors={n: n for n in names}, levels={f.name: f.level_names() for f in study.factors},
        baseline=study.baseline_levels, labels={a.name: arm_label(a.levels, names) for a in study.arms},
        counts=count_states(pd.read_csv(folder / "results.csv", usecols=["state"])),
        seeds=tuple(sorted(int(s) for s in set(per_trial["seed"]))), min_effect=study.min_effect,
        primary=study.primary, per_trial=per_trial, arms=in_arm_order(arm_table(per_trial, names), order),
        inference=run, diagnostics=(), points=pd.DataFrame(), fits=pd.DataFrame(), eval_problems=n_problems,
        eval_se=math.nan, warm_start=warm, contexts=run.across, evidence=study.evidence,
        entry_warning=study.entry_warning)


def committed_verdicts(folder: Path, root: Path) -> tuple[Verdicts, ReportStatistics] | None:
    """:func:`verdicts_of` the committed report in ``folder`` (:func:`committed_statistics`), with its statistics."""
    stats = committed_statistics(folder, root)
    return None if stats is None else (verdicts_of(stats), stats)


def claims_figures(folder: Path, stats: ReportStatistics) -> list[FigureRef]:
    """The claims figure of the report in ``folder`` as its pages show it: claims.png (and claims.svg where the
    report kept one), with the caption of :func:`claims_caption`; none without claims.png."""
    files = {fmt: folder / f"claims.{fmt}" for fmt in ("png", "svg") if (folder / f"claims.{fmt}").is_file()}
    caption = claims_caption(stats.inference.family.method)
    return [FigureRef("claims", "Claims", caption, files)] if "png" in files else []


def redraw_claims(folder: Path, stats: ReportStatistics, md_text: str) -> bool:
    """Draw the claims figure of ``stats`` into ``folder`` (claims.png, and claims.svg where one is there) when the
    report's README.md (``md_text``) names another digest or the PNG is missing; returns whether it drew."""
    from ablate.report import figures

    if (folder / "claims.png").is_file() and digest_line(stats_digest(stats)) in md_text:
        return False
    fig = draw_claims(stats)
    if fig is None:
        return False
    figures.save(fig, folder, "claims", ("png", "svg") if (folder / "claims.svg").is_file() else ("png",))
    return True


# ------------------------------------------------------------------------------------------ splicing


Locate = Callable[[str], "tuple[int, int, str] | None"]


def _replace(text: str, markers: tuple[str, str], block: str, locate: Locate) -> str:
    """``text`` with the span between ``markers`` replaced by ``block``; in a report written before the markers,
    the span :func:`locate` finds (its start, end and what follows the block), else ``text`` unchanged."""
    replaced = replace_marked(text, *markers, block)
    if replaced is not None:
        return replaced
    span = locate(text)
    return text if span is None else text[:span[0]] + block + span[2] + text[span[1]:]


#: The sections and tables of claims by title (a context study's tables: "<claim> across contexts").
_SECTION_TITLES = ("Across contexts", "Primary contrasts", "The study's question", "Exploratory contrasts",
                   "Interactions")
_TABLE_TITLES = ("Objective per arm", "Claims (one family)", "Analysis of variance (Type II)")
_HEADING = re.compile(r"^(#{2,3} .*|<!-- ablate:.*)$", re.M)


def _is_table(title: str) -> bool:
    return title in _TABLE_TITLES or title.endswith(" across contexts")


def _md_run(text: str, start: int, claims: Callable[[str], bool]) -> tuple[int, int, str] | None:
    """The run of ``### <title>`` headings of claims from ``start`` to the next other heading or marker."""
    heads = [m for m in _HEADING.finditer(text, start)]
    if not heads or not heads[0].group().startswith("### ") or not claims(heads[0].group()[4:].replace("\\", "")):
        return None
    end = next((m.start() for m in heads[1:] if not (m.group().startswith("### ")
                                                     and claims(m.group()[4:].replace("\\", "")))), len(text))
    return heads[0].start(), end, "\n\n"


def _md_answer(text: str) -> tuple[int, int, str] | None:
    k = text.find("\n## Findings\n\n")
    if k < 0:
        return None
    start = end = k + len("\n## Findings\n\n")
    while text.startswith("- ", end):
        end = text.index("\n", end) + 1
    return (start, end - 1, "") if end > start else (start, start, "\n\n")  # a report that opened without one




def _md_figure(text: str) -> tuple[int, int, str] | None:
    i = text.find("![Claims](claims.png)\n\n*Claims.* ")
    return None if i < 0 else (i, text.index("\n", i + len("![Claims](claims.png)\n\n")), "")


def _md_sections(text: str) -> tuple[int, int, str] | None:
    first = [m.start() for t in _SECTION_TITLES if (m := re.search(f"^### {re.escape(t)}$", text, re.M))]
    return _md_run(text, min(first), lambda t: t in _SECTION_TITLES) if first else None


def _md_tables(text: str) -> tuple[int, int, str] | None:
    k = text.find("\n## Tables\n\n")
    return None if k < 0 else _md_run(text, k + len("\n## Tables\n\n"), _is_table)


_SUMMARY = re.compile(r"<details><summary>(.*?)</summary>")


def _html_run(text: str, start: int, claims: Callable[[str], bool]) -> tuple[int, int, str] | None:
    """The run of ``<details>`` of claims (by their summary) from ``start``, to the ``</details>`` of the last."""
    pos, end = start, -1
    while (m := _SUMMARY.match(text, pos)) and claims(_html.unescape(m[1])):
        end = text.index("</details>", pos) + len("</details>")
        pos = end + 1
    return None if end < 0 else (start, end, "")


def _html_answer(text: str) -> tuple[int, int, str] | None:
    i = text.find('<ul class="answer">')
    if i >= 0:
        return i, text.index("</ul>", i) + len("</ul>"), ""
    k = text.find("<h2>Findings</h2>\n")  # a report that opened without one
    return None if k < 0 else (k + len("<h2>Findings</h2>\n"), k + len("<h2>Findings</h2>\n"), "\n")


def _html_figure(text: str) -> tuple[int, int, str] | None:
    i = text.find('<figure id="fig-claims"')
    return None if i < 0 else (i, text.index("</figure>", i) + len("</figure>"), "")


def _html_sections(text: str) -> tuple[int, int, str] | None:
    first = [i for t in _SECTION_TITLES if (i := text.find(f"<details><summary>{_html.escape(t)}</summary>")) >= 0]
    return _html_run(text, min(first), lambda t: t in _SECTION_TITLES) if first else None


def _html_tables(text: str) -> tuple[int, int, str] | None:
    k = text.find("<h2>Tables</h2>\n")
    return None if k < 0 else _html_run(text, k + len("<h2>Tables</h2>\n"), _is_table)


def spliced(md_text: str, html_text: str, verdicts: Verdicts, figures: list[FigureRef]) -> tuple[str, str]:
    """A report's README.md and index.html with ``verdicts`` in their four marked places (in a report written
    before the markers: in place of its answer, claims figure, sections and tables of claims); ``figures``: the
    claims figure the pages show (:func:`claims_figures`); ``html_text`` ``""``: left empty."""
    from ablate.report import html, markdown

    md_new = _replace(md_text, ANSWER, markdown.answer_block(verdicts.answer), _md_answer)
    md_new = _replace(md_new, CLAIMS_FIGURE, markdown.claims_figure_block(figures, verdicts.digest), _md_figure)
    md_new = _replace(md_new, CLAIM_SECTIONS, markdown.claim_sections_block(verdicts.sections), _md_sections)
    md_new = _replace(md_new, CLAIM_TABLES, markdown.claim_tables_block(verdicts.tables), _md_tables)
    if not html_text:
        return md_new, html_text
    html_new = _replace(html_text, ANSWER, html.answer_block(verdicts.answer), _html_answer)
    html_new = _replace(html_new, CLAIMS_FIGURE, html.claims_figure_block(figures, verdicts.digest), _html_figure)
    html_new = _replace(html_new, CLAIM_SECTIONS, html.claim_sections_block(verdicts.sections), _html_sections)
    html_new = _replace(html_new, CLAIM_TABLES, html.claim_tables_block(verdicts.tables), _html_tables)
    return md_new, html_new
