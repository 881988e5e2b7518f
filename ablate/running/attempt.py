"""The logged attempt: one claimed trial trained with MLflow logging and heartbeats, then recorded.

One path for every trial a study trains (:func:`run_attempt`; the tuning trials of ``tune:`` through
:func:`run_unqueued`, the same path without a claimed attempt)::

    config = the spec's, with the worker's thread count          trial_config
    heartbeat from a thread until the attempt is recorded        ablate.store.Heartbeat
    open the trial's MLflow child run (an outage: offline)        train_logged
    train through the trial's engine                             ablate.engines.base (EngineJob -> TrialResult)
    files + FINISHED in MLflow, or the outbox                    finish_logged
    done in the store, checkpoint dropped                        run_attempt
    an exception: its traceback on the attempt and the run       record_failure

Every function takes the worker's :class:`ablate.running.session.Session` (study, plan, store, tracker, parent run,
worker, events) rather than those one by one. A population (``--pack K``): :func:`claim_mates` claims up
to K - 1 more packed trials of one shape, and :func:`run_population_attempts` runs each member's
ordinary :func:`run_attempt` in a thread (:func:`ablate.train.population.run_members`).
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.disk import disk_full_error, is_disk_full
from ablate.engines.base import EngineJob, engine_for, has_checkpoint
from ablate.metrics import content_fingerprint
from ablate.objective import summarize_history
from ablate.paths import trial_dir
from ablate.running.footprint import pack_size
from ablate.running.session import Session
from ablate.store import Attempt, Heartbeat

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.study import TrialSpec
    from ablate.tracking import TrialLogger
    from ablate.train import TrialResult

#: What :func:`run_attempt` returns: the attempt completed, failed, or was lost (failed as stale by
#: another worker while it ran; its retry resumes from the final checkpoint).
OUTCOMES = ("done", "failed", "lost")


def trial_config(spec: TrialSpec, threads: int) -> TrialConfig:
    """The configuration a worker trains: the spec's, with ``threads`` torch threads when > 0 (not part
    of the trial key). The arm's configuration warnings were printed once, when the study was loaded."""
    if threads <= 0:
        return spec.config
    from ablate.config import ConfigWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return spec.config.with_overrides({"threads": threads})


def start_arguments(spec: TrialSpec, config: TrialConfig, worker: str) -> dict[str, Any]:
    """What a trial's MLflow run is opened with (:meth:`Tracker.start_trial`), as kept in the outbox."""
    return {"study": spec.study, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
            "levels": dict(spec.levels), "flat_config": config.to_flat_dict(), "worker": worker}


class TrialRunError(Exception):
    """Training a logged trial failed (its cause is the original exception); ``logger`` is its run."""

    def __init__(self, logger: TrialLogger) -> None:
        super().__init__("the trial failed")
        self.logger = logger


@dataclass(frozen=True)
class Hooks:
    """What the caller of :func:`train_logged` hears while the trial trains.

    Attributes:
        on_log: called with each logged step (heartbeats, progress).
        on_start: called with the run's logger once it exists (e.g. to record its run id).
        fence: False once the attempt belongs to another worker: its logger stops sending.
    """

    on_log: Callable[[int], None] | None = None
    on_start: Callable[[TrialLogger], None] | None = None
    fence: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Trained:
    """A trial trained with logging (:func:`train_logged`): what it was, what it gave, and its run's logger
    (closed: ``logger.unsent`` is None when every metric reached the run)."""

    spec: TrialSpec
    config: TrialConfig
    result: TrialResult
    logger: TrialLogger


def train_logged(session: Session, spec: TrialSpec, config: TrialConfig, *, workdir: Path | None = None,
                 hooks: Hooks | None = None) -> Trained:
    """Train one trial as a child run of the session's parent run, logging every step, through the
    trial's engine (:func:`ablate.engines.base.engine_for`).

    A tracking store that does not answer never stops the trial: when its run cannot be opened the trial
    trains with an offline logger, and metrics it cannot send wait in the logger (:class:`TrialLogger`);
    :func:`finish_logged` then keeps what did not arrive in the outbox.

    Args:
        spec: the trial's identity (study, arm, seed, budget, levels, key).
        config: what to train (``spec.config``, perhaps with a thread count).
        workdir: the trial's checkpoint folder (None: no checkpoints).

    Raises:
        TrialRunError: training failed; it carries the run's logger so the caller can record why.
    """
    from ablate.tracking import TRACKING_ERRORS, TrialIdentity, TrialLogger, first_line

    hooks = hooks or Hooks()
    tracker, flush_every = session.tracker, session.settings.flush_every
    job_dir = Path(workdir) if workdir is not None else None
    try:
        logger = tracker.start_trial(session.parent, TrialIdentity(**start_arguments(spec, config, session.worker.name)),
                                     resuming=has_checkpoint(job_dir, config), fence=hooks.fence, flush_every=flush_every)
    except TRACKING_ERRORS as exc:  # the run cannot be opened now: train anyway, keep the metrics
        if is_disk_full(exc):
            raise disk_full_error(exc, tracker.folder) from None
        logger = TrialLogger.offline(first_line(exc), flush_every=flush_every)
    try:
        if hooks.on_start is not None:
            hooks.on_start(logger)

        def log(metrics: dict[str, float], step: int) -> None:
            logger(metrics, step)
            if hooks.on_log is not None:
                hooks.on_log(step)

        result = engine_for(config).train(EngineJob(config, log, job_dir))
        logger.backfill(result.history)  # steps before a resume that a killed attempt never sent
        logger.close()
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - the caller records why, with the run
        raise TrialRunError(logger) from exc
    return Trained(spec, config, result, logger)


