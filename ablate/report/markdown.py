"""The report as Markdown (``README.md``), so that the findings read on a code host.

The same findings, tables and configuration as the HTML page; figures are the PNG files beside it.
User-provided strings are escaped (:func:`md`): markup characters are shown, never interpreted, and
a ``|`` cannot break a table.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from ablate.report.page import (
    ANSWER,
    CLAIM_SECTIONS,
    CLAIM_TABLES,
    CLAIMS_FIGURE,
    HEADLINE_FIGURE,
    digest_line,
    uncommitted_sentence,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

    from ablate.report.page import FigureRef, ReportPage, Section, Table

_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def md(text: object) -> str:
    """``text`` for Markdown: ``< > &`` as HTML entities, Markdown's markup characters backslash-escaped,
    newlines as spaces."""
    return _SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False)).replace("\n", " ")


def code(text: object) -> str:
    """``text`` as inline code, with a backtick run longer than any inside it."""
    text = str(text).replace("\n", " ")
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str, lang: str = "") -> str:
    """``text`` in a fenced code block long enough not to be closed by backticks inside it."""
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def frame_md(frame: pd.DataFrame) -> str:
    """A DataFrame of strings as a Markdown table."""
    lines = ["| " + " | ".join(md(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines.extend("| " + " | ".join(md(v) for v in row) + " |" for row in frame.itertuples(index=False))
    return "\n".join(lines)


def table_md(table: Table) -> str:
    """A report table with its title and caption."""
    parts = [f"### {md(table.title)}", ""]
    if table.caption:
        parts += [md(table.caption), ""]
    parts.append(frame_md(table.frame))
    return "\n".join(parts)


def marked(markers: tuple[str, str], lines: Sequence[str]) -> str:
    """``lines`` between the ``(begin, end)`` markers, a blank line before the end marker (it never continues a
    list, a table or a paragraph)."""
    body = "\n".join(lines).strip("\n")
    return f"{markers[0]}\n{body}\n\n{markers[1]}" if body else f"{markers[0]}\n{markers[1]}"


def answer_block(answer: Sequence[str]) -> str:
    """The answer's bullets between the :data:`ablate.report.page.ANSWER` markers."""
    return marked(ANSWER, [f"- {md(s)}" for s in answer])


def figure_md(fig: FigureRef) -> list[str]:
    """A figure's PNG, title and caption (no lines without a PNG)."""
    png = fig.files.get("png")
    return [] if png is None else [f"![{md(fig.title)}]({png.name})", "", f"*{md(fig.title)}.* {md(fig.caption)}", ""]


def claims_figure_block(figures: Sequence[FigureRef], digest: str) -> str:
    """The claims figure (the headline figure, if drawn) and the digest of the data it was drawn from, between the
    :data:`ablate.report.page.CLAIMS_FIGURE` markers."""
    lines = [line for f in figures if f.name == HEADLINE_FIGURE for line in figure_md(f)]
    return marked(CLAIMS_FIGURE, [*lines, digest_line(digest)] if lines else [])


def sections_lines(sections: Sequence[Section]) -> list[str]:
    """Sections of findings: each a heading, its intro and its bullets."""
    out: list[str] = []
    for sec in sections:
        out += [f"### {md(sec.title)}", ""]
        if sec.intro:
            out += [md(sec.intro), ""]
        out += [f"- {md(s)}" for s in sec.items] + ([""] if sec.items else [])
    return out


def claim_sections_block(sections: Sequence[Section]) -> str:
    """The sections of claims between the :data:`ablate.report.page.CLAIM_SECTIONS` markers."""
    return marked(CLAIM_SECTIONS, sections_lines(sections))


def claim_tables_block(tables: Sequence[Table]) -> str:
    """The tables of claims between the :data:`ablate.report.page.CLAIM_TABLES` markers."""
    return marked(CLAIM_TABLES, [line for t in tables for line in (table_md(t), "")])


def render_markdown(data: ReportPage) -> str:
    """The whole README.md."""
    c = data.counts
    out = [f"# Ablation study {md(data.study)}", ""]
    if data.description:
        out += [f"**Question.** {md(data.description)}", ""]
    out += ["## Findings", "", answer_block(data.answer), "", claims_figure_block(data.figures, data.claims_digest), ""]
    if data.acknowledged:
        out += [md(data.acknowledged[0].upper() + data.acknowledged[1:]) + ".", ""]
    if data.provenance:
        lines = [(k, v) for k, v in data.provenance.items() if k not in ("analysed by", "trials")]
        out += [" · ".join(f"{md(k)}: {code(v)}" for k, v in lines), ""]
        for own in ("analysed by", "trials"):  # each on its own line
            if own in data.provenance:
                out += [f"{own}: {code(data.provenance[own])}", ""]
    out += [
        f"Budget **{md(data.budget)}** · objective: {md(data.objective)} · trials: {c.get('done', 0)} done, "
        f"{c.get('failed', 0)} failed, {c.get('running', 0)} running, {c.get('not started', 0)} not started · "
        f"generated {md(data.generated)}. The full page with embedded figures: [index.html](index.html).", "",
    ]
    out += [f"> {md(n)}\n" for n in data.notes]
    out += [claim_sections_block([s for s in data.sections if s.claims]), ""]
    out += sections_lines([s for s in data.sections if not s.claims])
    rest = [f for f in data.figures if f.name != HEADLINE_FIGURE and f.files.get("png") is not None]
    if rest:
        out += ["## Figures", ""]
    for fig in rest:
        out += figure_md(fig)
    if data.tables:
        out += ["## Tables", "", claim_tables_block([t for t in data.tables if t.claims]), ""]
        for t in data.tables:
            if not t.claims:
                out += [table_md(t), ""]
    if data.missing is not None:
        out += ["## Missing trials", "", table_md(data.missing), ""]
    if data.samples:
        out += ["## Sample completions", ""]
        for title, frame in data.samples:
            out += [f"### {md(title)}", "", frame_md(frame), ""]
    if data.design is not None:
        out += ["## Design", "", table_md(data.design), ""]
    if data.alias_lines:
        out += ["### Alias structure", "", fence("\n".join(data.alias_lines)), ""]
    out += ["## Configuration", ""]
    if data.study_yaml:
        out += ["### Study file", "", fence(data.study_yaml, "yaml"), ""]
    if data.baseline_config:
        out += ["### Resolved configuration of the baseline arm", "", fence(data.baseline_config, "yaml"), ""]
    if data.versions:
        out += ["### Versions", ""] + [f"- {md(k)}: {md(v)}" for k, v in data.versions.items()] + [""]
    if data.files or data.uncommitted:
        out += ["### Files", "", ", ".join(f"[{md(f)}]({f})" for f in data.files), ""]
        if data.uncommitted:
            out += [md(uncommitted_sentence(data.uncommitted)), ""]
    return "\n".join(out).rstrip() + "\n"
