"""The study store's queue: enqueue, claim, heartbeat, complete and fail the attempts of a study's trials.

See :mod:`ablate.store` for the guarantees (frozen design, atomic claim, heartbeats, bounded retries,
resume). States are :mod:`ablate.states`' vocabulary.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from filelock import FileLock
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState, create_trial

from ablate.disk import is_disk_full
from ablate.objective import direction as objective_direction
from ablate.states import DONE, FAILED, PENDING, RUNNING, zero_counts
from ablate.store.design import DesignChangedError, DesignDiff, design_record, diff_designs, jsonable
from ablate.store.storage import (
    DEFAULT_STORE_WAIT,
    RetryingStorage,
    StoreError,
    StoreNotFoundError,
    describe_storage,
    is_outage,
    is_rdb_url,
    open_storage,
    resolve_storage,
)

if TYPE_CHECKING:
    from ablate.study import Study
    from ablate.study.plan import Plan

#: Seconds between two heartbeats of a running attempt.
DEFAULT_HEARTBEAT_INTERVAL = 15.0
#: Seconds without a heartbeat after which an attempt that ran on another machine is stale.
DEFAULT_GRACE_PERIOD = 90.0
#: Automatic retries of a trial whose worker died (in a row); rerunning the study resets the count.
DEFAULT_MAX_RETRIES = 2
#: Longest error text (a traceback) kept on an attempt.
MAX_ERROR_CHARS = 20000

# attribute names
_DESIGN_ATTR = "ablate:design:"  # + budget (study system attribute)
_CLAIM = "ablate:claim"
_HEARTBEAT = "ablate:heartbeat"
_ERROR = "ablate:error"
_RESULT = "ablate:result"
_RUN_ID = "ablate:mlflow_run_id"
_NOTE_ATTR = "ablate:note:"  # + name (study system attribute)
#: Study system attribute: each factor's levels and the largest seed, the value spaces of the Optuna
#: parameters every queued trial carries (for optuna-dashboard and Optuna's API); one per store, as Optuna
#: allows one categorical space per parameter name in a study, whatever the budget
_PARAMS_ATTR = "ablate:params"
_IDENTITY_ATTR = "ablate:identity"  # {fingerprint, file} of the study that first used the store
#: {factor: {level: its overrides}} of every level a design of the store has run (any budget)
_LEVELS_ATTR = "ablate:levels"

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ------------------------------------------------------------------------------------------ workers


def _node_id() -> str:
    """This machine and PID namespace: a pid can be checked directly only where they are equal."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    pidns = ""
    with contextlib.suppress(OSError):
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    return f"{socket.gethostname()}/{boot}/{pidns}"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), None where unknown: with
    the pid, it names a process even after the pid is reused."""
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    return None


def pid_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` exists on this machine and is not a zombie (and, when ``started`` is
    given, is the process that started then, not a later one given the same pid)."""
    if started is not None and process_start(pid) not in (None, started):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] in "ZX":
            return False
    return True


@dataclass(frozen=True)
class WorkerInfo:
    """Who runs an attempt: recorded on it when claimed.

    Attributes:
        name: ``host:pid`` (plus ``/index`` for local pool workers), shown by ``ablate status``.
        host: the machine's host name.
        node: host, boot id and PID namespace: where ``pid`` can be checked directly.
        pid: the worker's process id.
        started: when that process started (see :func:`process_start`).
    """

    name: str
    host: str
    node: str
    pid: int
    started: str | None = None

    @staticmethod
    def current(index: int | None = None) -> WorkerInfo:
        """This process as a worker (``index``: its number in a local pool)."""
        host, pid = socket.gethostname(), os.getpid()
        name = f"{host}:{pid}" + (f"/{index}" if index is not None else "")
        return WorkerInfo(name=name, host=host, node=_node_id(), pid=pid, started=process_start(pid))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "node": self.node, "pid": self.pid, "started": self.started}


# ----------------------------------------------------------------------------------------- records


