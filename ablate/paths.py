"""Where ablate keeps things on disk, in one place.

Relative paths are under the working directory::

    runs/<study>/store.journal          the study store (a journal file; see ablate.store)
    runs/<study>/trials/<key>/          a trial's checkpoint (ablate.train.CHECKPOINT_FILE)
    reports/<study>/                    the report folder (ablate.report)
"""

from __future__ import annotations

import os
from pathlib import Path

#: The folder of run folders (``--runs``).
RUNS_DIR = "runs"
#: The study store's journal file inside a study's run folder.
STORE_FILE = "store.journal"
#: The folder of report folders.
REPORTS_DIR = "reports"


def run_dir(study_name: str, runs: str | os.PathLike[str] | None = None) -> Path:
    """The study's run folder: ``<runs>/<study>`` (``runs`` defaults to :data:`RUNS_DIR`)."""
    return Path(runs if runs is not None else RUNS_DIR) / study_name


def trial_dir(study_name: str, key: str, runs: str | os.PathLike[str] | None = None) -> Path:
    """Where a trial keeps its checkpoint: ``<runs>/<study>/trials/<key>``."""
    return run_dir(study_name, runs) / "trials" / key


def store_file(study_name: str, runs: str | os.PathLike[str] | None = None) -> Path:
    """The default study store of a study: ``<runs>/<study>/store.journal``."""
    return run_dir(study_name, runs) / STORE_FILE


def report_dir(study_name: str, reports: str | os.PathLike[str] | None = None) -> Path:
    """The study's report folder: ``<reports>/<study>`` (``reports`` defaults to :data:`REPORTS_DIR`)."""
    return Path(reports if reports is not None else REPORTS_DIR) / study_name


def report_dir_for(study_name: str, budget: str, reports: str | os.PathLike[str] | None = None) -> Path:
    """Where ``ablate run`` writes a budget's report: ``<reports>/<study>`` at the default budget,
    ``<reports>/<study>-<budget>`` at another (a smoke run never overwrites the study's report)."""
    return report_dir(study_name if budget == "default" else f"{study_name}-{budget}", reports)


__all__ = ["REPORTS_DIR", "RUNS_DIR", "STORE_FILE", "report_dir", "report_dir_for", "run_dir", "store_file",
           "trial_dir"]
