"""Committed reports read from their folders, and trials two reports share by configuration.

Reports find the trials they share by *content* (:mod:`ablate.report.ledger`, reports/SHARED.md);
:func:`shared_trials` is the older, configuration-level view, kept for what content cannot say: that
two differently keyed trials were *meant* to compute the same thing on a device. Two trials compute the same thing when their trial keys are equal, or when their configurations
differ only in a setting that resolves to the same computation on the device they ran on:
``model.dtype: auto`` is float32 on a CPU (bfloat16 autocast on CUDA), and ``rollout.dtype: null``
follows the trainer's precision (:func:`computation_key`). Trial keys keep such settings apart on
purpose: ``auto`` is another computation on a GPU, and a key names what a trial computes wherever it
runs. Setting an option to its default value already gives the key of leaving it out (a key hashes
the whole resolved configuration, :meth:`ablate.config.TrialConfig.trial_key`).

A committed report is a folder ``<reports>/<study>/`` whose README.md starts with ``produced by:
`ablate run <study file> ...``` and which holds ``results.csv`` (:func:`committed_report`). Its trials'
configurations come from its study file at its budget (and ``tuned.json``), as
``tests/test_committed_reports.py`` checks they still do.
"""

from __future__ import annotations

import json
import math
import shlex
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.study.plan import Plan

__all__ = ["CommittedReport", "committed_report", "computation_key", "seed_ranges", "shared_trials"]


def computation_key(config: TrialConfig, device_type: str = "cpu") -> str:
    """The trial key of ``config`` with its precision settings resolved for ``device_type``
    (``cpu`` or ``cuda``): ``model.dtype`` becomes the precision the trainer computes in there
    (float32 or bfloat16), and ``rollout.dtype`` null when it equals the trainer's. Two trials with
    one computation key compute the same on that device; 12 hex digits like a trial key."""
    model = config.model.dtype
    trainer = "bfloat16" if model == "bfloat16" or (model == "auto" and device_type == "cuda") else "float32"
    rollout = config.rollout.dtype or trainer
    with warnings.catch_warnings():  # the configuration validated when its study loaded: no warnings twice
        warnings.simplefilter("ignore")
        return config.with_overrides({"model.dtype": trainer,
                                      "rollout.dtype": None if rollout == trainer else rollout}).trial_key()


@dataclass(frozen=True)
class CommittedReport:
    """A committed report: its folder, its study's plan at the report's budget, and its finished
    trials (``results.csv`` rows in state done)."""

    folder: Path
    plan: Plan
    trials: pd.DataFrame

    @property
    def name(self) -> str:
        return self.folder.name


def committed_report(folder: Path, root: Path | None = None) -> CommittedReport | None:
    """The committed report in ``folder``, or None when it is not one whose trials can be named
    (no README provenance or results.csv, a study file that is gone or no longer validates).

    Args:
        root: the folder the provenance's study path is relative to (default: ``folder``'s grandparent,
            the repository root of ``reports/<study>/``).
    """
    from ablate.errors import AblateError
    from ablate.report.folder import PRODUCED, command_budget
    from ablate.study import load_study
    from ablate.study.plan import Plan

    readme, csv = folder / "README.md", folder / "results.csv"
    if not readme.is_file() or not csv.is_file():
        return None
    m = PRODUCED.search(readme.read_text(encoding="utf-8"))
    if not m:
        return None
    argv = shlex.split(m["command"])
    if argv[:2] != ["ablate", "run"] or len(argv) < 3:
        return None
    budget = command_budget(argv)
    tuned_file = folder / "tuned.json"
    try:
        study = load_study((root or folder.parent.parent) / argv[2])
        tuned = json.loads(tuned_file.read_text(encoding="utf-8")) if tuned_file.is_file() else None
        plan = Plan.of(study, budget, tuned=tuned)
    except (AblateError, OSError, ValueError):
        return None
    trials = pd.read_csv(csv, dtype={"key": str})
    return CommittedReport(folder, plan, trials[trials["state"] == "done"].reset_index(drop=True))


def _keyed(plan: Plan, trials: pd.DataFrame) -> pd.DataFrame:
    """``key, ckey, arm, seed, objective`` of the finished trials that the plan defines."""
    by_key = {s.key: s for s in plan.specs}
    rows = [{"key": k, "ckey": computation_key(by_key[k].config), "arm": by_key[k].arm, "seed": by_key[k].seed,
             "objective": float(o) if o == o else math.nan}
            for k, o in zip(trials["key"], trials.get("objective", pd.Series([math.nan] * len(trials))))
            if k in by_key]
    return pd.DataFrame(rows, columns=["key", "ckey", "arm", "seed", "objective"])


def shared_trials(plan: Plan, trials: pd.DataFrame, reports: Path, *,
                  labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The finished trials of this report that other committed reports under ``reports`` also ran.

    Args:
        plan: this report's plan; trials: its trials (``key``, ``state``, ``objective``), e.g.
            results.csv's rows.
        reports: the folder of committed reports (``reports/``); the one named like this study is skipped.
        labels: arm -> the label this report prints for it.

    Returns:
        One row per (arm, other report, other arm): ``arm, seeds, report, other_arm, how, same_objective,
        n``: the seeds in common (``0-3`` or ``0, 2``), ``how`` ``same trial key`` or ``same computation on
        CPU`` (keys that differ only in a setting that resolves alike there), and in how many of the
        ``n`` shared seeds both reports hold the same objective value (a difference means another
        processor model or code: RL amplifies float rounding). Empty without any.
    """
    done = trials[trials["state"] == "done"] if "state" in trials else trials
    mine = _keyed(plan, done)
    cols = ["arm", "seeds", "report", "other_arm", "how", "same_objective", "n"]
    if mine.empty or not reports.is_dir():
        return pd.DataFrame(columns=cols)
    rows = []
    for folder in sorted(p for p in reports.iterdir() if p.is_dir() and p.name != plan.study.name):
        other = committed_report(folder)
        if other is None:
            continue
        theirs = _keyed(other.plan, other.trials)
        pairs = mine.merge(theirs, on="ckey", suffixes=("", "_other"))
        for (arm, arm_other), g in pairs.groupby(["arm", "arm_other"], sort=False):
            same_key = bool((g["key"] == g["key_other"]).all())
            equal = int(sum(a == b for a, b in zip(g["objective"], g["objective_other"])))
            rows.append({"arm": (labels or {}).get(arm, arm), "seeds": seed_ranges(g["seed"]), "report": other.name,
                         "other_arm": arm_other, "how": "same trial key" if same_key else "same computation on CPU",
                         "same_objective": equal, "n": len(g)})
    return pd.DataFrame(rows, columns=cols)


def seed_ranges(seeds: pd.Series) -> str:
    """``0-3, 5`` for seeds 0, 1, 2, 3, 5."""
    values = sorted({int(s) for s in seeds})
    parts: list[str] = []
    start = prev = values[0]
    for s in [*values[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(parts)
