"""Where a study store lives: a journal file or a PostgreSQL database, checked, described and opened.

- a journal file path (the default, ``runs/<study>/store.journal``, :func:`ablate.paths.store_file`):
  processes on one machine (or sharing the folder) cooperate through it; its writes are serialised
  by a file lock (:mod:`filelock`, an OS lock the kernel releases when its holder dies, so a killed
  worker never leaves the file locked);
- ``postgresql://user:password@host:port/database``: Optuna's RDB storage, for workers on many machines.

SQLite URLs are refused: SQLite cannot claim a trial atomically across processes.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from ablate.disk import disk_full_error, is_disk_full
from ablate.errors import AblateError, OutageError
from ablate.paths import STORE_FILE, store_file

try:  # the lock interface of JournalFileBackend (not exported, stable since optuna 4.0)
    from optuna.storages.journal._file import BaseJournalFileLock
except ImportError:  # pragma: no cover - a future optuna that moved it: fall back to its default lock
    BaseJournalFileLock = None  # type: ignore[assignment,misc]

#: Environment variable read when ``--storage`` is not given.
ENV_STORAGE = "ABLATE_STORAGE"
#: Seconds a study store that does not answer (a PostgreSQL restart, a journal I/O error) is waited
#: for before a worker gives up (``--store-wait``).
DEFAULT_STORE_WAIT = 300.0


class StoreError(AblateError):
    """The store cannot be opened or used as asked (bad URL, missing driver, unknown study)."""


class StoreNotFoundError(StoreError):
    """The store (or the study in it) does not exist: the study has not been run there."""


def resolve_storage(storage: str | None, study_name: str, runs: str | os.PathLike[str] | None = None) -> str:
    """The storage to use: ``storage``, else ``$ABLATE_STORAGE``, else the default journal file.

    Returns:
        A PostgreSQL URL or the path of a journal file (``runs/<study>/store.journal`` by default).

    Raises:
        StoreError: an unsupported URL (SQLite, another scheme), naming the fix.
    """
    value = storage or os.environ.get(ENV_STORAGE) or str(store_file(study_name, runs))
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


class _JournalLock(BaseJournalFileLock or object):  # type: ignore[misc]
    """The journal file's write lock: a :class:`filelock.FileLock` on ``<journal>.lock``.

    Optuna's own file locks are files that a killed process leaves behind (others wait out a grace
    period); an OS file lock is released by the kernel when its process dies.
    """

    def __init__(self, path: str) -> None:
        self._lock = FileLock(path)

    def acquire(self) -> bool:
        self._lock.acquire()
        return True

    def release(self) -> None:
        self._lock.release()


class _WholeRecordBackend(JournalFileBackend):
    """Optuna's journal file whose appends are whole or absent: a write that fails part way (a full
    disk) is cut back to where it began, under the journal's lock, before the error goes on; so no
    record is ever left half-written for the next writer to append after."""

    def __init__(self, path: str, lock: Any) -> None:
        super().__init__(path, lock_obj=lock)
        self._whole_path = path
        self._whole_lock = lock

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        self._whole_lock.acquire()
        try:
            fd = os.open(self._whole_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                start = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError as exc:
                    os.ftruncate(fd, start)  # freeing space never needs space
                    if exc.filename is None:  # os.write names no file: a full disk is then said as the
                        exc.filename = self._whole_path  # journal's, wherever the append was made from
                    raise
            finally:
                os.close(fd)
        finally:
            self._whole_lock.release()


class TornJournalWarning(RuntimeWarning):
    """The journal's last record was cut short (a writer died mid-write); it was removed and kept aside."""


def check_journal(path: Path, *, heal: bool = True) -> None:
    """Check a journal file before Optuna reads it; call it holding the journal's write lock (``heal``).

    Every record is one line of JSON. A last record without its newline was cut short by a writer
    that died (or a full disk): it never took effect, so it is moved to ``<journal>.torn`` and cut
    off, with a :class:`TornJournalWarning` (appending after it would damage the next record too).
    Without ``heal`` (a reader that writes nothing: ``ablate status``) it is left in place, as Optuna's
    reader skips a last line without its newline. Any other unreadable line is damage that cannot be
    repaired safely.

    Raises:
        StoreError: a line that is not JSON (other than a torn last one), naming the file, the line
            and the fix.
    """
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1  # where the last complete record ends (0: none is complete)
    body, tail = data[: max(cut - 1, 0)], data[cut:]
    if tail and heal:
        import warnings

        with open(path, "r+b") as fh:  # cut first: healing must work on a full disk
            fh.truncate(len(data) - len(tail))
        aside = path.with_name(path.name + ".torn")
        try:
            aside.write_bytes(tail)
            kept = f"was moved to {aside}"
        except OSError as exc:
            kept = f"was removed (it could not be kept in {aside}: {exc.strerror or exc})"
        warnings.warn(f"{path}: its last record was cut short ({len(tail)} bytes, a writer that died?); it never "
                      f"took effect and {kept}", TornJournalWarning, stacklevel=3)
    for number, line in enumerate(body.split(b"\n") if body else [], start=1):
        try:
            json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise StoreError(f"{path}: line {number} of the study store is damaged (not a JSON record); restore the "
                             "file from a backup, or move it away to start a new store (the results in MLflow stay; "
                             "trials not in the new store run again)") from None


