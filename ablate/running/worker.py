"""The worker: claim a trial of the plan from the study store, train it with MLflow logging, record it.

``ablate worker FILE --storage URL`` runs :func:`run_worker` alone, on any machine that reaches the
store and the tracking server; ``ablate run`` runs it in N local processes (:mod:`ablate.running.runner`).

The worker loop::

    repeat:
        fail stale attempts of dead workers (their retries are enqueued)
        claim the oldest pending attempt of the plan (atomic: one worker gets it)
            none pending, none running anywhere -> done
            none pending, some running elsewhere -> wait (they may die and need a retry)
        (--pack K: claim up to K - 1 packed mates of one shape: one population, a thread each)
        the logged attempt (ablate.running.attempt.run_attempt):
        heartbeat from a thread until the attempt is recorded (opening, training, finishing its run)
        open its MLflow child run (a tracking outage: train anyway, offline)
        train through the trial's engine (ablate.engines.base): ablate's own run_trial(config, log,
            workdir=runs/<study>/trials/<key>/)
            (resumes from the checkpoint a killed attempt left there; metrics the tracking store
            does not take wait in memory and are sent when it answers again)
        success: artifacts + FINISHED in MLflow (still unreachable: the trial goes to the outbox,
            runs/<study>/trials/<key>/unsent.json, see ablate.tracking.outbox), then done in the store
        exception: the traceback on the attempt and the run (FAILED); the study goes on
        another worker took the attempt over (failed it as stale): send nothing more, leave it

Liveness: an attempt of a process on this machine is stale only when the process is gone; one of
another machine, when its heartbeats stop for the grace period. Every call to the study store waits
out an outage of up to ``--store-wait`` seconds (:class:`ablate.store.RetryingStorage`).

A worker opens its :class:`ablate.running.session.Session` once (the study, plan, store, tracking store, parent
run, its identity); which trials: :func:`ablate.running.session.current_plan`, the plan the runner runs (the seeds
the store holds for a study with ``seeds: {min, max}``, each arm's tuned values for ``tune:``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ablate.disk import DISK_FULL_EXIT, disk_full_error, is_disk_full
from ablate.running.attempt import claim_mates, run_attempt, run_population_attempts
from ablate.running.session import EventFn, RunSettings, Session, current_plan, finish_parent, record_stale
from ablate.store import Attempt
from ablate.tracking.outbox import upload_unsent

if TYPE_CHECKING:
    from ablate.study import Study
    from ablate.tracking import Tracker


@dataclass
class WorkerStats:
    """What one worker did: keys of the trials it completed, that failed, and that it lost (another
    worker declared them stale while they ran); and the trials its outbox still held at the end
    (``ablate worker`` only: a local pool's outbox is the runner's)."""

    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)  # trials left in the outbox when it stopped


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
    from ablate.running.memory import keep_freed_memory

    started = time.time()
    keep_freed_memory()  # the next trial reuses this one's pages instead of faulting in new ones
    session = Session.open(settings, study, index=index, events=events, prepare=prepare)
    if any(s.config.train.packed for s in session.plan.specs):
        tag_packing(session.tracker, session.parent, settings)
    stats = WorkerStats()
    while True:
        attempts = claim(session)
        if attempts is None:
            if settings.parent_run_id is None:  # `ablate worker`: its own outbox, and the parent's state
                stats.unsent = finish_alone(session, time.time() - started)
            return stats
        if not attempts:
            time.sleep(settings.poll_seconds)
            continue
        if len(attempts) == 1:
            outcomes = [run_attempt(session, session.plan.by_key[attempts[0].key], attempts[0])]
        else:  # one population: each member runs its attempt in a thread of this process
            outcomes = run_population_attempts(session, attempts)
        for a, outcome in zip(attempts, outcomes):
            {"done": stats.done, "failed": stats.failed, "lost": stats.lost}[outcome].append(a.key)


def claim(session: Session) -> list[Attempt] | None:
    """The attempts this worker trains next: one, or a population of packed mates (:func:`claim_mates`);
    [] when none is pending but some run elsewhere (wait: they may die and need a retry); None when the
    study has nothing pending or running. Fails the stale attempts of dead workers first; follows a plan
    that a round of adaptive seeds grew."""
    store, budget = session.store, session.settings.budget
    record_stale(session.tracker, store.fail_stale(budget))
    attempt = store.claim(budget, session.worker, keys=session.plan.by_key.keys())
    if attempt is not None:
        return [attempt] + claim_mates(session, attempt)
    if not store.has_work(budget):
        return None
    if session.study.seed_range is not None:  # a round of `ablate run` may have added seeds
        grown = current_plan(session.study, session.settings, store, session.plan.tuned)
        if grown.seeds != session.plan.seeds:
            session.plan = grown
            return claim(session)
    return []


def finish_alone(session: Session, elapsed: float) -> list[str]:
    """The end of an ``ablate worker`` (a local pool's end is the runner's): upload its outbox and set the
    parent run's state; the trials left in the outbox."""
    settings = session.settings
    unsent = upload_unsent(session.tracker, session.study.name, settings.runs, wait=settings.end_wait(elapsed),
                           ran_for=elapsed, stream=sys.stderr).left
    failed = session.store.counts(settings.budget)["failed"] > 0 or bool(unsent)
    finish_parent(session.tracker, session.parent, failed=failed)
    return unsent


#: Parent-run tag: ``--pack`` of the workers that trained the study's packed trials.
TAG_PACK = "ablate.pack"


def tag_packing(tracker: Tracker, parent: str, settings: RunSettings) -> None:
    """Record ``--pack`` on the parent run (a tracking error only warns: the trials still run)."""
    from ablate.tracking import TRACKING_ERRORS

    try:
        tracker.client.set_tag(parent, TAG_PACK, str(settings.pack))
    except TRACKING_ERRORS as exc:
        print(f"warning: --pack could not be recorded in MLflow: {type(exc).__name__}: {exc}", file=sys.stderr)


def process_main(settings: RunSettings, index: int, events: EventFn, gpu: str | None = None) -> None:
    """The work of a worker subprocess of a local pool (:func:`ablate.running.pool.member_main`): its threads and GPU,
    then the worker loop, its progress events sent to ``events``; a full disk or an outage ends it with its
    exit code (:data:`~ablate.disk.DISK_FULL_EXIT`, the error's), said in one line."""
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
        run_worker(settings, index=index, events=events)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        if is_disk_full(exc):  # the pool says it once, and stops the other workers
            events({"kind": "disk_full", "message": str(disk_full_error(exc, settings.runs)), "worker": index})
            raise SystemExit(DISK_FULL_EXIT) from None
        if not isinstance(exc, AblateError):
            raise
        print(f"ablate worker {index}: error: {exc}", file=sys.stderr, flush=True)  # an outage it could not wait out
        raise SystemExit(exc.exit_code) from None


__all__ = [
    "TAG_PACK",
    "WorkerStats",
    "claim",
    "finish_alone",
    "process_main",
    "run_worker",
    "tag_packing",
]
