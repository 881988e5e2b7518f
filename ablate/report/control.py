"""Did the baseline learn? The positive control's block at the top of every report (issue 54).

The control itself (the baseline arm's gain from step 0 to its last evaluation, 95% paired t over seeds,
one of *learned*, *did not learn*, *collapsed*, *not resolved*; per context in a context study) and its
effect on the verdicts (an equivalence where nothing was learned is *uninformative*) are computed in
:mod:`ablate.report.learning`, whose names this module also exports. Here are its words: gains printed as
the report prints them (points for a fraction).

:func:`study_block` renders the block for a study and its curves; both paths that write it call it:
:func:`ablate.report.build.write_report` with the curves it writes, and ``ablate ledger``
(:func:`ablate.report.ledger.generated_files`) with each committed report's curves.csv
(:func:`committed_block`), which :func:`spliced` places between :data:`BEGIN` and :data:`END` right
after the Findings' answer.
"""


from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ablate.report.learning import (
    COLLAPSED,
    CURVES_FILE,
    DID_NOT_LEARN,
    LEARNED,
    NOT_RESOLVED,
    Control,
    baseline_arms,
    folder_controls,
    informative,
    judged,
    judged_across,
    learning_gain,
    not_learned_text,
    objective_curves,
    study_controls,
)
from ablate.report.page import ANSWER, replace_marked
from ablate.stats.intervals import MIN_SEEDS

if TYPE_CHECKING:
    from ablate.study import Study

__all__ = ["BEGIN", "COLLAPSED", "CURVES_FILE", "Control", "ControlBlock", "DID_NOT_LEARN", "END", "LEARNED",
           "NOT_RESOLVED", "TITLE", "baseline_arms", "committed_block", "control_block", "folder_controls",
           "informative", "judged", "judged_across", "learning_gain", "not_learned_text", "objective_curves",
           "spliced", "study_block", "study_controls"]

#: Markers of the control's block in a report's README.md and index.html.
BEGIN, END = "<!-- ablate:control:begin -->", "<!-- ablate:control:end -->"
#: The block's heading.
TITLE = "Did the baseline learn?"
#: Where the block goes: right after the Findings' answer (its bullets in README.md, its list in index.html).
_FINDINGS_MD, _FINDINGS_HTML, _ANSWER_HTML = "\n## Findings\n\n", "<h2>Findings</h2>\n", '<ul class="answer">'


# ------------------------------------------------------------------------------------------ words


@dataclass(frozen=True)
class ControlBlock:
    """The control as a report prints it: paragraphs and, for a study with contexts, a table (strings,
    escaped by the renderers); :meth:`markdown` and :meth:`html` give the marked block."""

    paragraphs: tuple[str, ...]
    table: pd.DataFrame | None = None
    controls: tuple[Control, ...] = ()

    def markdown(self) -> str:
        from ablate.report.markdown import frame_md, md

        out = [BEGIN, f"### {TITLE}", ""]
        for text in self.paragraphs:
            out += [md(text), ""]
        if self.table is not None:
            out += [frame_md(self.table), ""]
        return "\n".join(out) + "\n" + END  # a blank line: the end marker never continues a table or paragraph

    def html(self) -> str:
        from ablate.report.html import e, frame_html

        out = [BEGIN, f'<h3 id="positive-control">{e(TITLE)}</h3>', *(f"<p>{e(t)}</p>" for t in self.paragraphs)]
        if self.table is not None:
            out.append(frame_html(self.table))
        return "\n".join(out) + END


def _steps(c: Control) -> str:
    lo, hi = c.last_steps
    return f"step {lo}" if lo == hi else f"its last evaluation (steps {lo}-{hi})"


def _points(x: float, factor: float, unit: str) -> str:
    from ablate.report.findings import signed

    return f"{signed(x * factor)}{f' {unit}' if unit else ''}"


def _why(c: Control, factor: float, unit: str) -> str:
    """The verdict with its reason, as the sentence ends."""
    from ablate.report.findings import num

    if c.verdict == LEARNED:
        return LEARNED
    if c.verdict == COLLAPSED:
        return f"{COLLAPSED} (the whole interval is below 0: RL made the baseline worse)"
    if c.verdict == NOT_RESOLVED:
        return f"{NOT_RESOLVED} at {c.n} seed{'s' if c.n != 1 else ''} (no interval below {MIN_SEEDS} seeds)"
    if c.ci_low > 0:
        return (f"{DID_NOT_LEARN} (it gained less than the study's min_effect of "
                f"{num((c.min_effect or 0) * factor)}{f' {unit}' if unit else ''})")
    return f"{DID_NOT_LEARN} (the interval holds 0)"


