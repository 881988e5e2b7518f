"""The worker: claim a trial of the plan from the study store, train it with MLflow logging, record it.

``ablate worker FILE --storage URL`` runs :func:`run_worker` alone, on any machine that reaches the
store and the tracking server; ``ablate run`` runs it in N local processes (:mod:`ablate.runner`).

The worker loop::

    repeat:
        fail stale attempts of dead workers (their retries are enqueued)
        claim the oldest pending attempt of the plan (atomic: one worker gets it)
            none pending, none running anywhere -> done
            none pending, some running elsewhere -> wait (they may die and need a retry)
        heartbeat from a thread until the attempt is recorded (opening, training, finishing its run)
        open its MLflow child run (a tracking outage: train anyway, offline)
        train: ablate.train.run_trial(config, log, workdir=runs/<study>/trials/<key>/)
            (resumes from the checkpoint a killed attempt left there; metrics the tracking store
            does not take wait in memory and are sent when it answers again)
        success: artifacts + FINISHED in MLflow (still unreachable: the trial goes to the outbox,
            runs/<study>/trials/<key>/unsent.json, see ablate.outbox), then done in the store
        exception: the traceback on the attempt and the run (FAILED); the study goes on
        another worker took the attempt over (failed it as stale): send nothing more, leave it

Liveness: an attempt of a process on this machine is stale only when the process is gone; one of
another machine, when its heartbeats stop for the grace period. Every call to the study store waits
out an outage of up to ``--store-wait`` seconds (:class:`ablate.store.RetryingStorage`).

Which trials: :func:`current_plan`, the plan the runner runs (the seeds the store holds for a study
with ``seeds: {min, max}``, each arm's tuned values for a study with ``tune:``).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.disk import DISK_FULL_EXIT, disk_full_error, is_disk_full
from ablate.metrics import content_fingerprint
from ablate.objective import direction, summarize_history
from ablate.outbox import upload_unsent
from ablate.paths import RUNS_DIR, trial_dir
from ablate.plan import Plan
from ablate.store import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_STORE_WAIT,
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

#: A progress event: a dict with ``kind`` (``start``, ``step``, ``end``; ``population`` when a worker packs
#: trials together), the trial's identity and more.
Event = dict[str, Any]
EventFn = Callable[[Event], None]

#: The most seconds the end of a run waits by default for an MLflow server that stopped answering, to
#: upload what it kept (:meth:`RunSettings.end_wait`).
DEFAULT_TRACKING_WAIT = 60.0
#: By default the end of a run waits for a stopped server at most this share of the run's own time so far:
#: a tracking outage never adds more than a tenth to a study's wall time.
TRACKING_WAIT_SHARE = 0.1
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
        heartbeat_interval, grace_period, max_retries, store_wait: see :mod:`ablate.store`.
        flush_every: logged steps between two MLflow ``log_batch`` requests.
        poll_seconds: how long an idle worker waits before looking again.
        keep_checkpoints: keep a finished trial's checkpoint; by default it is deleted once the trial's
            result is recorded in the store and in MLflow or the outbox (:func:`drop_checkpoint`).
        tracking_wait: seconds the end of a run waits for an MLflow server that does not answer, to upload
            the trials kept in the outbox meanwhile (``--tracking-wait``); None: :meth:`end_wait`'s default.
        check_disk: refuse to start when a disk the study writes to has less free space than its
            estimated peak use (:func:`ablate.runner.check_disk_space`; ``--ignore-disk-space``).
        pack: the most trials with ``train.packed: true`` that train together as one population
            (``--pack``; ``auto``: see :func:`pack_size`).
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
    store_wait: float = DEFAULT_STORE_WAIT
    flush_every: int = 10
    poll_seconds: float = POLL_SECONDS
    keep_checkpoints: bool = False
    check_disk: bool = True
    tracking_wait: float | None = None
    pack: int | str = "auto"

    def end_wait(self, elapsed: float) -> float:
        """Seconds the end of a run that has taken ``elapsed`` seconds gives an MLflow outage in all, from the
        first trial it kept on disk (:func:`ablate.outbox.upload_unsent`): ``--tracking-wait`` when given,
        else a tenth of ``elapsed``, at most 60 s. An outage as old as the run (the server down for the
        whole study) is then not waited for at all, and a short one near the end is waited out."""
        if self.tracking_wait is not None:
            return self.tracking_wait
        return min(DEFAULT_TRACKING_WAIT, TRACKING_WAIT_SHARE * max(0.0, elapsed))

    def open_store(self, study: Study) -> StudyStore:
        """The study store these settings name, for ``study``."""
        return StudyStore(self.storage, study.name, direction=direction(study.objective.mode),
                          heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period,
                          max_retries=self.max_retries, store_wait=self.store_wait)


@dataclass
class WorkerStats:
    """What one worker did: keys of the trials it completed, that failed, and that it lost (another
    worker declared them stale while they ran); and the trials its outbox still held at the end
    (``ablate worker`` only: a local pool's outbox is the runner's)."""

    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)  # trials left in the outbox when it stopped


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
            from ablate.tuner import Tuner, tuning_for_budget

            tuned = Tuner(tuning_for_budget(study, settings.budget), settings.storage).all_best_values()
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
        events: called with progress events (dicts with ``kind``: ``start``, ``step``, ``end``, ``population``).
        prepare: check the design and enqueue what must run first (as ``ablate worker`` does).

    Returns:
        The keys this worker completed, failed and lost.
    """
    from ablate.memory import keep_freed_memory
    from ablate.study import load_study
    from ablate.tracking import Tracker

    started = time.time()
    keep_freed_memory()  # the next trial reuses this one's pages instead of faulting in new ones
    study = study if study is not None else load_study(settings.study_file)
    budget = settings.budget
    store = settings.open_store(study)
    plan = current_plan(study, settings, store)
    tracker = Tracker(settings.tracking_uri)
    if prepare:  # `ablate worker`: refuse another study of this name before anything is written
        tracker.check_identity(study)
        store.bind(study)
        store.prepare(plan)
    parent = settings.parent_run_id or parent_run_id(plan, store, tracker)
    if any(s.config.train.packed for s in plan.specs):
        tag_packing(tracker, parent, settings)
    worker = WorkerInfo.current(index)
    stats = WorkerStats()
    while True:
        record_stale(tracker, store.fail_stale(budget))
        attempt = store.claim(budget, worker, keys=plan.by_key.keys())
        if attempt is None:
            if not store.has_work(budget):
                if settings.parent_run_id is None:  # `ablate worker`: its own outbox, and the parent's state
                    stats.unsent = upload_unsent(tracker, study.name, settings.runs,
                                                 wait=settings.end_wait(time.time() - started),
                                                 stream=sys.stderr).left
                    finish_parent(tracker, parent, failed=store.counts(budget)["failed"] > 0 or bool(stats.unsent))
                return stats
            if study.seed_range is not None:  # a round of `ablate run` may have added seeds
                grown = current_plan(study, settings, store, plan.tuned)
                if grown.seeds != plan.seeds:
                    plan = grown
                    continue
            time.sleep(settings.poll_seconds)
            continue
        attempts = [attempt] + claim_mates(plan, attempt, store, worker, settings)
        if len(attempts) == 1:
            outcomes = [run_attempt(plan, plan.by_key[attempt.key], attempt, store, tracker, parent, settings, worker,
                                    events)]
        else:  # one population: each member runs its attempt in a thread of this process
            outcomes = run_population_attempts(plan, attempts, store, tracker, parent, settings, worker, events)
        for a, outcome in zip(attempts, outcomes):
            {"done": stats.done, "failed": stats.failed, "lost": stats.lost}[outcome].append(a.key)


