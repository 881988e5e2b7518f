"""MLflow tracking of studies: one experiment per study, one parent run per study and budget, one
child run per trial, metrics logged in batches, artifacts a report can read in one go.

This is the only module that imports mlflow. Layout in MLflow::

    experiment <study name>                       tags: ablate.study, mlflow.experimentKind=
                                                    custom_model_development (a model-training
                                                    experiment, see EXPERIMENT_KIND_TAG)
      run "<study> (<budget>)"                      the parent: one per study and budget, found
                                                    again by its tags on every run of the study
        tags    ablate.role=study, ablate.study, ablate.budget, ablate.storage, git commit, versions,
                ablate.command (the command line of the last `ablate run` of the study)
        params  design, budget, seeds, arms, trials, objective.*
        files   study.yaml (the study file), design.json (arms, levels, trial keys)
        run "<arm> seed=<s>"                        a child (tag mlflow.parentRunId): one per trial,
                                                    reused when the trial is retried or resumed
          tags    ablate.role=trial, ablate.trial_key, ablate.arm, ablate.seed, ablate.budget,
                  ablate.study, ablate.worker, ablate.objective, ablate.error (failed), git commit,
                  versions (ablate, torch, transformers, python)
          params  the flattened resolved TrialConfig (``loss.clip_high`` ...) and ``level.<factor>``
          metrics every metric the trainer logs (docs/metrics.md), by step
          files   config.yaml, history.csv (every logged step x metric: one file, so that reports
                  need not fetch metric by metric), eval_problems.csv (every evaluation x eval
                  problem, see below), samples.json (sample completions with their per-component
                  rewards), result.json (final metrics, objective, warm start), and
                  errors/attempt-<n>.txt: the error of each failed attempt (n = 1, 2, ...), kept
                  when a retry succeeds, so the run's status (and the ablate.error tag, which a
                  retry removes) says how the trial ended and errors/ how its attempts failed

``eval_problems.csv`` holds one row per evaluation of the trial x eval problem, with the columns
:data:`EVAL_PROBLEM_COLUMNS`: ``step`` (the RL step evaluated after; 0 = the start policy),
``problem`` (the problem's index in the trial's eval problems, ``task.sample("eval", eval.n_problems,
seed=task.data_seed)``: fixed by the task, its difficulty and options and ``task.data_seed``, never by
the trial seed, so index i is the same problem in every seed, and in every arm that leaves those task
settings alone; a smaller ``eval.n_problems`` evaluates a prefix), ``correct`` (final answer right,
0/1), ``step_accuracy`` (correct steps over the reference's steps), ``format_ok`` (0/1), ``length``
(generated tokens, EOS included), ``truncated`` (no EOS within rollout.max_new_tokens, 0/1) and
``partial`` (partial credit). Greedy decoding; the means over problems of one step are that step's ``eval/*`` metrics.
Trials logged before this file existed have none (:mod:`ablate.results` then gives no rows for them).

The tracking URI is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in
the working directory (MLflow's own default); ``mlflow ui`` (or ``mlflow ui --backend-store-uri
sqlite:///mlflow.db``) shows it all. An ``http://`` URI logs to an ``mlflow server``. A SQLite store is
opened under a lock file beside it (``mlflow.db.lock``): MLflow creates a new store's schema when it opens
it, and two processes doing that at once would race.

Metrics are buffered by :class:`TrialLogger` and sent with ``MlflowClient.log_batch`` every
``flush_every`` steps and at the end, never one request per metric. MLflow metric names allow only
letters, digits and ``_ - . / : space``; other characters are replaced (``eval/pass@8`` is logged as
``eval/pass_at_8``, see :func:`metric_name`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import logging
import math
import os
import platform
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunStatus, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from ablate.disk import disk_full_error, is_disk_full, local_tracking_folder
from ablate.errors import AblateError
from ablate.machine import cpu_name
from ablate.metrics import EVAL_PROBLEM_GLOSSARY

if TYPE_CHECKING:
    from ablate.study import Study

#: MLflow's default when nothing else is given: a SQLite file in the working directory.
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"

TAG_ROLE = "ablate.role"
TAG_STUDY = "ablate.study"
TAG_BUDGET = "ablate.budget"
TAG_KEY = "ablate.trial_key"
TAG_ARM = "ablate.arm"
TAG_SEED = "ablate.seed"
TAG_WORKER = "ablate.worker"
TAG_ERROR = "ablate.error"
TAG_OBJECTIVE = "ablate.objective"
#: A finished trial's content fingerprint (:func:`ablate.metrics.content_fingerprint`): the same value
#: for two trials that computed the same thing, whatever their keys (reports/SHARED.md lists them).
TAG_FINGERPRINT = "ablate.fingerprint"
TAG_LOGGED_STEP = "ablate.logged_step"
TAG_STORAGE = "ablate.storage"
TAG_COMMAND = "ablate.command"
#: Experiment tags: the fingerprint and file of the study the experiment belongs to (see Tracker.bind).
TAG_FINGERPRINT = "ablate.fingerprint"
TAG_STUDY_FILE = "ablate.study_file"
LEVEL_PARAM_PREFIX = "level."
#: MLflow 3's experiment-kind tag and its value for a model-training experiment (shown as "Machine
#: learning" in the UI, as opposed to ``genai_development``). mlflow has no Python constant for either:
#: they are the UI's ``EXPERIMENT_KIND_TAG_KEY`` and ``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT`` (the
#: server's JS bundle, mlflow/server/js/build), which the UI itself writes with ``setExperimentTag``.
#: Every study experiment carries it; a kind someone set already is never overwritten.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND_MODEL_TRAINING = "custom_model_development"
#: The query that opens an experiment's MLflow UI page on its runs table (see :func:`experiment_url`).
RUNS_VIEW_QUERY = "workflowType=machine_learning"
#: The artifact folder of a trial run's failed attempts: ``errors/attempt-<n>.txt``.
ERRORS_DIR = "errors"

#: Limits of MLflow's API (from mlflow.utils.validation when it has them).
try:
    from mlflow.utils import validation as _validation

    MAX_PARAM_VALUE = int(getattr(_validation, "MAX_PARAM_VAL_LENGTH", 500))
    MAX_TAG_VALUE = int(getattr(_validation, "MAX_TAG_VAL_LENGTH", 5000))
    MAX_METRICS_PER_BATCH = int(getattr(_validation, "MAX_METRICS_PER_BATCH", 1000))
    MAX_PARAMS_TAGS_PER_BATCH = int(getattr(_validation, "MAX_PARAMS_TAGS_PER_BATCH", 100))
except ImportError:  # pragma: no cover
    MAX_PARAM_VALUE, MAX_TAG_VALUE, MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH = 500, 5000, 1000, 100

TRUNCATED = "...[truncated]"

for _name in ("mlflow", "alembic", "alembic.runtime.migration"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def _not_a_full_disk(record: logging.LogRecord) -> bool:
    """A logging filter: drop MLflow's traceback of a database write that found its disk full. The
    exception it logs is raised on to ablate, which says it in one line naming the disk
    (:func:`ablate.disk.disk_full_error`); the record would put 40 lines of SQL before that line."""
    exc = record.exc_info[1] if record.exc_info else None
    return not is_disk_full(exc)


logging.getLogger("mlflow.store.db.utils").addFilter(_not_a_full_disk)


class TrackingError(AblateError):
    """The MLflow tracking store cannot be used as asked."""


# ------------------------------------------------------------------------------------ pure helpers


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else :data:`DEFAULT_TRACKING_URI`; a relative SQLite path
    is made absolute (so that every worker process and the printed location agree)."""
    uri = uri or os.environ.get(ENV_TRACKING_URI) or DEFAULT_TRACKING_URI
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def missing_local_store(uri: str) -> str | None:
    """Where a local tracking store (a SQLite file or a folder) should be, when it does not exist; None
    when it exists or the store is a server. Readers check it first: MLflow creates a store it opens."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
    elif uri.startswith("file:") or "://" not in uri:
        path = Path(uri[len("file://"):] if uri.startswith("file://") else uri.removeprefix("file:"))
    else:
        return None
    return None if path.exists() else str(path)


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


def tracking_location(uri: str, experiment_id: str | None = None) -> str:
    """Where the results are, for people: the SQLite file, or the URI, with how to browse it; with the
    study's ``experiment_id``, the UI page that opens on its runs table (:func:`experiment_url`)."""
    if uri.startswith("sqlite:///"):
        then = f", then open {experiment_url('http://127.0.0.1:5000', experiment_id)}" if experiment_id else ""
        return f"{uri} (browse: mlflow ui --backend-store-uri {uri}{then})"
    if uri.startswith(("http://", "https://")):
        return f"{uri} (the MLflow server's UI" + (f": {experiment_url(uri, experiment_id)})" if experiment_id else ")")
    return uri