def control_sentence(c: Control, metric: str, factor: float, unit: str) -> str:
    """One context's control in a sentence (a study without contexts: the block's first paragraph)."""
    from ablate.report.findings import ci_text, num

    who = f"the baseline (arm {c.arm})"
    if c.n == 0:
        return (f"Positive control: {NOT_RESOLVED}: {who} has no seed with an evaluation of {metric} at step 0 and a "
                "later one, so whether it learned cannot be told.")
    means = f"mean {metric} {num(c.start)} → {num(c.end)}"
    if c.n < MIN_SEEDS:
        per_seed = ", ".join(_points(g, factor, "") for g in c.gains)
        return (f"Positive control: {who} gained {_points(c.gain, factor, unit)} from step 0 to {_steps(c)} at "
                f"{c.n} seed{'s' if c.n != 1 else ''} (per seed {per_seed}; {means}): {_why(c, factor, unit)}.")
    return (f"Positive control: {who} gained {_points(c.gain, factor, unit)} {ci_text(c.ci_low, c.ci_high, factor)} "
            f"from step 0 to {_steps(c)} (95% paired t, {c.n} seeds; {means}): {_why(c, factor, unit)}.")


#: What the block says when the baseline did not learn: why an equivalence there is no evidence.
UNINFORMATIVE = ("Where the baseline did not learn, no choice had anything to change: an 'equivalent' verdict {where} "
                 "is uninformative, not evidence that the choice does not matter.")
COLLAPSE_NOTE = ("Where the baseline collapsed, a level that beats it may have prevented the collapse rather than "
                 "improved learning.")


def _context_table(controls: Sequence[Control], metric: str, factor: float, unit: str) -> pd.DataFrame:
    from ablate.report.findings import ci_text, num

    return pd.DataFrame([{
        "context": c.context, "seeds": str(c.n),
        f"{metric}: step 0 → last": f"{num(c.start)} → {num(c.end)}" if c.n else "–",
        "last step": str(c.last_steps[0]) if c.last_steps[0] == c.last_steps[1] else "{}-{}".format(*c.last_steps),
        f"gain ({unit})" if unit else "gain": _points(c.gain, factor, "") if c.n else "–",
        "95% paired t": ci_text(c.ci_low, c.ci_high, factor) if math.isfinite(c.ci_low) else "–",
        "verdict": c.verdict} for c in controls])


def _contexts_paragraphs(controls: Sequence[Control], levels: str, factor: float, unit: str) -> list[str]:
    k = len(controls)
    by = {v: [c.context for c in controls if c.verdict == v] for v in (LEARNED, DID_NOT_LEARN, COLLAPSED, NOT_RESOLVED)}
    counts = [f"{v} in {len(by[v])}" + (f" ({'; '.join(by[v])})" if v != DID_NOT_LEARN else "")
              for v in (LEARNED, DID_NOT_LEARN, COLLAPSED, NOT_RESOLVED) if by[v]]
    out = [f"Positive control per context: the baseline ({levels}) {', '.join(counts)} of the {k} contexts: its gain "
           "from step 0 to the last evaluation, paired over each context's seeds (95% paired t; learned: the interval "
           f"above 0 and a mean gain of at least the study's min_effect; collapsed: the interval below 0)."]
    flat = len(by[DID_NOT_LEARN]) + len(by[COLLAPSED])
    if flat:
        them = "it" if flat == 1 else "them"
        pooled = (f" The verdicts across contexts pool {them} with the {len(by[LEARNED])} where it learned."
                  if by[LEARNED] else " The baseline learned in no context: every verdict across contexts rests on "
                  "contexts where it did not.")
        out.append(UNINFORMATIVE.format(where=f"in {'that context' if flat == 1 else f'those {flat} contexts'}")
                   + pooled + (f" {COLLAPSE_NOTE}" if by[COLLAPSED] else ""))
    return out


def control_block(controls: Sequence[Control], *, metric: str, factor: float = 1.0, unit: str = "",
                  levels: str = "") -> ControlBlock:
    """The block of ``controls`` (:func:`learning_gain`): one sentence for a study without contexts, a summary
    and a table for one with (``levels``: the compared factors' baseline levels, ``loss_norm=sequence,...``);
    when the baseline did not learn or collapsed, why an *equivalent* verdict is then no evidence."""
    if not controls:
        return ControlBlock((f"Positive control: {NOT_RESOLVED}: the design runs no arm at the baseline levels, so "
                             "whether the baseline learned cannot be told.",))
    if len(controls) == 1 and not controls[0].context:
        c = controls[0]
        text = [control_sentence(c, metric, factor, unit)]
        if c.verdict in (DID_NOT_LEARN, COLLAPSED):
            text.append(UNINFORMATIVE.format(where="of this report") + (f" {COLLAPSE_NOTE}" if c.verdict == COLLAPSED
                                                                       else ""))
        return ControlBlock(tuple(text), None, tuple(controls))
    return ControlBlock(tuple(_contexts_paragraphs(controls, levels or "its compared factors' baseline levels",
                                                   factor, unit)),
                        _context_table(controls, metric, factor, unit), tuple(controls))


