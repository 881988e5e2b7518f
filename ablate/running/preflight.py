"""The checks before a run writes anything: each refusal is one message, exit code 2, nothing created.

``ablate run`` and ``ablate worker`` call :func:`preflight` first: the tracking server answers, the runs
folder is writable, the study does not take the name of another (:meth:`ablate.study.Study.fingerprint`),
its store was not lost while MLflow holds its finished trials, and each disk it writes to has the free
space its estimated peak needs (:mod:`ablate.running.footprint`). ``ablate run`` also checks that its report's
folder is writable (:func:`check_reports_writable`), before any trial trains rather than after all of them.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from ablate.disk import disk_full_error, is_disk_full
from ablate.running.session import RunSettings, current_plan
from ablate.store import StudyStore
from ablate.study.plan import Plan

if TYPE_CHECKING:
    from ablate.study import Study


def preflight(study: Study, settings: RunSettings, workers: int = 1) -> None:
    """What ``ablate run`` and ``ablate worker`` check before the store, MLflow or any worker touches
    anything: the tracking server answers, the runs folder is writable, and the store was not lost while
    MLflow holds the study's finished trials. Each refusal is one message; nothing is created."""
    from ablate.tracking import check_tracking_server

    check_engines_installed(study, settings.budget)
    if workers > 1:
        check_no_component_of_main(workers)
    check_tracking_server(settings.tracking_uri)
    check_runs_writable(study, settings)
    store = existing_store(study, settings)  # opened once (reading a journal replays it) for the checks
    check_identity(study, settings, store)
    check_store_not_lost(study, settings, store)
    if settings.check_disk:
        check_disk_space(study, settings, store, workers)


def check_no_component_of_main(workers: int) -> None:
    """Refuse ``workers`` > 1 local workers when the calling script itself registered a component (a reward,
    a task, ... whose module is ``__main__``): the worker processes import ablate and the study's plugins, never
    the caller's ``__main__`` (:mod:`ablate.running.pool`), so they would not know its name.

    Raises:
        AblateError: one line naming the components and the two ways out.
    """
    from ablate.errors import AblateError
    from ablate.registry import ALL_REGISTRIES

    found = [f"{kind} {name!r}" for kind, reg in ALL_REGISTRIES.items() for name, obj in reg.items()
             if getattr(obj, "__module__", None) == "__main__"]
    if found:
        raise AblateError(
            f"{', '.join(found)} registered in the running script (__main__): the {workers} worker processes do "
            "not run that script, so they would not know it; move the registration into a module listed under the "
            "study's plugins: (docs/factors.md), or run with 1 worker (in this process)")


def check_engines_installed(study: Study, budget: str) -> None:
    """Refuse a study whose trials name an engine that cannot be imported here (``engine.name: trl`` needs
    TRL), before anything is written, rather than fail every one of those trials.

    Raises:
        AblateError: one line naming the study, the engine, the arms and the install command.
    """
    from ablate.engines.trl import require_trl
    from ablate.errors import AblateError, ConfigError

    arms = sorted(a.name for a in study.arms if study.arm_config(a, budget).engine.name == "trl")
    if not arms:
        return
    try:
        require_trl()
    except ConfigError:
        raise AblateError(
            f"study {study.name!r}: {len(arms)} arm(s) train with engine.name=trl ({', '.join(arms[:3])}"
            f"{', ...' if len(arms) > 3 else ''}), which needs TRL: pip install 'ablate[trl]' (TRL >= 1.16 and "
            "datasets), or set engine.name=ablate") from None