_STATE_NAMES = {
    TrialState.WAITING: PENDING,
    TrialState.RUNNING: RUNNING,
    TrialState.COMPLETE: DONE,
    TrialState.FAIL: FAILED,
    TrialState.PRUNED: FAILED,
}


@dataclass(frozen=True)
class Attempt:
    """One run of a trial: an Optuna trial of the study.

    Attributes:
        trial_id: the Optuna trial id (storage-wide).
        number: the Optuna trial number (study-wide, in enqueue order).
        key: the trial key (``TrialConfig.trial_key()``).
        arm, seed, budget, levels: the trial's identity in the study.
        state: ``pending`` | ``running`` | ``done`` | ``failed`` (:mod:`ablate.states`).
        retry: 0 for an attempt enqueued by a run of the study, n for the n-th automatic retry.
        value: the objective summary of a done attempt.
        error: why a failed attempt failed (a traceback, or how its worker died).
        claim: who ran it: ``{name, host, node, pid, t}`` (None until claimed).
        heartbeat: the last heartbeat ``{t, step, steps}`` (None before the first).
        result: what a done attempt recorded (steps, seconds, resumed_from, objective).
        mlflow_run_id: the MLflow child run of the trial, once created.
        started: when it was claimed (local time of the storage's clock).
    """

    trial_id: int
    number: int
    key: str
    arm: str
    seed: int
    budget: str
    levels: dict[str, str]
    state: str
    retry: int = 0
    value: float | None = None
    error: str | None = None
    claim: dict[str, Any] | None = None
    heartbeat: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    mlflow_run_id: str | None = None
    started: datetime | None = None

    @staticmethod
    def from_trial(t: FrozenTrial) -> Attempt:
        """The attempt recorded in an Optuna trial of the store."""
        u, s = t.user_attrs, t.system_attrs
        return Attempt(
            trial_id=t._trial_id,
            number=t.number,
            key=str(u.get("key", "")),
            arm=str(u.get("arm", "")),
            seed=int(u.get("seed", 0)),
            budget=str(u.get("budget", "")),
            levels=dict(u.get("levels", {})),
            state=_STATE_NAMES.get(t.state, FAILED),
            retry=int(u.get("retry", 0)),
            value=t.values[0] if t.values else None,
            error=s.get(_ERROR),
            claim=s.get(_CLAIM),
            heartbeat=s.get(_HEARTBEAT),
            result=s.get(_RESULT),
            mlflow_run_id=s.get(_RUN_ID),
            started=t.datetime_start,
        )

    @property
    def last_seen(self) -> float | None:
        """Unix time of the last sign of life: the last heartbeat, else the claim."""
        times = [d["t"] for d in (self.heartbeat, self.claim) if d and "t" in d]
        if times:
            return float(max(times))
        return self.started.timestamp() if self.started is not None else None

    @property
    def step(self) -> int | None:
        """The step of the last heartbeat (None before the first)."""
        return None if not self.heartbeat else self.heartbeat.get("step")


@dataclass
class TrialStatus:
    """Where one trial of the design stands, over all its attempts.

    Attributes:
        state: ``done`` (an attempt completed), ``running``, ``pending`` (waiting, or not enqueued
            yet) or ``failed`` (every attempt failed and none is pending).
        attempts: its attempts, oldest first.
    """

    key: str
    arm: str
    seed: int
    state: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        """The error of the latest failed attempt."""
        for a in reversed(self.attempts):
            if a.state == FAILED and a.error:
                return a.error
        return None

    @property
    def active(self) -> Attempt | None:
        """The running attempt, else the done one, else None."""
        for state in (RUNNING, DONE):
            for a in reversed(self.attempts):
                if a.state == state:
                    return a
        return None


@dataclass(frozen=True)
class StaleAttempt:
    """An attempt that :meth:`StudyStore.fail_stale` failed: why, and whether a retry was enqueued."""

    attempt: Attempt
    reason: str
    retried: bool


