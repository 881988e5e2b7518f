"""The study store: which trials of a study exist, which ran, which run now, on Optuna storage.

One Optuna study per ablate study (same name). Every trial of the expanded design is an Optuna trial
that is *enqueued* (state WAITING) with its identity as user attributes (``key``, ``arm``, ``seed``,
``budget``, ``levels``, ``retry``), so that any Optuna tool (``optuna-dashboard``) shows it. A run of
a trial is an *attempt*: one Optuna trial. A trial that has to run again (it failed, or its worker
died) gets a new attempt; its key ties the attempts together.

Storage (``--storage`` or ``$ABLATE_STORAGE``):

- default: an Optuna journal file, ``runs/<study>/store.journal`` under the working directory
  (:data:`STORE_FILE`); any other file path works too. Processes on one machine (or on machines that
  share the folder) cooperate through it. Its writes are serialised by an ``fcntl`` lock, which the
  kernel releases when its holder dies, so a killed worker never leaves the file locked.
- ``postgresql://user:password@host:port/database``: Optuna's RDB storage on PostgreSQL (needs a
  driver: ``psycopg2-binary`` or ``psycopg[binary]``), for workers on many machines. SQLite URLs are refused: SQLite cannot claim a
  trial atomically across processes (use the journal file instead).

Guarantees:

- **Frozen design.** The first run records the expanded design of each budget (every trial key with
  its arm and seed, and each arm's overrides) in the Optuna study. A later run whose study file
  expands differently is refused with the differences (arms and seeds added, removed or changed),
  unless it only adds trials and ``extend=True`` (``--extend``): then the new trials are added and the
  existing results kept.
- **Atomic claim.** A worker claims a WAITING attempt by switching it to RUNNING with Optuna's
  compare-and-set (``set_trial_state_values`` checks the state under a row lock on PostgreSQL, and by
  the order of the journal's log on a journal file): of N workers racing for one attempt exactly
  one gets it. Enqueueing (:meth:`StudyStore.prepare`, stale retries) holds a store-wide lock (an
  ``fcntl`` lock beside the journal file, a PostgreSQL advisory lock) so a key never has two pending
  attempts.
- **Heartbeat, stale trials, bounded retries.** A running attempt records who runs it (host, pid)
  and a heartbeat every ``heartbeat_interval`` seconds. An attempt is *stale* when its worker's
  process is gone (checked directly when it ran on this machine) or its heartbeat is older than
  ``grace_period`` seconds (other machines; keep their clocks in sync). Any worker that sees a stale
  attempt fails it (compare-and-set again: one winner) and enqueues a retry, at most
  ``max_retries`` times in a row for one key. A trial that raises is failed with its traceback and is
  not retried until the study is run again (an exception is usually deterministic).
- **Resume.** :meth:`StudyStore.prepare` (every ``ablate run`` and ``ablate worker``) skips trials
  with a completed attempt, fails stale attempts, and enqueues one fresh attempt for every trial that
  has none pending: missing, failed and dead trials run again, completed ones never.

This module and the per-arm tuner are the only ones that import optuna.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState, create_trial

from ablate.errors import AblateError

try:  # the lock interface of JournalFileBackend (not exported, stable since optuna 4.0)
    from optuna.storages.journal._file import BaseJournalFileLock
except ImportError:  # pragma: no cover - a future optuna that moved it: fall back to its default lock
    BaseJournalFileLock = None  # type: ignore[assignment,misc]

#: Environment variable read when ``--storage`` is not given.
ENV_STORAGE = "ABLATE_STORAGE"
#: The default journal file, inside the study's run folder.
STORE_FILE = "store.journal"
#: Default folder of run folders (``runs/<study>/``), relative to the working directory.
RUNS_DIR = "runs"
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

optuna.logging.set_verbosity(optuna.logging.WARNING)


class StoreError(AblateError):
    """The store cannot be opened or used as asked (bad URL, missing driver, unknown study)."""


class StoreNotFoundError(StoreError):
    """The store (or the study in it) does not exist: the study has not been run there."""


class DesignChangedError(AblateError):
    """The study file expands to another design than the one frozen in the store."""

    def __init__(self, message: str, diff: DesignDiff) -> None:
        super().__init__(message)
        self.diff = diff


# ------------------------------------------------------------------------------------------- URLs


def run_dir(study_name: str, runs: str | os.PathLike[str] | None = None) -> Path:
    """The study's run folder: ``<runs>/<study>`` (``runs`` defaults to :data:`RUNS_DIR`)."""
    return Path(runs if runs is not None else RUNS_DIR) / study_name


