"""The report as one self-contained HTML page (no script, no external resource: it opens offline).

Figures are embedded as base64 PNG data URIs (their SVG files are linked, beside the page). Every
string that comes from the user or the results (study name, description, factor and level names,
sample completions, configuration, errors) goes through :func:`html.escape`: a name containing
markup shows as text.
"""

from __future__ import annotations

import base64
import html
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

STYLE = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0 auto;
       max-width: 1160px; padding: 1.5em; color: #1d1d1f; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
.meta { color: #555; } .finding { margin: 0.35em 0; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.86em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0 2em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.9em; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.82em; white-space: pre-wrap; }
.caption { color: #555; font-size: 0.88em; } .note { color: #7a4b00; }
.sample td { white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.95em; }
.question { font-size: 1.08em; } ul.answer { padding-left: 1.2em; } li.answer { margin: 0.4em 0; font-size: 1.04em; }
figure.headline { margin: 0.6em 0 1em 0; } figure.headline img { max-height: 520px; width: auto; }
details { margin: 0.5em 0; } summary { cursor: pointer; font-weight: 600; font-size: 1.05em; padding: 0.2em 0; }
.acknowledged { color: #444; }
"""


def e(text: object) -> str:
    """``text`` escaped for HTML (quotes included)."""
    return html.escape(str(text), quote=True)


def _is_num(text: str) -> bool:
    try:
        float(text.replace("−", "-").replace("∞", "inf"))
        return True
    except ValueError:
        return text == "–"


def frame_html(frame: pd.DataFrame, css: str = "") -> str:
    """A DataFrame of strings as an HTML table, every header and cell escaped."""
    head = "".join(f"<th>{e(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="num">{e(v)}</td>' if _is_num(str(v)) else f"<td>{e(v)}</td>" for v in row)
        body.append(f"<tr>{cells}</tr>")
    cls = f' class="{e(css)}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def table_html(table: Table) -> str:
    """A report table with its title and caption."""
    anchor = f' id="{e(table.anchor)}"' if table.anchor else ""
    caption = f'<p class="caption">{e(table.caption)}</p>' if table.caption else ""
    return f"<h3{anchor}>{e(table.title)}</h3>{caption}{frame_html(table.frame)}"


def figure_html(fig: FigureRef, css: str = "") -> str:
    """A figure with its PNG embedded as a data URI, its caption and links to its files ("" without a PNG)."""
    png = fig.files.get("png")
    if png is None:
        return ""
    b64 = base64.b64encode(png.read_bytes()).decode("ascii")
    links = " ".join(f'<a href="{e(p.name)}">{e(fmt.upper())}</a>' for fmt, p in fig.files.items())
    cls = f' class="{e(css)}"' if css else ""
    return (f'<figure id="fig-{e(fig.name)}"{cls}><img src="data:image/png;base64,{b64}" alt="{e(fig.title)}">'
            f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)} ({links})</figcaption></figure>")


def marked(markers: tuple[str, str], parts: Sequence[str]) -> str:
    """``parts`` (one line each) between the ``(begin, end)`` markers."""
    return "\n".join([markers[0], *parts, markers[1]])


def answer_block(answer: Sequence[str]) -> str:
    """The answer's list between the :data:`ablate.report.page.ANSWER` markers."""
    items = "".join(f'<li class="answer">{e(s)}</li>' for s in answer)
    return marked(ANSWER, [f'<ul class="answer">{items}</ul>'] if answer else [])


def claims_figure_block(figures: Sequence[FigureRef], digest: str) -> str:
    """The claims figure (the headline figure, if drawn), embedded, and the digest of the data it was drawn from,
    between the :data:`ablate.report.page.CLAIMS_FIGURE` markers."""
    shown = [figure_html(f, "headline") for f in figures if f.name == HEADLINE_FIGURE]
    shown = [f for f in shown if f]
    return marked(CLAIMS_FIGURE, [*shown, digest_line(digest)] if shown else [])


def section_parts(sections: Sequence[Section]) -> list[str]:
    """Sections of findings, each collapsed below its title."""
    parts = []
    for sec in sections:
        parts.append(f"<details><summary>{e(sec.title)}</summary>")
        if sec.intro:
            parts.append(f'<p class="intro">{e(sec.intro)}</p>')
        if sec.items:
            parts.append("<ul>" + "".join(f'<li class="finding">{e(s)}</li>' for s in sec.items) + "</ul>")
        parts.append("</details>")
    return parts


def claim_sections_block(sections: Sequence[Section]) -> str:
    """The sections of claims between the :data:`ablate.report.page.CLAIM_SECTIONS` markers."""
    return marked(CLAIM_SECTIONS, section_parts(sections))


def table_details(table: Table) -> str:
    """A report table collapsed below its title."""
    return f"<details><summary>{e(table.title)}</summary>{table_html(table)}</details>"


def claim_tables_block(tables: Sequence[Table]) -> str:
    """The tables of claims between the :data:`ablate.report.page.CLAIM_TABLES` markers."""
    return marked(CLAIM_TABLES, [table_details(t) for t in tables])


def render_html(data: ReportPage) -> str:
    """The whole page."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e('ablate report: ' + data.study)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Ablation study {e(data.study)}</h1>",
    ]
    if data.description:
        parts.append(f'<p class="question"><b>Question.</b> {e(data.description)}</p>')
    parts += ["<h2>Findings</h2>", answer_block(data.answer), claims_figure_block(data.figures, data.claims_digest)]
    if data.acknowledged:
        parts.append(f'<p class="acknowledged">{e(data.acknowledged[0].upper() + data.acknowledged[1:])}.</p>')
    if data.provenance:
        parts.append('<p class="meta provenance">' + " · ".join(
            f"{e(k)}: <code>{e(v)}</code>" for k, v in data.provenance.items()) + "</p>")
    c = data.counts
    parts.append(
        f'<p class="meta">budget <b>{e(data.budget)}</b> · objective: {e(data.objective)} · trials: '
        f"{c.get('done', 0)} done, {c.get('failed', 0)} failed, {c.get('running', 0)} running, "
        f"{c.get('not started', 0)} not started · generated {e(data.generated)}</p>"
    )
    for note in data.notes:
        parts.append(f'<p class="note">{e(note)}</p>')
    # the claims, method and details: collapsed below the answer
    parts.append(claim_sections_block([s for s in data.sections if s.claims]))
    parts += section_parts([s for s in data.sections if not s.claims])
    rest = [f for f in data.figures if f.name != HEADLINE_FIGURE and f.files.get("png") is not None]
    if rest:
        parts.append("<h2>Figures</h2>")
    parts.extend(figure_html(f) for f in rest)
    if data.tables:
        parts += ["<h2>Tables</h2>", claim_tables_block([t for t in data.tables if t.claims])]
        parts += [table_details(t) for t in data.tables if not t.claims]
    if data.missing is not None:
        parts.append("<h2>Missing trials</h2>")
        parts.append(table_html(data.missing))
    if data.samples:
        parts.append("<h2>Sample completions</h2>")
        parts.append('<p class="caption">From the last training step of one seed per arm, with each reward '
                     "component's reward (summed over its tokens).</p>")
        for title, frame in data.samples:
            parts.append(f"<h3>{e(title)}</h3>{frame_html(frame, 'sample')}")
    if data.design is not None:
        parts.append("<h2>Design</h2>")
        parts.append(table_html(data.design))
    if data.alias_lines:
        parts.append("<h3>Alias structure</h3><pre>" + e("\n".join(data.alias_lines)) + "</pre>")
    parts.append("<h2>Configuration</h2>")
    if data.study_yaml:
        parts.append(f"<h3>Study file</h3><pre>{e(data.study_yaml)}</pre>")
    if data.baseline_config:
        parts.append(f"<h3>Resolved configuration of the baseline arm</h3><pre>{e(data.baseline_config)}</pre>")
    if data.versions:
        parts.append("<h3>Versions</h3><ul>")
        parts.extend(f"<li>{e(k)}: {e(v)}</li>" for k, v in data.versions.items())
        parts.append("</ul>")
    if data.files or data.uncommitted:
        parts.append("<h3>Files</h3><p>" + ", ".join(f'<a href="{e(f)}">{e(f)}</a>' for f in data.files) + "</p>")
        if data.uncommitted:
            parts.append(f"<p>{e(uncommitted_sentence(data.uncommitted))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