@dataclass(frozen=True)
class PrepareResult:
    """What :meth:`StudyStore.prepare` found and did.

    Attributes:
        total: trials in the design at this budget.
        complete: trials already done (skipped).
        pending: trials already waiting or running (left as they are).
        enqueued: trials given a fresh attempt (missing, failed or stale).
        created: True when this call froze the design.
        extended: the trials ``extend=True`` added (None when nothing was added).
        stale: the stale attempts this call failed.
    """

    total: int
    complete: int
    pending: int
    enqueued: int
    created: bool
    extended: DesignDiff | None
    stale: list[StaleAttempt]


# -------------------------------------------------------------------------------------------- store


class StudyStore:
    """One ablate study on Optuna storage: enqueue, claim, heartbeat, complete, fail, retry, status.

    Open it with :meth:`open`. Every method reads the storage afresh, so several processes (and
    machines, on PostgreSQL) can use one store at once.
    """

    def __init__(
        self,
        storage: str,
        study_name: str,
        *,
        direction: str = "maximize",
        create: bool = True,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        max_retries: int = DEFAULT_MAX_RETRIES,
        store_wait: float = DEFAULT_STORE_WAIT,
        read_only: bool = False,
    ) -> None:
        """Open (and with ``create``, create) the Optuna study ``study_name`` in ``storage``; ``read_only``
        (with ``create=False``): open it for reading only (:func:`open_storage`): nothing on disk changes.

        Every later call to the storage waits out an outage of up to ``store_wait`` seconds (a
        PostgreSQL restart, a journal I/O error: :class:`~ablate.store.storage.RetryingStorage`).

        Raises:
            StoreError: a bad storage, or (``create=False``) no such study in it.
        """
        if grace_period <= heartbeat_interval:
            raise StoreError(f"grace period ({grace_period} s) must exceed the heartbeat interval ({heartbeat_interval} s)")
        self.url = storage
        self.name = study_name
        self.heartbeat_interval = float(heartbeat_interval)
        self.grace_period = float(grace_period)
        self.max_retries = int(max_retries)
        raw = open_storage(storage, create=create, read_only=read_only and not create)
        if create:
            study = optuna.create_study(
                storage=raw, study_name=study_name, direction=direction, load_if_exists=True
            )
        else:
            try:
                study = optuna.load_study(storage=raw, study_name=study_name)
            except KeyError:
                raise StoreNotFoundError(
                    f"study {study_name!r} is not in the store {describe_storage(storage)}: it has not been run there "
                    "(ablate run FILE, with the same --storage)"
                ) from None
        self.study_id: int = study._study_id
        self.storage: Any = RetryingStorage(raw, describe_storage(storage), store_wait)
        self._lock_depth = 0
        self._lock_mutex = threading.RLock()
        self._lock_release: Callable[[], None] | None = None
        self._node = _node_id()

    @classmethod
    def open(cls, study: Study, storage: str | None = None, *, runs: str | os.PathLike[str] | None = None,
             create: bool = True, **kwargs: Any) -> StudyStore:
        """The store of a loaded :class:`~ablate.study.Study` (see :func:`resolve_storage`)."""
        url = resolve_storage(storage, study.name, runs)
        return cls(url, study.name, direction=objective_direction(study.objective.mode), create=create, **kwargs)

    @property
    def description(self) -> str:
        """The journal file's path or the redacted URL."""
        return describe_storage(self.url)

    # -- locking -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The store-wide lock (re-entrant in one process): held while enqueueing.

        A journal file: a :class:`filelock.FileLock` on ``<journal>.prepare.lock``; PostgreSQL: a
        session-level advisory lock keyed by the study name.
        """
        with self._lock_mutex:
            if self._lock_depth == 0:
                self._lock_release = self._acquire()
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    release, self._lock_release = self._lock_release, None
                    if release is not None:
                        release()

    def _acquire(self) -> Callable[[], None]:
        """Take the store-wide lock; the function that releases it."""
        if not is_rdb_url(self.url):
            lock = FileLock(str(self.url) + ".prepare.lock")
            lock.acquire()
            return lock.release
        from sqlalchemy import text

        key = int.from_bytes(hashlib.sha256(f"ablate:{self.name}".encode()).digest()[:8], "big", signed=True)

        def lock_pg() -> Any:
            conn = self.storage.engine.connect()
            try:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
                conn.commit()
            except BaseException:
                conn.close()
                raise
            return conn

        conn = self.storage.call(lock_pg)  # waits out a restart of the server like every store call

        def release_pg() -> None:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
            except Exception as exc:  # a server restarted meanwhile ended the session, and its lock with it
                if not is_outage(exc):
                    raise
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

        return release_pg

    # -- reading -------------------------------------------------------------------------------------

    def attempts(self, budget: str | None = None, states: Collection[str] | None = None) -> list[Attempt]:
        """Every attempt (of ``budget`` when given; in ``states`` when given), in trial-number order."""
        optuna_states = None
        if states is not None:
            optuna_states = tuple(s for s, n in _STATE_NAMES.items() if n in states)
        trials = self.storage.get_all_trials(self.study_id, deepcopy=False, states=optuna_states)
        out = [Attempt.from_trial(t) for t in trials if "key" in t.user_attrs]
        if budget is not None:
            out = [a for a in out if a.budget == budget]
        return sorted(out, key=lambda a: a.number)

    def attempt(self, trial_id: int) -> Attempt:
        """The attempt with Optuna trial id ``trial_id``, as stored now."""
        return Attempt.from_trial(self.storage.get_trial(trial_id))

    def frozen_design(self, budget: str) -> dict[str, Any] | None:
        """The design frozen for ``budget`` (see :func:`design_record`), or None if never run."""
        return self.storage.get_study_system_attrs(self.study_id).get(_DESIGN_ATTR + budget)

    def budgets(self) -> list[str]:
        """The budgets with a frozen design, in the order they were first run."""
        attrs = self.storage.get_study_system_attrs(self.study_id)
        return [k[len(_DESIGN_ATTR):] for k in attrs if k.startswith(_DESIGN_ATTR)]

    def note(self, name: str) -> Any:
        """A JSON value kept in the store under ``name`` by :meth:`set_note` (None when absent), e.g.
        the decisions of adaptive seeds (:mod:`ablate.stats.planning`)."""
        return self.storage.get_study_system_attrs(self.study_id).get(_NOTE_ATTR + name)

    def set_note(self, name: str, value: Any) -> None:
        """Keep the JSON value ``value`` in the store under ``name`` (replacing any earlier one)."""
        self.storage.set_study_system_attr(self.study_id, _NOTE_ATTR + name, jsonable(value))

    def status(self, budget: str, design: Mapping[str, Any] | None = None) -> list[TrialStatus]:
        """Every trial of the design of ``budget`` (the frozen one unless ``design`` is given) with its
        state, in design order; attempts of keys outside the design are ignored."""
        design = design if design is not None else self.frozen_design(budget)
        if design is None:
            return []
        by_key: dict[str, list[Attempt]] = {}
        for a in self.attempts(budget):
            by_key.setdefault(a.key, []).append(a)
        out = []
        for key, (arm, seed) in design["trials"].items():
            attempts = by_key.get(key, [])
            states = {a.state for a in attempts}
            if DONE in states:
                state = DONE
            elif RUNNING in states:
                state = RUNNING
            elif PENDING in states or not attempts:
                state = PENDING
            else:
                state = FAILED
            out.append(TrialStatus(key=key, arm=arm, seed=int(seed), state=state, attempts=attempts))
        return out

    def counts(self, budget: str) -> dict[str, int]:
        """``{done, running, failed, pending}`` trial counts of ``budget``'s frozen design."""
        out = zero_counts()
        for st in self.status(budget):
            out[st.state] += 1
        return out

    # -- enqueueing ----------------------------------------------------------------------------------

    def _enqueue(self, key: str, arm: str, seed: int, budget: str, levels: Mapping[str, str], retry: int,
                 space: Mapping[str, Any] | None = None) -> int:
        """Queue one attempt of a trial. It carries its arm's levels and its seed as Optuna parameters (what
        optuna-dashboard plots), over the value spaces of :meth:`_param_space`; the trial key and what
        ablate reads stay in the user attributes."""
        space = space if space is not None else self.storage.get_study_system_attrs(self.study_id).get(_PARAMS_ATTR)
        params, dists = _params(levels, int(seed), space)
        template = create_trial(
            state=TrialState.WAITING, params=params, distributions=dists,
            user_attrs={"key": key, "arm": arm, "seed": int(seed), "budget": budget, "levels": dict(levels),
                        "retry": int(retry)},
        )
        return self.storage.create_new_trial(self.study_id, template_trial=template)

    def _param_space(self, specs: Sequence[Any]) -> dict[str, Any]:
        """The value spaces of the Optuna parameters of the store's trials, kept in the store: each factor's
        levels in design order, fixed when a design is first frozen (Optuna refuses a categorical space
        that changes: a level added by an extension is not a parameter value, its trials carry the other
        factors' levels and the seed), and the largest seed (an integer range may widen)."""
        key = _PARAMS_ATTR
        old = self.storage.get_study_system_attrs(self.study_id).get(key)
        levels: dict[str, list[str]] = {}
        if old is None:
            for sp in specs:
                for f, lv in sp.levels.items():
                    if str(lv) not in levels.setdefault(f, []):
                        levels[f].append(str(lv))
        else:
            levels = old["levels"]
        seed_max = max([int(old["seed_max"]) if old else 0, *(int(sp.seed) for sp in specs)])
        space = {"levels": levels, "seed_max": seed_max}
        if space != old:
            self.storage.set_study_system_attr(self.study_id, key, space)
        return space

    def bind(self, study: Study) -> None:
        """Bind the store to ``study``'s fingerprint (:meth:`ablate.study.Study.fingerprint`) when it has
        none yet; refuse another study that takes the same name.

        Raises:
            StudyIdentityError: the store belongs to a study with another fingerprint (the message names
                both files and the fix).
        """
        with self.lock():
            if self.check_identity(study):
                self.storage.set_study_system_attr(self.study_id, _IDENTITY_ATTR, {
                    "fingerprint": study.fingerprint(), "file": str(Path(study.path).resolve())})

    def check_identity(self, study: Study) -> bool:
        """Refuse ``study`` when the store belongs to another study of the same name; True when the
        store is bound to no study yet, or to this study's :meth:`~ablate.study.Study.legacy_fingerprint`
        (a store made before the analysis left the identity: :meth:`bind` binds it again; reads only).

        Raises:
            StudyIdentityError: naming both files and the fix.
        """
        from ablate.errors import StudyIdentityError, identity_message

        held = self.storage.get_study_system_attrs(self.study_id).get(_IDENTITY_ATTR)
        if held is not None and not study.owns(held.get("fingerprint")):
            raise StudyIdentityError(identity_message(study.name, f"the study store {self.description}",
                                                      str(held.get("file", "an unknown file")), str(study.path)))
        return held is None or held.get("fingerprint") != study.fingerprint()

    def prepare(self, plan: Plan, *, extend: bool = False) -> PrepareResult:
        """Freeze or check the design of ``plan``'s budget, fail stale attempts, and enqueue every trial
        of the plan that needs to run.

        Args:
            plan: the trials of one budget (its arm overrides explain design changes).
            extend: accept a design that adds trials to the frozen one (never one that removes or
                changes trials).

        Raises:
            DesignChangedError: the design differs from the frozen one (and ``extend`` does not apply);
                the message lists the differences and the ways out.
        """
        budget, specs = plan.budget, plan.specs
        new = design_record(specs, plan.arm_overrides())
        with self.lock():
            frozen = self.frozen_design(budget)
            created, extended = frozen is None, None
            if frozen is not None and frozen["hash"] != new["hash"]:
                diff = diff_designs(frozen, new)
                if not (extend and diff.additions_only):
                    raise DesignChangedError(self._explain_change(budget, diff, extend), diff)
                extended = diff
            self._check_levels(plan)  # a budget not frozen yet: its levels against those that ran elsewhere
            if created or extended is not None:
                self.storage.set_study_system_attr(self.study_id, _DESIGN_ATTR + budget, new)
            stale = self.fail_stale(budget, retry=False)
            by_key: dict[str, set[str]] = {}
            for a in self.attempts(budget):
                by_key.setdefault(a.key, set()).add(a.state)
            complete = pending = enqueued = 0
            space = self._param_space(specs)
            for s in specs:
                states = by_key.get(s.key, set())
                if DONE in states:
                    complete += 1
                elif states & {PENDING, RUNNING}:
                    pending += 1
                else:
                    self._enqueue(s.key, s.arm, s.seed, budget, s.levels, retry=0, space=space)
                    enqueued += 1
        return PrepareResult(len(specs), complete, pending, enqueued, created, extended, stale)

    def _check_levels(self, plan: Plan) -> None:
        """Refuse a plan whose study gives a level that ran (at any budget) other overrides: a study file
        edited after its run would otherwise start a budget the store never froze with a changed level under
        the old name. New levels and factors are recorded (``--extend`` adds them to a frozen budget).

        Raises:
            DesignChangedError: naming each changed level, what it sets now and what it ran with, and the fixes.
        """
        study = getattr(plan, "study", None)
        if study is None:  # a plan without its study (tests of the store alone)
            return
        held = self.storage.get_study_system_attrs(self.study_id).get(_LEVELS_ATTR) or {}
        now = {f.name: {lv.name: jsonable(lv.overrides) for lv in f.levels} for f in study.factors}
        changed = [f"level {lv!r} of factor {f!r} sets {ov} here but ran with {held[f][lv]}"
                   for f, levels in now.items() for lv, ov in levels.items()
                   if lv in held.get(f, {}) and held[f][lv] != ov]
        if changed:
            raise DesignChangedError(
                f"study {self.name!r}: the study file changed a level that ran (store {self.description}): "
                + "; ".join(changed) + ". Restore the level, give the new setting a new level name (added with "
                "--extend), or give a new study a new `name:`", DesignDiff())
        merged = {f: {**held.get(f, {}), **levels} for f, levels in now.items()}
        merged.update({f: v for f, v in held.items() if f not in merged})
        if merged != held:
            self.storage.set_study_system_attr(self.study_id, _LEVELS_ATTR, merged)

    def _explain_change(self, budget: str, diff: DesignDiff, extend: bool) -> str:
        head = (f"study {self.name!r}: the study file's design at budget {budget!r} differs from the one frozen "
                f"in the store {self.description} when it was first run:")
        lines = [head, *("  " + line for line in diff.lines())]
        if extend and not diff.additions_only:
            lines.append("--extend only adds trials; it cannot remove or change trials that the store holds.")
        elif diff.additions_only:
            lines.append("To add the new trials and keep the existing results, run again with --extend.")
        lines.append(
            "To keep both, give the changed study a new 'name:'; to start over, use another --storage "
            f"or delete {self.description}."
        )
        return "\n".join(lines)

    # -- claiming and running ------------------------------------------------------------------------

    def claim(self, budget: str, worker: WorkerInfo, keys: Collection[str] | None = None) -> Attempt | None:
        """Atomically claim the oldest waiting attempt of ``budget`` (with a key in ``keys``, if given).

        Returns:
            The claimed attempt (now running, claimed by ``worker``), or None when none is waiting.
        """
        for a in self.attempts(budget, states=(PENDING,)):
            if keys is not None and a.key not in keys:
                continue
            try:
                won = self.storage.set_trial_state_values(a.trial_id, TrialState.RUNNING)
            except UpdateFinishedTrialError:
                won = False
            if not won:
                continue
            self.storage.set_trial_system_attr(a.trial_id, _CLAIM, {**worker.to_dict(), "t": time.time()})
            others = [b for b in self.attempts(budget) if b.key == a.key and b.trial_id != a.trial_id]
            if any(b.state == DONE for b in others):  # defensive: never run a done trial again
                self.fail(a, "skipped: another attempt of this trial is already done")
                continue
            return self.attempt(a.trial_id)
        return None

    def heartbeat(self, attempt: Attempt, step: int | None = None, steps: int | None = None) -> bool:
        """Record a heartbeat (and the current step) on a running attempt.

        Returns:
            False when the attempt is no longer running (another worker declared it stale).
        """
        try:
            self.storage.set_trial_system_attr(attempt.trial_id, _HEARTBEAT, {"t": time.time(), "step": step,
                                                                             "steps": steps})
            return True
        except UpdateFinishedTrialError:
            return False

    def set_run_id(self, attempt: Attempt, run_id: str) -> None:
        """Record the MLflow run of a running attempt."""
        with contextlib.suppress(UpdateFinishedTrialError):
            self.storage.set_trial_system_attr(attempt.trial_id, _RUN_ID, run_id)

    def complete(self, attempt: Attempt, value: float | None, result: Mapping[str, Any]) -> bool:
        """Mark a running attempt done with its objective ``value`` and a small ``result`` record.

        A missing or non-finite objective is stored as the worst value (-inf when maximizing, +inf
        when minimizing: Optuna needs a number) and as ``objective: null`` in the result.

        Returns:
            False when the attempt had already been failed as stale (its retry will run it again).
        """
        direction = self.storage.get_study_directions(self.study_id)[0]
        ok = value is not None and math.isfinite(value)
        stored = float(value) if ok else (-math.inf if direction == optuna.study.StudyDirection.MAXIMIZE else math.inf)
        try:
            self.storage.set_trial_system_attr(attempt.trial_id, _RESULT, {**jsonable(dict(result)),
                                                                           "objective": value if ok else None})
            self.storage.set_trial_state_values(attempt.trial_id, TrialState.COMPLETE, values=[stored])
            return True
        except UpdateFinishedTrialError:
            return False

    def fail(self, attempt: Attempt, error: str) -> bool:
        """Mark a running attempt failed with ``error`` (a traceback; its end is kept if too long).

        Returns:
            False when it was no longer running.
        """
        text = error if len(error) <= MAX_ERROR_CHARS else "...\n" + error[-MAX_ERROR_CHARS:]
        try:
            self.storage.set_trial_system_attr(attempt.trial_id, _ERROR, text)
            self.storage.set_trial_state_values(attempt.trial_id, TrialState.FAIL)
            return True
        except UpdateFinishedTrialError:
            return False

    # -- stale attempts ------------------------------------------------------------------------------

    def stale_reason(self, attempt: Attempt, now: float | None = None) -> str | None:
        """Why a running attempt is stale, or None if it looks alive.

        An attempt claimed by a process of this machine is stale exactly when that process is gone;
        one of another machine, when its last heartbeat is older than the grace period.
        """
        if attempt.state != RUNNING:
            return None
        claim = attempt.claim or {}
        if claim.get("node") == self._node and claim.get("pid"):
            # On this machine the process itself answers: alive means never stale, however long its
            # heartbeats are late (it may be waiting out a tracking or store outage).
            if pid_alive(int(claim["pid"]), claim.get("started")):
                return None
            return f"its worker {claim.get('name', claim['pid'])} died (process {claim['pid']} is gone)"
        last = attempt.last_seen
        now = time.time() if now is None else now
        if last is not None and now - last > self.grace_period:
            who = f" from worker {claim['name']}" if claim.get("name") else ""
            return f"no heartbeat{who} for {now - last:.1f} s (grace period {self.grace_period:g} s)"
        return None

    def fail_stale(self, budget: str | None = None, *, retry: bool = True) -> list[StaleAttempt]:
        """Fail every stale running attempt (of ``budget``) and, with ``retry``, enqueue its retry.

        A retry is enqueued unless the trial has already been retried :attr:`max_retries` times in
        a row, or already has another pending or complete attempt.

        Returns:
            The attempts this call failed (another worker may have failed some first).
        """
        now = time.time()
        candidates = [(a, r) for a in self.attempts(budget, states=(RUNNING,))
                      if (r := self.stale_reason(a, now)) is not None]
        if not candidates:
            return []
        out = []
        with self.lock():
            for a, reason in candidates:
                current = self.attempt(a.trial_id)
                if current.state != RUNNING or self.stale_reason(current) is None:
                    continue
                if not self.fail(current, f"stale: {reason}"):
                    continue
                retried = False
                if retry and current.retry < self.max_retries:
                    others = [b for b in self.attempts(current.budget) if b.key == current.key]
                    if not any(b.state in (PENDING, RUNNING, DONE) for b in others):
                        self._enqueue(current.key, current.arm, current.seed, current.budget, current.levels,
                                      retry=current.retry + 1)
                        retried = True
                out.append(StaleAttempt(self.attempt(current.trial_id), reason, retried))
        return out

    def has_work(self, budget: str) -> bool:
        """Whether any attempt of ``budget`` is pending or running."""
        return bool(self.attempts(budget, states=(PENDING, RUNNING)))


