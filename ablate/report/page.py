"""What a report page shows: plain, already phrased data that the HTML and Markdown renderers read
(:mod:`ablate.report.html`, :mod:`ablate.report.markdown`). Strings are raw: the renderers escape
them. Built once by :func:`ablate.report.build.write_report`, never changed afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

#: The figure both pages show with the answer, at the top (the rest follow under "Figures").
HEADLINE_FIGURE = "claims"

#: The marked places of a report's body that carry its verdicts, each a (begin, end) pair of HTML comments in
#: README.md and index.html: the answer at the top, the claims figure under it, the sections of claims and the
#: tables of claims. Everything between them is computed from the trials' objectives alone (results.csv; the
#: positive control from curves.csv), so ``ablate ledger`` re-renders them in every committed report
#: (:mod:`ablate.report.verdicts`) from the same functions a new report uses, beside the evidence block.
ANSWER = ("<!-- ablate:answer:begin -->", "<!-- ablate:answer:end -->")
CLAIMS_FIGURE = ("<!-- ablate:claims-figure:begin -->", "<!-- ablate:claims-figure:end -->")
CLAIM_SECTIONS = ("<!-- ablate:claim-sections:begin -->", "<!-- ablate:claim-sections:end -->")
CLAIM_TABLES = ("<!-- ablate:claim-tables:begin -->", "<!-- ablate:claim-tables:end -->")


def replace_marked(text: str, begin: str, end: str, block: str) -> str | None:
    """``text`` with the span from ``begin`` to the end of ``end`` replaced by ``block``; None when the markers are
    absent (or out of order), where each caller has its own place for a first block."""
    i, j = text.find(begin), text.find(end)
    return text[:i] + block + text[j + len(end):] if i >= 0 and j > i else None


def digest_line(digest: str) -> str:
    """The hidden line of the claims figure's block that names the data it was drawn from
    (:func:`ablate.report.verdicts.claims_digest`): ``ablate ledger`` redraws claims.png when it changes."""
    return f"<!-- claims.png drawn from the claims with digest {digest} -->"


@dataclass(frozen=True)
class Table:
    """A table of the report: a title, a caption and a frame of already formatted strings."""

    title: str
    frame: pd.DataFrame
    caption: str = ""
    anchor: str = ""
    claims: bool = False  # a table of claims (verdicts, p values, intervals): between the CLAIM_TABLES markers


#: The files of a report folder that a committed report leaves out (the repository's .gitignore:
#: ``reports/*/tidy.csv.gz``, ``problems.csv.gz``, ``samples.json``, ``*.svg``), each with what it holds: the
#: pages name them without a link (a link would be broken wherever the report is committed).
NOT_COMMITTED = {"tidy.csv.gz": "every step of every metric, which ablate report --from reads",
                 "problems.csv.gz": "per-problem evaluation records", "samples.json": "the sample completions"}


def split_files(files: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``files`` of a report folder as (linked: committed with a report, named: :data:`NOT_COMMITTED` and the
    SVG copies), each in the given order."""
    named = tuple(f for f in files if f in NOT_COMMITTED or f.endswith(".svg"))
    return tuple(f for f in files if f not in named), named


def uncommitted_sentence(names: Sequence[str]) -> str:
    """What the pages say of the files :func:`split_files` names without a link ("" when none)."""
    if not names:
        return ""
    said = ", ".join(f"{n} ({NOT_COMMITTED[n]})" if n in NOT_COMMITTED else n for n in names)
    return (f"Not linked, because a committed report leaves them out (.gitignore): {said}. They were written "
            "beside this page where it was built, and ablate run and ablate report (without --no-log) upload "
            "them with it to the study's MLflow parent run (artifacts report/).")


@dataclass(frozen=True)
class FigureRef:
    """A figure of the report and its files (``png`` is embedded in the HTML page)."""

    name: str
    title: str
    caption: str
    files: dict[str, Path]


@dataclass(frozen=True)
class Section:
    """A list of findings under a heading, with an optional paragraph before it."""

    title: str
    items: tuple[str, ...]
    intro: str = ""
    claims: bool = False  # a section of claims (verdicts, p values, intervals): between the CLAIM_SECTIONS markers


@dataclass(frozen=True)
class ReportPage:
    """Everything the pages show. The first screen holds the question (``description``), the answer
    (one sentence per primary contrast) and the claims figure; then what the study acknowledges running
    on purpose, the provenance, and the method and details below their own headings."""

    study: str
    description: str
    budget: str
    objective: str
    generated: str
    counts: dict[str, int]
    provenance: dict[str, str] = field(default_factory=dict)
    answer: tuple[str, ...] = ()
    acknowledged: str = ""
    notes: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    figures: tuple[FigureRef, ...] = ()
    tables: tuple[Table, ...] = ()
    missing: Table | None = None
    samples: tuple[tuple[str, pd.DataFrame], ...] = ()
    design: Table | None = None
    alias_lines: tuple[str, ...] = ()
    study_yaml: str = ""
    baseline_config: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    uncommitted: tuple[str, ...] = ()
    claims_digest: str = ""  # the data the claims figure was drawn from (:func:`digest_line`)
