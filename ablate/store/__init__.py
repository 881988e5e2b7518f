"""The study store: which trials of a study exist, which ran, which run now, on Optuna storage.

One Optuna study per ablate study (same name). Every trial of the expanded design is an Optuna trial
that is *enqueued* (state WAITING) with its identity as user attributes (``key``, ``arm``, ``seed``,
``budget``, ``levels``, ``retry``), so that any Optuna tool (``optuna-dashboard``) shows it. A run of
a trial is an *attempt*: one Optuna trial. A trial that has to run again (it failed, or its worker
died) gets a new attempt; its key ties the attempts together.

Storage (``--storage`` or ``$ABLATE_STORAGE``):

- default: an Optuna journal file, ``runs/<study>/store.journal`` under the working directory
  (:data:`STORE_FILE`); any other file path works too. Processes on one machine (or on machines that
  share the folder) cooperate through it. Its writes are serialised by a file lock (:mod:`filelock`), which the
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
  one gets it. Enqueueing (:meth:`StudyStore.prepare`, stale retries) holds a store-wide lock (a
  file lock beside the journal file, a PostgreSQL advisory lock) so a key never has two pending
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

The package: :mod:`~ablate.store.storage` (where a store lives: URL checks, opening, locks),
:mod:`~ablate.store.design` (the frozen design and its differences), :mod:`~ablate.store.queue`
(:class:`StudyStore`: enqueue, claim, heartbeat, finish). This package and the per-arm tuner are the
only modules that import optuna.
"""

from __future__ import annotations

from ablate.store.design import DesignChangedError, DesignDiff, design_record, diff_designs
from ablate.store.queue import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_RETRIES,
    MAX_ERROR_CHARS,
    Attempt,
    Heartbeat,
    PrepareResult,
    StaleAttempt,
    StudyStore,
    TrialStatus,
    WorkerInfo,
    pid_alive,
    process_start,
)
from ablate.store.storage import (
    DEFAULT_STORE_WAIT,
    ENV_STORAGE,
    RetryingStorage,
    StoreError,
    StoreNotFoundError,
    TornJournalWarning,
    check_journal,
    check_storage,
    describe_storage,
    is_outage,
    is_rdb_url,
    open_storage,
    postgres_url_with_driver,
    redact,
    resolve_storage,
)

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_STORE_WAIT",
    "RetryingStorage",
    "is_outage",
    "ENV_STORAGE",
    "MAX_ERROR_CHARS",
    "Attempt",
    "DesignChangedError",
    "DesignDiff",
    "Heartbeat",
    "PrepareResult",
    "StaleAttempt",
    "StoreError",
    "StoreNotFoundError",
    "StudyStore",
    "TornJournalWarning",
    "TrialStatus",
    "WorkerInfo",
    "check_journal",
    "check_storage",
    "describe_storage",
    "design_record",
    "diff_designs",
    "is_rdb_url",
    "open_storage",
    "pid_alive",
    "process_start",
    "postgres_url_with_driver",
    "redact",
    "resolve_storage",
]
