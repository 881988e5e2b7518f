"""Reading a study back from MLflow: its parent and trial runs, a run's files, and the report logged
to the parent run."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlflow.entities import Run, RunStatus, ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

if TYPE_CHECKING:
    pass
from ablate.tracking.names import TAG_ROLE
from ablate.tracking.runs import Tracker


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as plain data (what results and reports read; no mlflow objects leak out).

    Attributes:
        run_id: the MLflow run id.
        status: RUNNING, SCHEDULED, FINISHED, FAILED or KILLED.
        tags: every tag of the run (``ablate.trial_key``, ``ablate.arm``, ``ablate.seed`` ...).
        params: every param of the run (the flattened config and ``level.<factor>``).
        start_time, end_time: milliseconds since the epoch (None when unknown / still running).
    """

    run_id: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    start_time: int | None = None
    end_time: int | None = None

def _record(run: Run) -> RunRecord:
    status = run.info.status
    return RunRecord(
        run_id=run.info.run_id,
        status=status if isinstance(status, str) else RunStatus.to_string(status),
        tags=dict(run.data.tags),
        params=dict(run.data.params),
        start_time=run.info.start_time,
        end_time=run.info.end_time,
    )

def study_runs(tracker: Tracker, study_name: str, budget: str) -> tuple[RunRecord | None, list[RunRecord]]:
    """The parent run of ``study_name`` at ``budget`` and every trial (child) run under it.

    Runs are fetched page by page with ``search_runs`` (one request per 1000 runs, metrics are not
    read here: a trial's history is its ``history.csv`` artifact, see :func:`read_run_file`).

    Returns:
        ``(parent, trials)``: the parent (None when the study never ran at that budget, and then no
        trials) and the trial runs in start order.
    """
    parent_id = tracker.find_parent(study_name, budget)
    if parent_id is None:
        return None, []
    parent = tracker.client.get_run(parent_id)
    trials: list[RunRecord] = []
    token: str | None = None
    while True:
        page = tracker.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}' and tags.`{TAG_ROLE}` = 'trial'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1000,
            page_token=token,
        )
        trials.extend(_record(r) for r in page)
        token = page.token
        if not token:
            break
    return _record(parent), trials

def read_run_file(tracker: Tracker, run_id: str, path: str) -> str | None:
    """The text of artifact ``path`` (e.g. ``history.csv``) of run ``run_id``, or None if it has none."""
    with tempfile.TemporaryDirectory(prefix="ablate-download-") as tmp:
        try:
            local = tracker.client.download_artifacts(run_id, path, tmp)
        except (MlflowException, OSError):
            return None
        try:
            return Path(local).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

def log_report(tracker: Tracker, run_id: str, folder: str | Path, artifact_path: str = "report") -> None:
    """Upload a report folder (``index.html``, ``README.md``, figures, ``results.csv``) as artifacts
    of run ``run_id`` (the study's parent run), under ``artifact_path``; hidden files are skipped."""
    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="ablate-report-") as tmp:
        for f in folder.rglob("*"):
            rel = f.relative_to(folder)
            if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                target = Path(tmp, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
        tracker.client.log_artifacts(run_id, tmp, artifact_path=artifact_path)
