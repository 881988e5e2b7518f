"""Parent and trial runs: one experiment per study, one parent run per study and budget, one child run
per trial, their params, tags and files (:class:`Tracker`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunStatus, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from ablate.disk import local_tracking_folder

if TYPE_CHECKING:
    from ablate.study import Study
from ablate.tracking.client import HTTP_REQUEST_DEFAULTS, LinkedClient, link_for
from ablate.tracking.logger import TrialLogger
from ablate.tracking.names import (
    DIFF_FILE,
    ERRORS_DIR,
    EVAL_PROBLEMS_FILE,
    EXPERIMENT_KIND_MODEL_TRAINING,
    EXPERIMENT_KIND_TAG,
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VALUE,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VALUE,
    TAG_ARM,
    TAG_BUDGET,
    TAG_COMMAND,
    TAG_ERROR,
    TAG_FINGERPRINT,
    TAG_GIT_DIFF,
    TAG_KEY,
    TAG_LOGGED_STEP,
    TAG_OBJECTIVE,
    TAG_ROLE,
    TAG_SEED,
    TAG_STORAGE,
    TAG_STUDY,
    TAG_STUDY_FILE,
    TAG_WORKER,
    TrackingError,
    code_diff,
    code_version,
    diff_tags,
    dirty_diff,
    eval_problems_csv,
    finite_json,
    gpu_tags,
    history_csv,
    metric_name,
    resolve_tracking_uri,
    tracking_location,
    trial_params,
    truncate,
)


@contextlib.contextmanager
def _sqlite_open_lock(uri: str) -> Iterator[None]:
    """Hold the lock file beside a ``sqlite:///`` store (``<db>.lock``) for the block; nothing for other
    stores, nor where the lock cannot be created (a read-only folder, where no schema can be created
    either)."""
    lock = None
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):].split("?", 1)[0])
        lock = FileLock(db.with_name(db.name + ".lock"))
        try:
            lock.acquire()
        except OSError:
            lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()

@dataclass(frozen=True)
class TrialIdentity:
    """What a trial's MLflow run is opened with (:meth:`Tracker.start_trial`; kept as a mapping in the
    outbox, ``TrialIdentity(**record["start"])``): the study, trial key, arm, seed, budget, the arm's
    levels, the flat trial configuration (its params) and the worker's name (a tag)."""

    study: str
    key: str
    arm: str
    seed: int
    budget: str
    levels: Mapping[str, str]
    flat_config: Mapping[str, Any]
    worker: str = ""

