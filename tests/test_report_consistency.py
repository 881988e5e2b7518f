"""A report's body and its evidence block come from one computation (issue 54, item 5): every committed report's
claims, in its answer, its sections of claims and its claims table, say the verdict, the Holm p and the seeds needed
its evidence block says; and a new report's verdict-bearing parts are exactly what `ablate ledger` re-renders from
its results.csv."""

from __future__ import annotations

import html
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ablate.report import ledger as L
from ablate.report import verdicts
from ablate.report.build import write_report
from ablate.report.page import ANSWER, CLAIM_SECTIONS, CLAIM_TABLES, CLAIMS_FIGURE
from ablate.study import load_study
from ablate.study.plan import Plan

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"


def _plain(cell: str) -> str:
    """A Markdown cell or line as text: the renderer's escapes undone."""
    return html.unescape(cell.replace("\\", "")).strip()


def _table_after(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after ``heading``, as dicts by (unescaped) column title."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([_plain(c) for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return [dict(zip(rows[0], r)) for r in rows[2:]]


def _close(body: str, block: str) -> bool:
    """One p value as the body prints it (2 significant digits) and as the evidence block does (3, or ``< 0.001``)."""
    if block == "–" or body == "–":
        return block == body
    if "<" in block or "<" in body:  # below 0.001 in one, so in both
        return all("<" in x or float(x) < 0.001 for x in (body, block))
    return math.isclose(float(body), float(block), rel_tol=0.05, abs_tol=1e-12)


#: Every verdict word a claim's sentence may open with (a context study's first).
VERDICTS = ("holds across contexts", "equivalent on average across contexts", "context-dependent", "detected",
            "equivalent", "uninformative", "not resolved")


def disagreements(text: str) -> list[str]:
    """Where a report's body disagrees with its evidence block: each claim's verdict (its claims table, its
    sentence in the answer and in the sections of claims), its Holm p (the table's and the sentence's) and the
    seeds it needs."""
    evidence = text[text.index(L.BEGIN):text.index(L.END)]
    block = {r["claim"].removesuffix(" ★"): r for r in _table_after(evidence, "Error control across the project")}
    body = text[:text.index(L.BEGIN)] + text[text.index(L.END):]
    table = {r["claim"]: r for r in _table_after(body, "### Claims (one family)")}
    lines = [_plain(line[2:]) for line in body.splitlines() if line.startswith("- ")]
    out = []
    for name, ev in block.items():
        word = ev["verdict"].split(";")[0].removesuffix(" here")  # "detected here; a lead project-wide" -> detected
        verdict = "detected" if word in L.DETECTIONS else word
        mine = table.get(name)
        if mine is None:
            out.append(f"{name}: not in the body's claims table")
            continue
        said = "detected" if mine["verdict"] in L.DETECTIONS else mine["verdict"]
        if said != verdict:
            out.append(f"{name}: {mine['verdict']} in the table, {ev['verdict']} in the evidence block")
        if not _close(mine["p (Holm)"], ev["p (Holm, report)"]):
            out.append(f"{name}: Holm p {mine['p (Holm)']} in the table, {ev['p (Holm, report)']} in the evidence block")
        if mine["seeds needed"] != ev["seeds needed"]:
            out.append(f"{name}: {mine['seeds needed']} seeds needed in the table, {ev['seeds needed']} in the block")
        for line in (x for x in lines if x.startswith(f"{name}: ")):
            words = line[len(name) + 2:]
            says = [v for v in VERDICTS if words.startswith(v)]  # (a sentence may describe without a verdict)
            if says and says[0] != verdict and not (verdict == "detected" and says[0] in L.DETECTIONS):
                out.append(f"{name}: '{words[:40]}...' in a sentence, {ev['verdict']} in the evidence block")
            p = re.search(r"\bp (= [0-9.e-]+|< 0\.001) \(Holm", line)
            if p and not _close(p[1].removeprefix("= "), ev["p (Holm, report)"]):
                out.append(f"{name}: 'p {p[1]}' in a sentence, Holm p {ev['p (Holm, report)']} in the evidence block")
    return out


@pytest.mark.parametrize("folder", L.report_folders(REPORTS), ids=lambda p: p.name)
def test_every_committed_report_s_body_says_what_its_evidence_block_says(folder):
    """Before the bodies were re-rendered from results.csv, 11 reports' bodies held single-stage statistics
    beside their two-stage evidence blocks: loss_normalization's length penalty "detected, p = 0.044" above
    "not resolved, Holm 0.0796", granularity_cross's reward x ratio interaction detected above not resolved,
    behaviour_logp's 5 seeds needed above 3."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    page = (folder / "index.html").read_text(encoding="utf-8") if (folder / "index.html").is_file() else text
    for begin, end in (ANSWER, CLAIMS_FIGURE, CLAIM_SECTIONS, CLAIM_TABLES):  # both pages: `ablate ledger` renders them
        assert [text.count(begin), text.count(end), page.count(begin), page.count(end)] == [1] * 4, (folder.name, begin)
    assert disagreements(text) == []


def test_the_check_finds_a_body_that_disagrees_with_its_evidence_block():
    text = (REPORTS / "loss_normalization" / "README.md").read_text(encoding="utf-8")
    old = text.replace("not resolved at 16 seeds: -7.09", "detected: -7.09", 1)
    assert disagreements(old) == ["loss_norm: length-penalty vs seq-mean: 'detected: -7.09 points [-12.3, -1.88] (9...' "
                                  "in a sentence, not resolved in the evidence block"]
    row = re.search(r"^\| loss\\_norm: length-penalty vs seq-mean \| exploratory \| not resolved .*$", text, re.M)[0]
    cells = row.split(" | ")
    cells[2], cells[10], cells[-1] = "detected", "0.044", "40 |"
    found = disagreements(text.replace(row, " | ".join(cells)))
    name = "loss_norm: length-penalty vs seq-mean: "
    assert [f.removeprefix(name).split(" in ")[0] for f in found] == ["detected", "Holm p 0.044", "40 seeds needed"]


STUDY = """\
name: synth
description: Planted effects, seeds extended after a report of the first 4 was read
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
seeds: 8
extended_after: [4]
baseline: {loss_norm: sequence, clip_high: 0.2}
primary: [loss_norm]
min_effect: 0.05
objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 2}
"""


def test_a_new_report_s_verdicts_are_what_the_ledger_renders_from_its_results_csv(tmp_path):
    """write_report (from the tidy results) and `ablate ledger` (from results.csv and curves.csv alone) phrase and
    render the verdicts with the same functions: the ledger changes nothing in a report just written, and the
    body's claims say the evidence block's two-stage verdicts."""
    from test_report import FAST, synthetic

    (tmp_path / "studies").mkdir()
    path = tmp_path / "studies" / "synth.yaml"
    path.write_text(STUDY)
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(3), effect=0.04)
    res.parent.update({"ablate.command": "ablate run studies/synth.yaml", "ablate.git_commit": "abc1234"})
    folder = tmp_path / "reports" / "synth"
    write_report(Plan.of(study, "default"), res, folder, **FAST)
    md, page = (folder / "README.md").read_text(encoding="utf-8"), (folder / "index.html").read_text(encoding="utf-8")
    assert "two-stage" in md and "<!-- claims.png drawn from the claims with digest " in md
    assert L.report_files(folder, tmp_path, L.report_block(folder)) == {folder / "README.md": md,
                                                                      folder / "index.html": page}
    assert disagreements(md) == []
    png = (folder / "claims.png").read_bytes()
    found = verdicts.committed_verdicts(folder, tmp_path)
    assert found is not None and not verdicts.redraw_claims(folder, found[1], md)  # its digest is the one drawn
    assert (folder / "claims.png").read_bytes() == png


def test_the_ledger_re_renders_an_old_body_and_redraws_its_claims_figure(tmp_path):
    """A report written before the markers: the ledger puts its verdicts in place of its answer, claims figure,
    sections and tables of claims, redraws claims.png and embeds it, and the next run changes nothing."""
    reports = tmp_path / "reports"
    shutil.copytree(REPORTS / "behaviour_logp", reports / "behaviour_logp")
    (tmp_path / "studies").symlink_to(ROOT / "studies")
    folder = reports / "behaviour_logp"
    md = (folder / "README.md").read_text(encoding="utf-8")
    old = md
    for begin, end in (ANSWER, CLAIMS_FIGURE, CLAIM_SECTIONS, CLAIM_TABLES):  # back to the unmarked body
        old = re.sub(re.escape(begin) + r"\n|\n\n" + re.escape(end), "", old)
    old = re.sub(r"\n\n<!-- claims\.png drawn from the claims with digest \w+ -->", "", old)
    old = old.replace("| 2.8e-06 | -0.33 | 1/2 | 3 |", "| 2.8e-06 | -0.33 | 1/2 | 5 |")  # an old planner's count
    (folder / "README.md").write_text(old, encoding="utf-8")
    (folder / "claims.png").unlink()
    assert any("5 seeds needed in the table" in d for d in disagreements(old))
    written = L.write_all(reports, tmp_path)
    assert folder / "README.md" in written and (folder / "claims.png").is_file()
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert disagreements(text) == [] and L.stale_files(reports, tmp_path) == []
    assert L.write_all(reports, tmp_path) == []