#: Parent-run tag: ``--pack`` of the workers that trained the study's packed trials.
TAG_PACK = "ablate.pack"


def tag_packing(tracker: Tracker, parent: str, settings: RunSettings) -> None:
    """Record ``--pack`` on the parent run (a tracking error only warns: the trials still run)."""
    from ablate.tracking import TRACKING_ERRORS

    try:
        tracker.client.set_tag(parent, TAG_PACK, str(settings.pack))
    except TRACKING_ERRORS as exc:
        print(f"warning: --pack could not be recorded in MLflow: {type(exc).__name__}: {exc}", file=sys.stderr)


def pack_size(pack: int | str, config: TrialConfig) -> int:
    """The population size ``--pack`` gives trials like ``config`` (1 unless ``train.packed``).

    ``auto``: 1 on a CPU, where a population measured no faster than the same trials one after another
    (benchmarks/RESULTS.md, bench_study.py --pack); on a GPU as many as :func:`gpu_member_bytes` says fit
    in half its free memory, at most :data:`MAX_AUTO_PACK` (an estimate, not yet measured on a GPU)."""
    if not config.train.packed:
        return 1
    if pack != "auto":
        return int(pack)
    from ablate.config import resolve_device

    device = resolve_device(config)
    if device.type != "cuda":
        return 1
    import torch

    from ablate.train.footprint import parameter_count

    free, _ = torch.cuda.mem_get_info(device)
    per_member = gpu_member_bytes(parameter_count(config.model.name) or 0)
    return max(1, min(MAX_AUTO_PACK, int(0.5 * free // per_member)))


#: Largest population ``--pack auto`` forms.
MAX_AUTO_PACK = 64


def gpu_member_bytes(params: int) -> int:
    """Device memory one member is assumed to take: 32 bytes a parameter (float32 weights, gradient, AdamW's
    two moments, the stacked copy of a forward, a reference model) and 256 MiB of activations."""
    return 32 * params + 256 * 2**20


def claim_mates(plan: Plan, attempt: Attempt, store: StudyStore, worker: WorkerInfo,
                settings: RunSettings) -> list[Attempt]:
    """Further attempts to train with ``attempt`` as one population: up to ``--pack`` - 1 pending
    attempts of packed trials of the same :func:`~ablate.train.population.population_shape`."""
    from ablate.train.population import population_shape

    config = plan.by_key[attempt.key].config
    size = pack_size(settings.pack, config)
    if size <= 1:
        return []
    shape = population_shape(config)
    keys = {k for k, s in plan.by_key.items() if s.config.train.packed and population_shape(s.config) == shape}
    mates: list[Attempt] = []
    while len(mates) < size - 1:
        mate = store.claim(settings.budget, worker, keys=keys)
        if mate is None:
            break
        mates.append(mate)
    return mates


def run_population_attempts(plan: Plan, attempts: list[Attempt], store: StudyStore, tracker: Tracker, parent: str,
                            settings: RunSettings, worker: WorkerInfo, events: EventFn | None) -> list[str]:
    """Run the claimed ``attempts`` as one population (:func:`ablate.train.population.run_members`): each
    member is an ordinary :func:`run_attempt` (its heartbeats, run, checkpoint and record), in a thread.

    Raises:
        KeyboardInterrupt, or a full disk's error: after every member has recorded its own outcome.
    """
    from ablate.train.population import run_members

    def task(a: Attempt) -> Callable[[], str]:
        return lambda: run_attempt(plan, plan.by_key[a.key], a, store, tracker, parent, settings, worker, events)

    emit(events, kind="population", size=len(attempts), worker=worker.name, keys=[a.key for a in attempts])
    outcomes = run_members([task(a) for a in attempts])
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        raise next((e for e in errors if isinstance(e, KeyboardInterrupt)), errors[0])
    return outcomes


def parent_run_id(plan: Plan, store: StudyStore, tracker: Tracker) -> str:
    """The study's MLflow parent run at the plan's budget, found or created under the store's lock.

    Raises:
        OutageError: the tracking store does not answer (one line naming it; nothing was trained).
    """
    from ablate.errors import OutageError
    from ablate.tracking import TRACKING_ERRORS, first_line

    try:
        with store.lock():
            return tracker.parent_run(plan.study, plan.budget, storage=store.description,
                                      design=store.frozen_design(plan.budget))
    except TRACKING_ERRORS as exc:
        raise OutageError(f"MLflow {tracker.location} does not answer ({first_line(exc)}); start it (or pass "
                          "another --tracking-uri) and run the same command again") from None


def finish_parent(tracker: Tracker, parent: str, *, failed: bool) -> str | None:
    """Mark the parent run finished or failed; the tracking error's first line when the store does
    not answer (the parent's state is a summary: the trials' runs and the outbox hold the results)."""
    from ablate.tracking import TRACKING_ERRORS, first_line

    try:
        tracker.finish_parent(parent, failed=failed)
    except TRACKING_ERRORS as exc:
        return first_line(exc)
    return None


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
                 on_start: Callable[[TrialLogger], None] | None = None,
                 fence: Callable[[], bool] | None = None) -> tuple[TrialResult, TrialLogger]:
    """Train one trial as a child run of ``parent``, logging every step.

    The one way ablate trains a trial of a study (main trials and tuning trials alike). A tracking
    store that does not answer never stops the trial: when its run cannot be opened the trial trains
    with an offline logger, and metrics it cannot send wait in the logger (:class:`TrialLogger`);
    :func:`finish_logged` then keeps what did not arrive in the outbox.

    Args:
        spec: the trial's identity (study, arm, seed, budget, levels, key).
        config: what to train (``spec.config``, perhaps with a thread count).
        worker: the worker's name (a tag of the run).
        workdir: the trial's checkpoint folder (None: no checkpoints).
        on_log: called with each logged step (heartbeats, progress).
        on_start: called with the run's logger once it exists (e.g. to record its run id).
        fence: False once the attempt belongs to another worker: its logger stops sending.

    Returns:
        The trial's result and its logger (closed: ``logger.unsent`` is None when every metric
        reached the run).

    Raises:
        TrialRunError: training failed; it carries the run's logger so the caller can record why.
    """
    from ablate.tracking import TRACKING_ERRORS, TrialLogger, first_line
    from ablate.train import CHECKPOINT_FILE, run_trial

    resuming = workdir is not None and (Path(workdir) / CHECKPOINT_FILE).exists()
    try:
        logger = tracker.start_trial(parent, resuming=resuming, fence=fence, flush_every=flush_every,
                                     **start_arguments(spec, config, worker))
    except TRACKING_ERRORS as exc:  # the run cannot be opened now: train anyway, keep the metrics
        if is_disk_full(exc):
            raise disk_full_error(exc, tracker.folder) from None
        logger = TrialLogger.offline(first_line(exc), flush_every=flush_every)
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
    return result, logger


def start_arguments(spec: TrialSpec, config: TrialConfig, worker: str) -> dict[str, Any]:
    """What a trial's MLflow run is opened with (:meth:`Tracker.start_trial`), as kept in the outbox."""
    return {"study": spec.study, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
            "levels": dict(spec.levels), "flat_config": config.to_flat_dict(), "worker": worker}


class TrialRunError(Exception):
    """Training a logged trial failed (its cause is the original exception); ``logger`` is its run."""

    def __init__(self, logger: TrialLogger) -> None:
        super().__init__("the trial failed")
        self.logger = logger


def finish_logged(tracker: Tracker, logger: TrialLogger, parent: str, spec: TrialSpec, config: TrialConfig,
                  result: TrialResult, study: Study, record: Mapping[str, Any], *, worker: str,
                  outbox: os.PathLike[str] | None) -> tuple[float | None, bool]:
    """Upload a trained trial's files to its run (config, history, samples, per-problem records, the
    result record) and mark it FINISHED.

    When the tracking store does not take them (or some metrics never reached the run), the trial is
    kept in the outbox folder ``outbox`` (:func:`ablate.outbox.write_unsent`) for a later upload;
    without an outbox folder the tracking error is raised.

    Returns:
        The trial's objective (None when its metric has no value), and whether the run got everything
        (False: the trial waits in the outbox).
    """
    from ablate.outbox import write_unsent
    from ablate.tracking import TRACKING_ERRORS, first_line

    obj = study.objective
    value = summarize_history(result.history, obj.metric, obj.summary, obj.last_n)
    warm = {k: v for k, v in result.warmstart.items() if k != "history"}
    prm = {k: v for k, v in result.learned_prm.items() if k != "history"}
    finish = {
        "config_yaml": config.to_yaml(), "samples": list(result.samples), "eval_problems": result.eval_problems,
        "result": {**record, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
                   "levels": spec.levels, "objective": value, "objective_metric": obj.metric,
                   "fingerprint": content_fingerprint(result.final),
                   "final": dict(result.final), "warmstart": warm, "learned_prm": prm},
        "objective": value,
    }
    why = logger.unsent
    if why is None:
        try:
            tracker.finish_trial(logger.run_id, history=result.history, **finish)  # type: ignore[arg-type]
            return value, True
        except TRACKING_ERRORS as exc:
            if is_disk_full(exc):
                raise disk_full_error(exc, tracker.folder) from None
            if outbox is None:
                raise
            why = first_line(exc)
    if outbox is None:
        from ablate.tracking import TrackingError

        raise TrackingError(f"the trial's metrics did not reach MLflow {tracker.location}: {why}")
    write_unsent(outbox, parent=parent, start=start_arguments(spec, config, worker), history=result.history,
                 finish=finish, why=why)
    return value, False


def run_attempt(plan: Plan, spec: TrialSpec, attempt: Attempt, store: StudyStore, tracker: Tracker, parent: str,
                settings: RunSettings, worker: WorkerInfo, events: EventFn | None = None) -> str:
    """Run one claimed attempt: train with MLflow logging, finish its run, record the outcome; the
    attempt heartbeats (from a thread) all along, while its run is opened and finished too.

    Returns:
        One of :data:`OUTCOMES`: ``done``, ``failed`` (recorded in the store and MLflow; the study goes
        on), or ``lost`` (another worker failed the attempt as stale meanwhile: its run is left to the
        retry, which resumes from the final checkpoint; nothing more is sent to it from here).

    Raises:
        KeyboardInterrupt: after recording the attempt as failed ("interrupted") and its run KILLED.
    """
    config = trial_config(spec, settings.threads)
    steps = config.train.steps
    common = {"worker": worker.name, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "steps": steps}
    t0 = time.time()
    opened: list[TrialLogger] = []  # the trial's run, once it exists (its failure is recorded there too)
    workdir = trial_dir(plan.study.name, spec.key, settings.runs)
    try:
        with Heartbeat(store, attempt, steps=steps) as hb:

            def on_log(step: int) -> None:
                if hb.error is not None:  # the store cannot record the attempt any more (a full disk)
                    raise hb.error
                hb.step = step
                emit(events, kind="step", step=step, **common)

            def on_start(logger: TrialLogger) -> None:
                opened.append(logger)
                if logger.run_id is not None:
                    store.set_run_id(attempt, logger.run_id)
                emit(events, kind="start", attempt=attempt.number, retry=attempt.retry, **common)

            result, logger = train_logged(tracker, parent, spec, config, worker=worker.name,
                                          flush_every=settings.flush_every, workdir=workdir,
                                          on_log=on_log, on_start=on_start, fence=lambda: not hb.lost)
            record = {"steps": result.steps, "seconds": round(result.seconds, 3), "resumed_from": result.resumed_from,
                      "worker": worker.name, "mlflow_run_id": logger.run_id}
            value, sent = None, True
            if not hb.lost:  # a late finish would overwrite the run its new owner writes to
                value, sent = finish_logged(tracker, logger, parent, spec, config, result, plan.study, record,
                                            worker=worker.name, outbox=workdir)
        ok = not hb.lost and store.complete(attempt, value, {**record, "sent_to_mlflow": sent})
        outcome = "done" if ok else "lost"
        if ok and not settings.keep_checkpoints:  # recorded in the store and in MLflow or the outbox
            drop_checkpoint(workdir)
        emit(events, kind="end", state=outcome, seconds=time.time() - t0, objective=value,
             metric=plan.study.objective.metric, unsent=None if sent else logger.unsent, **common)
        return outcome
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - one trial's error is recorded; the study goes on
        logger = opened[0] if opened else None
        cause = exc.__cause__ if isinstance(exc, TrialRunError) and exc.__cause__ is not None else exc
        if is_disk_full(cause):  # not the trial's fault: it stays running, and resumes when there is space
            raise disk_full_error(cause, workdir) from None
        if isinstance(cause, KeyboardInterrupt):
            record_failure(store, tracker, attempt, logger, "interrupted (KeyboardInterrupt)", status="KILLED")
            emit(events, kind="end", state="failed", seconds=time.time() - t0, error="interrupted", **common)
            raise cause from None
        text = "".join(traceback.format_exception(cause))
        record_failure(store, tracker, attempt, logger, text)
        emit(events, kind="end", state="failed", seconds=time.time() - t0,
             error=f"{type(cause).__name__}: {cause}".splitlines()[0], **common)
        return "failed"


def drop_checkpoint(workdir: str | Path) -> None:
    """Delete a finished trial's checkpoint (``trainer.pt`` and a temporary file a save left) and its
    folder when nothing else is in it (an outbox ``unsent.json`` stays until it is uploaded). A trial is
    only finished once its result is in the store, so no retry needs the checkpoint; ~10 MB a tiny-llama
    trial, ~13 GB for the ~1,300 trials of the predefined studies at the seeds they need."""
    from ablate.train import CHECKPOINT_FILE

    folder = Path(workdir)
    for path in (folder / CHECKPOINT_FILE, (folder / CHECKPOINT_FILE).with_suffix(".tmp")):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    try:
        folder.rmdir()
    except OSError:  # not empty (an outbox, a file moved aside) or already gone
        pass


def record_failure(store: StudyStore, tracker: Tracker, attempt: Attempt, logger: TrialLogger | None, text: str,
                   status: str = "FAILED") -> None:
    """Record a failed attempt: its error on the attempt, and on its run (``status``) when it has one."""
    if logger is not None:
        try:
            logger.close()
        except Exception:  # noqa: BLE001 - the tracking store may be what failed
            pass
    store.fail(attempt, text)
    if logger is not None and logger.run_id is not None:
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
    from ablate.errors import AblateError, say_warnings_in_one_line

    say_warnings_in_one_line(f"ablate worker {index}")
    try:
        run_worker(settings, index=index, events=events.put)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        if is_disk_full(exc):  # the pool says it once, and stops the other workers
            events.put({"kind": "disk_full", "message": str(disk_full_error(exc, settings.runs)), "worker": index})
            raise SystemExit(DISK_FULL_EXIT) from None
        if not isinstance(exc, AblateError):
            raise
        print(f"ablate worker {index}: error: {exc}", file=sys.stderr, flush=True)  # an outage it could not wait out
        raise SystemExit(exc.exit_code) from None


__all__ = [
    "DEFAULT_TRACKING_WAIT",
    "TRACKING_WAIT_SHARE",
    "OUTCOMES",
    "POLL_SECONDS",
    "RunSettings",
    "TrialRunError",
    "WorkerStats",
    "current_plan",
    "emit",
    "finish_logged",
    "finish_parent",
    "start_arguments",
    "parent_run_id",
    "process_main",
    "record_failure",
    "record_stale",
    "run_attempt",
    "run_worker",
    "train_logged",
    "trial_config",
]