def open_storage(storage: str, *, create: bool = True, read_only: bool = False) -> BaseStorage:
    """The Optuna storage of ``storage`` (a journal file path or a PostgreSQL URL).

    Args:
        create: create the journal file (and its folder) if missing; when False a missing file
            raises :class:`StoreError`.
        read_only: the caller only reads (``ablate status``): a journal is neither locked (no lock file is
            made, so a read-only folder can be read) nor healed (a torn last record is left, and skipped).
    """
    check_storage(storage)
    if not is_rdb_url(storage):
        path = Path(storage)
        if not path.exists():
            if not create:
                raise StoreNotFoundError(f"no study store at {path}: the study has not been run here (ablate run FILE)")
            path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and read_only:
            check_journal(path, heal=False)
        elif path.exists():
            with FileLock(str(path) + ".lock"):  # the journal's write lock: no writer is mid-record now
                check_journal(path)
        if BaseJournalFileLock is None:  # pragma: no cover - see the import above
            return JournalStorage(JournalFileBackend(str(path)))
        return JournalStorage(_WholeRecordBackend(str(path), _JournalLock(str(path) + ".lock")))
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


# OS errors of a journal file that waiting cannot cure (the rest, e.g. a network filesystem's hiccup,
# are waited out like a database restart; a full disk is neither: RetryingStorage stops at once).
_PERMANENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EROFS}


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception in its chain of causes) says the store is unreachable for now
    (a database connection refused or dropped, a journal I/O error) rather than that the request is
    wrong. Optuna wraps database errors in ``StorageInternalError``; the chain holds the driver's."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = type(exc)
        names = {c.__name__ for c in kind.__mro__}
        if {"OperationalError", "InterfaceError", "DisconnectionError"} & names and kind.__module__.split(".")[0] in (
                "sqlalchemy", "psycopg", "psycopg2"):
            return True
        if isinstance(exc, OSError) and exc.errno not in _PERMANENT_ERRNOS and not isinstance(exc, FileNotFoundError):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


class RetryingStorage:
    """An Optuna storage whose calls wait out outages: a call that fails with :func:`is_outage` is
    tried again with exponential backoff (0.5 s doubling to 10 s) for up to ``wait`` seconds, then
    raises :class:`~ablate.errors.OutageError` naming the store and the driver's error. Other errors
    (a finished trial updated, a bad request) pass through at once. One line on stderr says when an
    outage starts and when the store answers again.

    Retrying is safe for ablate's use: every write is either idempotent (attributes, heartbeats) or
    a state change Optuna checks against the stored state (a claim made twice is refused once).
    """

    def __init__(self, storage: BaseStorage, description: str, wait: float = DEFAULT_STORE_WAIT) -> None:
        self._storage = storage
        self._description = description
        self._folder = None if is_rdb_url(description) else str(Path(description).parent)
        self.wait = float(wait)
        self._down = False  # an outage was announced and has not ended (shared by the worker's threads)
        self._mutex = threading.Lock()

    def _announce(self, down: bool, why: str = "") -> None:
        with self._mutex:
            if down == self._down:
                return
            self._down = down
        if down:
            print(f"ablate: the study store {self._description} does not answer ({why}); waiting up to "
                  f"{self.wait:g} s for it", file=sys.stderr, flush=True)
        else:
            print(f"ablate: the study store {self._description} answers again", file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._storage, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(attr, *args, **kwargs)

        return call

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, retried through an outage of at most :attr:`wait` seconds."""
        deadline: float | None = None
        delay = 0.5
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if is_disk_full(exc):  # not an outage: waiting does not free space
                    raise disk_full_error(exc, self._folder) from None
                if not is_outage(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.wait
                    self._announce(True, _root_message(exc))
                if now >= deadline:
                    raise OutageError(
                        f"the study store {self._description} did not answer for {self.wait:g} s "
                        f"({_root_message(exc)}); once it is back, run the study again: trials left running are "
                        "retried from their checkpoints (--store-wait sets how long workers wait)"
                    ) from None
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 10.0)
                continue
            if deadline is not None:
                self._announce(False)
            return result


def _root_message(exc: BaseException) -> str:
    """The first line of the innermost cause of ``exc`` that says something (what the database driver
    said; SQLAlchemy chains an empty pool error behind it)."""
    seen: set[int] = set()
    found = ""
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        lines = [ln.strip() for ln in str(exc).splitlines() if any(ch.isalnum() for ch in ln)]
        if lines:
            found = lines[0]
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return found or type(exc).__name__


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


__all__ = [
    "DEFAULT_STORE_WAIT",
    "RetryingStorage",
    "is_outage",
    "ENV_STORAGE",
    "StoreError",
    "StoreNotFoundError",
    "TornJournalWarning",
    "check_journal",
    "check_storage",
    "describe_storage",
    "is_rdb_url",
    "open_storage",
    "postgres_url_with_driver",
    "redact",
    "resolve_storage",
]