def finish_logged(session: Session, trained: Trained, record: Mapping[str, Any], *,
                  outbox: Path | None) -> tuple[float | None, bool]:
    """Upload a trained trial's files to its run (config, history, samples, per-problem records, the
    result ``record``) and mark it FINISHED.

    When the tracking store does not take them (or some metrics never reached the run), the trial is
    kept in the outbox folder ``outbox`` (:func:`ablate.tracking.outbox.write_unsent`) for a later upload;
    without an outbox folder the tracking error is raised.

    Returns:
        The trial's objective (None when its metric has no value), and whether the run got everything
        (False: the trial waits in the outbox).
    """
    from ablate.tracking import TRACKING_ERRORS, TrackingError, first_line
    from ablate.tracking.outbox import write_unsent

    spec, config, result, logger = trained.spec, trained.config, trained.result, trained.logger
    tracker = session.tracker
    obj = session.study.objective
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
        raise TrackingError(f"the trial's metrics did not reach MLflow {tracker.location}: {why}")
    write_unsent(outbox, parent=session.parent, start=start_arguments(spec, config, session.worker.name),
                 history=result.history, finish=finish, why=why)
    return value, False


def result_record(session: Session, trained: Trained, **extra: Any) -> dict[str, Any]:
    """The result record a trained trial's run gets: steps, seconds, resume step, worker, run id, ``extra``."""
    result = trained.result
    return {"steps": result.steps, "seconds": round(result.seconds, 3), "resumed_from": result.resumed_from,
            "worker": session.worker.name, "mlflow_run_id": trained.logger.run_id, **extra}


def run_attempt(session: Session, spec: TrialSpec, attempt: Attempt) -> str:
    """Run one claimed attempt: train with MLflow logging, finish its run, record the outcome; the
    attempt heartbeats (from a thread) all along, while its run is opened and finished too.

    Returns:
        One of :data:`OUTCOMES`: ``done``, ``failed`` (recorded in the store and MLflow; the study goes
        on), or ``lost`` (another worker failed the attempt as stale meanwhile: its run is left to the
        retry, which resumes from the final checkpoint; nothing more is sent to it from here).

    Raises:
        KeyboardInterrupt: after recording the attempt as failed ("interrupted") and its run KILLED.
    """
    store, settings = session.store, session.settings
    config = trial_config(spec, settings.threads)
    common = {"worker": session.worker.name, "key": spec.key, "arm": spec.arm, "seed": spec.seed,
              "steps": config.train.steps}
    t0 = time.time()
    opened: list[TrialLogger] = []  # the trial's run, once it exists (its failure is recorded there too)
    workdir = trial_dir(session.study.name, spec.key, settings.runs)
    try:
        with Heartbeat(store, attempt, steps=config.train.steps) as hb:

            def on_log(step: int) -> None:
                if hb.error is not None:  # the store cannot record the attempt any more (a full disk)
                    raise hb.error
                hb.step = step
                session.emit(kind="step", step=step, **common)

            def on_start(logger: TrialLogger) -> None:
                opened.append(logger)
                if logger.run_id is not None:
                    store.set_run_id(attempt, logger.run_id)
                session.emit(kind="start", attempt=attempt.number, retry=attempt.retry, **common)

            trained = train_logged(session, spec, config, workdir=workdir,
                                   hooks=Hooks(on_log, on_start, fence=lambda: not hb.lost))
            record = result_record(session, trained)
            value, sent = None, True
            if not hb.lost:  # a late finish would overwrite the run its new owner writes to
                value, sent = finish_logged(session, trained, record, outbox=workdir)
        ok = not hb.lost and store.complete(attempt, value, {**record, "sent_to_mlflow": sent})
        if ok and not settings.keep_checkpoints:  # recorded in the store and in MLflow or the outbox
            drop_checkpoint(workdir)
        session.emit(kind="end", state="done" if ok else "lost", seconds=time.time() - t0, objective=value,
                     metric=session.study.objective.metric, unsent=None if sent else trained.logger.unsent, **common)
        return "done" if ok else "lost"
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - one trial's error is recorded; the study goes on
        logger = opened[0] if opened else None
        cause = exc.__cause__ if isinstance(exc, TrialRunError) and exc.__cause__ is not None else exc
        if is_disk_full(cause):  # not the trial's fault: it stays running, and resumes when there is space
            raise disk_full_error(cause, workdir) from None
        if isinstance(cause, KeyboardInterrupt):
            record_failure(session, attempt, logger, "interrupted (KeyboardInterrupt)", status="KILLED")
            session.emit(kind="end", state="failed", seconds=time.time() - t0, error="interrupted", **common)
            raise cause from None
        record_failure(session, attempt, logger, "".join(traceback.format_exception(cause)))
        session.emit(kind="end", state="failed", seconds=time.time() - t0,
                     error=f"{type(cause).__name__}: {cause}".splitlines()[0], **common)
        return "failed"


