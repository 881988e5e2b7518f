"""Running a study: tune (``tune:``), plan, enqueue, run a local pool of workers, grow adaptive seeds.

``ablate run FILE`` = :func:`run_study`::

    refuse a runs folder that cannot be written, and a store holding none of the trials that MLflow
        holds finished at the budget (an emptied or deleted store would train them all again)
    tune every arm first (a study with ``tune:``; ablate.tuner, its trials logged to MLflow)
    plan = the study's Plan at the budget (tuned values, the seeds the store holds)
    the store checks the plan against its frozen design and enqueues what must run
    find or create the MLflow parent run; tag it with the plan's tuned values and seed count
    repeat (one round; a study with seeds: {min, max} may run several):
        run ablate.worker.run_worker in N local processes until nothing is pending or running
        an adaptive study: re-estimate the seeds needed (ablate.planning); more -> plan.with_seeds, enqueue

Local pool: ``workers`` processes started with multiprocessing's *spawn* (no forked torch state),
each with ``max(1, cores // workers)`` torch threads; on a machine with several GPUs the workers take
them round-robin (``CUDA_VISIBLE_DEVICES``), with one GPU they share it. A worker process that dies is
replaced (its trial is retried, see :mod:`ablate.store`), at most ``workers * (max_retries + 1)``
times. With ``workers=1`` the loop runs in the calling process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from ablate.disk import DISK_FULL_EXIT, DiskFullError, disk_full_error, is_disk_full
from ablate.outbox import upload_unsent
from ablate.paths import run_dir, trial_dir
from ablate.plan import TAG_SEEDS, TAG_TUNED, Plan
from ablate.progress import Progress
from ablate.store import PrepareResult, StudyStore, WorkerInfo
from ablate.worker import (
    Event,
    EventFn,
    RunSettings,
    TrialRunError,
    WorkerStats,
    current_plan,
    finish_logged,
    finish_parent,
    pack_size,
    parent_run_id,
    process_main,
    record_stale,
    run_worker,
    train_logged,
    trial_config,
)

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.planning import AdaptiveRound
    from ablate.study import Arm, Study
    from ablate.tracking import Tracker
    from ablate.train import TrialResult


# ------------------------------------------------------------------------------------------ tuning


def tuning_budget_label(study: Study) -> str:
    """The budget tag of a study's tuning runs in MLflow: ``tune:<budget>`` (a colon never appears in a
    budget's name, so tuning runs never mix with a budget's trials)."""
    assert study.tune is not None
    return f"tune:{study.tune.budget}"


def tuning_trainer(study: Study, settings: RunSettings, tracker: Tracker) -> tuple[Callable[..., TrialResult], str]:
    """The trial function the tuner trains with, and the MLflow parent run of the tuning trials:
    each tuning trial is a child run of ``<study> (tune:<budget>)``, logged like a main trial."""
    from ablate.store import describe_storage
    from ablate.study import TrialSpec

    label = tuning_budget_label(study)
    parent = tracker.parent_run(study, label, storage=describe_storage(settings.storage))
    worker = WorkerInfo.current().name

    def train(arm: Arm, seed: int, config: TrialConfig) -> TrialResult:
        spec = TrialSpec(study.name, arm.name, dict(arm.levels), seed, label, config, config.trial_key())
        config = trial_config(spec, settings.threads)
        try:
            result, logger = train_logged(tracker, parent, spec, config, worker=worker,
                                          flush_every=settings.flush_every)
        except TrialRunError as exc:
            cause = exc.__cause__ or exc
            try:
                if exc.logger.run_id is not None:
                    tracker.fail_trial(exc.logger.run_id, "".join(traceback.format_exception(cause)))
            except Exception:  # noqa: BLE001 - the tracking store may be what failed
                pass
            raise cause from None
        record = {"steps": result.steps, "seconds": round(result.seconds, 3), "worker": worker,
                  "mlflow_run_id": logger.run_id, "tuning": True}
        finish_logged(tracker, logger, parent, spec, config, result, study, record, worker=worker,
                      outbox=trial_dir(study.name, spec.key, settings.runs))
        return result

    return train, parent


def tune_study(study: Study, settings: RunSettings, tracker: Tracker,
               stream: TextIO) -> dict[str, dict[str, Any]] | None:
    """Tune every arm of a study with ``tune:`` (arms already tuned are not run again; see
    :mod:`ablate.tuner`); arm -> best values. None for a study without ``tune:``."""
    if study.tune is None:
        return None
    from ablate.tuner import Tuner, tuning_for_budget, tuning_seeds

    study = tuning_for_budget(study, settings.budget)  # --budget smoke: one trial per arm at smoke

    train, parent = tuning_trainer(study, settings, tracker)
    print(f"study {study.name}: tuning {', '.join(p.path for p in study.tune.params)} per arm "
          f"({study.tune.trials} trials at budget {study.tune.budget}, seeds {tuning_seeds(study.tune)})",
          file=stream)
    try:
        best = Tuner(study, settings.storage, train=train).tune_all(stream)
    except BaseException:
        finish_parent(tracker, parent, failed=True)
        raise
    finish_parent(tracker, parent, failed=False)
    return best


# ------------------------------------------------------------------------------------- adaptive seeds


def adaptive_rounds(store: StudyStore, budget: str) -> list[AdaptiveRound]:
    """The adaptive-seed decisions kept in the store for ``budget`` (:class:`ablate.planning.AdaptiveRound`)."""
    from ablate.planning import STORE_NOTE, AdaptiveRound

    note = store.note(STORE_NOTE + budget) or {}
    return [AdaptiveRound.from_dict(d) for d in note.get("rounds", [])]


def tag_plan(tracker: Tracker, parent: str, plan: Plan, rounds: list[AdaptiveRound]) -> None:
    """Record on the parent run what a report needs to rebuild the plan that ran (:meth:`Plan.recorded`):
    the tuned values (:data:`~ablate.plan.TAG_TUNED`) and an adaptive study's rule and seed count
    (:data:`~ablate.planning.TAG_ADAPTIVE`, :data:`~ablate.plan.TAG_SEEDS`)."""
    from ablate.planning import TAG_ADAPTIVE, adaptive_summary

    study = plan.study
    tags = {}
    if plan.tuned:
        tags[TAG_TUNED] = plan.tuned_tag()
    if study.seed_range is not None:
        tags[TAG_ADAPTIVE] = adaptive_summary(rounds, min_seeds=study.seed_range.min,
                                              max_seeds=study.seed_range.max, min_effect=study.min_effect)
        tags[TAG_SEEDS] = str(len(plan.seeds))
    try:
        for name, value in tags.items():
            tracker.client.set_tag(parent, name, value)
    except Exception as exc:  # noqa: BLE001 - the store keeps the plan; MLflow only records it
        print(f"warning: the plan could not be recorded in MLflow: {type(exc).__name__}: {exc}", file=sys.stderr)


def adaptive_round(plan: Plan, store: StudyStore, settings: RunSettings, counts: dict[str, int], *,
                   stream: TextIO) -> AdaptiveRound | None:
    """Decide whether a study with ``seeds: {min, max}`` runs more seeds, and print the decision.

    The decision at the current seed count n is taken once and kept in the store: a decision found
    there (a rerun) is reused, never taken again. Otherwise, when every trial of seeds 0..n-1 is
    done, n < max and fewer than :data:`ablate.planning.MAX_ROUNDS` rounds ran, the seeds needed
    are re-estimated from the finished trials (the report's inference, read from MLflow) for the
    study's ``min_effect`` (:func:`ablate.planning.reestimate`: variance only).

    Returns:
        The round (its ``n_new`` may exceed n: run those seeds), or None: no more seeds.
    """
    from ablate.planning import MAX_ROUNDS

    study = plan.study
    n, top = len(plan.seeds), study.seed_range.max
    rounds = adaptive_rounds(store, plan.budget)
    scale, unit = _objective_scale(study)
    before = [r for r in rounds if r.n == n]
    if before:
        print(before[-1].line(scale, unit) + " (decided before)", file=stream)
        return before[-1]
    if n >= top:
        print(f"adaptive seeds: {n} seeds, the max: no more rounds", file=stream)
        return None
    if len(rounds) >= MAX_ROUNDS:
        print(f"adaptive seeds: stays at {n} seeds after {MAX_ROUNDS} rounds (the most)", file=stream)
        return None
    missing = sum(counts.values()) - counts.get("done", 0)
    if missing:
        print(f"adaptive seeds: {missing} trial(s) of seeds 0-{n - 1} are not done; the seeds needed are "
              "re-estimated once every trial of the current seeds is done: run the same command again", file=stream)
        return None
    return _reestimate(plan, store, settings, rounds, stream=stream)


def _reestimate(plan: Plan, store: StudyStore, settings: RunSettings, rounds: list[AdaptiveRound], *,
                stream: TextIO) -> AdaptiveRound | None:
    """Re-estimate the seeds needed from the finished trials, keep the decision in the store, print it."""
    from ablate.inference import ALPHA, POWER
    from ablate.planning import STORE_NOTE, plan_seeds, read_pilot, reestimate

    study = plan.study
    n = len(plan.seeds)
    pilot = read_pilot(plan, settings.tracking_uri)
    seed_plan = plan_seeds(pilot.inference.contrasts, min_effect=study.min_effect, alpha=ALPHA, power=POWER,
                           family_size=len(pilot.inference.family.claims))
    if not seed_plan.contrasts:
        print(f"adaptive seeds: no contrast could be estimated from the {pilot.finished} finished trials (is the "
              f"objective {study.objective.metric} logged?); stays at {n} seeds", file=stream)
        return None
    decision = reestimate(seed_plan, n, study.seed_range.max, len(rounds) + 1)
    with store.lock():
        store.set_note(STORE_NOTE + plan.budget, {"rule": "variance-only re-estimation",
                                                   "rounds": [r.to_dict() for r in [*rounds, decision]]})
    scale, unit = _objective_scale(study)
    print(decision.line(scale, unit), file=stream)
    return decision


def _objective_scale(study: Study) -> tuple[float, str]:
    """How the report shows the objective: (factor, unit), e.g. (100, "points") for a fraction."""
    from ablate.report.statistics import Scale

    sc = Scale.of(study.objective.metric)
    return sc.factor, sc.unit


# ------------------------------------------------------------------------------------------ the run


@dataclass
class StudyRun:
    """The outcome of :func:`run_study`.

    Attributes:
        counts: ``{done, running, failed, pending}`` at the end.
        prepared: what the store held and enqueued at the start.
        parent_run_id: the MLflow parent run.
        tracking_uri: where the runs are.
        storage: the study store's description.
        seconds: wall time.
        plan: the plan at the end (a study with ``seeds: {min, max}`` may have added seeds).
        unsent: trials done but not in MLflow (its server did not answer): they wait in the outbox
            (:mod:`ablate.outbox`) for the next ``ablate run`` of the study.
        tracking_error: why the outbox could not be uploaded (None when it is empty).
    """

    counts: dict[str, int]
    prepared: PrepareResult
    parent_run_id: str
    tracking_uri: str
    storage: str
    seconds: float
    plan: Plan
    unsent: list[str] = field(default_factory=list)
    tracking_error: str | None = None

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds of the plan at the end."""
        return self.plan.seeds

    @property
    def complete(self) -> bool:
        """Every trial is done."""
        return self.counts.get("done", 0) == sum(self.counts.values())


def run_study(study: Study, settings: RunSettings, *, workers: int = 1, extend: bool = False,
              progress: bool = True, stream: TextIO | None = None, live: bool | None = None) -> StudyRun:
    """Run a study to completion with ``workers`` local worker processes.

    A study with ``seeds: {min: a, max: b}`` runs in rounds: the seeds the store holds (at first
    0..a-1), then, as long as :func:`adaptive_round` asks for more, the added seeds (see
    :mod:`ablate.planning`); the rounds' decisions are printed, kept in the store and tagged on the
    MLflow parent run.

    Args:
        study: the loaded Study (its file is ``settings.study_file``).
        settings: budget, store, tracking and knobs (``threads`` 0 = split the cores between workers).
        extend: add the trials of a design that grew (see :meth:`StudyStore.prepare`).
        progress: show the progress display on ``stream`` (stderr by default).

    Raises:
        DesignChangedError: the plan differs from the design frozen in the store.
    """
    from ablate.tracking import Tracker

    preflight(study, settings, workers)
    check_reports_writable(study, settings.budget)  # the report comes last: its folder is checked first
    stream = stream or sys.stderr
    t0 = time.time()
    store = settings.open_store(study)
    store.bind(study)  # (preflight refused another study of this name)
    tracker = Tracker(settings.tracking_uri)
    sent = upload_unsent(tracker, study.name, settings.runs)  # trials an earlier outage left on disk
    if sent.sent:
        print(f"study {study.name}: uploaded {len(sent.sent)} trial(s) kept on disk during a tracking outage to "
              f"MLflow {tracker.location}", file=stream)
    tuned = tune_study(study, settings, tracker, stream)  # sequentially in this process, before any main trial
    plan = current_plan(study, settings, store, tuned)
    prepared = first = store.prepare(plan, extend=extend)
    parent = parent_run_id(plan, store, tracker)
    record_stale(tracker, prepared.stale)
    tag_plan(tracker, parent, plan, adaptive_rounds(store, plan.budget))
    while True:
        counts = _run_round(plan, settings, store, tracker, parent, prepared, workers=workers,
                            progress=progress, stream=stream, live=live)
        if study.seed_range is None:
            break
        decision = adaptive_round(plan, store, settings, counts, stream=stream)
        if decision is None or decision.n_new <= len(plan.seeds):
            break
        plan = plan.with_seeds(range(decision.n_new))
        prepared = store.prepare(plan, extend=True)  # adds the new seeds' trials
        parent = parent_run_id(plan, store, tracker)  # running again
        record_stale(tracker, prepared.stale)
        tag_plan(tracker, parent, plan, adaptive_rounds(store, plan.budget))
    outbox = upload_unsent(tracker, study.name, settings.runs, wait=settings.end_wait(time.time() - t0), stream=stream)
    if not store.has_work(plan.budget):
        finish_parent(tracker, parent, failed=counts["failed"] > 0 or bool(outbox.left))
    return StudyRun(counts, first, parent, tracker.uri, store.description, time.time() - t0, plan,
                    unsent=outbox.left, tracking_error=outbox.error)


def _round_message(plan: Plan, prepared: PrepareResult, counts: dict[str, int], runs: str) -> str:
    """The line that opens a round: trials, done, to run, and what dead workers left."""
    from ablate.train import CHECKPOINT_FILE

    msg = (f"study {plan.study.name}, budget {plan.budget}: {prepared.total} trials; {counts['done']} already done, "
           f"{counts['pending']} to run")
    if counts["running"]:
        msg += f", {counts['running']} running on other workers"
    if prepared.stale:
        saved = sum((trial_dir(plan.study.name, s.attempt.key, runs) / CHECKPOINT_FILE).exists() for s in prepared.stale)
        n = len(prepared.stale)
        how = ("they resume from their checkpoints" if saved == n else "they start over: no checkpoint was saved"
               if saved == 0 else f"{saved} resume from their checkpoints, {n - saved} start over")
        msg += f" ({n} of them left by dead workers: {how})"
    if prepared.extended is not None:
        msg += f" (extended by {len(prepared.extended.added)} trials)"
    return msg


def _run_round(plan: Plan, settings: RunSettings, store: StudyStore, tracker: Tracker, parent: str,
               prepared: PrepareResult, *, workers: int, progress: bool, stream: TextIO,
               live: bool | None) -> dict[str, int]:
    """Run the workers until no trial of the plan is pending or running; the counts at the end."""
    counts = store.counts(plan.budget)
    workers = max(1, min(workers, counts["pending"] + counts["running"]))  # no idle processes to start
    if settings.threads == 0 and workers > 1:
        settings = replace(settings, threads=threads_per_worker(workers))
    settings = replace(settings, parent_run_id=parent)
    print(_round_message(plan, prepared, counts, settings.runs), file=stream)
    print(f"  store: {store.description}\n  tracking: {tracker.location}", file=stream)
    display = Progress(prepared.total, plan.steps, counts, stream=stream, live=live,
                       label=f"{plan.study.name} {plan.budget}") if progress else None
    if workers <= 1:
        run_worker(settings, study=plan.study, events=_local_events(display, store, plan.budget))
    else:
        _run_pool(settings, workers, store, display)
    counts = store.counts(plan.budget)
    if display is not None:
        display.set_counts(counts)
        display.close()
    return counts


def _local_events(display: Progress | None, store: StudyStore, budget: str) -> EventFn | None:
    """The progress display's event handler for a worker in this process: the counts are read again from the
    store whenever a trial starts or ends (there is no pool loop to poll it), and the status line follows
    every finished trial (so a log shows done / running / pending move, and an ETA over what is left)."""
    if display is None:
        return None

    def handle(event: Event) -> None:
        display.handle(event)
        if event.get("kind") in ("start", "end"):
            try:
                display.set_counts(store.counts(budget))
            except Exception:  # noqa: BLE001 - the display is best effort
                pass
        display.refresh(force=event.get("kind") == "end")

    return handle


def record_command(run: StudyRun, argv: list[str]) -> None:
    """Tag the study's parent run with the command line that ran it and the code it ran with (what a
    report prints as its provenance); a tracking failure here only warns: the trials are already safe."""
    from ablate.tracking import Tracker

    try:
        Tracker(run.tracking_uri).record_command(run.parent_run_id, "ablate " + shlex.join(argv))
    except Exception as exc:  # noqa: BLE001
        from ablate.tracking import first_line

        print(f"warning: the command could not be recorded in MLflow: {first_line(exc)}", file=sys.stderr)


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


def make_settings(study: Study, budget: str, *, storage: str | None = None, tracking_uri: str | None = None,
                  runs: str = "runs", threads: int = 0, workers: int = 1, max_retries: int | None = None,
                  heartbeat: float | None = None, grace: float | None = None,
                  store_wait: float | None = None, keep_checkpoints: bool = False,
                  check_disk: bool = True, tracking_wait: float | None = None, pack: int | str = "auto") -> RunSettings:
    """Check the run options and build the :class:`RunSettings` (creates nothing).

    ``storage`` None: ``$ABLATE_STORAGE``, else ``<runs>/<study>/store.journal``; ``tracking_uri``
    None: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; the knobs None: the store's defaults.

    Raises:
        AblateError: an unknown budget or a bad option (every problem in one message).
    """
    from ablate.errors import AblateError
    from ablate.store import (
        DEFAULT_GRACE_PERIOD,
        DEFAULT_HEARTBEAT_INTERVAL,
        DEFAULT_MAX_RETRIES,
        DEFAULT_STORE_WAIT,
        resolve_storage,
    )
    from ablate.tracking import resolve_tracking_uri

    study.check_budget(budget)
    max_retries = DEFAULT_MAX_RETRIES if max_retries is None else max_retries
    heartbeat = DEFAULT_HEARTBEAT_INTERVAL if heartbeat is None else heartbeat
    grace = DEFAULT_GRACE_PERIOD if grace is None else grace
    store_wait = DEFAULT_STORE_WAIT if store_wait is None else store_wait
    problems = []
    if workers < 1:
        problems.append(f"--workers {workers}: must be at least 1")
    if threads < 0:
        problems.append(f"--threads {threads}: must be 0 (automatic) or more")
    if max_retries < 0:
        problems.append(f"--max-retries {max_retries}: must be 0 or more")
    if heartbeat <= 0 or grace <= heartbeat:
        problems.append(f"--heartbeat {heartbeat:g} / --grace {grace:g}: need 0 < heartbeat < grace")
    if not store_wait >= 0:
        problems.append(f"--store-wait {store_wait:g}: must be 0 or more seconds")
    if tracking_wait is not None and not tracking_wait >= 0:
        problems.append(f"--tracking-wait {tracking_wait:g}: must be 0 or more seconds")
    if pack != "auto" and not (str(pack).isdigit() and int(pack) >= 1):
        problems.append(f"--pack {pack}: must be a whole number of trials, 1 or more, or auto")
    if problems:
        raise AblateError("; ".join(problems))
    return RunSettings(
        study_file=str(study.path), budget=budget, storage=resolve_storage(storage, study.name, runs),
        tracking_uri=resolve_tracking_uri(tracking_uri), runs=runs, threads=threads,
        heartbeat_interval=heartbeat, grace_period=grace, max_retries=max_retries, store_wait=store_wait,
        keep_checkpoints=keep_checkpoints, check_disk=check_disk,
        tracking_wait=tracking_wait,
        pack=pack if pack == "auto" else int(pack),
    )


def run_one_worker(study: Study, settings: RunSettings, *, stream: TextIO | None = None) -> WorkerStats:
    """``ablate worker``: this process as one worker of the study (it checks the plan against the
    store's frozen design and enqueues what must run first), with a progress display on ``stream``."""
    from ablate.store import describe_storage

    preflight(study, settings)
    stream = stream or sys.stderr
    if settings.threads > 0:
        import torch

        torch.set_num_threads(settings.threads)
    display = Progress(study.n_trials, 0, {}, stream=stream, live=False, label=f"{study.name} {settings.budget}")
    print(f"worker for study {study.name} ({settings.budget}); store: {describe_storage(settings.storage)}",
          file=stream)
    return run_worker(settings, study=study, events=display.handle, prepare=True)


def preflight(study: Study, settings: RunSettings, workers: int = 1) -> None:
    """What ``ablate run`` and ``ablate worker`` check before the store, MLflow or any worker touches
    anything: the tracking server answers, the runs folder is writable, and the store was not lost while
    MLflow holds the study's finished trials. Each refusal is one message; nothing is created."""
    from ablate.tracking import check_tracking_server

    check_tracking_server(settings.tracking_uri)
    check_runs_writable(study, settings)
    store = existing_store(study, settings)  # opened once (reading a journal replays it) for the checks
    check_identity(study, settings, store)
    check_store_not_lost(study, settings, store)
    if settings.check_disk:
        check_disk_space(study, settings, store, workers)


def check_disk_space(study: Study, settings: RunSettings, store: StudyStore | None, workers: int = 1) -> None:
    """Refuse to start when a disk the study writes to has less free space than the study's estimated
    peak use there (:func:`ablate.train.footprint.estimate_disk`: the running trials' checkpoints and
    the store under ``--runs``, a local MLflow store, the report), counting only the trials still to run.
    ``--ignore-disk-space`` skips it (settings.check_disk).

    Raises:
        DiskSpaceError: one message naming the folder, its free space, the estimate and the fixes.
    """
    from ablate.disk import DiskSpaceError, free_bytes, human_bytes, local_tracking_folder, nearest_existing
    from ablate.paths import REPORTS_DIR
    from ablate.train.footprint import estimate_disk

    # the plan as the run will start it (a store's adaptive seeds); a new store or a tuned study: the file's
    plan = current_plan(study, settings, store) if store is not None and study.tune is None else None
    specs = list((plan or Plan.of(study, settings.budget)).specs)
    done = store.counts(settings.budget)["done"] if store is not None else 0
    pack = max((pack_size(settings.pack, s.config) for s in specs if s.config.train.packed), default=1)
    est = estimate_disk(specs, workers=workers, to_run=len(specs) - done, tracking_uri=settings.tracking_uri,
                        keep_checkpoints=settings.keep_checkpoints, pack=pack)
    folders = {"runs": settings.runs, "report": REPORTS_DIR, "tracking": local_tracking_folder(settings.tracking_uri)}
    disks: dict[int, list[str]] = {}  # filesystem -> the parts that land on it
    for part, folder in folders.items():
        if folder is not None:
            with contextlib.suppress(OSError):
                disks.setdefault(os.stat(nearest_existing(folder)).st_dev, []).append(part)
    for parts in disks.values():
        folder = folders[parts[0]]
        assert folder is not None
        need = est.on_disk(parts)
        free = free_bytes(folder)
        if free is not None and free < need:
            raise DiskSpaceError(
                f"study {study.name}: the disk holding {nearest_existing(folder)} has {human_bytes(free)} free, and "
                f"this run needs about {human_bytes(need)} there at its peak ({est.text()}); free space, pass --runs DIR "
                "(and --tracking-uri) on a larger disk, or --ignore-disk-space to run anyway (a full disk then stops "
                "the run with one message, and the same command resumes it); nothing was run or written")


def check_identity(study: Study, settings: RunSettings, store: StudyStore | None) -> None:
    """Refuse a study that takes the name of another whose MLflow experiment or study store (``store``:
    :func:`existing_store`) exists (:meth:`ablate.study.Study.fingerprint`). Creates nothing (a missing
    local MLflow store is not opened).

    Raises:
        StudyIdentityError: one message naming both study files and the fix.
    """
    from ablate.tracking import Tracker, missing_local_store

    if missing_local_store(settings.tracking_uri) is None:
        Tracker(settings.tracking_uri).check_identity(study)
    if store is not None:
        store.check_identity(study)


def check_runs_writable(study: Study, settings: RunSettings) -> None:
    """Refuse a runs folder that cannot be written (checkpoints and the default store live there), before
    anything is enqueued or logged: otherwise every trial fails at its first checkpoint and the workers
    that die of it are replaced again and again.

    Checks ``<runs>`` (its nearest existing parent when it does not exist yet), and ``<runs>/<study>`` and
    its ``trials/`` when they exist, by creating (and at once removing) an unnamed file in each.

    Raises:
        AblateError: one line naming the folder, the OS error and the fix.
    """
    from pathlib import Path

    from ablate.paths import run_dir

    runs = Path(settings.runs)
    study_dir = run_dir(study.name, runs)
    check_writable(runs, "the runs folder", "--runs", {study_dir: "the study's run folder",
                                                       study_dir / "trials": "the study's trials folder"},
                    "or pass --runs DIR with a writable folder")


def check_reports_writable(study: Study, budget: str) -> None:
    """``ablate run`` writes its report at the end: refuse a report folder (``reports/<study>``, or
    ``reports/<study>-<budget>``) that cannot be written before any trial trains, not after all of them.

    Raises:
        AblateError: one line naming the folder, the OS error and the fix.
    """
    from ablate.paths import REPORTS_DIR, report_dir_for

    folder = report_dir_for(study.name, budget)
    check_writable(folder.parent, "the reports folder", str(REPORTS_DIR), {folder: "the study's report folder"},
                    f"or run from a folder where {REPORTS_DIR}/ can be written (`ablate report --out DIR` writes "
                    "a report elsewhere)")


def check_writable(root: Any, what: str, made: str, inside: dict[Any, str], fix: str) -> None:
    """Create (and at once remove) an unnamed file in ``root`` (its nearest existing parent when it does
    not exist yet, ``made`` naming what would make it) and in each existing folder of ``inside``.

    Raises:
        AblateError: the first that refuses, with the OS error, a chmod and ``fix``.
    """
    import tempfile

    from ablate.errors import AblateError

    nearest = root
    while not nearest.exists() and nearest.parent != nearest:
        nearest = nearest.parent
    folders = {nearest: f"{what} {nearest.resolve()}" if nearest == root else
               f"the folder {nearest.resolve()} (where {made} {root} would be made)",
               **{f: f"{name} {f.resolve()}" for f, name in inside.items()}}
    for folder, name in folders.items():
        if folder != nearest and not folder.exists():
            continue
        try:
            with tempfile.TemporaryFile(dir=folder, prefix=".ablate-write-check-"):
                pass
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(exc, folder) from None
            raise AblateError(
                f"{name} is not writable ({exc.strerror or os.strerror(exc.errno or 0)}): "
                f"fix its permissions (e.g. chmod -R u+w {folder}) {fix}"
            ) from exc


def check_store_not_lost(study: Study, settings: RunSettings, store: StudyStore | None) -> None:
    """Refuse to start a study from a store (``store``: :func:`existing_store`, None when there is none)
    that holds none of its trials at the budget while MLflow holds finished trials of it there: the store
    was emptied, deleted or replaced, and running would train every trial again as if none had run.
    Creates nothing (a missing local MLflow store is not opened).

    Raises:
        AblateError: one message naming the store, the tracking store, the finished trials and the fixes.
    """
    from ablate.errors import AblateError
    from ablate.store import describe_storage
    from ablate.tracking import Tracker, missing_local_store, study_runs

    if store is not None and store.attempts(settings.budget):
        return
    if missing_local_store(settings.tracking_uri) is not None:
        return
    tracker = Tracker(settings.tracking_uri)
    parent, trials = study_runs(tracker, study.name, settings.budget)
    finished = sum(t.status == "FINISHED" for t in trials)
    if parent is None or not finished:
        return
    exp = tracker.experiment_id(study.name, create=False)
    raise AblateError(
        f"the study store {describe_storage(settings.storage)} holds no trial of study {study.name!r} at budget "
        f"{settings.budget}, but MLflow {settings.tracking_uri} holds {finished} finished trial "
        f"run(s) of it (parent run {parent.run_id}): the store that ran them was emptied, deleted or "
        f"replaced, and running now would train every trial again. Restore the store file (or pass the --storage "
        f"that ran them); or, to train again from scratch, delete the MLflow experiment {study.name!r} for good "
        f"(mlflow experiments delete --experiment-id {exp}, then mlflow gc), or use another --tracking-uri or "
        f"study name"
    )


def existing_store(study: Study, settings: RunSettings, *, read_only: bool = False) -> StudyStore | None:
    """The study's store as ``settings`` name it, opened without creating anything (``read_only``: without
    writing anything, not even a lock file or a healed journal); None when the study has not run there."""
    from ablate.store import StoreNotFoundError

    try:
        return StudyStore(settings.storage, study.name, create=False, read_only=read_only)
    except StoreNotFoundError:
        return None


# ------------------------------------------------------------------------------------------- pool


def cpu_cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` local workers: ``max(1, cores // workers)``."""
    return max(1, (cores if cores is not None else cpu_cores()) // max(1, workers))


def gpu_for_worker(index: int, gpus: int, visible: str | None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` value of local worker ``index`` when the machine has ``gpus`` > 1
    GPUs: the workers take them round-robin (from the user's ``CUDA_VISIBLE_DEVICES`` list, if set);
    None (leave it) with one GPU or none."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(k) for k in range(gpus)]
    if gpus <= 1 or len(ids) <= 1:
        return None
    return ids[index % len(ids)]


def _cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable CUDA: CPU workers
        return 0


def _run_pool(settings: RunSettings, workers: int, store: StudyStore, display: Progress | None) -> None:
    """Run ``workers`` spawned worker processes until they exit; replace a process that dies while work is left."""
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    procs: dict[int, multiprocessing.process.BaseProcess] = {}
    gpus = _cuda_devices()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")

    def start(i: int) -> None:
        gpu = gpu_for_worker(i, gpus, visible)
        p = ctx.Process(target=process_main, args=(settings, i, events, gpu), name=f"ablate-worker-{i}", daemon=False)
        p.start()
        procs[i] = p

    for i in range(workers):
        start(i)
    restarts_left = workers * (settings.max_retries + 1)
    last_poll = 0.0
    disk_full: list[str] = []  # the message of the first worker that found its disk full

    def handle(event: dict[str, Any]) -> None:
        if event.get("kind") == "disk_full":
            disk_full.append(str(event.get("message")))
        elif display is not None:
            display.handle(event)

    try:
        while procs:
            try:
                handle(events.get(timeout=0.5))
                continue
            except queue_module.Empty:
                pass
            for i, p in list(procs.items()):
                if p.is_alive():
                    continue
                p.join()
                del procs[i]
                if p.exitcode == DISK_FULL_EXIT:  # every worker would fail the same way: stop them all
                    _stop_workers(procs)
                    _drain(events, handle)
                    if disk_full:
                        raise DiskFullError(disk_full[0])
                    raise disk_full_error(None, run_dir(store.name, settings.runs))
                if p.exitcode != 0 and store.has_work(settings.budget) and restarts_left > 0:
                    restarts_left -= 1
                    if display is not None:
                        display.line(f"worker {i} exited with code {p.exitcode}; starting a new one")
                    start(i)
            if display is not None and time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                try:
                    display.set_counts(store.counts(settings.budget))
                except Exception:  # noqa: BLE001 - the display is best effort
                    pass
                display.refresh()
        _drain(events, handle)  # events sent just before the workers exited
    except KeyboardInterrupt:
        deadline = time.monotonic() + 30
        for p in procs.values():
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
        raise
    finally:
        events.close()


def _drain(events: Any, handle: Callable[[dict[str, Any]], None]) -> None:
    """Handle the events left in the queue (sent just before their workers exited)."""
    while True:
        try:
            event = events.get_nowait()
        except queue_module.Empty:
            return
        handle(event)


def _stop_workers(procs: dict[int, multiprocessing.process.BaseProcess]) -> None:
    """Stop the pool's remaining workers (SIGTERM, no traceback): their trials stay running in the store
    and resume from their checkpoints when the study runs again."""
    for p in procs.values():
        p.terminate()
    for p in procs.values():
        p.join(timeout=30)
    procs.clear()


__all__ = [
    "StudyRun",
    "adaptive_round",
    "cpu_cores",
    "gpu_for_worker",
    "make_settings",
    "preflight",
    "check_writable",
    "existing_store",
    "record_command",
    "run_one_worker",
    "run_study",
    "status_plan",
    "tag_plan",
    "threads_per_worker",
    "tune_study",
]
