"""README.md, as a newcomer reads it: every link and image resolves to a file of the repository (or an
anchor of the page it points at), and every number of the predefined-studies table's answers occurs
(rounded as the table prints it) in the committed report the row links to."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_DOWN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown page's headings: lower case, punctuation dropped, spaces as -."""
    out = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def local_links(markdown: str) -> list[str]:
    return [t for t in LINK.findall(markdown) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", ["README.md", "docs/findings.md", "docs/contexts.md", "docs/statistics.md"])
def test_every_link_and_image_resolves(page):
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in local_links(text):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{page}: links that do not resolve: {broken}"
    assert any(t.endswith(".png") for t in local_links(text)) or page != "README.md"  # README shows a report figure


def test_readme_is_short_and_has_no_findings_prose():
    assert len(README.encode()) < 16_000, "README is for a newcomer's two minutes: move detail to docs/"
    assert "## Findings" not in README and "docs/findings.md" in README


def _numbers(text: str) -> list[Decimal]:
    """Every number of ``text``: ``1,120`` (thousands separators), ``1.12e+03`` (an exponent), ``-0.5``."""
    found = re.findall(r"[-+]?\d{1,3}(?:,\d{3})+(?![\d.])|[-+]?\d+(?:\.\d+)?(?:e[-+]\d{1,3}(?![\d.]))?",
                       text.replace("−", "-").replace("\\", ""))
    return [Decimal(x.replace(",", "")) for x in found]


def _printed_as(value: Decimal, shown: Decimal) -> bool:
    """``value`` (as a report prints it) rounds to ``shown`` (as the README prints it), either way at a tie:
    the report's figure is itself rounded."""
    step = Decimal(1).scaleb(shown.as_tuple().exponent)
    try:
        return any(value.quantize(step, rounding=r) == shown for r in (ROUND_HALF_UP, ROUND_HALF_DOWN))
    except InvalidOperation:  # a number too large for the step's precision
        return False


def table_rows() -> list[tuple[str, str]]:
    section = README[README.index("## Predefined studies"):]
    section = section[:section.index("\n## ", 1)]
    rows = []
    for row in section.splitlines():
        m = re.search(r"\]\((reports/[^)]+/README\.md)\)", row)
        if m:
            rows.append((m.group(1), row.split("|")[-2]))
    return rows


def test_the_table_links_a_report_for_most_studies():
    assert len(table_rows()) >= 10


@pytest.mark.parametrize(("report", "answer"), table_rows(), ids=[r.split("/")[1] for r, _ in table_rows()])
def test_every_number_of_an_answer_is_in_its_report(report, answer):
    have = _numbers((ROOT / report).read_text(encoding="utf-8"))
    shown = [Decimal(x) for x in re.findall(r"[-+]?\d+\.\d+", answer.replace("−", "-"))]
    missing = [str(x) for x in shown if not any(_printed_as(h, x) for h in have)]
    assert not missing, f"README's answer for {report} quotes numbers its report does not hold: {missing}"


def test_the_number_check_can_fail():
    assert _printed_as(Decimal("2.75"), Decimal("2.7")) and _printed_as(Decimal("2.75"), Decimal("2.8"))
    assert not _printed_as(Decimal("2.76"), Decimal("2.7")) and not _printed_as(Decimal("-7.35"), Decimal("7.3"))


FINDINGS = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")


def findings_rows() -> list[tuple[str, str]]:
    """(report, the row) of docs/findings.md's table, one per row that links a report first."""
    rows = []
    for row in FINDINGS.splitlines():
        m = re.match(r"\| \[[^\]]+\]\(\.\./(reports/[^)]+/README\.md)\)", row)
        if m:
            rows.append((m.group(1), row))
    return rows


def test_the_findings_table_links_a_report_in_each_row():
    assert len(findings_rows()) >= 12


@pytest.mark.parametrize(("report", "measured"), findings_rows(), ids=[r.split("/")[1] for r, _ in findings_rows()])
def test_every_number_of_a_finding_is_in_its_report(report, measured):
    """Each decimal and percentage docs/findings.md quotes as measured (the row's last cell) occurs,
    rounded as quoted, in a committed report the row links to, or in docs/statistics.md's re-analysis
    and noise tables, which tests recompute from the committed results."""
    statistics = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    linked = {report, *re.findall(r"\(\.\./(reports/[^)]+/README\.md)\)", measured)}
    have = [x for r in sorted(linked) for x in _numbers((ROOT / r).read_text(encoding="utf-8"))] + _numbers(statistics)
    text = measured.split("|")[-2].replace("−", "-")
    shown = [Decimal(x.replace(",", "")) for x in re.findall(r"\d{1,3}(?:,\d{3})+(?![\d.])|[-+]?\d+\.\d+(?:e[-+]\d{1,3})?|\d+(?=%)", text)]
    have = [abs(h) for h in have]  # a sentence may turn a difference's sign into words ("shorter by")
    missing = [str(x) for x in shown if not any(_printed_as(h, abs(x)) or _printed_as(100 * h, abs(x)) for h in have)]
    assert not missing, f"docs/findings.md's row for {report} quotes numbers its report does not hold: {missing}"


def findings_bullets() -> list[str]:
    """The bullets of docs/findings.md's "What reproduces at this scale" section, one string each."""
    section = FINDINGS[FINDINGS.index("## What reproduces at this scale"):]
    section = section[:section.index("\nWhat the non-reproductions")]
    return [b.replace("\n  ", " ") for b in re.split(r"\n(?=- )", section)[1:]]


def test_the_findings_bullets_are_found():
    assert len(findings_bullets()) >= 10


@pytest.mark.parametrize("bullet", findings_bullets(), ids=lambda b: re.sub(r"\W+", "-", b[4:40]))
def test_every_number_of_a_findings_bullet_is_in_a_report_it_names(bullet):
    """Each decimal of a "What reproduces" bullet occurs, rounded as quoted, in a committed report the bullet
    names (`name` in backticks): the bullets are checked against the reports like the table's rows."""
    named = [n for n in re.findall(r"`([a-z_0-9]+)`", bullet) if (ROOT / "reports" / n / "README.md").is_file()]
    assert named, bullet[:80]
    have = [abs(x) for n in named for x in _numbers((ROOT / "reports" / n / "README.md").read_text(encoding="utf-8"))]
    shown = [Decimal(x) for x in re.findall(r"\d+\.\d+", bullet.replace("−", "-"))]
    missing = [str(x) for x in shown if not any(_printed_as(h, x) for h in have)]
    assert not missing, f"docs/findings.md quotes numbers the reports it names do not hold: {missing} in {bullet[:80]}"


def test_the_suite_figures_are_the_recorded_run_s():
    """README's sentence about the suite is generated from benchmarks/suite.json, one measured run
    (benchmarks/suite_record.py): typed numbers would drift."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from suite_record import BEGIN, END, readme_block

    rec = json.loads((ROOT / "benchmarks" / "suite.json").read_text(encoding="utf-8"))
    assert rec["passed"] > 1000 and rec["wall_s"] > 0
    assert README.split(BEGIN, 1)[1].split(END, 1)[0] == readme_block(rec)
