"""Running a study: tune (``tune:``), plan, enqueue, run a local pool of workers, grow adaptive seeds.

``ablate run FILE`` = :func:`run_study`::

    refuse a runs folder that cannot be written, and a store holding none of the trials that MLflow
        holds finished at the budget (an emptied or deleted store would train them all again)
    tune every arm first (a study with ``tune:``; ablate.running.tuner, its trials logged to MLflow)
    plan = the study's Plan at the budget (tuned values, the seeds the store holds)
    the store checks the plan against its frozen design and enqueues what must run
    find or create the MLflow parent run; tag it with the plan's tuned values and seed count
    repeat (one round; a study with seeds: {min, max} may run several):
        run ablate.running.worker.run_worker in N local processes until nothing is pending or running
        an adaptive study: re-estimate the seeds needed (ablate.stats.planning); more -> plan.with_seeds, enqueue

The refusals before anything is written are :mod:`ablate.running.preflight`; the local pool of ``workers``
processes is :mod:`ablate.running.pool` (with ``workers=1`` the worker loop runs in the calling process); each
round opens a :class:`ablate.running.session.Session` (the plan, store, tracking store, parent run).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from ablate.paths import trial_dir
from ablate.running.attempt import run_unqueued
from ablate.running.pool import run_pool, threads_per_worker
from ablate.running.preflight import check_reports_writable, preflight
from ablate.running.progress import Progress
from ablate.running.session import (
    EventFn,
    RunSettings,
    Session,
    current_plan,
    finish_parent,
    parent_run_id,
    record_stale,
)
from ablate.running.worker import WorkerStats, run_worker
from ablate.store import PrepareResult, StudyStore, WorkerInfo
from ablate.study.plan import TAG_SEEDS, TAG_TUNED, Plan
from ablate.tracking.outbox import upload_unsent

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.running.session import Event
    from ablate.stats.planning import AdaptiveRound
    from ablate.study import Arm, Study
    from ablate.tracking import Tracker
    from ablate.train import TrialResult


# ------------------------------------------------------------------------------------------ tuning


def tuning_budget_label(study: Study) -> str:
    """The budget tag of a study's tuning runs in MLflow: ``tune:<budget>`` (a colon never appears in a
    budget's name, so tuning runs never mix with a budget's trials)."""
    assert study.tune is not None
    return f"tune:{study.tune.budget}"


def tuning_trainer(study: Study, settings: RunSettings, store: StudyStore,
                   tracker: Tracker) -> tuple[Callable[..., TrialResult], str]:
    """The trial function the tuner trains with, and the MLflow parent run of the tuning trials:
    each tuning trial is a child run of ``<study> (tune:<budget>)``, trained through the same logged path as
    a main trial (:func:`ablate.running.attempt.run_unqueued`)."""
    from ablate.store import describe_storage
    from ablate.study import TrialSpec

    label = tuning_budget_label(study)
    parent = tracker.parent_run(study, label, storage=describe_storage(settings.storage))
    session = Session(study, settings, Plan.of(study, settings.budget), store, tracker, parent, WorkerInfo.current())

    def train(arm: Arm, seed: int, config: TrialConfig) -> TrialResult:
        return run_unqueued(session, TrialSpec(study.name, arm.name, dict(arm.levels), seed, label, config,
                                               config.trial_key()))

    return train, parent


def tune_study(study: Study, settings: RunSettings, store: StudyStore, tracker: Tracker,
               stream: TextIO) -> dict[str, dict[str, Any]] | None:
    """Tune every arm of a study with ``tune:`` (arms already tuned are not run again; see
    :mod:`ablate.running.tuner`); arm -> best values. None for a study without ``tune:``."""
    if study.tune is None:
        return None
    from ablate.running.tuner import Tuner, tuning_for_budget, tuning_seeds

    study = tuning_for_budget(study, settings.budget)  # --budget smoke: one trial per arm at smoke

    train, parent = tuning_trainer(study, settings, store, tracker)
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
    """The adaptive-seed decisions kept in the store for ``budget`` (:class:`ablate.stats.planning.AdaptiveRound`)."""
    from ablate.stats.planning import STORE_NOTE, AdaptiveRound

    note = store.note(STORE_NOTE + budget) or {}
    return [AdaptiveRound.from_dict(d) for d in note.get("rounds", [])]


def tag_plan(tracker: Tracker, parent: str, plan: Plan, rounds: list[AdaptiveRound]) -> None:
    """Record on the parent run what a report needs to rebuild the plan that ran (:meth:`Plan.recorded`):
    the tuned values (:data:`~ablate.study.plan.TAG_TUNED`) and an adaptive study's rule and seed count
    (:data:`~ablate.stats.planning.TAG_ADAPTIVE`, :data:`~ablate.study.plan.TAG_SEEDS`)."""
    from ablate.stats.planning import TAG_ADAPTIVE, adaptive_summary

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
    done, n < max and fewer than :data:`ablate.stats.planning.MAX_ROUNDS` rounds ran, the seeds needed
    are re-estimated from the finished trials (the report's inference, read from MLflow) for the
    study's ``min_effect`` (:func:`ablate.stats.planning.reestimate`: variance only).

    Returns:
        The round (its ``n_new`` may exceed n: run those seeds), or None: no more seeds.
    """
    from ablate.stats.planning import MAX_ROUNDS

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
    from ablate.stats.inference import ALPHA, POWER
    from ablate.stats.planning import STORE_NOTE, plan_seeds, read_pilot, reestimate

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
            (:mod:`ablate.tracking.outbox`) for the next ``ablate run`` of the study.
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
    :mod:`ablate.stats.planning`); the rounds' decisions are printed, kept in the store and tagged on the
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
    tuned = tune_study(study, settings, store, tracker, stream)  # sequentially in this process, before any main trial
    plan = current_plan(study, settings, store, tuned)
    prepared = first = store.prepare(plan, extend=extend)
    parent = parent_run_id(plan, store, tracker)
    record_stale(tracker, prepared.stale)
    tag_plan(tracker, parent, plan, adaptive_rounds(store, plan.budget))
    display = Display(progress, stream, live)
    while True:
        session = Session(study, settings, plan, store, tracker, parent, WorkerInfo.current())
        counts = _run_round(session, prepared, workers, display)
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
    ran_for = time.time() - t0
    outbox = upload_unsent(tracker, study.name, settings.runs, wait=settings.end_wait(ran_for), ran_for=ran_for,
                           finished=counts["done"] - first.complete, stream=stream)
    if not store.has_work(plan.budget):
        finish_parent(tracker, parent, failed=counts["failed"] > 0 or bool(outbox.left))
    return StudyRun(counts, first, parent, tracker.uri, store.description, time.time() - t0, plan,
                    unsent=outbox.left, tracking_error=outbox.error)


