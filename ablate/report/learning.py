"""Did the baseline learn? The positive control's computation (issue 54); its words are
:mod:`ablate.report.control`.

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
- *not resolved*: fewer than :data:`ablate.stats.intervals.MIN_SEEDS` paired seeds (no interval is given).

A study with ``contexts:`` gets one control per context, of the baseline levels' arm in that context
(:func:`baseline_arms`). Gains are in the objective's units and in its direction (last minus first for
``mode: max``, first minus last for ``mode: min``).

:func:`judged` and :func:`judged_across` apply it to the verdicts: an *equivalent* claim, or an
*equivalent on average across contexts*, where the baseline did not learn in every context it rests on becomes
*uninformative*. The report's statistics (:func:`ablate.report.statistics.compute_statistics`) and every
reader of a saved report folder (:func:`ablate.report.folder.read_report_pilot`: ``ablate.load``, the ledger,
``ablate plan --from``; :func:`ablate.report.scope.context_verdicts`) call them, so a claim carries one
word wherever it is printed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats

from ablate.stats.intervals import CONFIDENCE, MIN_SEEDS

if TYPE_CHECKING:
    from ablate.stats.inference import Family
    from ablate.study import Study

__all__ = ["COLLAPSED", "CURVES_FILE", "Control", "DID_NOT_LEARN", "LEARNED", "NOT_RESOLVED", "baseline_arms",
           "folder_controls", "informative", "judged", "judged_across", "learning_gain", "not_learned_text",
           "objective_curves", "paired_interval", "study_controls", "verdict_of"]

#: The verdicts of the control.
LEARNED, DID_NOT_LEARN, COLLAPSED, NOT_RESOLVED = "learned", "did not learn", "collapsed", "not resolved"
#: The objective metric's history per trial, committed with a report (the control's input).
CURVES_FILE = "curves.csv"
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


def objective_curves(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``key, arm, seed, step, value`` of ``metric`` in the tidy results ``table``, by trial then step: the
    control's input (a report commits it as curves.csv)."""
    cols = ["key", "arm", "seed", "step", "value"]
    rows = table[table["metric"] == metric] if not table.empty else pd.DataFrame(columns=cols)
    return rows[cols].sort_values(["arm", "seed", "step"], kind="stable").reset_index(drop=True)


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


def folder_controls(study: Study, folder: str | Path) -> tuple[Control, ...] | None:
    """:func:`study_controls` over a report folder's curves.csv; None when it has none (a report that predates
    it: whether its baseline learned cannot be told)."""
    path = Path(folder) / CURVES_FILE
    if not path.is_file():
        return None
    return study_controls(study, pd.read_csv(path, dtype={"key": str, "arm": str}))


# ------------------------------------------------------------------------------------- the verdicts


def informative(controls: Sequence[Control] | None) -> bool:
    """Whether an *equivalent* verdict over these controls' contexts is evidence: the baseline learned in
    every one of them (False when there is no control, or it could not be computed: ``None``)."""
    return bool(controls) and all(c.learned for c in controls)


def not_learned_text(controls: Sequence[Control] | None) -> str:
    """Why an equivalence over ``controls`` is uninformative, as a clause: where the baseline did not learn."""
    if controls is None:
        return (f"whether the baseline learned cannot be told (no {CURVES_FILE}: no step-0 evaluation in the "
                "report's files)")
    if not controls:
        return "the design runs no arm at the baseline levels, so whether the baseline learned cannot be told"
    if len(controls) == 1 and not controls[0].context:
        c = controls[0]
        return f"the baseline {c.verdict} (positive control: {_gain_text(c)})"
    bad = [c for c in controls if not c.learned]
    by = {v: [c.context for c in bad if c.verdict == v] for v in (DID_NOT_LEARN, COLLAPSED, NOT_RESOLVED)}
    said = "; ".join(f"{v} in {len(names)} ({', '.join(names)})" for v, names in by.items() if names)
    return f"the baseline learned in {len(controls) - len(bad)} of the {len(controls)} contexts ({said})"


def _gain_text(c: Control) -> str:
    """The control's gain in the objective's units with its interval and n (a clause)."""
    if not c.n:
        return "no seed with a step-0 evaluation and a later one"
    ci = f" [{c.ci_low:+.3g}, {c.ci_high:+.3g}]" if math.isfinite(c.ci_low) else ""
    return f"gain {c.gain:+.3g}{ci}, 95% paired t over {c.n} seed{'s' if c.n != 1 else ''}".replace("-", "−")


def judged(family: Family, controls: Sequence[Control] | None) -> Family:
    """``family`` with every *equivalent* claim labelled *uninformative* (:data:`ablate.stats.inference.UNINFORMATIVE`,
    the reason in words) unless the baseline learned in every context (:func:`informative`): an equivalence
    where nothing was learned is not evidence. Other verdicts, and every p, are kept."""
    from ablate.stats.inference import EQUIVALENT, UNINFORMATIVE

    if informative(controls):
        return family
    reason = not_learned_text(controls)
    claims = tuple(replace(c, verdict=UNINFORMATIVE, reason=reason) if c.verdict == EQUIVALENT else c
                   for c in family.claims)
    return replace(family, claims=claims)


def judged_across(across: Sequence[Any], controls: Sequence[Control] | None) -> tuple[Any, ...]:
    """The across-contexts verdicts (:class:`ablate.report.statistics.AcrossContexts`) with each *equivalent
    across contexts* labelled *uninformative* unless the baseline learned in every context it pools."""
    from ablate.stats import meta
    from ablate.stats.inference import UNINFORMATIVE

    by = {c.context: c for c in controls or ()}
    out = []
    for a in across:
        if a.verdict == meta.EQUIVALENT:
            pooled = [by[x] for x in a.contexts["context"] if x in by] if controls is not None else None
            if pooled is None or len(pooled) < len(a.contexts) or not informative(pooled):
                a = replace(a, verdict=UNINFORMATIVE, reason=f"{a.reason}; but {not_learned_text(pooled)}: an "
                            "equivalence there is no evidence that the choice does not matter")
        out.append(a)
    return tuple(out)