def check_disk_space(study: Study, settings: RunSettings, store: StudyStore | None, workers: int = 1) -> None:
    """Refuse to start when a disk the study writes to has less free space than the study's estimated
    peak use there (:func:`ablate.train.footprint.estimate_disk`: the running trials' checkpoints and
    the store under ``--runs``, a local MLflow store, the report), counting only the trials still to run.
    ``--ignore-disk-space`` skips it (settings.check_disk).

    Raises:
        DiskSpaceError: one message naming the folder, its free space, the estimate and the fixes.
    """
    from ablate.disk import DiskSpaceError, free_bytes, human_bytes, local_tracking_folder, nearest_existing
    from ablate.paths import REPORTS_DIR
    from ablate.running.footprint import estimate_disk, pack_size

    # the plan as the run will start it (a store's adaptive seeds); a new store or a tuned study: the file's
    plan = current_plan(study, settings, store) if store is not None and study.tune is None else None
    specs = list((plan or Plan.of(study, settings.budget)).specs)
    done = store.counts(settings.budget)["done"] if store is not None else 0
    pack = max((pack_size(settings.pack, s.config) for s in specs if s.config.train.packed), default=1)
    est = estimate_disk(specs, workers=workers, to_run=len(specs) - done, tracking_uri=settings.tracking_uri,
                        keep_checkpoints=settings.keep_checkpoints, pack=pack)
    folders = {"runs": settings.runs, "report": REPORTS_DIR, "tracking": local_tracking_folder(settings.tracking_uri)}
    disks: dict[int, list[str]] = {}  # filesystem -> the parts that land on it
    for part, folder in folders.items():
        if folder is not None:
            with contextlib.suppress(OSError):
                disks.setdefault(os.stat(nearest_existing(folder)).st_dev, []).append(part)
    for parts in disks.values():
        folder = folders[parts[0]]
        assert folder is not None
        need = est.on_disk(parts)
        free = free_bytes(folder)
        if free is not None and free < need:
            raise DiskSpaceError(
                f"study {study.name}: the disk holding {nearest_existing(folder)} has {human_bytes(free)} free, and "
                f"this run needs about {human_bytes(need)} there at its peak ({est.text()}); free space, pass --runs DIR "
                "(and --tracking-uri) on a larger disk, or --ignore-disk-space to run anyway (a full disk then stops "
                "the run with one message, and the same command resumes it); nothing was run or written")


def check_identity(study: Study, settings: RunSettings, store: StudyStore | None) -> None:
    """Refuse a study that takes the name of another whose MLflow experiment or study store (``store``:
    :func:`existing_store`) exists (:meth:`ablate.study.Study.fingerprint`). Creates nothing (a missing
    local MLflow store is not opened).

    Raises:
        StudyIdentityError: one message naming both study files and the fix.
    """
    from ablate.tracking import Tracker, missing_local_store

    if missing_local_store(settings.tracking_uri) is None:
        Tracker(settings.tracking_uri).check_identity(study)
    if store is not None:
        store.check_identity(study)


def check_runs_writable(study: Study, settings: RunSettings) -> None:
    """Refuse a runs folder that cannot be written (checkpoints and the default store live there), before
    anything is enqueued or logged: otherwise every trial fails at its first checkpoint and the workers
    that die of it are replaced again and again.

    Checks ``<runs>`` (its nearest existing parent when it does not exist yet), and ``<runs>/<study>`` and
    its ``trials/`` when they exist, by creating (and at once removing) an unnamed file in each.

    Raises:
        AblateError: one line naming the folder, the OS error and the fix.
    """
    from pathlib import Path

    from ablate.paths import run_dir

    runs = Path(settings.runs)
    study_dir = run_dir(study.name, runs)
    check_writable(runs, "the runs folder", "--runs", {study_dir: "the study's run folder",
                                                       study_dir / "trials": "the study's trials folder"},
                    "or pass --runs DIR with a writable folder")


def check_reports_writable(study: Study, budget: str) -> None:
    """``ablate run`` writes its report at the end: refuse a report folder (``reports/<study>``, or
    ``reports/<study>-<budget>``) that cannot be written before any trial trains, not after all of them.

    Raises:
        AblateError: one line naming the folder, the OS error and the fix.
    """
    from ablate.paths import REPORTS_DIR, report_dir_for

    folder = report_dir_for(study.name, budget)
    check_writable(folder.parent, "the reports folder", str(REPORTS_DIR), {folder: "the study's report folder"},
                    f"or run from a folder where {REPORTS_DIR}/ can be written (`ablate report --out DIR` writes "
                    "a report elsewhere)")