class Heartbeat:
    """A thread that records a running attempt's heartbeat every ``store.heartbeat_interval`` seconds.

    Use it as a context manager around the trial; set :attr:`step` as the trial advances. When the
    store says the attempt is no longer running (another worker failed it as stale), :attr:`lost`
    becomes True and the thread stops.
    """

    def __init__(self, store: StudyStore, attempt: Attempt, steps: int | None = None) -> None:
        self.store = store
        self.attempt = attempt
        self.steps = steps
        self.step: int | None = None
        self.lost = False
        self.error: BaseException | None = None  # why the store cannot take heartbeats at all (a full disk)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{attempt.key}", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                if not self.store.heartbeat(self.attempt, self.step, self.steps):
                    self.lost = True
                    return
            except Exception as exc:  # noqa: BLE001 - a storage hiccup must not kill the trial; try again later
                if is_disk_full(exc):  # ... but no attempt can be recorded on a full disk: the trial stops
                    self.error = exc
                    return
            if self._stop.wait(self.store.heartbeat_interval):
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_MAX_RETRIES",
    "MAX_ERROR_CHARS",
    "Attempt",
    "DesignChangedError",
    "Heartbeat",
    "PrepareResult",
    "StaleAttempt",
    "StoreError",
    "StoreNotFoundError",
    "StudyStore",
    "TrialStatus",
    "WorkerInfo",
    "pid_alive",
    "process_start",
]


def _params(levels: Mapping[str, str], seed: int, space: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trial's Optuna parameters and distributions: each factor's level (categorical over the factor's
    levels) and ``seed`` (an integer from 0 to the largest seed); none without a recorded space (a store
    written before parameters were recorded)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if not space:
        return {}, {}
    params: dict[str, Any] = {}
    dists: dict[str, Any] = {}
    for f, lv in levels.items():
        choices = space["levels"].get(f, [])
        if str(lv) in choices:
            params[f], dists[f] = str(lv), CategoricalDistribution(tuple(choices))
    name = "seed" if "seed" not in params else "ablate.seed"  # a factor called seed keeps its name
    params[name], dists[name] = int(seed), IntDistribution(0, max(int(space["seed_max"]), int(seed)))
    return params, dists