def trial_dir(study_name: str, key: str, runs: str | os.PathLike[str] | None = None) -> Path:
    """Where a trial keeps its checkpoint: ``<runs>/<study>/trials/<key>``."""
    return run_dir(study_name, runs) / "trials" / key


def resolve_storage(storage: str | None, study_name: str, runs: str | os.PathLike[str] | None = None) -> str:
    """The storage to use: ``storage``, else ``$ABLATE_STORAGE``, else the default journal file.

    Returns:
        A PostgreSQL URL or the path of a journal file (``runs/<study>/store.journal`` by default).

    Raises:
        StoreError: an unsupported URL (SQLite, another scheme), naming the fix.
    """
    value = storage or os.environ.get(ENV_STORAGE) or str(run_dir(study_name, runs) / STORE_FILE)
    check_storage(value)
    return value


def is_rdb_url(storage: str) -> bool:
    """True for a database URL (``scheme://...``), False for a journal file path."""
    return "://" in storage


def check_storage(storage: str) -> None:
    """Raise :class:`StoreError` unless ``storage`` is a journal file path or a PostgreSQL URL."""
    if not is_rdb_url(storage):
        if storage.endswith(("/", os.sep)) or (os.path.exists(storage) and os.path.isdir(storage)):
            raise StoreError(f"--storage {storage!r} is a folder; give a journal file such as {storage.rstrip('/')}/{STORE_FILE}")
        return
    scheme = storage.split("://", 1)[0].lower()
    if scheme.startswith("sqlite"):
        raise StoreError(
            f"--storage {redact(storage)!r}: SQLite cannot claim trials atomically across processes; "
            f"use a journal file path (the default, e.g. runs/<study>/{STORE_FILE}) on one machine, or "
            "postgresql://user:password@host:port/database for many machines"
        )
    if not (scheme.startswith("postgresql") or scheme == "postgres"):
        raise StoreError(
            f"--storage {redact(storage)!r}: unsupported scheme {scheme!r}; use a journal file path "
            "or postgresql://user:password@host:port/database"
        )


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and MLflow tags)."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


def describe_storage(storage: str) -> str:
    """A short description for messages: the journal file's absolute path or the redacted URL."""
    return redact(storage) if is_rdb_url(storage) else str(Path(storage).resolve())


class _FlockJournalLock(BaseJournalFileLock or object):  # type: ignore[misc]
    """The journal file's write lock, on ``fcntl.flock`` of ``<journal>.lock``.

    Optuna's own file locks are files that a killed process leaves behind (others wait out a grace
    period); a flock is released by the kernel when its process dies.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._fh: Any = None

    def acquire(self) -> bool:
        fh = open(self._path, "a+")  # noqa: SIM115 - held until release()
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        self._fh = fh
        return True

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()


def open_storage(storage: str, *, create: bool = True) -> BaseStorage:
    """The Optuna storage of ``storage`` (a journal file path or a PostgreSQL URL).

    Args:
        create: create the journal file (and its folder) if missing; when False a missing file
            raises :class:`StoreError`.
    """
    check_storage(storage)
    if not is_rdb_url(storage):
        path = Path(storage)
        if not path.exists():
            if not create:
                raise StoreNotFoundError(f"no study store at {path}: the study has not been run here (ablate run FILE)")
            path.parent.mkdir(parents=True, exist_ok=True)
        lock = _FlockJournalLock(str(path) + ".lock") if BaseJournalFileLock is not None else None
        return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    url = postgres_url_with_driver(storage)
    for attempt in range(5):
        try:
            return RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, skip_table_creation=not create)
        except ImportError:
            raise StoreError(
                f"--storage {redact(url)}: no PostgreSQL driver is installed; pip install psycopg2-binary "
                "(or 'psycopg[binary]')"
            ) from None
        except Exception as exc:  # sqlalchemy.exc.OperationalError and friends: the root cause says why
            why = _root_message(exc)
            if not create and "does not exist" in why and "relation" in why:
                raise StoreNotFoundError(
                    f"no study store in {redact(url)} (its tables do not exist): the study has not been run there"
                ) from None
            # Workers that start together on an empty database race to create Optuna's tables (a
            # unique-constraint error for all but one): the tables exist on the next try.
            if attempt == 4 or "already exists" not in why and "duplicate key" not in why:
                raise StoreError(f"--storage {redact(url)}: cannot open the store: {why}") from None
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _root_message(exc: BaseException) -> str:
    """The first line of the innermost cause of ``exc`` (what the database driver said)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def postgres_url_with_driver(url: str) -> str:
    """A PostgreSQL URL with an installed driver named: ``postgres://`` and ``postgresql://`` (whose
    default driver in SQLAlchemy 2.1 is psycopg 3) become ``postgresql+psycopg://`` when psycopg is
    installed, else ``postgresql+psycopg2://``; a URL naming its driver is left as it is."""
    import importlib.util

    scheme, rest = url.split("://", 1)
    if scheme not in ("postgres", "postgresql"):
        return url
    if importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + rest
    if importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + rest
    return "postgresql://" + rest


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


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine and is not a zombie."""
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
    """

    name: str
    host: str
    node: str
    pid: int

    @staticmethod
    def current(index: int | None = None) -> WorkerInfo:
        """This process as a worker (``index``: its number in a local pool)."""
        host, pid = socket.gethostname(), os.getpid()
        name = f"{host}:{pid}" + (f"/{index}" if index is not None else "")
        return WorkerInfo(name=name, host=host, node=_node_id(), pid=pid)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "node": self.node, "pid": self.pid}


