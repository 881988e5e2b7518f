"""The worker: claim a trial of the plan from the study store, train it with MLflow logging, record it.

``ablate worker FILE --storage URL`` runs :func:`run_worker` alone, on any machine that reaches the
store and the tracking server; ``ablate run`` runs it in N local processes (:mod:`ablate.runner`).

The worker loop::

    repeat:
        fail stale attempts of dead workers (their retries are enqueued)
        claim the oldest pending attempt of the plan (atomic: one worker gets it)
            none pending, none running anywhere -> done
            none pending, some running elsewhere -> wait (they may die and need a retry)
        open its MLflow child run; heartbeat while it trains
        train: ablate.train.run_trial(config, log, workdir=runs/<study>/trials/<key>/)
            (resumes from the checkpoint a killed attempt left there)
        success: artifacts + FINISHED in MLflow, then done with the objective in the store
        exception: the traceback on the attempt and the run (FAILED); the study goes on

Which trials: :func:`current_plan`, the plan the runner runs (the seeds the store holds for a study
with ``seeds: {min, max}``, each arm's tuned values for a study with ``tune:``).
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.objective import direction, summarize_history
from ablate.paths import RUNS_DIR, trial_dir
from ablate.plan import Plan
from ablate.store import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_RETRIES,
    Attempt,
    Heartbeat,
    StaleAttempt,
    StudyStore,
    WorkerInfo,
)

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from ablate.config import TrialConfig
    from ablate.study import Study, TrialSpec
    from ablate.tracking import Tracker, TrialLogger
    from ablate.train import TrialResult

#: A progress event: a dict with ``kind`` (``start``, ``step``, ``end``), the trial's identity and more.
Event = dict[str, Any]
EventFn = Callable[[Event], None]

#: Seconds an idle worker waits before looking for work again.
POLL_SECONDS = 2.0
#: What :func:`run_attempt` returns: the attempt completed, failed, or was lost (failed as stale by
#: another worker while it ran; its retry resumes from the final checkpoint).
OUTCOMES = ("done", "failed", "lost")


@dataclass(frozen=True)
class RunSettings:
    """What a worker needs to run a study (picklable: it is sent to spawned processes).

    Attributes:
        study_file: the study file (each worker loads and validates it, importing its plugins).
        budget: the budget to run.
        storage: the resolved study store (journal file path or PostgreSQL URL).
        tracking_uri: the resolved MLflow tracking URI.
        runs: the folder of run folders (``runs/``): checkpoints go to ``<runs>/<study>/trials/<key>``.
        threads: torch threads per trial (0: leave torch's default).
        parent_run_id: the MLflow parent run (None: the worker finds or creates it).
        heartbeat_interval, grace_period, max_retries: see :mod:`ablate.store`.
        flush_every: logged steps between two MLflow ``log_batch`` requests.
        poll_seconds: how long an idle worker waits before looking again.
    """

    study_file: str
    budget: str
    storage: str
    tracking_uri: str
    runs: str = RUNS_DIR
    threads: int = 0
    parent_run_id: str | None = None
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    grace_period: float = DEFAULT_GRACE_PERIOD
    max_retries: int = DEFAULT_MAX_RETRIES
    flush_every: int = 10
    poll_seconds: float = POLL_SECONDS

    def open_store(self, study: Study) -> StudyStore:
        """The study store these settings name, for ``study``."""
        return StudyStore(self.storage, study.name, direction=direction(study.objective.mode),
                          heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period,
                          max_retries=self.max_retries)


@dataclass
class WorkerStats:
    """What one worker did: keys of the trials it completed, that failed, and that it lost (another
    worker declared them stale while they ran)."""

    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def current_plan(study: Study, settings: RunSettings, store: StudyStore,
                 tuned: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The plan the runner runs at ``settings.budget``.

    A study with ``seeds: {min, max}`` runs seeds 0..n-1, n = the largest of ``min``, the seed
    count of the design frozen in the store and the study's own (adaptive rounds add seeds; see
    :mod:`ablate.planning`). A study with ``tune:`` runs each arm at its tuned values: ``tuned``
    when given, else read from the store's tuning studies (:class:`ablate.tuner.Tuner`; an error
    naming the fix while tuning is unfinished).
    """
    plan = Plan.of(study, settings.budget)
    if study.seed_range is not None:
        from ablate.planning import seeds_in_design

        n = max(study.seed_range.min, seeds_in_design(store.frozen_design(settings.budget)), len(study.seeds))
        plan = plan.with_seeds(range(n))
    if study.tune is not None:
        if tuned is None:
            from ablate.tuner import Tuner

            tuned = Tuner(study, settings.storage).all_best_values()
        plan = plan.with_tuned(tuned)
    return plan


def record_stale(tracker: Tracker, stale: list[StaleAttempt]) -> None:
    """Mark the MLflow runs of attempts failed as stale (a retry reopens them)."""
    for s in stale:
        if s.attempt.mlflow_run_id:
            try:
                note = " (a retry is enqueued)" if s.retried else ""
                tracker.fail_trial(s.attempt.mlflow_run_id, f"stale: {s.reason}{note}")
            except Exception:  # noqa: BLE001 - the run may live in another tracking store
                pass


def emit(events: EventFn | None, **event: Any) -> None:
    """Send a progress event (a display problem never fails a trial)."""
    if events is not None:
        try:
            events(event)
        except Exception:  # noqa: BLE001
            pass


def run_worker(settings: RunSettings, *, index: int | None = None, study: Study | None = None,
               events: EventFn | None = None, prepare: bool = False) -> WorkerStats:
    """The worker loop: claim and run trials of the plan until none is pending or running.

    Args:
        settings: the study, budget, store, tracking URI and knobs.
        index: this worker's number in a local pool (part of its name).
        study: the loaded Study (loaded from ``settings.study_file`` when None).
        events: called with progress events (dicts with ``kind``: ``start``, ``step``, ``end``).
        prepare: check the design and enqueue what must run first (as ``ablate worker`` does).

    Returns:
        The keys this worker completed, failed and lost.
    """
    from ablate.study import load_study
    from ablate.tracking import Tracker

    study = study if study is not None else load_study(settings.study_file)
    budget = settings.budget
    store = settings.open_store(study)
    plan = current_plan(study, settings, store)
    tracker = Tracker(settings.tracking_uri)
    if prepare:
        store.prepare(plan)
    parent = settings.parent_run_id or parent_run_id(plan, store, tracker)
    worker = WorkerInfo.current(index)
    stats = WorkerStats()
    while True:
        record_stale(tracker, store.fail_stale(budget))
        attempt = store.claim(budget, worker, keys=plan.by_key.keys())
        if attempt is None:
            if not store.has_work(budget):
                tracker.finish_parent(parent, failed=store.counts(budget)["failed"] > 0)
                return stats
            if study.seed_range is not None:  # a round of `ablate run` may have added seeds
                grown = current_plan(study, settings, store, plan.tuned)
                if grown.seeds != plan.seeds:
                    plan = grown
                    continue
            time.sleep(settings.poll_seconds)
            continue
        outcome = run_attempt(plan, plan.by_key[attempt.key], attempt, store, tracker, parent, settings, worker, events)
        {"done": stats.done, "failed": stats.failed, "lost": stats.lost}[outcome].append(attempt.key)


def parent_run_id(plan: Plan, store: StudyStore, tracker: Tracker) -> str:
    """The study's MLflow parent run at the plan's budget, found or created under the store's lock."""
    with store.lock():
        return tracker.parent_run(plan.study, plan.budget, storage=store.description,
                                  design=store.frozen_design(plan.budget))


def trial_config(spec: TrialSpec, threads: int) -> TrialConfig:
    """The configuration a worker trains: the spec's, with ``threads`` torch threads when > 0 (not part
    of the trial key). The arm's configuration warnings were printed once, when the study was loaded."""
    if threads <= 0:
        return spec.config
    from ablate.config import ConfigWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return spec.config.with_overrides({"threads": threads})


def train_logged(tracker: Tracker, parent: str, spec: TrialSpec, config: TrialConfig, *, worker: str,
                 flush_every: int, workdir: os.PathLike[str] | None = None,
                 on_log: Callable[[int], None] | None = None,
                 on_start: Callable[[TrialLogger], None] | None = None) -> tuple[TrialResult, str]:
    """Train one trial as a child run of ``parent``: log every step, upload its files, mark it FINISHED.

    The one way ablate trains a trial of a study (main trials and tuning trials alike).

    Args:
        spec: the trial's identity (study, arm, seed, budget, levels, key).
        config: what to train (``spec.config``, perhaps with a thread count).
        worker: the worker's name (a tag of the run).
        workdir: the trial's checkpoint folder (None: no checkpoints).
        on_log: called with each logged step (heartbeats, progress).
        on_start: called with the run's logger once it exists (e.g. to record its run id).

    Returns:
        The trial's result and its run id.

    Raises:
        TrialRunError: training failed; it carries the run's logger so the caller can record why.
    """
    from ablate.train import CHECKPOINT_FILE, run_trial

    resuming = workdir is not None and (Path(workdir) / CHECKPOINT_FILE).exists()
    logger = tracker.start_trial(
        parent, study=spec.study, key=spec.key, arm=spec.arm, seed=spec.seed, budget=spec.budget,
        levels=spec.levels, flat_config=config.to_flat_dict(), worker=worker, flush_every=flush_every,
        resuming=resuming,
    )
    try:
        if on_start is not None:
            on_start(logger)

        def log(metrics: dict[str, float], step: int) -> None:
            logger(metrics, step)
            if on_log is not None:
                on_log(step)

        result = run_trial(config, log, workdir=workdir)
        logger.backfill(result.history)  # steps before a resume that a killed attempt never sent
        logger.close()
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - the caller records why, with the run
        raise TrialRunError(logger) from exc
    return result, logger.run_id


class TrialRunError(Exception):
    """Training a logged trial failed (its cause is the original exception); ``logger`` is its run."""

    def __init__(self, logger: TrialLogger) -> None:
        super().__init__("the trial failed")
        self.logger = logger


def finish_logged(tracker: Tracker, run_id: str, spec: TrialSpec, config: TrialConfig, result: TrialResult,
                  study: Study, record: Mapping[str, Any]) -> float | None:
    """Upload a trained trial's files to its run (config, history, samples, per-problem records, the
    result record) and mark it FINISHED; the trial's objective (None when its metric has no value)."""
    obj = study.objective
    value = summarize_history(result.history, obj.metric, obj.summary, obj.last_n)
    warm = {k: v for k, v in result.warmstart.items() if k != "history"}
    prm = {k: v for k, v in result.learned_prm.items() if k != "history"}
    tracker.finish_trial(
        run_id, config_yaml=config.to_yaml(), history=result.history, samples=result.samples,
        eval_problems=result.eval_problems,
        result={**record, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
                "levels": spec.levels, "objective": value, "objective_metric": obj.metric,
                "final": dict(result.final), "warmstart": warm, "learned_prm": prm},
        objective=value,
    )
    return value


def run_attempt(plan: Plan, spec: TrialSpec, attempt: Attempt, store: StudyStore, tracker: Tracker, parent: str,
                settings: RunSettings, worker: WorkerInfo, events: EventFn | None = None) -> str:
    """Run one claimed attempt: train with MLflow logging and heartbeats, then record the outcome.

    Returns:
        One of :data:`OUTCOMES`: ``done``, ``failed`` (recorded in the store and MLflow; the study goes
        on), or ``lost`` (finished, but another worker failed the attempt as stale meanwhile; its retry
        resumes from the final checkpoint).

    Raises:
        KeyboardInterrupt: after recording the attempt as failed ("interrupted") and its run KILLED.
    """
    config = trial_config(spec, settings.threads)
    steps = config.train.steps
    common = {"worker": worker.name, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "steps": steps}
    t0 = time.time()
    opened: list[TrialLogger] = []  # the trial's run, once it exists (its failure is recorded there too)
    try:
        with Heartbeat(store, attempt, steps=steps) as hb:

            def on_log(step: int) -> None:
                hb.step = step
                emit(events, kind="step", step=step, **common)

            def on_start(logger: TrialLogger) -> None:
                opened.append(logger)
                store.set_run_id(attempt, logger.run_id)
                emit(events, kind="start", attempt=attempt.number, retry=attempt.retry, **common)

            result, run_id = train_logged(tracker, parent, spec, config, worker=worker.name,
                                          flush_every=settings.flush_every,
                                          workdir=trial_dir(plan.study.name, spec.key, settings.runs),
                                          on_log=on_log, on_start=on_start)
        record = {"steps": result.steps, "seconds": round(result.seconds, 3), "resumed_from": result.resumed_from,
                  "worker": worker.name, "mlflow_run_id": run_id}
        value = finish_logged(tracker, run_id, spec, config, result, plan.study, record)
        ok = store.complete(attempt, value, record)
        outcome = "done" if ok and not hb.lost else "lost"
        emit(events, kind="end", state=outcome, seconds=time.time() - t0, objective=value,
             metric=plan.study.objective.metric, **common)
        return outcome
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - one trial's error is recorded; the study goes on
        logger = opened[0] if opened else None
        cause = exc.__cause__ if isinstance(exc, TrialRunError) and exc.__cause__ is not None else exc
        if isinstance(cause, KeyboardInterrupt):
            record_failure(store, tracker, attempt, logger, "interrupted (KeyboardInterrupt)", status="KILLED")
            emit(events, kind="end", state="failed", seconds=time.time() - t0, error="interrupted", **common)
            raise cause from None
        text = "".join(traceback.format_exception(cause))
        record_failure(store, tracker, attempt, logger, text)
        emit(events, kind="end", state="failed", seconds=time.time() - t0,
             error=f"{type(cause).__name__}: {cause}".splitlines()[0], **common)
        return "failed"


def record_failure(store: StudyStore, tracker: Tracker, attempt: Attempt, logger: TrialLogger | None, text: str,
                   status: str = "FAILED") -> None:
    """Record a failed attempt: its error on the attempt, and on its run (``status``) when it has one."""
    if logger is not None:
        try:
            logger.close()
        except Exception:  # noqa: BLE001 - the tracking store may be what failed
            pass
    store.fail(attempt, text)
    if logger is not None:
        try:
            tracker.fail_trial(logger.run_id, text, status=status)
        except Exception:  # noqa: BLE001
            pass


def process_main(settings: RunSettings, index: int, events: Queue[Event], gpu: str | None = None) -> None:
    """Entry point of a spawned worker process of a local pool (:func:`ablate.runner.run_study`)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if settings.threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(settings.threads)
        import torch

        torch.set_num_threads(settings.threads)
    try:
        run_worker(settings, index=index, events=events.put)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


__all__ = [
    "OUTCOMES",
    "POLL_SECONDS",
    "RunSettings",
    "TrialRunError",
    "WorkerStats",
    "current_plan",
    "emit",
    "finish_logged",
    "parent_run_id",
    "process_main",
    "record_failure",
    "record_stale",
    "run_attempt",
    "run_worker",
    "train_logged",
    "trial_config",
]
