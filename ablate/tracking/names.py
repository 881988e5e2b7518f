"""What ablate writes into MLflow and how it is named: the tags, the tracking URI, the params and files of a
trial run (history.csv, eval_problems.csv), the code and machine a run ran on. Pure functions, no client."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

from ablate.errors import AblateError
from ablate.machine import cpu_name
from ablate.metrics import EVAL_PROBLEM_GLOSSARY

if TYPE_CHECKING:
    pass


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

class TrackingError(AblateError):
    """The MLflow tracking store cannot be used as asked."""

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

#: The artifact of a parent or trial run that ran from a dirty checkout: the tree's diff (see :func:`git_diff`).
DIFF_FILE = "diff.patch"

#: The tag beside :data:`DIFF_FILE`: :func:`diff_sha256` of its bytes.
TAG_GIT_DIFF = "ablate.git_diff_sha256"

#: The paths whose changes make a checkout dirty, as git pathspecs relative to the folder checked (ablate's
#: :func:`code_root`): its tracked files, less what ablate itself writes (reports/ is output, not a change of
#: the code that runs). Untracked files are not part of it.
CODE_PATHSPEC: tuple[str, ...] = (".", ":(exclude)reports")

#: Hex digits of a diff's sha256 that :func:`diff_sha256` keeps (48 bits: a collision among one checkout's
#: diffs is not a concern).
DIFF_SHA_CHARS = 12


def code_root() -> Path:
    """ablate's package folder, whose tracked files :func:`code_version` and :func:`code_diff` check
    (git paths in a diff stay relative to the checkout's root)."""
    return Path(__file__).resolve().parent.parent


def _git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess | None:
    """``git -C root ARGS`` (10 s at most); None where git is missing or does not answer in time."""
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=text, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


def git_tags(root: Path) -> dict[str, str]:
    """The commit of the git checkout at ``root`` (``mlflow.source.git.commit``, ``ablate.git_commit``) and
    whether its tracked files (:data:`CODE_PATHSPEC`) differ from it (``ablate.git_dirty``: true/false);
    ``{}`` where git is missing or ``root`` is no checkout."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None or commit.returncode != 0 or not commit.stdout.strip():
        return {}
    tags = {MLFLOW_GIT_COMMIT: commit.stdout.strip(), "ablate.git_commit": commit.stdout.strip()}
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHSPEC)
    if dirty is not None:
        tags["ablate.git_dirty"] = "true" if dirty.stdout.strip() else "false"
    return tags


def git_diff(root: Path) -> bytes | None:
    """``git diff HEAD`` of the tracked files of the checkout at ``root`` (:data:`CODE_PATHSPEC`, the files
    whose changes :func:`git_tags` calls dirty; staged and unstaged changes alike), the bytes ``git apply``
    takes back onto the commit: ``b""`` when they are unchanged, None where git is missing, ``root`` is no
    checkout or git fails. Deterministic whatever the user's git configuration: no colour, no external diff
    or textconv driver, no rename detection, ``a/`` ``b/`` prefixes, binary files in full (``--binary``)."""
    diff = _git(root, "diff", "HEAD", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--binary",
                "--src-prefix=a/", "--dst-prefix=b/", "--", *CODE_PATHSPEC, text=False)
    if diff is None or diff.returncode != 0:
        return None
    return diff.stdout


def diff_sha256(patch: bytes) -> str:
    """The first :data:`DIFF_SHA_CHARS` hex digits of the sha256 of ``patch`` (a :data:`DIFF_FILE`'s bytes):
    ``sha256sum diff.patch | cut -c1-12`` checks a downloaded patch against its tag."""
    return hashlib.sha256(patch).hexdigest()[:DIFF_SHA_CHARS]


def dirty_diff(root: Path) -> bytes | None:
    """The diff (:func:`git_diff`) of the checkout at ``root`` when :func:`git_tags` calls it dirty; None
    when it is clean, no checkout, or git is missing or fails (a run then logs no diff and no tag)."""
    if git_tags(root).get("ablate.git_dirty") != "true":
        return None
    return git_diff(root)


@functools.lru_cache(maxsize=1)
def code_diff() -> bytes | None:
    """:func:`dirty_diff` of ablate's own checkout (:func:`code_root`), computed once per process: the diff
    that a run's parent and trial runs log as :data:`DIFF_FILE` (None: nothing to log)."""
    return dirty_diff(code_root())


def diff_tags(patch: bytes | None) -> dict[str, str]:
    """The tag that goes with a logged ``patch`` (:data:`TAG_GIT_DIFF`: its :func:`diff_sha256`); ``{}`` for
    None (a clean checkout, or no git)."""
    return {} if patch is None else {TAG_GIT_DIFF: diff_sha256(patch)}


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """Tags describing the code that runs: git commit and dirty flag (:func:`git_tags`, if ablate runs from
    a git checkout) and the versions of ablate, torch, transformers, optuna, mlflow and Python."""
    tags: dict[str, str] = dict(git_tags(code_root()))
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

def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (strict JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value