def experiment_url(ui_url: str, experiment_id: str) -> str:
    """The MLflow UI page of experiment ``experiment_id`` that opens on its runs table (the study's parent
    runs, their trials nested under them), for a UI served at ``ui_url`` (``mlflow ui``'s
    ``http://127.0.0.1:5000``, or the ``mlflow server`` of an ``http://`` tracking URI).

    The query (:data:`RUNS_VIEW_QUERY`) is needed: MLflow 3's UI (3.17 at least) chooses an experiment's
    landing page from its "GenAI / Model training" switch, which starts at GenAI (the traces overview)
    and which it remembers per browser, not from the experiment's kind tag; the query sets the switch.
    """
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}?{RUNS_VIEW_QUERY}"


def metric_name(name: str) -> str:
    """``name`` as a valid MLflow metric name: ``@`` becomes ``_at_`` and any other character outside
    letters, digits and ``_ - . / : space`` becomes ``_`` (``eval/pass@8`` -> ``eval/pass_at_8``)."""
    return re.sub(r"[^/\w.\- :]", "_", name.replace("@", "_at_"))


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in :data:`TRUNCATED` when cut."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def param_value(value: Any) -> str:
    """A config value as an MLflow param: strings as they are, everything else as JSON
    (``true``, ``null``, ``0.0001``, ``["final_answer"]``), cut to MLflow's length limit."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return truncate(text, MAX_PARAM_VALUE)


def trial_params(flat_config: Mapping[str, Any], levels: Mapping[str, str]) -> dict[str, str]:
    """The params of a trial's run: the flattened resolved config and ``level.<factor>`` -> level."""
    out = {k: param_value(v) for k, v in flat_config.items()}
    out.update({LEVEL_PARAM_PREFIX + f: truncate(str(lv), MAX_PARAM_VALUE) for f, lv in levels.items()})
    return out