def _round_message(plan: Plan, prepared: PrepareResult, counts: dict[str, int], runs: str) -> str:
    """The line that opens a round: trials, done, to run, and what dead workers left."""
    from ablate.engines.base import has_checkpoint

    msg = (f"study {plan.study.name}, budget {plan.budget}: {prepared.total} trials; {counts['done']} already done, "
           f"{counts['pending']} to run")
    if counts["running"]:
        msg += f", {counts['running']} running on other workers"
    if prepared.stale:
        saved = sum(has_checkpoint(trial_dir(plan.study.name, s.attempt.key, runs)) for s in prepared.stale)
        n = len(prepared.stale)
        how = ("they resume from their checkpoints" if saved == n else "they start over: no checkpoint was saved"
               if saved == 0 else f"{saved} resume from their checkpoints, {n - saved} start over")
        msg += f" ({n} of them left by dead workers: {how})"
    if prepared.extended is not None:
        msg += f" (extended by {len(prepared.extended.added)} trials)"
    return msg


@dataclass(frozen=True)
class Display:
    """How a run shows its progress: a display or none, on which stream, redrawn live or line by line
    (None: live on a terminal)."""

    progress: bool
    stream: TextIO
    live: bool | None


def _run_round(session: Session, prepared: PrepareResult, workers: int, display: Display) -> dict[str, int]:
    """Run the workers until no trial of the session's plan is pending or running; the counts at the end."""
    plan, store, settings = session.plan, session.store, session.settings
    counts = store.counts(plan.budget)
    workers = max(1, min(workers, counts["pending"] + counts["running"]))  # no idle processes to start
    if settings.threads == 0 and workers > 1:
        settings = replace(settings, threads=threads_per_worker(workers))
    settings = replace(settings, parent_run_id=session.parent)
    print(_round_message(plan, prepared, counts, settings.runs), file=display.stream)
    print(f"  store: {store.description}\n  tracking: {session.tracker.location}", file=display.stream)
    shown = Progress(prepared.total, plan.steps, counts, stream=display.stream, live=display.live,
                     label=f"{plan.study.name} {plan.budget}") if display.progress else None
    if workers <= 1:
        run_worker(settings, study=plan.study, events=_local_events(shown, store, plan.budget))
    else:
        run_pool(settings, workers, store, shown)
    counts = store.counts(plan.budget)
    if shown is not None:
        shown.set_counts(counts)
        shown.close()
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


# ------------------------------------------------------------------------------------------- pool


__all__ = [
    "Display",
    "StudyRun",
    "adaptive_round",
    "adaptive_rounds",
    "tuning_trainer",
    "record_command",
    "run_one_worker",
    "run_study",
    "tag_plan",
    "tune_study",
]
