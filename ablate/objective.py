"""A study's objective as one number per trial: the summary of a metric's history, and its direction.

:func:`summarize` is the one implementation: the study store records it when a trial completes, the
tuner ranks tuning trials by it, and the report's inference reads it per trial
(:func:`ablate.stats.analysis.trial_objectives`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

#: The summaries ``objective.summary`` accepts.
SUMMARIES = ("last", "mean", "max", "min", "auc")


def summarize(steps: Sequence[float], values: Sequence[float], summary: str = "last", last_n: int = 1) -> float:
    """One number from one trial's metric history (the study's ``objective.summary``).

    Args:
        steps: the steps of the values (any order; sorted here, stably).
        values: the metric's values, same length; non-finite ones are skipped.
        summary: ``last`` (mean of the last ``last_n`` values), ``mean``, ``max``, ``min``, or
            ``auc`` (trapezoid area under value-over-step divided by the step range; one point: its
            value). Units: the metric's.
        last_n: values averaged by ``last``.

    Returns:
        The summary, NaN when there is no finite value.

    Raises:
        ValueError: an unknown ``summary``.
    """
    s = np.asarray(steps, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    s, v = s[keep], v[keep]
    if summary not in SUMMARIES:
        raise ValueError(f"unknown objective summary {summary!r}; allowed: {', '.join(SUMMARIES)}")
    if v.size == 0:
        return math.nan
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    if summary == "last":
        return float(v[-max(1, int(last_n)):].mean())
    if summary == "mean":
        return float(v.mean())
    if summary == "max":
        return float(v.max())
    if summary == "min":
        return float(v.min())
    if v.size == 1 or s[-1] == s[0]:  # auc of one point, or of points at one step
        return float(v[-1])
    return float(np.sum((s[1:] - s[:-1]) * (v[1:] + v[:-1]) / 2) / (s[-1] - s[0]))


def summarize_history(history: Sequence[tuple[int, Mapping[str, float]]], metric: str, summary: str = "last",
                      last_n: int = 1) -> float | None:
    """:func:`summarize` of ``metric`` over a trial's ``(step, metrics)`` history
    (``TrialResult.history``); None when the metric has no finite value."""
    points = [(int(s), float(m[metric])) for s, m in history if metric in m]
    value = summarize([s for s, _ in points], [v for _, v in points], summary, last_n)
    return None if math.isnan(value) else value


def direction(mode: str) -> str:
    """Optuna's direction of an objective's ``mode``: ``max`` -> ``maximize``, ``min`` -> ``minimize``."""
    return {"max": "maximize", "min": "minimize"}[mode]


__all__ = ["SUMMARIES", "direction", "summarize", "summarize_history"]