def check_writable(root: Any, what: str, made: str, inside: dict[Any, str], fix: str) -> None:
    """Create (and at once remove) an unnamed file in ``root`` (its nearest existing parent when it does
    not exist yet, ``made`` naming what would make it) and in each existing folder of ``inside``.

    Raises:
        AblateError: the first that refuses, with the OS error, a chmod and ``fix``.
    """
    import tempfile

    from ablate.errors import AblateError

    nearest = root
    while not nearest.exists() and nearest.parent != nearest:
        nearest = nearest.parent
    folders = {nearest: f"{what} {nearest.resolve()}" if nearest == root else
               f"the folder {nearest.resolve()} (where {made} {root} would be made)",
               **{f: f"{name} {f.resolve()}" for f, name in inside.items()}}
    for folder, name in folders.items():
        if folder != nearest and not folder.exists():
            continue
        try:
            with tempfile.TemporaryFile(dir=folder, prefix=".ablate-write-check-"):
                pass
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(exc, folder) from None
            raise AblateError(
                f"{name} is not writable ({exc.strerror or os.strerror(exc.errno or 0)}): "
                f"fix its permissions (e.g. chmod -R u+w {folder}) {fix}"
            ) from exc


def check_store_not_lost(study: Study, settings: RunSettings, store: StudyStore | None) -> None:
    """Refuse to start a study from a store (``store``: :func:`existing_store`, None when there is none)
    that holds none of its trials at the budget while MLflow holds finished trials of it there: the store
    was emptied, deleted or replaced, and running would train every trial again as if none had run.
    Creates nothing (a missing local MLflow store is not opened).

    Raises:
        AblateError: one message naming the store, the tracking store, the finished trials and the fixes.
    """
    from ablate.errors import AblateError
    from ablate.store import describe_storage
    from ablate.tracking import Tracker, missing_local_store, study_runs

    if store is not None and store.attempts(settings.budget):
        return
    if missing_local_store(settings.tracking_uri) is not None:
        return
    tracker = Tracker(settings.tracking_uri)
    parent, trials = study_runs(tracker, study.name, settings.budget)
    finished = sum(t.status == "FINISHED" for t in trials)
    if parent is None or not finished:
        return
    exp = tracker.experiment_id(study.name, create=False)
    raise AblateError(
        f"the study store {describe_storage(settings.storage)} holds no trial of study {study.name!r} at budget "
        f"{settings.budget}, but MLflow {settings.tracking_uri} holds {finished} finished trial "
        f"run(s) of it (parent run {parent.run_id}): the store that ran them was emptied, deleted or "
        f"replaced, and running now would train every trial again. Restore the store file (or pass the --storage "
        f"that ran them); or, to train again from scratch, delete the MLflow experiment {study.name!r} for good "
        f"(mlflow experiments delete --experiment-id {exp}, then mlflow gc), or use another --tracking-uri or "
        f"study name"
    )


def existing_store(study: Study, settings: RunSettings, *, read_only: bool = False) -> StudyStore | None:
    """The study's store as ``settings`` name it, opened without creating anything (``read_only``: without
    writing anything, not even a lock file or a healed journal); None when the study has not run there."""
    from ablate.store import StoreNotFoundError

    try:
        return StudyStore(settings.storage, study.name, create=False, read_only=read_only)
    except StoreNotFoundError:
        return None


__all__ = [
    "check_disk_space",
    "check_identity",
    "check_no_component_of_main",
    "check_reports_writable",
    "check_runs_writable",
    "check_store_not_lost",
    "check_writable",
    "existing_store",
    "preflight",
]
