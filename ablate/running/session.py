"""A study run as one object: the run's settings, the checks before it, and the opened session.

:class:`RunSettings` is what every worker of a run needs (plain values: it goes to worker processes as JSON);
:func:`make_settings` builds it from the options a user gives (:class:`RunOptions`). A worker opens
a :class:`Session` once (:meth:`Session.open`: the study, its plan, the study store, the MLflow tracking
store, the parent run, the worker's identity, where progress events go), and every attempt it trains
takes that session (:mod:`ablate.running.attempt`). :func:`current_plan` is the plan a run runs: the seeds the
store holds for adaptive seeds, each arm's tuned values for ``tune:``.

The refusals made before anything is written (the tracking server, writable folders, the study's
identity, a lost store, the disk) are :mod:`ablate.running.preflight`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.objective import direction
from ablate.paths import RUNS_DIR
from ablate.store import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_STORE_WAIT,
    StaleAttempt,
    StudyStore,
    WorkerInfo,
)
from ablate.study.plan import Plan

if TYPE_CHECKING:
    from ablate.study import Study
    from ablate.tracking import Tracker


#: A progress event: a dict with ``kind`` (``start``, ``step``, ``end``; ``population`` when a worker packs
#: trials together), the trial's identity and more.
Event = dict[str, Any]
#: Where a worker sends its progress events.
EventFn = Callable[[Event], None]


#: The most seconds the end of a run waits by default for an MLflow server that stopped answering, to
#: upload what it kept (:meth:`RunSettings.end_wait`).
DEFAULT_TRACKING_WAIT = 60.0


#: By default the end of a run waits for a stopped server at most this share of the run's own time so far:
#: a tracking outage never adds more than a tenth to a study's wall time.
TRACKING_WAIT_SHARE = 0.1


#: Seconds an idle worker waits before looking for work again.
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class RunSettings:
    """What a worker needs to run a study (plain values: a local pool sends it to its worker processes as JSON,
    :func:`ablate.running.pool.member_command`).

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
            result is recorded in the store and in MLflow or the outbox (:func:`ablate.running.attempt.drop_checkpoint`).
        tracking_wait: seconds the end of a run waits for an MLflow server that does not answer, to upload
            the trials kept in the outbox meanwhile (``--tracking-wait``); None: :meth:`end_wait`'s default.
        check_disk: refuse to start when a disk the study writes to has less free space than its
            estimated peak use (:func:`ablate.running.preflight.check_disk_space`; ``--ignore-disk-space``).
        pack: the most trials with ``train.packed: true`` that train together as one population
            (``--pack``; ``auto``: see :func:`ablate.running.attempt.pack_size`).
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
        """Seconds the end of a run that has taken ``elapsed`` seconds gives an MLflow outage
        (:func:`ablate.tracking.outbox.upload_unsent`): ``--tracking-wait`` when given, else a tenth of
        ``elapsed``, at most 60 s. An outage that began in the run's second half, after the server took some of
        its trials, gets them from the run's end, so a short one whose end they cover is waited out; another
        gets them in all from the first trial it kept on disk, so a server down for the whole study is not
        waited for at all."""
        if self.tracking_wait is not None:
            return self.tracking_wait
        return min(DEFAULT_TRACKING_WAIT, TRACKING_WAIT_SHARE * max(0.0, elapsed))

    def open_store(self, study: Study) -> StudyStore:
        """The study store these settings name, for ``study``."""
        return StudyStore(self.storage, study.name, direction=direction(study.objective.mode),
                          heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period,
                          max_retries=self.max_retries, store_wait=self.store_wait)


def current_plan(study: Study, settings: RunSettings, store: StudyStore,
                 tuned: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The plan the runner runs at ``settings.budget``.

    A study with ``seeds: {min, max}`` runs seeds 0..n-1, n = the largest of ``min``, the seed
    count of the design frozen in the store and the study's own (adaptive rounds add seeds; see
    :mod:`ablate.stats.planning`). A study with ``tune:`` runs each arm at its tuned values: ``tuned``
    when given, else read from the store's tuning studies (:class:`ablate.running.tuner.Tuner`; an error
    naming the fix while tuning is unfinished).
    """
    plan = Plan.of(study, settings.budget)
    if study.seed_range is not None:
        from ablate.stats.planning import seeds_in_design

        n = max(study.seed_range.min, seeds_in_design(store.frozen_design(settings.budget)), len(study.seeds))
        plan = plan.with_seeds(range(n))
    if study.tune is not None:
        if tuned is None:
            from ablate.running.tuner import Tuner, tuning_for_budget

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


def status_plan(study: Study, store: StudyStore | None, budget: str, storage: str | None) -> tuple[Plan, str | None]:
    """The plan of the study as it runs today, and a note: the seeds the store holds for an adaptive
    study, each arm's tuned values for a tuned study (untuned keys, with a note, while tuning is unfinished)."""
    from ablate.errors import AblateError

    if store is None or storage is None:
        return Plan.of(study, budget), None
    settings = RunSettings(study_file=str(study.path), budget=budget, storage=storage, tracking_uri="")
    try:
        return current_plan(study, settings, store), None
    except AblateError:
        plan = current_plan(study, settings, store, {})
        return plan, "tuning is not finished: trials are listed with their untuned keys"