# ----------------------------------------------------------------------------------------- records


STATES = ("waiting", "running", "complete", "failed")
_STATE_NAMES = {
    TrialState.WAITING: "waiting",
    TrialState.RUNNING: "running",
    TrialState.COMPLETE: "complete",
    TrialState.FAIL: "failed",
    TrialState.PRUNED: "failed",
}


@dataclass(frozen=True)
class Attempt:
    """One run of a trial: an Optuna trial of the study.

    Attributes:
        trial_id: the Optuna trial id (storage-wide).
        number: the Optuna trial number (study-wide, in enqueue order).
        key: the trial key (``TrialConfig.trial_key()``).
        arm, seed, budget, levels: the trial's identity in the study.
        state: ``waiting`` | ``running`` | ``complete`` | ``failed``.
        retry: 0 for an attempt enqueued by a run of the study, n for the n-th automatic retry.
        value: the objective summary of a complete attempt.
        error: why a failed attempt failed (a traceback, or how its worker died).
        claim: who ran it: ``{name, host, node, pid, t}`` (None until claimed).
        heartbeat: the last heartbeat ``{t, step, steps}`` (None before the first).
        result: what a complete attempt recorded (steps, seconds, resumed_from, objective).
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
            state=_STATE_NAMES.get(t.state, "failed"),
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
            if a.state == "failed" and a.error:
                return a.error
        return None

    @property
    def active(self) -> Attempt | None:
        """The running attempt, else the complete one, else None."""
        for state in ("running", "complete"):
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
        complete: trials already complete (skipped).
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


# ------------------------------------------------------------------------------------------ designs


@dataclass(frozen=True)
class DesignDiff:
    """How the study file's design differs from the frozen one (trials as ``(arm, seed)``).

    Attributes:
        added_arms / removed_arms: arms only in the new / the frozen design.
        added_seeds / removed_seeds: seeds only in the new / the frozen design.
        changed: ``(arm, seed, what)``: the same arm and seed whose resolved configuration (its key)
            differs; ``what`` lists the changed overrides when the arm's own overrides changed.
        added / removed: every trial key only in the new / the frozen design.
    """

    added_arms: tuple[str, ...] = ()
    removed_arms: tuple[str, ...] = ()
    added_seeds: tuple[int, ...] = ()
    removed_seeds: tuple[int, ...] = ()
    changed: tuple[tuple[str, int, str], ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed)

    @property
    def additions_only(self) -> bool:
        """True when the new design keeps every frozen trial and adds some."""
        return bool(self.added) and not self.removed

    def lines(self) -> list[str]:
        """The differences, one per line."""
        out = []
        if self.added_arms:
            out.append(f"added arms ({len(self.added_arms)}): " + "; ".join(self.added_arms))
        if self.removed_arms:
            out.append(f"removed arms ({len(self.removed_arms)}): " + "; ".join(self.removed_arms))
        if self.added_seeds:
            out.append("added seeds: " + ", ".join(map(str, self.added_seeds)))
        if self.removed_seeds:
            out.append("removed seeds: " + ", ".join(map(str, self.removed_seeds)))
        by_arm: dict[str, tuple[list[int], str]] = {}
        for arm, seed, what in self.changed:
            by_arm.setdefault(arm, ([], what))[0].append(seed)
        for arm, (seeds, what) in by_arm.items():
            out.append(f"changed arm {arm} (seeds {', '.join(map(str, seeds))}): {what}")
        return out


def design_record(specs: Sequence[Any], arm_overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The frozen form of a design: ``{hash, trials: {key: [arm, seed]}, arms: {arm: overrides}}``.

    Args:
        specs: the TrialSpecs of one budget (``study.expand(budget)``).
        arm_overrides: arm name -> its merged dotted overrides (``study.overrides(arm, budget)``),
            kept to explain later changes.
    """
    trials = {s.key: [s.arm, int(s.seed)] for s in specs}
    digest = hashlib.sha256(json.dumps(sorted(trials), separators=(",", ":")).encode()).hexdigest()[:16]
    arms = {name: {k: _jsonable(v) for k, v in ov.items()} for name, ov in arm_overrides.items()}
    return {"hash": digest, "trials": trials, "arms": arms}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def diff_designs(frozen: Mapping[str, Any], new: Mapping[str, Any]) -> DesignDiff:
    """The differences between a frozen design record and a new one (see :func:`design_record`)."""
    old_t: dict[str, list] = dict(frozen.get("trials", {}))
    new_t: dict[str, list] = dict(new.get("trials", {}))
    added = tuple(k for k in new_t if k not in old_t)
    removed = tuple(k for k in old_t if k not in new_t)
    old_arms = list(dict.fromkeys(a for a, _ in old_t.values()))
    new_arms = list(dict.fromkeys(a for a, _ in new_t.values()))
    old_seeds = sorted({int(s) for _, s in old_t.values()})
    new_seeds = sorted({int(s) for _, s in new_t.values()})
    old_by = {(a, int(s)): k for k, (a, s) in old_t.items()}
    new_by = {(a, int(s)): k for k, (a, s) in new_t.items()}
    changed = []
    for (arm, seed), key in new_by.items():
        if (arm, seed) in old_by and old_by[(arm, seed)] != key:
            what = _explain_overrides(frozen.get("arms", {}).get(arm, {}), new.get("arms", {}).get(arm, {}))
            changed.append((arm, seed, what))
    return DesignDiff(
        added_arms=tuple(a for a in new_arms if a not in old_arms),
        removed_arms=tuple(a for a in old_arms if a not in new_arms),
        added_seeds=tuple(s for s in new_seeds if s not in old_seeds),
        removed_seeds=tuple(s for s in old_seeds if s not in new_seeds),
        changed=tuple(changed),
        added=added,
        removed=removed,
    )


