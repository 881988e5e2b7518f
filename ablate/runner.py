"""Running a study: the worker loop, a local pool of worker processes, and the progress display.

``ablate run FILE`` = :func:`run_study`: check the design against the study store and enqueue what
must run (:meth:`~ablate.store.StudyStore.prepare`), find or create the MLflow parent run, then run
:func:`run_worker` in N local processes until no trial of the budget is waiting or running.
A study with ``tune:`` is first tuned per arm (:mod:`ablate.tuner`, sequentially in the process of
``ablate run``); its main trials then carry each arm's best values.
``ablate worker FILE --storage URL`` = :func:`run_worker` alone, on any machine that reaches the
store and the tracking server.
A study with ``seeds: {min: a, max: b}`` runs in rounds: after each, :func:`adaptive_round` may add
seeds (variance-only re-estimation, :mod:`ablate.planning`) and the workers run them; workers take
the seed count from the store's frozen design (:func:`adaptive_study`), and only ``ablate run`` decides.

The worker loop, in every worker::

    repeat:
        fail stale attempts of dead workers (their retries are enqueued)
        claim the oldest waiting attempt (atomic: one worker gets it)
            none waiting, none running anywhere -> done
            none waiting, some running elsewhere -> wait (they may die and need a retry)
        open its MLflow child run; heartbeat while it trains
        train: ablate.train.run_trial(config, log, workdir=runs/<study>/trials/<key>/)
            (resumes from the checkpoint a killed attempt left there)
        success: artifacts + FINISHED in MLflow, then COMPLETE with the objective in the store
        exception: the traceback on the attempt and the run (FAILED); the study goes on

Local pool: ``workers`` processes started with multiprocessing's *spawn* (no forked torch state),
each with ``max(1, cores // workers)`` torch threads; on a machine with several GPUs the workers take
them round-robin (``CUDA_VISIBLE_DEVICES``), with one GPU they share it. A worker process that dies is replaced (its
trial is retried, see :mod:`ablate.store`), at most ``workers * (max_retries + 1)`` times. With
``workers=1`` the loop runs in the calling process.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue as queue_module
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from ablate.store import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_RETRIES,
    Attempt,
    Heartbeat,
    PrepareResult,
    StaleAttempt,
    StudyStore,
    WorkerInfo,
    summarize_objective,
    trial_dir,
)

EventFn = Callable[[dict[str, Any]], None]

#: Seconds an idle worker waits before looking for work again.
POLL_SECONDS = 2.0


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
    runs: str = "runs"
    threads: int = 0
    parent_run_id: str | None = None
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    grace_period: float = DEFAULT_GRACE_PERIOD
    max_retries: int = DEFAULT_MAX_RETRIES
    flush_every: int = 10
    poll_seconds: float = POLL_SECONDS

    def open_store(self, study_name: str, direction: str = "maximize") -> StudyStore:
        """The study store these settings name."""
        return StudyStore(self.storage, study_name, direction=direction, heartbeat_interval=self.heartbeat_interval,
                          grace_period=self.grace_period, max_retries=self.max_retries)


@dataclass
class WorkerStats:
    """What one worker did: keys of the trials it completed, that failed, and that it lost (another
    worker declared them stale while they ran)."""

    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def arm_overrides(study: Any, budget: str, best: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Arm name -> its merged overrides at ``budget`` (kept in the store to explain design changes),
    with its tuned values (``best``, see :mod:`ablate.tuner`) on top."""
    return {a.name: {**study.overrides(a, budget), **(best or {}).get(a.name, {})} for a in study.arms}


def expand(study: Any, budget: str, best: dict[str, dict[str, Any]] | None = None) -> list[Any]:
    """The trials of ``budget``; with ``best`` (arm -> tuned values) their configs carry them."""
    if best is None:
        return study.expand(budget)
    from ablate.tuner import tuned_expand

    return tuned_expand(study, budget, best)


def prepare_store(study: Any, store: StudyStore, budget: str, *, extend: bool = False,
                  best: dict[str, dict[str, Any]] | None = None) -> PrepareResult:
    """Freeze or check the design of ``budget`` and enqueue every trial that must run."""
    return store.prepare(expand(study, budget, best), budget, arm_overrides=arm_overrides(study, budget, best),
                         extend=extend)


