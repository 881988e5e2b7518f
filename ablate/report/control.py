"""Did the baseline learn? The positive control at the top of every report (issue 54).

A choice of loss, ratio or reward can change what RL reaches only where RL moves the policy. Where the
baseline arm stays at its warm start (or gets worse), an estimate near 0 says nothing about the choice:
an *equivalent* verdict there is uninformative, not evidence that the choice does not matter.

:func:`learning_gain` is the control, a pure function of a study's curves table (``curves.csv``: ``key,
arm, seed, step, value``, the objective metric at each evaluation): per seed of the baseline arm, its value
at the last evaluation minus its value at step 0 (the same held-out problems), the mean over seeds with
its 95% paired t-interval (:func:`scipy.stats.ttest_rel`), and a verdict:

- *learned*: the interval's lower bound is above 0 and the mean gain is at least the study's
  ``min_effect`` (above 0 without one);
- *collapsed*: the interval's upper bound is below 0;
- *did not learn*: anything else (the interval holds 0, or a gain below ``min_effect``);
- *not resolved*: fewer than :data:`ablate.intervals.MIN_SEEDS` paired seeds (no interval is given).

A study with ``contexts:`` gets one control per context, of the baseline levels' arm in that context
(:func:`baseline_arms`). Gains are in the objective's units and in its direction (last minus first for
``mode: max``, first minus last for ``mode: min``); the block prints them as the report does (points for a
fraction).

:func:`study_block` renders the block for a study and its curves; both paths that write it call it:
:func:`ablate.report.build.write_report` with the curves it writes, and ``ablate ledger``
(:func:`ablate.report.ledger.generated_files`) with each committed report's curves.csv
(:func:`committed_block`), which :func:`spliced` places between :data:`BEGIN` and :data:`END` right
after the Findings' answer.
"""

from __future__ import annotations

import math
import shlex
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from ablate.intervals import CONFIDENCE, MIN_SEEDS

if TYPE_CHECKING:
    from ablate.study import Study

__all__ = ["BEGIN", "COLLAPSED", "CURVES_FILE", "Control", "ControlBlock", "DID_NOT_LEARN", "END", "LEARNED",
           "NOT_RESOLVED", "TITLE", "baseline_arms", "committed_block", "control_block", "learning_gain",
           "spliced", "study_block", "study_controls"]

#: The verdicts of the control.
LEARNED, DID_NOT_LEARN, COLLAPSED, NOT_RESOLVED = "learned", "did not learn", "collapsed", "not resolved"
#: Markers of the control's block in a report's README.md and index.html.
BEGIN, END = "<!-- ablate:control:begin -->", "<!-- ablate:control:end -->"
#: The block's heading.
TITLE = "Did the baseline learn?"
#: The objective metric's history per trial, committed with a report (the control's input).
CURVES_FILE = "curves.csv"
#: Where the block goes: right after the Findings' answer (its bullets in README.md, its list in index.html).
_FINDINGS_MD, _FINDINGS_HTML, _ANSWER_HTML = "\n## Findings\n\n", "<h2>Findings</h2>\n", '<ul class="answer">'
#: A mean gain this close below min_effect counts as reaching it (the float rounding of a difference of fractions).
_ROUNDING = 1e-12


@dataclass(frozen=True)
class Control:
    """The baseline's learning gain in one context (``""`` for a study without contexts).

    Attributes:
        arm: the baseline arm whose trials were read.
        seeds: the seeds with a step-0 evaluation and a later one, in order; ``gains`` their
            per-seed gains (last evaluation minus step 0, in the objective's direction).
        start, end: the mean value at step 0 and at the last evaluation over those seeds.
        last_steps: the last evaluation's step, lowest and highest over the seeds (equal in a study
            whose trials ran the same steps).
        gain, ci_low, ci_high: the mean gain and its 95% paired t-interval (NaN below
            :data:`MIN_SEEDS` seeds; zero-width when every seed gained the same).
        verdict: :data:`LEARNED`, :data:`DID_NOT_LEARN`, :data:`COLLAPSED` or :data:`NOT_RESOLVED`.
        min_effect: the study's min_effect the verdict used (None: none declared).
    """

    context: str
    arm: str
    seeds: tuple[int, ...]
    gains: tuple[float, ...]
    start: float
    end: float
    last_steps: tuple[int, int]
    gain: float
    ci_low: float
    ci_high: float
    verdict: str
    min_effect: float | None = None

    @property
    def n(self) -> int:
        """The number of paired seeds."""
        return len(self.seeds)

    @property
    def learned(self) -> bool:
        """Whether the baseline learned here: a contrast's *equivalent* verdict is evidence only then."""
        return self.verdict == LEARNED


def verdict_of(gain: float, ci_low: float, ci_high: float, n: int, min_effect: float | None = None) -> str:
    """The control's verdict from the mean gain, its interval and the number of seeds (see the module)."""
    if n < MIN_SEEDS or not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return NOT_RESOLVED
    if ci_low > 0 and gain >= (min_effect or 0.0) - _ROUNDING:
        return LEARNED
    if ci_high < 0:
        return COLLAPSED
    return DID_NOT_LEARN