class Tracker:
    """MLflow runs of a study: the experiment, the parent run, the trials' child runs."""

    def __init__(self, uri: str | None = None, *, code_root: str | Path | None = None) -> None:
        """Connect to the tracking store ``uri`` (see :func:`resolve_tracking_uri`).

        ``code_root``: the git checkout whose uncommitted changes the runs this tracker creates log
        (:meth:`code_diff`); None, ablate's own (:func:`~ablate.tracking.names.code_diff`, read once per
        process).

        Opening a SQLite store creates its schema when it is new, and MLflow's schema creation fails in
        one of two processes that do it at once; so a SQLite store is opened under a lock file beside it
        (``mlflow.db.lock``), and its first query is made there.
        """
        self.uri = resolve_tracking_uri(uri)
        self._code_root, self._diff, self._diff_read = code_root, None, False
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no tqdm bars in ablate's output
        if self.uri.startswith(("http://", "https://")):
            for name, value in HTTP_REQUEST_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.link = link_for(self.uri)
        with _sqlite_open_lock(self.uri):
            self.client: Any = LinkedClient(MlflowClient(tracking_uri=self.uri), self.link)
            if self.uri.startswith("sqlite:"):
                self.client.search_experiments(max_results=1)

    def code_diff(self) -> bytes | None:
        """The diff of the code that runs when its checkout is dirty (logged as ``diff.patch`` by each run
        this tracker creates, with tag ``ablate.git_diff_sha256``), None when it is clean or git is missing;
        read once per tracker (ablate's own checkout: once per process)."""
        if self._code_root is None:
            return code_diff()
        if not self._diff_read:
            self._diff, self._diff_read = dirty_diff(Path(self._code_root)), True
        return self._diff

    @property
    def location(self) -> str:
        return tracking_location(self.uri)

    @property
    def folder(self) -> str | None:
        """The folder of a local tracking store (a SQLite file's, or a file store), None for a server."""
        return local_tracking_folder(self.uri)

    # -- experiment and parent ---------------------------------------------------------------------

    def experiment_id(self, study_name: str, *, create: bool = True) -> str | None:
        """The id of the experiment named ``study_name`` (created when missing and ``create``).

        With ``create`` (ablate is about to log runs into it) the experiment is tagged as a model-training
        experiment (:data:`EXPERIMENT_KIND_TAG`): a new one when it is created, an existing one (made by
        an older ablate, or by hand) when it has no kind yet; a kind that is set already is kept.
        """
        exp = self.client.get_experiment_by_name(study_name)
        if exp is None and create:
            try:
                return self.client.create_experiment(
                    study_name, tags={TAG_STUDY: study_name, EXPERIMENT_KIND_TAG: EXPERIMENT_KIND_MODEL_TRAINING})
            except MlflowException:  # created by another worker meanwhile
                exp = self.client.get_experiment_by_name(study_name)
        if exp is None:
            return None
        if exp.lifecycle_stage != "active":
            raise TrackingError(
                f"the MLflow experiment {study_name!r} (id {exp.experiment_id}) in {self.uri} is deleted; restore it "
                f"(mlflow experiments restore --experiment-id {exp.experiment_id}) or remove it for good (mlflow gc)"
            )
        if create and not (exp.tags or {}).get(EXPERIMENT_KIND_TAG):
            self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_MODEL_TRAINING)
        return exp.experiment_id

    def check_identity(self, study: Study) -> None:
        """Refuse ``study`` when its name's experiment belongs to another study (another
        :meth:`ablate.study.Study.fingerprint`); an experiment without a fingerprint, or none, passes.

        Raises:
            StudyIdentityError: naming both study files and the fix.
        """
        exp = self.client.get_experiment_by_name(study.name)
        if exp is not None:
            self._held_by(study, exp.tags or {})

    def _held_by(self, study: Study, tags: Mapping[str, str]) -> bool:
        """Whether the experiment with ``tags`` is bound to ``study``'s fingerprint already (False: to none
        yet, or to its :meth:`~ablate.study.Study.legacy_fingerprint`, which :meth:`bind` replaces); raises
        StudyIdentityError when it is bound to another study."""
        from ablate.errors import StudyIdentityError, identity_message

        held = tags.get(TAG_FINGERPRINT)
        if held is not None and not study.owns(held):
            raise StudyIdentityError(identity_message(
                study.name, f"the MLflow experiment {study.name!r} in {self.uri}",
                tags.get(TAG_STUDY_FILE, "an unknown file"), str(study.path)))
        return held == study.fingerprint()

    def bind(self, study: Study, experiment_id: str) -> None:
        """Refuse ``study`` when experiment ``experiment_id`` belongs to another study (as
        :meth:`check_identity`), else tag it with the study's fingerprint and file when it has not that
        fingerprint yet (none, or the legacy one)."""
        if not self._held_by(study, self.client.get_experiment(experiment_id).tags or {}):
            self.client.set_experiment_tag(experiment_id, TAG_FINGERPRINT, study.fingerprint())
            self.client.set_experiment_tag(experiment_id, TAG_STUDY_FILE, str(Path(study.path).resolve()))

    def find_parent(self, study_name: str, budget: str) -> str | None:
        """The parent run of ``study_name`` at ``budget``, or None."""
        exp = self.experiment_id(study_name, create=False)
        if exp is None:
            return None
        runs = self.client.search_runs(
            [exp],
            filter_string=f"tags.`{TAG_ROLE}` = 'study' and tags.`{TAG_BUDGET}` = '{budget}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def parent_run(self, study: Study, budget: str, *, storage: str = "", design: Mapping[str, Any] | None = None
                   ) -> str:
        """The parent run of a study at a budget: found again by its tags, else created.

        Call it under the study store's lock so that concurrent processes create one parent.

        Args:
            study: the loaded Study.
            storage: the study store's description (a tag).
            design: logged as ``design.json`` when the run is created.
        """
        exp = self.experiment_id(study.name)
        self.bind(study, exp)  # refuses another study of this name (run and worker refused it already)
        found = self.find_parent(study.name, budget)
        if found is not None:
            self.client.update_run(found, status="RUNNING")
            return found
        diff = self.code_diff()
        tags = {
            TAG_ROLE: "study", TAG_STUDY: study.name, TAG_BUDGET: budget, TAG_STORAGE: storage,
            MLFLOW_RUN_NAME: f"{study.name} ({budget})", "ablate.study_file": str(Path(study.path).resolve()),
            **code_version(), **diff_tags(diff),
        }
        if study.description:
            tags["mlflow.note.content"] = study.description
        run = self.client.create_run(exp, tags=tags, run_name=f"{study.name} ({budget})")
        run_id = run.info.run_id
        obj = study.objective
        params = {
            "design": study.design_name, "budget": budget, "seeds": json.dumps(list(study.seeds)),
            "arms": str(len(study.arms)), "trials": str(study.n_trials), "factors": ",".join(f.name for f in study.factors),
            "objective.metric": obj.metric, "objective.mode": obj.mode, "objective.summary": obj.summary,
            "objective.last_n": str(obj.last_n),
        }
        self._log_params(run_id, {k: truncate(v, MAX_PARAM_VALUE) for k, v in params.items()})
        files: dict[str, str | bytes] = {"design.json": json.dumps(design or {}, indent=1, sort_keys=True)}
        with contextlib.suppress(OSError):
            files["study.yaml"] = Path(study.path).read_text(encoding="utf-8")
        if diff is not None:
            files[DIFF_FILE] = diff
        self._log_files(run_id, files)
        return run_id

    def record_command(self, run_id: str, command: str) -> None:
        """Tag a parent run with the command that last ran the study (``ablate.command``) and the code
        it ran with (git commit, dirty flag, versions): the provenance a report prints at its top.

        From a dirty checkout the run's ``diff.patch`` becomes this run's diff (uploaded when its tag
        ``ablate.git_diff_sha256`` names another); from a clean one the tag is removed (a ``diff.patch``
        an earlier, dirty run left stays, named by no tag)."""
        diff = self.code_diff()
        tags = {TAG_COMMAND: truncate(command, MAX_TAG_VALUE), **code_version(), **diff_tags(diff)}
        held = self.client.get_run(run_id).data.tags.get(TAG_GIT_DIFF)
        if diff is not None and held != tags[TAG_GIT_DIFF]:
            self._log_files(run_id, {DIFF_FILE: diff})
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        if diff is None and held is not None:
            self.client.delete_tag(run_id, TAG_GIT_DIFF)

    def finish_parent(self, run_id: str, *, failed: bool) -> None:
        """Mark the parent run FINISHED (every trial done) or FAILED (some trial failed)."""
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    # -- trials ------------------------------------------------------------------------------------

    def find_trial_run(self, parent_id: str, key: str) -> Run | None:
        """The child run of trial ``key`` under ``parent_id`` (an mlflow Run), or None."""
        parent = self.client.get_run(parent_id)
        runs = self.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}' and tags.`{TAG_KEY}` = '{key}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def start_trial(self, parent_id: str, trial: TrialIdentity, *, flush_every: int = 10, resuming: bool = False,
                    fence: Callable[[], bool] | None = None) -> TrialLogger:
        """Open the child run of ``trial`` (found again when it exists, else created with its params and
        tags) and return its :class:`TrialLogger` (skipping the steps that run already logged; ``fence``:
        see :class:`TrialLogger`)."""
        study, key, arm, seed, budget = trial.study, trial.key, trial.arm, trial.seed, trial.budget
        levels, flat_config, worker = trial.levels, trial.flat_config, trial.worker
        existing = self.find_trial_run(parent_id, key)
        tags = {TAG_WORKER: worker}
        if existing is None:
            exp = self.client.get_run(parent_id).info.experiment_id
            name = f"{arm} seed={seed}"
            diff = self.code_diff()
            tags.update({
                TAG_ROLE: "trial", MLFLOW_PARENT_RUN_ID: parent_id, MLFLOW_RUN_NAME: name, TAG_STUDY: study,
                TAG_KEY: key, TAG_ARM: arm, TAG_SEED: str(seed), TAG_BUDGET: budget, **code_version(),
                **diff_tags(diff), **gpu_tags(str(flat_config.get("device", "") or "")),
            })
            run = self.client.create_run(exp, tags={k: truncate(v, MAX_TAG_VALUE) for k, v in tags.items()},
                                         run_name=name)
            run_id, skip, has_params = run.info.run_id, -1, False
            if diff is not None:
                self._log_files(run_id, {DIFF_FILE: diff})
        else:
            run_id = existing.info.run_id
            skip = int(existing.data.tags.get(TAG_LOGGED_STEP, -1))
            has_params = bool(existing.data.params)
            self.client.update_run(run_id, status="RUNNING")
            self.client.set_tag(run_id, TAG_WORKER, worker)
            with contextlib.suppress(MlflowException):
                self.client.delete_tag(run_id, TAG_ERROR)
        if not has_params:
            self._log_params(run_id, trial_params(flat_config, levels))
        return TrialLogger(self.client, run_id, skip_through=skip, flush_every=flush_every,
                           hold_logged_step=resuming, fence=fence, folder=self.folder)

    def send_history(self, run_id: str, history: Sequence[tuple[int, Mapping[str, float]]]) -> int:
        """Send the metrics of ``history`` that run ``run_id`` does not hold yet, so that it holds each
        (metric, step) exactly once whatever reached it before (an upload after an outage: the run's
        metrics are read first); then tag ``ablate.logged_step``. The number of metric values sent."""
        keys = sorted({metric_name(k) for _, metrics in history for k in metrics})
        held = {(m.key, int(m.step)) for key in keys for m in self.client.get_metric_history(run_id, key)}
        ts = int(time.time() * 1000)
        missing = [Metric(metric_name(k), float(v), ts, int(step)) for step, metrics in history
                   for k, v in metrics.items() if (metric_name(k), int(step)) not in held]
        for i in range(0, len(missing), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=missing[i : i + MAX_METRICS_PER_BATCH])
        if history:
            self.client.set_tag(run_id, TAG_LOGGED_STEP, str(max(int(step) for step, _ in history)))
        return len(missing)

    def finish_trial(self, run_id: str, *, config_yaml: str, history: Sequence[tuple[int, Mapping[str, float]]],
                     samples: Sequence[Mapping[str, Any]], result: Mapping[str, Any], objective: float | None,
                     eval_problems: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Upload a finished trial's files and mark its run FINISHED.

        ``eval_problems`` (``TrialResult.eval_problems``) becomes ``eval_problems.csv``; None writes no
        such file.
        """
        files = {
            "config.yaml": config_yaml,
            "history.csv": history_csv(history),
            "samples.json": json.dumps(finite_json(list(samples)), indent=1, default=str),
            "result.json": json.dumps(finite_json(dict(result)), indent=1, sort_keys=True, default=str),
        }
        if eval_problems is not None:
            files[EVAL_PROBLEMS_FILE] = eval_problems_csv(eval_problems)
        self._log_files(run_id, files)
        self.client.set_tag(run_id, TAG_OBJECTIVE, "null" if objective is None else repr(float(objective)))
        if result.get("fingerprint"):
            self.client.set_tag(run_id, TAG_FINGERPRINT, str(result["fingerprint"]))
        self.client.set_terminated(run_id, status="FINISHED")

    def fail_trial(self, run_id: str, error: str, *, status: str = "FAILED") -> None:
        """Record a failed attempt of a trial (tag ``ablate.error``: the end of its error, removed when the
        trial is retried; ``errors/attempt-<n>.txt``: all of it, the n-th failed attempt's file, kept) and
        mark its run ``status`` (FAILED, or KILLED when interrupted)."""
        n = len(self.client.list_artifacts(run_id, ERRORS_DIR)) + 1
        self._log_files(run_id, {f"{ERRORS_DIR}/attempt-{n}.txt": error})
        tail = error if len(error) <= MAX_TAG_VALUE else "..." + error[-(MAX_TAG_VALUE - 3):]
        self.client.set_tag(run_id, TAG_ERROR, tail)
        self.client.set_terminated(run_id, status=status)

    def run_status(self, run_id: str) -> str:
        """The run's status name (RUNNING, FINISHED, FAILED, KILLED)."""
        status = self.client.get_run(run_id).info.status
        return status if isinstance(status, str) else RunStatus.to_string(status)

    # -- helpers -------------------------------------------------------------------------------------

    def _log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def _log_files(self, run_id: str, files: Mapping[str, str | bytes]) -> None:
        """Upload ``files`` (name -> text, written as UTF-8, or bytes, written as they are) as artifacts."""
        with tempfile.TemporaryDirectory(prefix="ablate-artifacts-") as tmp:
            for name, content in files.items():
                Path(tmp, name).parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, bytes):
                    Path(tmp, name).write_bytes(content)
                else:
                    Path(tmp, name).write_text(content, encoding="utf-8")
            self.client.log_artifacts(run_id, tmp)