def history_csv(history: Sequence[tuple[int, Mapping[str, float]]]) -> str:
    """A metric history as CSV: a ``step`` column then one column per metric (MLflow names, sorted);
    one row per logged step; an empty cell where a step did not log that metric, ``nan`` for NaN."""
    names = sorted({metric_name(k) for _, m in history for k in m})
    lines = [",".join(["step", *names])]
    for step, metrics in history:
        row = {metric_name(k): v for k, v in metrics.items()}
        cells = [str(int(step))]
        for n in names:
            v = row.get(n)
            cells.append("" if v is None else ("nan" if math.isnan(float(v)) else repr(float(v))))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


#: The columns of a trial's ``eval_problems.csv`` artifact, in order (see the module docstring; their
#: glossary is :data:`ablate.metrics.EVAL_PROBLEM_GLOSSARY`).
EVAL_PROBLEM_COLUMNS: tuple[str, ...] = tuple(EVAL_PROBLEM_GLOSSARY)
#: The artifact's file name.
EVAL_PROBLEMS_FILE = "eval_problems.csv"


def eval_problems_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per-problem evaluation rows (``TrialResult.eval_problems``) as CSV with the columns
    :data:`EVAL_PROBLEM_COLUMNS`: integers for ``step, problem, length`` and the 0/1 flags, floats in
    their shortest round-trip form, ``nan`` for NaN, an empty cell for a value a row lacks."""
    ints = {"step", "problem", "correct", "format_ok", "length", "truncated"}
    lines = [",".join(EVAL_PROBLEM_COLUMNS)]
    for row in rows:
        cells = []
        for c in EVAL_PROBLEM_COLUMNS:
            v = row.get(c)
            if v is None:
                cells.append("")
            elif c in ints:
                cells.append(str(int(v)))
            else:
                cells.append("nan" if math.isnan(float(v)) else repr(float(v)))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """Tags describing the code that runs: git commit (if ablate runs from a git checkout) and the
    versions of ablate, torch, transformers, optuna, mlflow and Python."""
    tags: dict[str, str] = {}
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10)
        if commit.returncode == 0 and commit.stdout.strip():
            tags[MLFLOW_GIT_COMMIT] = commit.stdout.strip()
            tags["ablate.git_commit"] = commit.stdout.strip()
            # what ablate itself writes (reports/) is output, not a change of the code that runs
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                    ".", ":(exclude)reports"], capture_output=True, text=True, timeout=10)
            tags["ablate.git_dirty"] = "true" if dirty.stdout.strip() else "false"
    except (OSError, subprocess.SubprocessError):
        pass
    for package in ("ablate", "torch", "transformers", "optuna", "mlflow"):
        try:
            tags[f"ablate.version.{package}"] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            if package == "ablate":
                from ablate import __version__

                tags["ablate.version.ablate"] = __version__
    tags["ablate.version.python"] = platform.python_version()
    tags.update(machine_tags())
    return tags


def machine_tags() -> dict[str, str]:
    """The processor a trial ran on: ``ablate.machine.cpu`` (its model name) and
    ``ablate.machine.cpu_capability`` (the vector instruction set torch's CPU kernels use). Float rounding,
    and so an RL trajectory, can differ between processor models: the same trial key gave other results
    on an Intel Xeon and an AMD EPYC, both AVX512 (README, behaviour_logp)."""
    tags = {"ablate.machine.cpu": cpu_name()}
    try:
        import torch

        tags["ablate.machine.cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError):
        pass
    return tags


def gpu_tags(device: str | None) -> dict[str, str]:
    """``ablate.machine.gpu``, the name of the CUDA device a trial on ``device`` (a configuration's device:
    auto, cuda, cuda:N, cpu) computes on; ``{}`` for a trial on the CPU, or where the device cannot be
    resolved (the trial then fails with its own message)."""
    if not device or device == "cpu" or device.startswith("mps"):
        return {}
    try:
        import torch

        from ablate.config.device import resolve_device

        resolved = resolve_device(device)
        if resolved.type != "cuda":
            return {}
        return {"ablate.machine.gpu": torch.cuda.get_device_name(resolved)}
    except Exception:  # noqa: BLE001 - a tag, never a reason for a trial to fail
        return {}


# -------------------------------------------------------------------------------------- the logger


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

    def down(self, why: str) -> None:
        """Take the link down (a request found the server unreachable) and start probing it."""
        if not self._remote:
            return
        with self._mutex:
            if self.why is not None:
                return
            self.why = why
            self.downs += 1
            if self._prober is None or not self._prober.is_alive():
                self._prober = threading.Thread(target=self._probe_until_up, name="mlflow-probe", daemon=True)
                self._prober.start()

    def answers(self, timeout: float = 5.0) -> bool:
        """Ask the server's ``/health`` once; bring the link up when it answers. True for a local store."""
        why = health_error(self.uri, timeout)
        if why is not None:
            if self.why is None:
                self.down(why)
            return False
        with self._mutex:
            self.why = None
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


class TrialLogger:
    """The trainer's ``log(metrics, step)``: buffers metrics and sends them with ``log_batch``.

    A flush happens every ``flush_every`` logged steps, after ``flush_seconds`` without one, and on
    :meth:`close`. Each request also sets the run's tag ``ablate.logged_step`` to the last step whose
    metrics are all sent (in the same request), so that a resumed trial skips the steps already
    logged (``skip_through``) and no step is logged twice. With ``hold_logged_step`` (a trial that
    resumes from a checkpoint: the steps before it come only with :meth:`backfill`) the tag is set
    only by :meth:`close`, so that it never claims steps that were not sent.

    **Outages never stop training.** A request the tracking store does not take
    (:data:`TRACKING_ERRORS`) leaves the metrics in the buffer, with their first timestamps (MLflow
    stores a metric row sent twice once), and they are tried again ``retry_seconds`` later and on
    :meth:`close`; :attr:`unsent` says why the last try failed. A logger without a run
    (:meth:`offline`: the run could not even be created) only buffers. ``fence`` (called before each
    request) returning False stops all sending for good: the attempt was taken over by another worker,
    whose metrics must not be mixed with these.

    Attributes:
        requests: ``log_batch`` requests sent so far.
        last_step: the last step given (logged or skipped).
        unsent: None when everything given so far reached the store; else why it did not.
    """

    #: Seconds without a flush after which the next logged step flushes.
    flush_seconds: float = 30.0
    #: Seconds before metrics a request could not send are tried again.
    retry_seconds: float = RETRY_SECONDS

    def __init__(self, client: MlflowClient | None, run_id: str | None, *, skip_through: int = -1,
                 flush_every: int = 10, hold_logged_step: bool = False, fence: Callable[[], bool] | None = None,
                 folder: str | None = None) -> None:
        self.client = client
        self.hold_logged_step = hold_logged_step
        self.run_id = run_id
        self.skip_through = skip_through
        self.flush_every = max(1, int(flush_every))
        self.fence = fence
        self.folder = folder  # where a local tracking store keeps its files (named when its disk is full)
        self.requests = 0
        self.last_step: int | None = None
        self.unsent: str | None = None
        self.fenced = False
        self._buffer: list[Metric] = []
        self._buffered_steps = 0
        self._buffered_through: int | None = None
        self._seen: set[int] = set()
        self._last_flush = time.monotonic()
        self._retry_at = 0.0

    @classmethod
    def offline(cls, why: str, **kwargs: Any) -> TrialLogger:
        """A logger for a trial whose run could not be created: it buffers and never sends."""
        logger = cls(None, None, **kwargs)
        logger.unsent = why
        return logger

    def __call__(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer ``metrics`` at ``step`` (skipped when ``step <= skip_through``); flush when due."""
        self.last_step = step
        if step <= self.skip_through or step in self._seen:
            return
        self._seen.add(step)
        ts = int(time.time() * 1000)
        self._buffer.extend(Metric(metric_name(k), float(v), ts, int(step)) for k, v in metrics.items())
        self._buffered_steps += 1
        self._buffered_through = max(step, self._buffered_through if self._buffered_through is not None else step)
        due = self._buffered_steps >= self.flush_every or time.monotonic() - self._last_flush >= self.flush_seconds
        if due and time.monotonic() >= self._retry_at:
            self.flush()

    def backfill(self, history: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Buffer the steps of a full history that neither this logger nor the run saw: a trial resumed
        from a checkpoint logs only the steps after it, and the steps before it that its killed
        attempt had buffered but not sent would otherwise be missing."""
        for step, metrics in history:
            self(metrics, int(step))

    def _sendable(self) -> bool:
        if self.fenced or (self.fence is not None and not self.fence()):
            self.fenced, self._buffer = True, []
            return False
        return self.client is not None and self.run_id is not None

    def flush(self) -> bool:
        """Send every buffered metric (in requests of at most MLflow's batch size, in step order).

        Returns:
            True when the buffer is empty afterwards; False when the store did not take a request
            (the rest stays buffered, :attr:`unsent` says why) or there is no run to send to.
        """
        if not self._buffer:
            return True
        if not self._sendable():
            return self.fenced
        self._buffer.sort(key=lambda m: m.step)  # stable: a step's metrics stay together and in order
        chunk = MAX_METRICS_PER_BATCH - 1  # one entity of each request is the logged_step tag
        while self._buffer:
            part, rest = self._buffer[:chunk], self._buffer[chunk:]
            through = self._buffered_through if not rest else _last_whole_step(part, rest[0].step)
            tags = [] if self.hold_logged_step or through is None else [RunTag(TAG_LOGGED_STEP, str(through))]
            try:
                self.client.log_batch(self.run_id, metrics=part, tags=tags)  # type: ignore[union-attr]
            except TRACKING_ERRORS as exc:
                if is_disk_full(exc):  # not an outage: the store's disk is full, and waiting frees nothing
                    raise disk_full_error(exc, self.folder) from None
                self.unsent = first_line(exc)
                self._retry_at = time.monotonic() + self.retry_seconds
                return False
            self._buffer = rest
            self.requests += 1
        self.unsent = None
        self._buffered_steps = 0
        self._last_flush = time.monotonic()
        return True

    def close(self) -> bool:
        """Flush what is left (and set the ``ablate.logged_step`` tag if it was held).

        Returns:
            True when every metric given reached the run (or sending was fenced off); False when
            some did not (:attr:`unsent` says why): the caller keeps the trial for a later upload.
        """
        if not self.flush():
            return self.fenced
        if self.hold_logged_step and self._buffered_through is not None and not self.fenced:
            try:
                self.client.set_tag(self.run_id, TAG_LOGGED_STEP, str(self._buffered_through))  # type: ignore[union-attr]
            except TRACKING_ERRORS as exc:
                if is_disk_full(exc):
                    raise disk_full_error(exc, self.folder) from None
                self.unsent = first_line(exc)
                return False
            self.requests += 1
            self.hold_logged_step = False
        return True


def _last_whole_step(part: Sequence[Metric], next_step: int) -> int | None:
    """The last step all of whose metrics are in ``part`` (step-sorted; the next metric is at
    ``next_step``), or None when there is none."""
    for m in reversed(part):
        if m.step < next_step:
            return int(m.step)
    return None


# ------------------------------------------------------------------------------------- the tracker


@contextlib.contextmanager
def _sqlite_open_lock(uri: str) -> Iterator[None]:
    """Hold the lock file beside a ``sqlite:///`` store (``<db>.lock``) for the block; nothing for other
    stores, nor where the lock cannot be created (a read-only folder, where no schema can be created
    either)."""
    lock = None
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):].split("?", 1)[0])
        lock = FileLock(db.with_name(db.name + ".lock"))
        try:
            lock.acquire()
        except OSError:
            lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()



