"""The MLflow client and its retries: the link to a tracking server (an outage found once per process;
requests refused at once until a probe finds it back), the errors a tracking store raises, the server's
health check, and MLflow's own log kept to one line for a full disk."""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from ablate.disk import is_disk_full

if TYPE_CHECKING:
    pass


for _name in ("mlflow", "alembic", "alembic.runtime.migration"):
    logging.getLogger(_name).setLevel(logging.WARNING)

def _not_a_full_disk(record: logging.LogRecord) -> bool:
    """A logging filter: drop MLflow's traceback of a database write that found its disk full. The
    exception it logs is raised on to ablate, which says it in one line naming the disk
    (:func:`ablate.disk.disk_full_error`); the record would put 40 lines of SQL before that line."""
    exc = record.exc_info[1] if record.exc_info else None
    return not is_disk_full(exc)

logging.getLogger("mlflow.store.db.utils").addFilter(_not_a_full_disk)

def health_error(uri: str, timeout: float) -> str | None:
    """Ask an ``http(s)://`` tracking server's ``/health`` once, with ``timeout`` and no retries: why it
    does not answer, or None when it answers (any HTTP reply counts: a proxy, or an older server without
    ``/health``; MLflow's client takes it from there) or the store is local."""
    if not uri.startswith(("http://", "https://")):
        return None
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))

def check_tracking_server(uri: str, timeout: float = 10.0) -> None:
    """For an ``http(s)://`` tracking URI: whether the server answers its ``/health`` check, asked
    once with ``timeout`` (MLflow's own client would retry for minutes before it says anything).

    Raises:
        OutageError: it does not answer; the message names the server and the fix.
    """
    why = health_error(uri, timeout)
    if why is not None:
        from ablate.errors import OutageError

        raise OutageError(f"the MLflow tracking server {uri} does not answer ({why}); start it (mlflow server ...) "
                          "or pass another --tracking-uri; nothing was run")

#: Errors that mean the tracking store did not take a request (a server down or restarting, a
#: network error after MLflow's own retries, a locked SQLite file): the data is kept and sent later.
#: ``requests``' errors are ``OSError``\ s.
TRACKING_ERRORS: tuple[type[BaseException], ...] = (MlflowException, OSError)

#: Seconds between two tries to send a trial's metrics while the tracking server does not answer.
RETRY_SECONDS = 60.0

_NETWORK_CAUSE = re.compile(r"\[Errno -?\d+\][^\"')(]*|Read timed out|Connection aborted|Max retries exceeded|Remote end closed[^\"')]*")

def first_line(exc: BaseException) -> str:
    """What went wrong, in one short line: the network cause of a failed MLflow request (``[Errno
    111] Connection refused``, ``Read timed out``), else ``Type: the message's first line``."""
    text = str(exc).strip()
    cause = _NETWORK_CAUSE.search(text)
    if cause is not None:
        return cause.group(0).strip().rstrip(".:,")
    lines = text.splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]

#: How ablate asks MLflow's HTTP client to retry, unless the environment says otherwise: once, at once
#: (MLflow's own defaults, 7 retries with backoff and a 120 s timeout, spend ~4 minutes on a server
#: that is down, and ablate paid them once per trial). Nothing is lost by giving up early: what the server does not take waits in the
#: trial's logger or the outbox, and the link (:class:`Link`) tells when the server answers again.
HTTP_REQUEST_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}

#: Seconds between two probes of a tracking server that stopped answering.
PROBE_SECONDS = 5.0

class TrackingOffline(ConnectionError):
    """A request not even tried: this process's link to the tracking server is down (:class:`Link`).
    An ``OSError``, so every place that keeps data through an outage (:data:`TRACKING_ERRORS`) keeps it."""

def is_unreachable(exc: BaseException) -> bool:
    """Whether a failed tracking request says the server cannot be reached (a network error after the
    client's retries), rather than that the request was refused (an unknown run, a bad value)."""
    if is_disk_full(exc):
        return False
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, MlflowException) and "failed with exception" in str(exc)

class Link:
    """Whether this process reaches an ``http(s)://`` tracking server, as it last found out.

    **An outage is detected once, not per request.** The first request that fails for want of the
    server (:func:`is_unreachable`, after the client's short retries: :data:`HTTP_REQUEST_DEFAULTS`)
    takes the link down; from then on a request through :class:`LinkedClient` raises
    :class:`TrackingOffline` at once, without touching the network, so trials log to their buffers and
    finish into the outbox without waiting. A background thread asks the server's ``/health`` every
    ``probe_seconds`` (one request, 5 s timeout, no retries) and brings the link up when it answers.
    A local store (SQLite, a folder) has no link to lose: its link never goes down.
    """

    def __init__(self, uri: str, probe_seconds: float = PROBE_SECONDS) -> None:
        self.uri = uri
        self.probe_seconds = probe_seconds
        self.why: str | None = None  # None: up
        self.downs = 0  # times the link went down (for tests and the progress display)
        self._ups = 0  # times a health check found the server answering
        self._remote = uri.startswith(("http://", "https://"))
        self._mutex = threading.Lock()
        self._prober: threading.Thread | None = None

    @property
    def up(self) -> bool:
        return self.why is None

    def check(self) -> None:
        """Raise :class:`TrackingOffline` when the link is down."""
        why = self.why
        if why is not None:
            raise TrackingOffline(f"MLflow {self.uri} did not answer ({why}); not asked again until it does")

    def down(self, why: str, ups: int | None = None) -> None:
        """Take the link down (a request found the server unreachable) and start probing it; with ``ups``
        (:attr:`_ups` when the failed question was asked), not when the server was found answering since."""
        if not self._remote:
            return
        with self._mutex:
            if self.why is not None or ups is not None and ups != self._ups:
                return
            self.why = why
            self.downs += 1
            if self._prober is None or not self._prober.is_alive():
                self._prober = threading.Thread(target=self._probe_until_up, name="mlflow-probe", daemon=True)
                self._prober.start()

    def answers(self, timeout: float = 5.0) -> bool:
        """Ask the server's ``/health`` once; bring the link up when it answers. True for a local store.
        A question that failed while another (the prober's, the end of a run's) found the server back
        does not take the link down again."""
        ups = self._ups
        why = health_error(self.uri, timeout)
        if why is not None:
            self.down(why, ups)
            return False
        with self._mutex:
            self.why = None
            self._ups += 1
        return True

    def _probe_until_up(self) -> None:
        while self.why is not None:
            time.sleep(self.probe_seconds)
            if self.answers():
                return

_LINKS: dict[str, Link] = {}

_LINKS_MUTEX = threading.Lock()

def link_for(uri: str) -> Link:
    """This process's :class:`Link` to the tracking store ``uri`` (one per URI, shared by its Trackers)."""
    with _LINKS_MUTEX:
        if uri not in _LINKS:
            _LINKS[uri] = Link(uri)
        return _LINKS[uri]

class LinkedClient:
    """An ``MlflowClient`` whose requests go through a :class:`Link`: refused at once while the link is
    down, and taking it down when one finds the server unreachable. Everything else is the client's."""

    def __init__(self, client: MlflowClient, link: Link) -> None:
        self._client = client
        self.link = link

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.link.check()
            try:
                return attr(*args, **kwargs)
            except TRACKING_ERRORS as exc:
                if is_unreachable(exc):
                    self.link.down(first_line(exc))
                raise

        return call