def best_values(study: Any, settings: RunSettings, *, tune: bool = False,
                stream: TextIO | None = None) -> dict[str, dict[str, Any]] | None:
    """Arm -> tuned values of a study with ``tune:`` (None without); with ``tune``, run the tuning first."""
    if study.tune is None:
        return None
    from ablate.tuner import study_best_values

    return study_best_values(study, settings.storage, tune=tune, threads=settings.threads, stream=stream)


def parent_run_id(study: Any, store: StudyStore, tracker: Any, budget: str) -> str:
    """The study's MLflow parent run at ``budget``, found or created under the store's lock."""
    with store.lock():
        return tracker.parent_run(study, budget, storage=store.description, design=store.frozen_design(budget))


def adaptive_study(study: Any, store: StudyStore, budget: str) -> Any:
    """A study with ``seeds: {min, max}`` at the seed count the store holds for ``budget``: seeds
    0..n-1 with n = the largest of ``min``, the frozen design's seed count and the study's own
    (adaptive rounds add seeds; see :mod:`ablate.planning`). Other studies are returned unchanged."""
    if study.seed_range is None:
        return study
    from ablate.planning import seeds_in_design

    n = max(study.seed_range.min, seeds_in_design(store.frozen_design(budget)), len(study.seeds))
    return study if tuple(study.seeds) == tuple(range(n)) else study.with_seeds(range(n))


def adaptive_rounds(store: StudyStore, budget: str) -> list[Any]:
    """The adaptive-seed decisions kept in the store for ``budget`` (:class:`ablate.planning.AdaptiveRound`)."""
    from ablate.planning import STORE_NOTE, AdaptiveRound

    note = store.note(STORE_NOTE + budget) or {}
    return [AdaptiveRound.from_dict(d) for d in note.get("rounds", [])]


def tag_adaptive(tracker: Any, parent: str, study: Any, rounds: list[Any]) -> None:
    """Record the adaptive rule and the current seed count on the parent run
    (:data:`ablate.planning.TAG_ADAPTIVE`, :data:`ablate.planning.TAG_ADAPTIVE_N`)."""
    from ablate.planning import TAG_ADAPTIVE, TAG_ADAPTIVE_N, adaptive_summary

    text = adaptive_summary(rounds, min_seeds=study.seed_range.min, max_seeds=study.seed_range.max,
                            min_effect=study.min_effect)
    try:
        tracker.client.set_tag(parent, TAG_ADAPTIVE, text)
        tracker.client.set_tag(parent, TAG_ADAPTIVE_N, str(len(study.seeds)))
    except Exception as exc:  # noqa: BLE001 - the store keeps the decisions; MLflow only records them
        print(f"warning: the adaptive seeds could not be recorded in MLflow: {type(exc).__name__}: {exc}",
              file=sys.stderr)


def adaptive_round(study: Any, store: StudyStore, settings: RunSettings, counts: dict[str, int], *,
                   stream: TextIO) -> Any | None:
    """Decide whether a study with ``seeds: {min, max}`` runs more seeds, and print the decision.

    The decision at the current seed count n is taken once and kept in the store: a decision found
    there (a rerun) is reused, never taken again. Otherwise, when every trial of seeds 0..n-1 is
    done, n < max and fewer than :data:`ablate.planning.MAX_ROUNDS` rounds ran, the seeds needed
    are re-estimated from the finished trials (the report's inference, read from MLflow) for the
    study's ``min_effect`` (:func:`ablate.planning.reestimate`: variance only).

    Returns:
        The round (its ``n_new`` may exceed n: run those seeds), or None: no more seeds.
    """
    from ablate.inference import ALPHA, POWER
    from ablate.planning import MAX_ROUNDS, STORE_NOTE, plan_seeds, read_pilot, reestimate

    budget = settings.budget
    n, top = len(study.seeds), study.seed_range.max
    rounds = adaptive_rounds(store, budget)
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
    pilot = read_pilot(study, budget, settings.tracking_uri)
    plan = plan_seeds(pilot.inference.contrasts, min_effect=study.min_effect, alpha=ALPHA, power=POWER,
                      family_size=len(pilot.inference.family.claims))
    if not plan.contrasts:
        print(f"adaptive seeds: no contrast could be estimated from the {pilot.finished} finished trials (is the "
              f"objective {study.objective.metric} logged?); stays at {n} seeds", file=stream)
        return None
    decision = reestimate(plan, n, top, len(rounds) + 1)
    with store.lock():
        store.set_note(STORE_NOTE + budget, {"rule": "variance-only re-estimation",
                                              "rounds": [r.to_dict() for r in [*rounds, decision]]})
    print(decision.line(scale, unit), file=stream)
    return decision