def study_block(study: Study, curves: pd.DataFrame) -> ControlBlock:
    """The block of ``study`` over its ``curves`` (``key, arm, seed, step, value``): what a new report and
    ``ablate ledger`` both print."""
    from ablate.report.statistics import Scale

    scale = Scale.of(study.objective.metric)
    levels = ",".join(f"{f.name}={study.baseline_levels[f.name]}" for f in study.compared) if study.contexts else ""
    return control_block(study_controls(study, curves), metric=study.objective.metric, factor=scale.factor,
                         unit=scale.unit, levels=levels)


def committed_block(folder: Path, root: Path) -> ControlBlock:
    """The block of the committed report in ``folder`` from its files alone: its study file (named by its
    README's provenance, relative to ``root``) and its curves.csv."""
    from ablate.errors import AblateError
    from ablate.report.folder import PRODUCED
    from ablate.study import load_study

    m = PRODUCED.search((folder / "README.md").read_text(encoding="utf-8"))
    argv = shlex.split(m["command"]) if m else []
    try:
        study = load_study(root / argv[2]) if argv[:2] == ["ablate", "run"] and len(argv) > 2 else None
    except (AblateError, OSError):
        study = None
    if study is None:
        return ControlBlock((f"Positive control: {NOT_RESOLVED}: the study file this report names cannot be read, so "
                             "its baseline arm is not known.",))
    curves_file = folder / CURVES_FILE
    if not curves_file.is_file():
        return ControlBlock((f"Positive control: {NOT_RESOLVED}: this report commits no {CURVES_FILE} (it predates "
                             "it), so its baseline's step-0 evaluation is not in its files and whether the baseline "
                             "learned cannot be told. Its 'equivalent' verdicts are unchecked against this control.",))
    return study_block(study, pd.read_csv(curves_file, dtype={"key": str, "arm": str}))


# ------------------------------------------------------------------------------------------ files


def _md_at(text: str) -> int:
    """Where the block goes in a README without one: after the Findings' answer bullets (-1: no Findings)."""
    k = text.find(_FINDINGS_MD)
    if k < 0:
        return -1
    k += len(_FINDINGS_MD)
    if text.startswith(ANSWER[0], k):  # the answer's marked block (ablate.report.verdicts)
        k = text.index(ANSWER[1], k) + len(ANSWER[1])
        k += 1 if text.startswith("\n", k) else 0
    while text.startswith("- ", k):
        nl = text.find("\n", k)
        k = len(text) if nl < 0 else nl + 1
    return k + 1 if text.startswith("\n", k) else k


def _html_at(text: str) -> int:
    """Where the block goes in an index.html without one: after the Findings' answer list (-1: no Findings)."""
    k = text.find(_FINDINGS_HTML)
    if k < 0:
        return -1
    k += len(_FINDINGS_HTML)
    if text.startswith(ANSWER[0], k):  # the answer's marked block (ablate.report.verdicts)
        k = text.index(ANSWER[1], k) + len(ANSWER[1])
        return k + (1 if text.startswith("\n", k) else 0)
    if text.startswith(_ANSWER_HTML, k):
        k = text.index("</ul>", k) + len("</ul>")
        k += 1 if text.startswith("\n", k) else 0
    return k


def _splice(text: str, block: str, at: int, sep: str) -> str:
    replaced = replace_marked(text, BEGIN, END, block)
    if replaced is not None:
        return replaced
    if at < 0:
        return text.rstrip() + "\n\n" + block + "\n"
    return text[:at] + block + sep + text[at:]


def spliced(md_text: str, html_text: str, block: ControlBlock) -> tuple[str, str]:
    """A report's README.md and index.html with ``block`` in place: replaced between :data:`BEGIN` and
    :data:`END`, else inserted right after the Findings' answer (``html_text`` ``""``: left empty)."""
    md_new = _splice(md_text, block.markdown(), _md_at(md_text), "\n\n")
    html_new = _splice(html_text, block.html(), _html_at(html_text), "\n") if html_text else html_text
    return md_new, html_new