def run_unqueued(session: Session, spec: TrialSpec) -> TrialResult:
    """Train a trial that no attempt of the store holds (a tuning trial of ``tune:``, the tuner keeping its
    own record) through the same path as :func:`run_attempt`: logged to a child run of the session's
    parent, finished there or kept in the outbox. A failure is recorded on its run and raised."""
    config = trial_config(spec, session.settings.threads)
    try:
        trained = train_logged(session, spec, config)
    except TrialRunError as exc:
        cause = exc.__cause__ or exc
        try:
            if exc.logger.run_id is not None:
                session.tracker.fail_trial(exc.logger.run_id, "".join(traceback.format_exception(cause)))
        except Exception:  # noqa: BLE001 - the tracking store may be what failed
            pass
        raise cause from None
    record = {"steps": trained.result.steps, "seconds": round(trained.result.seconds, 3),
              "worker": session.worker.name, "mlflow_run_id": trained.logger.run_id, "tuning": True}
    finish_logged(session, trained, record, outbox=trial_dir(session.study.name, spec.key, session.settings.runs))
    return trained.result


def drop_checkpoint(workdir: str | Path) -> None:
    """Delete a finished trial's checkpoint (``trainer.pt`` and a temporary file a save left, or the trl
    engine's ``trl/`` folder) and its
    folder when nothing else is in it (an outbox ``unsent.json`` stays until it is uploaded). A trial is
    only finished once its result is in the store, so no retry needs the checkpoint; ~10 MB a tiny-llama
    trial, ~13 GB for the ~1,300 trials of the predefined studies at the seeds they need."""
    import shutil

    from ablate.engines.trl import TRL_DIR
    from ablate.train import CHECKPOINT_FILE

    folder = Path(workdir)
    for path in (folder / CHECKPOINT_FILE, (folder / CHECKPOINT_FILE).with_suffix(".tmp")):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    shutil.rmtree(folder / TRL_DIR, ignore_errors=True)  # the trl engine's checkpoints
    try:
        folder.rmdir()
    except OSError:  # not empty (an outbox, a file moved aside) or already gone
        pass



def record_failure(session: Session, attempt: Attempt, logger: TrialLogger | None, text: str,
                   status: str = "FAILED") -> None:
    """Record a failed attempt: its error on the attempt, and on its run (``status``) when it has one."""
    if logger is not None:
        try:
            logger.close()
        except Exception:  # noqa: BLE001 - the tracking store may be what failed
            pass
    session.store.fail(attempt, text)
    if logger is not None and logger.run_id is not None:
        try:
            session.tracker.fail_trial(logger.run_id, text, status=status)
        except Exception:  # noqa: BLE001
            pass


def claim_mates(session: Session, attempt: Attempt) -> list[Attempt]:
    """Further attempts to train with ``attempt`` as one population: up to ``--pack`` - 1 pending
    attempts of packed trials of the same :func:`~ablate.train.population.population_shape`."""
    from ablate.train.population import population_shape

    plan = session.plan
    config = plan.by_key[attempt.key].config
    size = pack_size(session.settings.pack, config)
    if size <= 1:
        return []
    shape = population_shape(config)
    keys = {k for k, s in plan.by_key.items() if s.config.train.packed and population_shape(s.config) == shape}
    mates: list[Attempt] = []
    while len(mates) < size - 1:
        mate = session.store.claim(session.settings.budget, session.worker, keys=keys)
        if mate is None:
            break
        mates.append(mate)
    return mates


def run_population_attempts(session: Session, attempts: list[Attempt]) -> list[str]:
    """Run the claimed ``attempts`` as one population (:func:`ablate.train.population.run_members`): each
    member is an ordinary :func:`run_attempt` (its heartbeats, run, checkpoint and record), in a thread.

    Raises:
        KeyboardInterrupt, or a full disk's error: after every member has recorded its own outcome.
    """
    from ablate.train.population import run_members

    def task(a: Attempt) -> Callable[[], str]:
        return lambda: run_attempt(session, session.plan.by_key[a.key], a)

    session.emit(kind="population", size=len(attempts), worker=session.worker.name, keys=[a.key for a in attempts])
    outcomes = run_members([task(a) for a in attempts])
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        raise next((e for e in errors if isinstance(e, KeyboardInterrupt)), errors[0])
    return outcomes


__all__ = [
    "OUTCOMES",
    "Hooks",
    "Trained",
    "TrialRunError",
    "claim_mates",
    "drop_checkpoint",
    "finish_logged",
    "record_failure",
    "result_record",
    "run_attempt",
    "run_population_attempts",
    "run_unqueued",
    "start_arguments",
    "train_logged",
    "trial_config",
]