def _objective_scale(study: Any) -> tuple[float, str]:
    """How the report shows the objective: (factor, unit), e.g. (100, "points") for a fraction."""
    from ablate.report.statistics import Scale

    sc = Scale.of(study.objective.metric)
    return sc.factor, sc.unit


def record_stale(tracker: Any, stale: list[StaleAttempt]) -> None:
    """Mark the MLflow runs of attempts failed as stale (a retry reopens them)."""
    for s in stale:
        if s.attempt.mlflow_run_id:
            try:
                note = " (a retry is enqueued)" if s.retried else ""
                tracker.fail_trial(s.attempt.mlflow_run_id, f"stale: {s.reason}{note}")
            except Exception:  # noqa: BLE001 - the run may live in another tracking store
                pass


def _emit(events: EventFn | None, **event: Any) -> None:
    if events is not None:
        try:
            events(event)
        except Exception:  # noqa: BLE001 - a display problem must not fail a trial
            pass


def run_worker(settings: RunSettings, *, index: int | None = None, study: Any = None,
               events: EventFn | None = None, prepare: bool = False) -> WorkerStats:
    """The worker loop: claim and run trials of the study until none is waiting or running.

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

    if study is None:
        study = load_study(settings.study_file)
    budget = settings.budget
    store = settings.open_store(study.name, "maximize" if study.objective.mode == "max" else "minimize")
    study = adaptive_study(study, store, budget)
    best = best_values(study, settings)
    specs = {s.key: s for s in expand(study, budget, best)}
    tracker = Tracker(settings.tracking_uri)
    if prepare:
        prepare_store(study, store, budget, best=best)
    parent = settings.parent_run_id or parent_run_id(study, store, tracker, budget)
    worker = WorkerInfo.current(index)
    stats = WorkerStats()
    while True:
        record_stale(tracker, store.fail_stale(budget))
        attempt = store.claim(budget, worker, keys=specs.keys())
        if attempt is None:
            if not store.has_work(budget):
                tracker.finish_parent(parent, failed=store.counts(budget)["failed"] > 0)
                return stats
            grown = adaptive_study(study, store, budget)  # a round of `ablate run` may have added seeds
            if grown.seeds != study.seeds:
                study = grown
                specs = {s.key: s for s in expand(study, budget, best)}
                continue
            time.sleep(settings.poll_seconds)
            continue
        state = run_attempt(study, specs[attempt.key], attempt, store, tracker, parent, settings, worker, events)
        {"complete": stats.completed, "failed": stats.failed, "lost": stats.lost}[state].append(attempt.key)


def run_attempt(study: Any, spec: Any, attempt: Attempt, store: StudyStore, tracker: Any, parent: str,
                settings: RunSettings, worker: WorkerInfo, events: EventFn | None = None) -> str:
    """Run one claimed attempt: MLflow child run, heartbeat, training, then complete or fail it.

    Returns:
        ``complete``, ``failed``, or ``lost`` (it finished, but another worker had failed it as
        stale meanwhile; its retry resumes from the final checkpoint).

    Raises:
        KeyboardInterrupt: after recording the attempt as failed ("interrupted") and its run KILLED.
    """
    from ablate.train import CHECKPOINT_FILE, run_trial

    config = spec.config
    if settings.threads > 0:
        from ablate.config import ConfigWarning

        with warnings.catch_warnings():  # the arm's warnings were printed once, when the study was loaded
            warnings.simplefilter("ignore", ConfigWarning)
            config = config.with_overrides({"threads": settings.threads})
    steps = config.train.steps
    workdir = trial_dir(study.name, spec.key, settings.runs)
    common = {"worker": worker.name, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "steps": steps}
    t0 = time.time()
    logger = None
    try:
        logger = tracker.start_trial(
            parent, study=study.name, key=spec.key, arm=spec.arm, seed=spec.seed, budget=spec.budget,
            levels=spec.levels, flat_config=config.to_flat_dict(), worker=worker.name,
            flush_every=settings.flush_every, resuming=(workdir / CHECKPOINT_FILE).exists(),
        )
        store.set_run_id(attempt, logger.run_id)
        _emit(events, kind="start", attempt=attempt.number, retry=attempt.retry, **common)
        with Heartbeat(store, attempt, steps=steps) as hb:

            def log(metrics: dict[str, float], step: int) -> None:
                logger(metrics, step)
                hb.step = step
                _emit(events, kind="step", step=step, **common)

            result = run_trial(config, log, workdir=workdir)
            logger.backfill(result.history)  # steps before a resume that a killed attempt never sent
            logger.close()
        obj = study.objective
        value = summarize_objective(result.history, obj.metric, obj.summary, obj.last_n)
        record = {
            "steps": result.steps, "seconds": round(result.seconds, 3), "resumed_from": result.resumed_from,
            "worker": worker.name, "mlflow_run_id": logger.run_id,
        }
        final = {k: v for k, v in result.final.items()}
        warm = {k: v for k, v in result.warmstart.items() if k != "history"}
        tracker.finish_trial(
            logger.run_id, config_yaml=config.to_yaml(), history=result.history, samples=result.samples,
            eval_problems=result.eval_problems,
            result={**record, "key": spec.key, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
                    "levels": spec.levels, "objective": value, "objective_metric": obj.metric, "final": final,
                    "warmstart": warm, "learned_prm": {k: v for k, v in result.learned_prm.items() if k != "history"}},
            objective=value,
        )
        ok = store.complete(attempt, value, record)
        state = "complete" if ok and not hb.lost else "lost"
        _emit(events, kind="end", state=state, seconds=time.time() - t0, objective=value,
              metric=obj.metric, **common)
        return state
    except KeyboardInterrupt:
        _record_failure(store, tracker, attempt, logger, "interrupted (KeyboardInterrupt)", status="KILLED")
        _emit(events, kind="end", state="failed", seconds=time.time() - t0, error="interrupted", **common)
        raise
    except Exception as exc:  # noqa: BLE001 - any error of one trial is recorded; the study goes on
        text = traceback.format_exc()
        _record_failure(store, tracker, attempt, logger, text)
        _emit(events, kind="end", state="failed", seconds=time.time() - t0,
              error=f"{type(exc).__name__}: {exc}".splitlines()[0], **common)
        return "failed"


def _record_failure(store: StudyStore, tracker: Any, attempt: Attempt, logger: Any, text: str,
                    status: str = "FAILED") -> None:
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


# ---------------------------------------------------------------------------------------- display


def format_seconds(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3725`` -> ``1h02m``; ``9`` -> ``9s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """The progress display of ``ablate run``: trials done / running / failed / pending, each running
    trial's step, and an ETA.

    On a terminal one status line is redrawn in place; otherwise (a log file, a pipe) a status line
    is printed every ``interval`` seconds. Finished and failed trials are always printed on their own
    line. ETA = the steps left (over every unfinished trial) / the steps per second observed so far.
    """

    def __init__(self, total: int, steps_per_trial: int, counts: dict[str, int], *, stream: TextIO | None = None,
                 live: bool | None = None, interval: float = 30.0, label: str = "") -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.interval = interval
        self.total = total
        self.steps_per_trial = steps_per_trial
        self.counts = dict(counts)
        self.label = label
        self.running: dict[str, dict[str, Any]] = {}
        self.steps_done = 0
        self._last_step: dict[str, int] = {}
        self._t_first: float | None = None
        self._last_print = time.monotonic()
        self._width = 0

    def handle(self, event: dict[str, Any]) -> None:
        """Update from one worker event."""
        kind, key = event.get("kind"), event.get("key", "")
        if kind == "start":
            self.running[key] = dict(event, step=None)
        elif kind == "step":
            step = int(event["step"])
            prev = self._last_step.get(key)
            if prev is not None and step > prev:
                self.steps_done += step - prev
                if self._t_first is None:
                    self._t_first = time.monotonic()
            self._last_step[key] = step
            self.running.setdefault(key, dict(event))["step"] = step
        elif kind == "end":
            self.running.pop(key, None)
            self._last_step.pop(key, None)
            who = f"{event.get('arm')} seed={event.get('seed')}"
            took = format_seconds(float(event.get("seconds", 0.0)))
            if event.get("state") == "failed":
                self.line(f"FAILED {who} after {took}: {event.get('error', '')}")
            else:
                obj = event.get("objective")
                score = f", {event.get('metric')} = {obj:.4g}" if isinstance(obj, float) else ""
                self.line(f"done   {who} in {took}{score}")

    def set_counts(self, counts: dict[str, int]) -> None:
        """Counts from the store (they include other machines' workers)."""
        self.counts = dict(counts)

    def eta(self) -> float | None:
        """Seconds left, or None before the rate is known."""
        if self._t_first is None or self.steps_done <= 0:
            return None
        rate = self.steps_done / max(time.monotonic() - self._t_first, 1e-6)
        running_left = sum(max(0, self.steps_per_trial - int(r.get("step") or 0)) for r in self.running.values())
        queued = max(0, self.counts.get("pending", 0)) * self.steps_per_trial
        return (running_left + queued) / rate

    def status_line(self) -> str:
        """The one-line summary."""
        c = self.counts
        parts = [f"{c.get('done', 0)}/{self.total} done, {c.get('running', 0)} running, "
                 f"{c.get('failed', 0)} failed, {c.get('pending', 0)} pending"]
        for r in list(self.running.values())[:4]:
            step = r.get("step")
            parts.append(f"{r.get('arm')} s{r.get('seed')} " + ("starting" if step is None else f"{step}/{r.get('steps')}"))
        eta = self.eta()
        parts.append("ETA " + ("?" if eta is None or not math.isfinite(eta) else format_seconds(eta)))
        return (f"[{self.label}] " if self.label else "") + " | ".join(parts)

    def line(self, text: str) -> None:
        """Print a line (above the live status line)."""
        if self.live:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        if self.live:
            self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Redraw the status line (live), or print it when ``interval`` has passed (not live)."""
        now = time.monotonic()
        if self.live:
            self.stream.write("\r\x1b[K" + self.status_line()[: _terminal_width() - 1])
            self.stream.flush()
        elif force or now - self._last_print >= self.interval:
            self.stream.write(self.status_line() + "\n")
            self.stream.flush()
            self._last_print = now

    def close(self) -> None:
        """End the live line."""
        if self.live:
            self.stream.write("\r\x1b[K" + self.status_line()[: _terminal_width() - 1] + "\n")
            self.stream.flush()


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 160


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


def _process_main(settings: RunSettings, index: int, events: Any, gpu: str | None = None) -> None:
    """Entry point of a spawned worker process."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threads = settings.threads
    if threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
        import torch

        torch.set_num_threads(threads)
    try:
        run_worker(settings, index=index, events=events.put)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


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
        seeds: the seeds of the design at the end (a study with ``seeds: {min, max}`` may have added some).
    """

    counts: dict[str, int]
    prepared: PrepareResult
    parent_run_id: str
    tracking_uri: str
    storage: str
    seconds: float
    seeds: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        """Every trial is done."""
        return self.counts.get("done", 0) == sum(self.counts.values())


def run_study(study: Any, settings: RunSettings, *, workers: int = 1, extend: bool = False,
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
        DesignChangedError: the design differs from the one frozen in the store.
    """
    from ablate.tracking import Tracker

    stream = stream or sys.stderr
    t0 = time.time()
    budget = settings.budget
    store = settings.open_store(study.name, "maximize" if study.objective.mode == "max" else "minimize")
    # per-arm tuning (tune:) runs here, sequentially in this process, before any main trial
    best = best_values(study, settings, tune=True, stream=stream)
    study = adaptive_study(study, store, budget)  # adaptive seeds: the seeds already in the store count
    prepared = prepare_store(study, store, budget, extend=extend, best=best)
    first = prepared
    tracker = Tracker(settings.tracking_uri)
    parent = parent_run_id(study, store, tracker, budget)
    record_stale(tracker, prepared.stale)
    if study.seed_range is not None:
        tag_adaptive(tracker, parent, study, adaptive_rounds(store, budget))
    while True:
        counts = _run_round(study, settings, store, tracker, parent, prepared, best, workers=workers,
                            progress=progress, stream=stream, live=live)
        if study.seed_range is None:
            break
        decision = adaptive_round(study, store, settings, counts, stream=stream)
        if decision is None or decision.n_new <= len(study.seeds):
            break
        study = study.with_seeds(range(decision.n_new))
        prepared = prepare_store(study, store, budget, extend=True, best=best)  # adds the new seeds' trials
        parent = parent_run_id(study, store, tracker, budget)  # running again
        record_stale(tracker, prepared.stale)
        tag_adaptive(tracker, parent, study, adaptive_rounds(store, budget))
    if not store.has_work(budget):
        tracker.finish_parent(parent, failed=counts["failed"] > 0)
    return StudyRun(counts, first, parent, tracker.uri, store.description, time.time() - t0, tuple(study.seeds))


def _run_round(study: Any, settings: RunSettings, store: StudyStore, tracker: Any, parent: str,
               prepared: PrepareResult, best: dict[str, dict[str, Any]] | None, *, workers: int, progress: bool,
               stream: TextIO, live: bool | None) -> dict[str, int]:
    """Run the workers until no trial of the prepared design waits or runs; the counts at the end."""
    budget = settings.budget
    specs = expand(study, budget, best)
    counts = store.counts(budget)
    workers = max(1, min(workers, counts["pending"] + counts["running"]))  # no idle processes to start
    if settings.threads == 0 and workers > 1:
        settings = replace(settings, threads=threads_per_worker(workers))
    settings = replace(settings, parent_run_id=parent)

    msg = (f"study {study.name}, budget {budget}: {prepared.total} trials; {counts['done']} already done, "
           f"{counts['pending']} to run")
    if counts["running"]:
        msg += f", {counts['running']} running on other workers"
    if prepared.stale:
        msg += f" ({len(prepared.stale)} of them left by dead workers: they resume from their checkpoints)"
    if prepared.extended is not None:
        msg += f" (extended by {len(prepared.extended.added)} trials)"
    print(msg, file=stream)
    print(f"  store: {store.description}\n  tracking: {tracker.location}", file=stream)
    display = Progress(prepared.total, specs[0].config.train.steps if specs else 0, counts,
                       stream=stream, live=live, label=f"{study.name} {budget}") if progress else None
    handle = display.handle if display is not None else None

    if workers <= 1:
        run_worker(settings, study=study, events=handle)
    else:
        _run_pool(settings, workers, store, display)
    counts = store.counts(budget)
    if display is not None:
        display.set_counts(counts)
        display.close()
    return counts


def _run_pool(settings: RunSettings, workers: int, store: StudyStore, display: Progress | None) -> None:
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    procs: dict[int, Any] = {}
    gpus = _cuda_devices()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")

    def start(i: int) -> None:
        gpu = gpu_for_worker(i, gpus, visible)
        p = ctx.Process(target=_process_main, args=(settings, i, events, gpu), name=f"ablate-worker-{i}", daemon=False)
        p.start()
        procs[i] = p

    for i in range(workers):
        start(i)
    restarts_left = workers * (settings.max_retries + 1)
    last_poll = 0.0
    try:
        while procs:
            try:
                event = events.get(timeout=0.5)
                if display is not None:
                    display.handle(event)
                continue
            except queue_module.Empty:
                pass
            for i, p in list(procs.items()):
                if p.is_alive():
                    continue
                p.join()
                del procs[i]
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
        while True:  # events sent just before the workers exited
            try:
                event = events.get_nowait()
            except queue_module.Empty:
                break
            if display is not None:
                display.handle(event)
    except KeyboardInterrupt:
        deadline = time.monotonic() + 30
        for p in procs.values():
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
        raise
    finally:
        events.close()


__all__ = [
    "Progress",
    "adaptive_round",
    "adaptive_study",
    "RunSettings",
    "StudyRun",
    "WorkerStats",
    "run_attempt",
    "run_study",
    "run_worker",
    "threads_per_worker",
    "format_seconds",
]