@dataclass(frozen=True)
class TrialIdentity:
    """What a trial's MLflow run is opened with (:meth:`Tracker.start_trial`; kept as a mapping in the
    outbox, ``TrialIdentity(**record["start"])``): the study, trial key, arm, seed, budget, the arm's
    levels, the flat trial configuration (its params) and the worker's name (a tag)."""

    study: str
    key: str
    arm: str
    seed: int
    budget: str
    levels: Mapping[str, str]
    flat_config: Mapping[str, Any]
    worker: str = ""


class Tracker:
    """MLflow runs of a study: the experiment, the parent run, the trials' child runs."""

    def __init__(self, uri: str | None = None) -> None:
        """Connect to the tracking store ``uri`` (see :func:`resolve_tracking_uri`).

        Opening a SQLite store creates its schema when it is new, and MLflow's schema creation fails in
        one of two processes that do it at once; so a SQLite store is opened under a lock file beside it
        (``mlflow.db.lock``), and its first query is made there.
        """
        self.uri = resolve_tracking_uri(uri)
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no tqdm bars in ablate's output
        if self.uri.startswith(("http://", "https://")):
            for name, value in HTTP_REQUEST_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.link = link_for(self.uri)
        with _sqlite_open_lock(self.uri):
            self.client: Any = LinkedClient(MlflowClient(tracking_uri=self.uri), self.link)
            if self.uri.startswith("sqlite:"):
                self.client.search_experiments(max_results=1)

    @property
    def location(self) -> str:
        return tracking_location(self.uri)

    @property
    def folder(self) -> str | None:
        """The folder of a local tracking store (a SQLite file's, or a file store), None for a server."""
        return local_tracking_folder(self.uri)

    # -- experiment and parent ---------------------------------------------------------------------

    def experiment_id(self, study_name: str, *, create: bool = True) -> str | None:
        """The id of the experiment named ``study_name`` (created when missing and ``create``).

        With ``create`` (ablate is about to log runs into it) the experiment is tagged as a model-training
        experiment (:data:`EXPERIMENT_KIND_TAG`): a new one when it is created, an existing one (made by
        an older ablate, or by hand) when it has no kind yet; a kind that is set already is kept.
        """
        exp = self.client.get_experiment_by_name(study_name)
        if exp is None and create:
            try:
                return self.client.create_experiment(
                    study_name, tags={TAG_STUDY: study_name, EXPERIMENT_KIND_TAG: EXPERIMENT_KIND_MODEL_TRAINING})
            except MlflowException:  # created by another worker meanwhile
                exp = self.client.get_experiment_by_name(study_name)
        if exp is None:
            return None
        if exp.lifecycle_stage != "active":
            raise TrackingError(
                f"the MLflow experiment {study_name!r} (id {exp.experiment_id}) in {self.uri} is deleted; restore it "
                f"(mlflow experiments restore --experiment-id {exp.experiment_id}) or remove it for good (mlflow gc)"
            )
        if create and not (exp.tags or {}).get(EXPERIMENT_KIND_TAG):
            self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_MODEL_TRAINING)
        return exp.experiment_id

    def check_identity(self, study: Study) -> None:
        """Refuse ``study`` when its name's experiment belongs to another study (another
        :meth:`ablate.study.Study.fingerprint`); an experiment without a fingerprint, or none, passes.

        Raises:
            StudyIdentityError: naming both study files and the fix.
        """
        exp = self.client.get_experiment_by_name(study.name)
        if exp is not None:
            self._held_by(study, exp.tags or {})

    def _held_by(self, study: Study, tags: Mapping[str, str]) -> bool:
        """Whether the experiment with ``tags`` is bound to a study yet; raises StudyIdentityError when it
        is bound to another one than ``study``."""
        from ablate.errors import StudyIdentityError, identity_message

        held = tags.get(TAG_FINGERPRINT)
        if held is not None and held != study.fingerprint():
            raise StudyIdentityError(identity_message(
                study.name, f"the MLflow experiment {study.name!r} in {self.uri}",
                tags.get(TAG_STUDY_FILE, "an unknown file"), str(study.path)))
        return held is not None

    def bind(self, study: Study, experiment_id: str) -> None:
        """Refuse ``study`` when experiment ``experiment_id`` belongs to another study (as
        :meth:`check_identity`), else tag it with the study's fingerprint and file when it has none yet."""
        if not self._held_by(study, self.client.get_experiment(experiment_id).tags or {}):
            self.client.set_experiment_tag(experiment_id, TAG_FINGERPRINT, study.fingerprint())
            self.client.set_experiment_tag(experiment_id, TAG_STUDY_FILE, str(Path(study.path).resolve()))

    def find_parent(self, study_name: str, budget: str) -> str | None:
        """The parent run of ``study_name`` at ``budget``, or None."""
        exp = self.experiment_id(study_name, create=False)
        if exp is None:
            return None
        runs = self.client.search_runs(
            [exp],
            filter_string=f"tags.`{TAG_ROLE}` = 'study' and tags.`{TAG_BUDGET}` = '{budget}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def parent_run(self, study: Study, budget: str, *, storage: str = "", design: Mapping[str, Any] | None = None
                   ) -> str:
        """The parent run of a study at a budget: found again by its tags, else created.

        Call it under the study store's lock so that concurrent processes create one parent.

        Args:
            study: the loaded Study.
            storage: the study store's description (a tag).
            design: logged as ``design.json`` when the run is created.
        """
        exp = self.experiment_id(study.name)
        self.bind(study, exp)  # refuses another study of this name (run and worker refused it already)
        found = self.find_parent(study.name, budget)
        if found is not None:
            self.client.update_run(found, status="RUNNING")
            return found
        tags = {
            TAG_ROLE: "study", TAG_STUDY: study.name, TAG_BUDGET: budget, TAG_STORAGE: storage,
            MLFLOW_RUN_NAME: f"{study.name} ({budget})", "ablate.study_file": str(Path(study.path).resolve()),
            **code_version(),
        }
        if study.description:
            tags["mlflow.note.content"] = study.description
        run = self.client.create_run(exp, tags=tags, run_name=f"{study.name} ({budget})")
        run_id = run.info.run_id
        obj = study.objective
        params = {
            "design": study.design_name, "budget": budget, "seeds": json.dumps(list(study.seeds)),
            "arms": str(len(study.arms)), "trials": str(study.n_trials), "factors": ",".join(f.name for f in study.factors),
            "objective.metric": obj.metric, "objective.mode": obj.mode, "objective.summary": obj.summary,
            "objective.last_n": str(obj.last_n),
        }
        self._log_params(run_id, {k: truncate(v, MAX_PARAM_VALUE) for k, v in params.items()})
        files = {"design.json": json.dumps(design or {}, indent=1, sort_keys=True)}
        with contextlib.suppress(OSError):
            files["study.yaml"] = Path(study.path).read_text(encoding="utf-8")
        self._log_files(run_id, files)
        return run_id

    def record_command(self, run_id: str, command: str) -> None:
        """Tag a parent run with the command that last ran the study (``ablate.command``) and the code
        it ran with (git commit, dirty flag, versions): the provenance a report prints at its top."""
        tags = {TAG_COMMAND: truncate(command, MAX_TAG_VALUE), **code_version()}
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def finish_parent(self, run_id: str, *, failed: bool) -> None:
        """Mark the parent run FINISHED (every trial done) or FAILED (some trial failed)."""
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    # -- trials ------------------------------------------------------------------------------------

    def find_trial_run(self, parent_id: str, key: str) -> Run | None:
        """The child run of trial ``key`` under ``parent_id`` (an mlflow Run), or None."""
        parent = self.client.get_run(parent_id)
        runs = self.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}' and tags.`{TAG_KEY}` = '{key}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def start_trial(self, parent_id: str, trial: TrialIdentity, *, flush_every: int = 10, resuming: bool = False,
                    fence: Callable[[], bool] | None = None) -> TrialLogger:
        """Open the child run of ``trial`` (found again when it exists, else created with its params and
        tags) and return its :class:`TrialLogger` (skipping the steps that run already logged; ``fence``:
        see :class:`TrialLogger`)."""
        study, key, arm, seed, budget = trial.study, trial.key, trial.arm, trial.seed, trial.budget
        levels, flat_config, worker = trial.levels, trial.flat_config, trial.worker
        existing = self.find_trial_run(parent_id, key)
        tags = {TAG_WORKER: worker}
        if existing is None:
            exp = self.client.get_run(parent_id).info.experiment_id
            name = f"{arm} seed={seed}"
            tags.update({
                TAG_ROLE: "trial", MLFLOW_PARENT_RUN_ID: parent_id, MLFLOW_RUN_NAME: name, TAG_STUDY: study,
                TAG_KEY: key, TAG_ARM: arm, TAG_SEED: str(seed), TAG_BUDGET: budget, **code_version(),
                **gpu_tags(str(flat_config.get("device", "") or "")),
            })
            run = self.client.create_run(exp, tags={k: truncate(v, MAX_TAG_VALUE) for k, v in tags.items()},
                                         run_name=name)
            run_id, skip, has_params = run.info.run_id, -1, False
        else:
            run_id = existing.info.run_id
            skip = int(existing.data.tags.get(TAG_LOGGED_STEP, -1))
            has_params = bool(existing.data.params)
            self.client.update_run(run_id, status="RUNNING")
            self.client.set_tag(run_id, TAG_WORKER, worker)
            with contextlib.suppress(MlflowException):
                self.client.delete_tag(run_id, TAG_ERROR)
        if not has_params:
            self._log_params(run_id, trial_params(flat_config, levels))
        return TrialLogger(self.client, run_id, skip_through=skip, flush_every=flush_every,
                           hold_logged_step=resuming, fence=fence, folder=self.folder)

    def send_history(self, run_id: str, history: Sequence[tuple[int, Mapping[str, float]]]) -> int:
        """Send the metrics of ``history`` that run ``run_id`` does not hold yet, so that it holds each
        (metric, step) exactly once whatever reached it before (an upload after an outage: the run's
        metrics are read first); then tag ``ablate.logged_step``. The number of metric values sent."""
        keys = sorted({metric_name(k) for _, metrics in history for k in metrics})
        held = {(m.key, int(m.step)) for key in keys for m in self.client.get_metric_history(run_id, key)}
        ts = int(time.time() * 1000)
        missing = [Metric(metric_name(k), float(v), ts, int(step)) for step, metrics in history
                   for k, v in metrics.items() if (metric_name(k), int(step)) not in held]
        for i in range(0, len(missing), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=missing[i : i + MAX_METRICS_PER_BATCH])
        if history:
            self.client.set_tag(run_id, TAG_LOGGED_STEP, str(max(int(step) for step, _ in history)))
        return len(missing)

    def finish_trial(self, run_id: str, *, config_yaml: str, history: Sequence[tuple[int, Mapping[str, float]]],
                     samples: Sequence[Mapping[str, Any]], result: Mapping[str, Any], objective: float | None,
                     eval_problems: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Upload a finished trial's files and mark its run FINISHED.

        ``eval_problems`` (``TrialResult.eval_problems``) becomes ``eval_problems.csv``; None writes no
        such file.
        """
        files = {
            "config.yaml": config_yaml,
            "history.csv": history_csv(history),
            "samples.json": json.dumps(finite_json(list(samples)), indent=1, default=str),
            "result.json": json.dumps(finite_json(dict(result)), indent=1, sort_keys=True, default=str),
        }
        if eval_problems is not None:
            files[EVAL_PROBLEMS_FILE] = eval_problems_csv(eval_problems)
        self._log_files(run_id, files)
        self.client.set_tag(run_id, TAG_OBJECTIVE, "null" if objective is None else repr(float(objective)))
        if result.get("fingerprint"):
            self.client.set_tag(run_id, TAG_FINGERPRINT, str(result["fingerprint"]))
        self.client.set_terminated(run_id, status="FINISHED")

    def fail_trial(self, run_id: str, error: str, *, status: str = "FAILED") -> None:
        """Record a failed attempt of a trial (tag ``ablate.error``: the end of its error, removed when the
        trial is retried; ``errors/attempt-<n>.txt``: all of it, the n-th failed attempt's file, kept) and
        mark its run ``status`` (FAILED, or KILLED when interrupted)."""
        n = len(self.client.list_artifacts(run_id, ERRORS_DIR)) + 1
        self._log_files(run_id, {f"{ERRORS_DIR}/attempt-{n}.txt": error})
        tail = error if len(error) <= MAX_TAG_VALUE else "..." + error[-(MAX_TAG_VALUE - 3):]
        self.client.set_tag(run_id, TAG_ERROR, tail)
        self.client.set_terminated(run_id, status=status)

    def run_status(self, run_id: str) -> str:
        """The run's status name (RUNNING, FINISHED, FAILED, KILLED)."""
        status = self.client.get_run(run_id).info.status
        return status if isinstance(status, str) else RunStatus.to_string(status)

    # -- helpers -------------------------------------------------------------------------------------

    def _log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def _log_files(self, run_id: str, files: Mapping[str, str]) -> None:
        with tempfile.TemporaryDirectory(prefix="ablate-artifacts-") as tmp:
            for name, text in files.items():
                Path(tmp, name).parent.mkdir(parents=True, exist_ok=True)
                Path(tmp, name).write_text(text, encoding="utf-8")
            self.client.log_artifacts(run_id, tmp)


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (strict JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value



# ------------------------------------------------------------------------------ reading a study back


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as plain data (what results and reports read; no mlflow objects leak out).

    Attributes:
        run_id: the MLflow run id.
        status: RUNNING, SCHEDULED, FINISHED, FAILED or KILLED.
        tags: every tag of the run (``ablate.trial_key``, ``ablate.arm``, ``ablate.seed`` ...).
        params: every param of the run (the flattened config and ``level.<factor>``).
        start_time, end_time: milliseconds since the epoch (None when unknown / still running).
    """

    run_id: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    start_time: int | None = None
    end_time: int | None = None


def _record(run: Run) -> RunRecord:
    status = run.info.status
    return RunRecord(
        run_id=run.info.run_id,
        status=status if isinstance(status, str) else RunStatus.to_string(status),
        tags=dict(run.data.tags),
        params=dict(run.data.params),
        start_time=run.info.start_time,
        end_time=run.info.end_time,
    )


def study_runs(tracker: Tracker, study_name: str, budget: str) -> tuple[RunRecord | None, list[RunRecord]]:
    """The parent run of ``study_name`` at ``budget`` and every trial (child) run under it.

    Runs are fetched page by page with ``search_runs`` (one request per 1000 runs, metrics are not
    read here: a trial's history is its ``history.csv`` artifact, see :func:`read_run_file`).

    Returns:
        ``(parent, trials)``: the parent (None when the study never ran at that budget, and then no
        trials) and the trial runs in start order.
    """
    parent_id = tracker.find_parent(study_name, budget)
    if parent_id is None:
        return None, []
    parent = tracker.client.get_run(parent_id)
    trials: list[RunRecord] = []
    token: str | None = None
    while True:
        page = tracker.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}' and tags.`{TAG_ROLE}` = 'trial'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
            max_results=1000,
            page_token=token,
        )
        trials.extend(_record(r) for r in page)
        token = page.token
        if not token:
            break
    return _record(parent), trials


def read_run_file(tracker: Tracker, run_id: str, path: str) -> str | None:
    """The text of artifact ``path`` (e.g. ``history.csv``) of run ``run_id``, or None if it has none."""
    with tempfile.TemporaryDirectory(prefix="ablate-download-") as tmp:
        try:
            local = tracker.client.download_artifacts(run_id, path, tmp)
        except (MlflowException, OSError):
            return None
        try:
            return Path(local).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None


def log_report(tracker: Tracker, run_id: str, folder: str | Path, artifact_path: str = "report") -> None:
    """Upload a report folder (``index.html``, ``README.md``, figures, ``results.csv``) as artifacts
    of run ``run_id`` (the study's parent run), under ``artifact_path``; hidden files are skipped."""
    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="ablate-report-") as tmp:
        for f in folder.rglob("*"):
            rel = f.relative_to(folder)
            if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                target = Path(tmp, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
        tracker.client.log_artifacts(run_id, tmp, artifact_path=artifact_path)

__all__ = [
    "TrialIdentity",
    "RETRY_SECONDS",
    "TRACKING_ERRORS",
    "check_tracking_server",
    "first_line",
    "DEFAULT_TRACKING_URI",
    "EVAL_PROBLEMS_FILE",
    "EVAL_PROBLEM_COLUMNS",
    "RunRecord",
    "Tracker",
    "TrackingError",
    "TrialLogger",
    "eval_problems_csv",
    "history_csv",
    "log_report",
    "metric_name",
    "param_value",
    "read_run_file",
    "resolve_tracking_uri",
    "study_runs",
    "trial_params",
]