def paired_interval(end: np.ndarray, start: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The paired t-interval of ``mean(end - start)`` (:func:`scipy.stats.ttest_rel`); NaN below
    :data:`MIN_SEEDS` pairs, and zero-width when every pair differs by the same amount (no spread: the
    t-interval's limit, where scipy's would be NaN or rounding noise)."""
    d = end - start
    if d.size < MIN_SEEDS:
        return math.nan, math.nan
    if float(np.std(d)) <= _ROUNDING * max(1.0, float(np.abs(d).max())):
        return float(d.mean()), float(d.mean())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = stats.ttest_rel(end, start).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def _one(curves: pd.DataFrame, context: str, arm: str, min_effect: float | None, sign: float,
         confidence: float) -> Control:
    """The control of one context: the baseline ``arm``'s rows of ``curves``."""
    rows = curves[curves["arm"].astype(str) == arm]
    seeds, first, last, steps = [], [], [], []
    for seed, g in rows.sort_values("step", kind="stable").groupby("seed", sort=True):
        g = g[np.isfinite(g["value"].astype(float))]
        if g.empty or int(g["step"].iloc[0]) != 0 or int(g["step"].iloc[-1]) <= 0:
            continue  # no step-0 evaluation, or none after it: nothing to pair
        seeds.append(int(seed))
        first.append(float(g["value"].iloc[0]))
        last.append(float(g["value"].iloc[-1]))
        steps.append(int(g["step"].iloc[-1]))
    start, end = np.asarray(first, float), np.asarray(last, float)
    lo, hi = paired_interval(end, start, confidence) if sign > 0 else paired_interval(start, end, confidence)
    gains = sign * (end - start)
    gain = float(gains.mean()) if gains.size else math.nan
    return Control(context, arm, tuple(seeds), tuple(float(g) for g in gains),
                   float(start.mean()) if start.size else math.nan, float(end.mean()) if end.size else math.nan,
                   (min(steps), max(steps)) if steps else (0, 0), gain, lo, hi,
                   verdict_of(gain, lo, hi, len(seeds), min_effect), min_effect)


def learning_gain(curves: pd.DataFrame, baseline: str | Mapping[str, str], *, min_effect: float | None = None,
                  mode: str = "max", confidence: float = CONFIDENCE) -> tuple[Control, ...]:
    """The positive control: how much the baseline arm learned, from step 0 to its last evaluation.

    Args:
        curves: the objective per trial and evaluation: ``arm, seed, step, value`` (a report's
            curves.csv; ``key`` and other columns are ignored). Non-finite values are left out.
        baseline: the baseline arm's name; for a study with ``contexts:``, context -> the baseline
            levels' arm in that context (:func:`baseline_arms`), one control each, in its order.
        min_effect: the smallest gain that counts as learning (the study's min_effect, in the
            objective's units); None: any gain whose interval is above 0.
        mode: the objective's direction: ``max`` (gain = last - step 0) or ``min`` (step 0 - last).
        confidence: the interval's level.

    Returns:
        One :class:`Control` per context (one, of context ``""``, for a single arm name). A seed is
        paired when its arm has an evaluation at step 0 and one after it; a context with fewer than
        :data:`MIN_SEEDS` such seeds is *not resolved* and gets no interval.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    arms = {"": baseline} if isinstance(baseline, str) else dict(baseline)
    sign = 1.0 if mode == "max" else -1.0
    return tuple(_one(curves, context, arm, min_effect, sign, confidence) for context, arm in arms.items())


def baseline_arms(study: Study) -> dict[str, str]:
    """Context -> the name of the arm at the study's baseline levels of its compared factors in that context
    (``{"": name}`` for a study without contexts), in the design's order; a context whose design runs no
    such arm is left out."""
    base = study.baseline_levels
    out: dict[str, str] = {}
    for arm in study.arms:
        if all(arm.levels[f.name] == base[f.name] for f in study.compared):
            out.setdefault(study.context_of(arm.levels), arm.name)
    return out


def study_controls(study: Study, curves: pd.DataFrame) -> tuple[Control, ...]:
    """:func:`learning_gain` of ``study``'s baseline arm(s) over ``curves``, with its min_effect and direction."""
    return learning_gain(curves, baseline_arms(study), min_effect=study.min_effect, mode=study.objective.mode)


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
    if text.startswith(_ANSWER_HTML, k):
        k = text.index("</ul>", k) + len("</ul>")
        k += 1 if text.startswith("\n", k) else 0
    return k


def _splice(text: str, block: str, at: int, sep: str) -> str:
    i, j = text.find(BEGIN), text.find(END)
    if i >= 0 and j > i:
        return text[:i] + block + text[j + len(END):]
    if at < 0:
        return text.rstrip() + "\n\n" + block + "\n"
    return text[:at] + block + sep + text[at:]


def spliced(md_text: str, html_text: str, block: ControlBlock) -> tuple[str, str]:
    """A report's README.md and index.html with ``block`` in place: replaced between :data:`BEGIN` and
    :data:`END`, else inserted right after the Findings' answer (``html_text`` ``""``: left empty)."""
    md_new = _splice(md_text, block.markdown(), _md_at(md_text), "\n\n")
    html_new = _splice(html_text, block.html(), _html_at(html_text), "\n") if html_text else html_text
    return md_new, html_new