@dataclass(frozen=True)
class RunOptions:
    """The options of ``ablate run`` and ``ablate worker`` as a user gives them, unchecked; None: the default.

    ``storage`` None: ``$ABLATE_STORAGE``, else ``<runs>/<study>/store.journal``; ``tracking_uri`` None:
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; ``max_retries``, ``heartbeat``, ``grace`` and
    ``store_wait`` None: the store's defaults (:mod:`ablate.store`); ``tracking_wait`` None:
    :meth:`RunSettings.end_wait`'s default.
    """

    storage: str | None = None
    tracking_uri: str | None = None
    runs: str = RUNS_DIR
    threads: int = 0
    workers: int = 1
    max_retries: int | None = None
    heartbeat: float | None = None
    grace: float | None = None
    store_wait: float | None = None
    keep_checkpoints: bool = False
    check_disk: bool = True
    tracking_wait: float | None = None
    pack: int | str = "auto"

    def problems(self) -> list[str]:
        """Every option out of its range, one line each (empty: all fine)."""
        o = self
        heartbeat = DEFAULT_HEARTBEAT_INTERVAL if o.heartbeat is None else o.heartbeat
        grace = DEFAULT_GRACE_PERIOD if o.grace is None else o.grace
        checks = [
            (o.workers >= 1, f"--workers {o.workers}: must be at least 1"),
            (o.threads >= 0, f"--threads {o.threads}: must be 0 (automatic) or more"),
            (o.max_retries is None or o.max_retries >= 0, f"--max-retries {o.max_retries}: must be 0 or more"),
            (0 < heartbeat < grace, f"--heartbeat {heartbeat:g} / --grace {grace:g}: need 0 < heartbeat < grace"),
            (o.store_wait is None or o.store_wait >= 0, f"--store-wait {o.store_wait}: must be 0 or more seconds"),
            (o.tracking_wait is None or o.tracking_wait >= 0,
             f"--tracking-wait {o.tracking_wait}: must be 0 or more seconds"),
            (o.pack == "auto" or (str(o.pack).isdigit() and int(o.pack) >= 1),
             f"--pack {o.pack}: must be a whole number of trials, 1 or more, or auto"),
        ]
        return [message for ok, message in checks if not ok]


def make_settings(study: Study, budget: str, options: RunOptions | None = None) -> RunSettings:
    """Check the run ``options`` and build the :class:`RunSettings` (creates nothing).

    Raises:
        AblateError: an unknown budget or a bad option (every problem in one message).
    """
    from ablate.errors import AblateError
    from ablate.store import resolve_storage
    from ablate.tracking import resolve_tracking_uri

    o = options or RunOptions()
    study.check_budget(budget)
    problems = o.problems()
    if problems:
        raise AblateError("; ".join(problems))
    return RunSettings(
        study_file=str(study.path), budget=budget, storage=resolve_storage(o.storage, study.name, o.runs),
        tracking_uri=resolve_tracking_uri(o.tracking_uri), runs=o.runs, threads=o.threads,
        heartbeat_interval=DEFAULT_HEARTBEAT_INTERVAL if o.heartbeat is None else o.heartbeat,
        grace_period=DEFAULT_GRACE_PERIOD if o.grace is None else o.grace,
        max_retries=DEFAULT_MAX_RETRIES if o.max_retries is None else o.max_retries,
        store_wait=DEFAULT_STORE_WAIT if o.store_wait is None else o.store_wait,
        keep_checkpoints=o.keep_checkpoints, check_disk=o.check_disk, tracking_wait=o.tracking_wait,
        pack=o.pack if o.pack == "auto" else int(o.pack),
    )


@dataclass
class Session:
    """One worker's opened run of a study: what every attempt it trains shares, so that the attempt path
    (:mod:`ablate.running.attempt`) takes ``(session, spec, attempt)`` instead of these seven one by one.

    Attributes:
        study: the loaded study; settings: the run's :class:`RunSettings`.
        plan: the plan being run (a round of adaptive seeds may grow it: :func:`current_plan`).
        store: the study store; tracker: the MLflow tracking store; parent: the study's parent run.
        worker: this worker's identity (its name tags every run it opens).
        events: where progress events go (None: nowhere).
    """

    study: Study
    settings: RunSettings
    plan: Plan
    store: StudyStore
    tracker: Tracker
    parent: str
    worker: WorkerInfo
    events: EventFn | None = None

    @classmethod
    def open(cls, settings: RunSettings, study: Study | None = None, *, index: int | None = None,
             events: EventFn | None = None, prepare: bool = False) -> Session:
        """The opening sequence of a worker (``ablate run``'s, in each process, and ``ablate worker``'s):
        load the study (from ``settings.study_file`` when None), open its store and tracking store, read
        the plan, and find the parent run (``settings.parent_run_id``, else found or created).

        Args:
            index: this worker's number in a local pool (part of its name).
            prepare: ``ablate worker``: refuse another study of this name, then check the plan against
                the store's frozen design and enqueue what must run first, before anything is written.
        """
        from ablate.study import load_study
        from ablate.tracking import Tracker

        study = study if study is not None else load_study(settings.study_file)
        store = settings.open_store(study)
        plan = current_plan(study, settings, store)
        tracker = Tracker(settings.tracking_uri)
        if prepare:
            tracker.check_identity(study)
            store.bind(study)
            store.prepare(plan)
        parent = settings.parent_run_id or parent_run_id(plan, store, tracker)
        return cls(study, settings, plan, store, tracker, parent, WorkerInfo.current(index), events)

    def emit(self, **event: Any) -> None:
        """Send a progress event to :attr:`events` (a display problem never fails a trial)."""
        emit(self.events, **event)


__all__ = [
    "DEFAULT_TRACKING_WAIT",
    "POLL_SECONDS",
    "TRACKING_WAIT_SHARE",
    "Event",
    "EventFn",
    "RunOptions",
    "RunSettings",
    "Session",
    "current_plan",
    "emit",
    "finish_parent",
    "make_settings",
    "parent_run_id",
    "record_stale",
    "status_plan",
]