def _explain_overrides(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    parts = []
    for k in list(dict.fromkeys([*old, *new])):
        if k not in new:
            parts.append(f"{k} {json.dumps(old[k])} -> (default)")
        elif k not in old:
            parts.append(f"{k} (default) -> {json.dumps(new[k])}")
        elif old[k] != new[k]:
            parts.append(f"{k} {json.dumps(old[k])} -> {json.dumps(new[k])}")
    if parts:
        return "; ".join(parts)
    return "same overrides, other resolved configuration (TrialConfig defaults changed: another ablate version?)"


# ---------------------------------------------------------------------------------------- objective


def summarize_objective(history: Sequence[tuple[int, Mapping[str, float]]], metric: str, summary: str = "last",
                        last_n: int = 1) -> float | None:
    """One number from a trial's metric history, as a study's ``objective:`` asks.

    Args:
        history: ``(step, metrics)`` pairs in step order (``TrialResult.history``).
        metric: the metric name; steps that did not log it (or logged a NaN) are skipped.
        summary: ``last`` (mean of the last ``last_n`` values), ``mean``, ``max``, ``min``, or ``auc``
            (trapezoid area under value-over-step divided by the step range; one point: its value).
        last_n: values averaged by ``last``.

    Returns:
        The summary, or None when the metric has no finite value.
    """
    points = [(int(s), float(m[metric])) for s, m in history if metric in m and math.isfinite(float(m[metric]))]
    if not points:
        return None
    values = [v for _, v in points]
    if summary == "last":
        tail = values[-max(1, int(last_n)):]
        return sum(tail) / len(tail)
    if summary == "mean":
        return sum(values) / len(values)
    if summary == "max":
        return max(values)
    if summary == "min":
        return min(values)
    if summary == "auc":
        if len(points) == 1 or points[-1][0] == points[0][0]:
            return values[-1]
        area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:]))
        return area / (points[-1][0] - points[0][0])
    raise ValueError(f"unknown objective summary {summary!r}; allowed: last, mean, max, min, auc")


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
    ) -> None:
        """Open (and with ``create``, create) the Optuna study ``study_name`` in ``storage``.

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
        self.storage = open_storage(storage, create=create)
        if create:
            study = optuna.create_study(
                storage=self.storage, study_name=study_name, direction=direction, load_if_exists=True
            )
        else:
            try:
                study = optuna.load_study(storage=self.storage, study_name=study_name)
            except KeyError:
                raise StoreNotFoundError(
                    f"study {study_name!r} is not in the store {describe_storage(storage)}: it has not been run there "
                    "(ablate run FILE, with the same --storage)"
                ) from None
        self.study_id: int = study._study_id
        self._lock_depth = 0
        self._lock_mutex = threading.RLock()
        self._lock_release: Any = None
        self._node = _node_id()

    @classmethod
    def open(cls, study: Any, storage: str | None = None, *, runs: str | os.PathLike[str] | None = None,
             create: bool = True, **kwargs: Any) -> StudyStore:
        """The store of a loaded :class:`~ablate.study.Study` (see :func:`resolve_storage`)."""
        url = resolve_storage(storage, study.name, runs)
        direction = "maximize" if study.objective.mode == "max" else "minimize"
        return cls(url, study.name, direction=direction, create=create, **kwargs)

    @property
    def description(self) -> str:
        """The journal file's path or the redacted URL."""
        return describe_storage(self.url)

    # -- locking -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The store-wide lock (re-entrant in one process): held while enqueueing.

        A journal file: ``fcntl.flock`` of ``<journal>.prepare.lock``; PostgreSQL: a session-level
        advisory lock keyed by the study name.
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
                    release()

    def _acquire(self) -> Any:
        if not is_rdb_url(self.url):
            fh = open(str(self.url) + ".prepare.lock", "a+")  # noqa: SIM115
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)

            def release() -> None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()

            return release
        from sqlalchemy import text

        key = int.from_bytes(hashlib.sha256(f"ablate:{self.name}".encode()).digest()[:8], "big", signed=True)
        conn = self.storage.engine.connect()  # type: ignore[attr-defined]
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        conn.commit()

        def release_pg() -> None:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
            finally:
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
        the decisions of adaptive seeds (:mod:`ablate.planning`)."""
        return self.storage.get_study_system_attrs(self.study_id).get(_NOTE_ATTR + name)

    def set_note(self, name: str, value: Any) -> None:
        """Keep the JSON value ``value`` in the store under ``name`` (replacing any earlier one)."""
        self.storage.set_study_system_attr(self.study_id, _NOTE_ATTR + name, _jsonable(value))

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
            if "complete" in states:
                state = "done"
            elif "running" in states:
                state = "running"
            elif "waiting" in states or not attempts:
                state = "pending"
            else:
                state = "failed"
            out.append(TrialStatus(key=key, arm=arm, seed=int(seed), state=state, attempts=attempts))
        return out

    def counts(self, budget: str) -> dict[str, int]:
        """``{done, running, failed, pending}`` trial counts of ``budget``'s frozen design."""
        out = dict.fromkeys(("done", "running", "failed", "pending"), 0)
        for st in self.status(budget):
            out[st.state] += 1
        return out

    # -- enqueueing ----------------------------------------------------------------------------------

    def _enqueue(self, key: str, arm: str, seed: int, budget: str, levels: Mapping[str, str], retry: int) -> int:
        template = create_trial(
            state=TrialState.WAITING,
            user_attrs={"key": key, "arm": arm, "seed": int(seed), "budget": budget, "levels": dict(levels),
                        "retry": int(retry)},
        )
        return self.storage.create_new_trial(self.study_id, template_trial=template)

    def prepare(self, specs: Sequence[Any], budget: str, *, arm_overrides: Mapping[str, Mapping[str, Any]],
                extend: bool = False) -> PrepareResult:
        """Freeze or check the design, fail stale attempts, and enqueue every trial that needs to run.

        Args:
            specs: the study's TrialSpecs at ``budget`` (``study.expand(budget)``).
            arm_overrides: arm name -> merged overrides (for explaining design changes).
            extend: accept a design that adds trials to the frozen one (never one that removes or
                changes trials).

        Raises:
            DesignChangedError: the design differs from the frozen one (and ``extend`` does not apply);
                the message lists the differences and the ways out.
        """
        new = design_record(specs, arm_overrides)
        with self.lock():
            frozen = self.frozen_design(budget)
            created, extended = frozen is None, None
            if frozen is not None and frozen["hash"] != new["hash"]:
                diff = diff_designs(frozen, new)
                if not (extend and diff.additions_only):
                    raise DesignChangedError(self._explain_change(budget, diff, extend), diff)
                extended = diff
            if created or extended is not None:
                self.storage.set_study_system_attr(self.study_id, _DESIGN_ATTR + budget, new)
            stale = self.fail_stale(budget, retry=False)
            by_key: dict[str, set[str]] = {}
            for a in self.attempts(budget):
                by_key.setdefault(a.key, set()).add(a.state)
            complete = pending = enqueued = 0
            for s in specs:
                states = by_key.get(s.key, set())
                if "complete" in states:
                    complete += 1
                elif states & {"waiting", "running"}:
                    pending += 1
                else:
                    self._enqueue(s.key, s.arm, s.seed, budget, s.levels, retry=0)
                    enqueued += 1
        return PrepareResult(len(specs), complete, pending, enqueued, created, extended, stale)

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
        for a in self.attempts(budget, states=("waiting",)):
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
            if any(b.state == "complete" for b in others):  # defensive: never run a complete trial again
                self.fail(a, "skipped: another attempt of this trial is already complete")
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
        """Mark a running attempt complete with its objective ``value`` and a small ``result`` record.

        A missing or non-finite objective is stored as the worst value (-inf when maximizing, +inf
        when minimizing: Optuna needs a number) and as ``objective: null`` in the result.

        Returns:
            False when the attempt had already been failed as stale (its retry will run it again).
        """
        direction = self.storage.get_study_directions(self.study_id)[0]
        ok = value is not None and math.isfinite(value)
        stored = float(value) if ok else (-math.inf if direction == optuna.study.StudyDirection.MAXIMIZE else math.inf)
        try:
            self.storage.set_trial_system_attr(attempt.trial_id, _RESULT, {**_jsonable(dict(result)),
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
        """Why a running attempt is stale, or None if it looks alive."""
        if attempt.state != "running":
            return None
        claim = attempt.claim or {}
        if claim.get("node") == self._node and claim.get("pid") and not pid_alive(int(claim["pid"])):
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
        candidates = [(a, r) for a in self.attempts(budget, states=("running",))
                      if (r := self.stale_reason(a, now)) is not None]
        if not candidates:
            return []
        out = []
        with self.lock():
            for a, reason in candidates:
                current = self.attempt(a.trial_id)
                if current.state != "running" or self.stale_reason(current) is None:
                    continue
                if not self.fail(current, f"stale: {reason}"):
                    continue
                retried = False
                if retry and current.retry < self.max_retries:
                    others = [b for b in self.attempts(current.budget) if b.key == current.key]
                    if not any(b.state in ("waiting", "running", "complete") for b in others):
                        self._enqueue(current.key, current.arm, current.seed, current.budget, current.levels,
                                      retry=current.retry + 1)
                        retried = True
                out.append(StaleAttempt(self.attempt(current.trial_id), reason, retried))
        return out

    def has_work(self, budget: str) -> bool:
        """Whether any attempt of ``budget`` is waiting or running."""
        return bool(self.attempts(budget, states=("waiting", "running")))


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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{attempt.key}", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                if not self.store.heartbeat(self.attempt, self.step, self.steps):
                    self.lost = True
                    return
            except Exception:  # noqa: BLE001 - a storage hiccup must not kill the trial; try again later
                pass
            if self._stop.wait(self.store.heartbeat_interval):
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
