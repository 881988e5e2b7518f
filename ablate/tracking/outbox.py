"""The outbox: trials that finished while the MLflow tracking server did not answer, kept on disk
until their run can take them.

A tracking outage never stops a trial (see :class:`ablate.tracking.TrialLogger`): its metrics wait in
memory and go out when the server answers again. A trial that *ends* while the server is still away
is written here, as ``<runs>/<study>/trials/<key>/unsent.json`` (:data:`UNSENT_FILE`): the parent run,
what its child run is opened with, the full metric history and the files and objective that finishing
it uploads. The study store records the trial as done (it is not trained again).

``ablate run`` uploads the outbox of its study when it starts and when its workers are done; a study
whose outbox is not empty at the end gets no report, and one message naming the server and the
command that uploads it (the same ``ablate run`` again). An upload opens (or finds) the trial's run,
reads the metrics the run already holds and sends only the missing (metric, step) pairs, then the
files, then marks the run FINISHED and deletes the file: whatever reached the server before the
outage, the run ends with each (metric, step) exactly once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ablate.paths import RUNS_DIR, run_dir

if TYPE_CHECKING:
    from ablate.tracking import Tracker

#: The file of a trial folder that holds a finished trial MLflow has not received.
UNSENT_FILE = "unsent.json"


def write_unsent(folder: str | os.PathLike[str], *, parent: str, start: Mapping[str, Any],
                 history: Sequence[tuple[int, Mapping[str, float]]], finish: Mapping[str, Any], why: str) -> Path:
    """Keep a finished trial for a later upload (written atomically: a reader sees all or nothing).

    Args:
        folder: the trial's folder (``<runs>/<study>/trials/<key>``).
        parent: the study's MLflow parent run id.
        start: the keyword arguments of :meth:`Tracker.start_trial` (study, key, arm, seed, budget,
            levels, flat_config, worker).
        history: the trial's metric history, ``[(step, {name: value})]``.
        finish: the keyword arguments of :meth:`Tracker.finish_trial` but ``history``.
        why: the tracking error that kept it here (first line).

    Returns:
        The file written.
    """
    path = Path(folder) / UNSENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"parent": parent, "start": dict(start), "history": [[int(s), dict(m)] for s, m in history],
              "finish": dict(finish), "why": why}
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record, default=str), encoding="utf-8")
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial file on a full disk: its space is what the next write needs
        raise
    os.replace(tmp, path)
    return path


def unsent_files(study_name: str, runs: str | os.PathLike[str] = RUNS_DIR) -> list[Path]:
    """The outbox of a study: its trials' ``unsent.json`` files, sorted."""
    return sorted((run_dir(study_name, runs) / "trials").glob(f"*/{UNSENT_FILE}"))


def upload_file(tracker: Tracker, path: Path) -> str:
    """Upload one kept trial to its MLflow run (see the module docstring) and delete the file.

    Returns:
        The run id.

    Raises:
        The tracking store's error (:data:`ablate.tracking.TRACKING_ERRORS`) when it does not take
        the upload; the file is kept, and a later upload sends only what is still missing.
    """
    from ablate.tracking import TrialIdentity

    record = json.loads(path.read_text(encoding="utf-8"))
    history = [(int(step), metrics) for step, metrics in record["history"]]
    logger = tracker.start_trial(record["parent"], TrialIdentity(**record["start"]), resuming=True)
    tracker.send_history(logger.run_id, history)
    tracker.finish_trial(logger.run_id, history=history, **record["finish"])
    path.unlink()
    return str(logger.run_id)


@dataclass
class OutboxResult:
    """What an upload of a study's outbox did: the trial folders sent, those left, and why."""

    sent: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    error: str | None = None


def _mtime(path: Path) -> float:
    """When a kept trial was written (now, if it cannot be read: it is then not old)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def upload_unsent(tracker: Tracker, study_name: str, runs: str | os.PathLike[str] = RUNS_DIR, *,
                  wait: float = 0.0, ran_for: float | None = None, finished: int | None = None,
                  stream: TextIO | None = None) -> OutboxResult:
    """Upload every kept trial of a study; stop at the first the tracking store does not take (it is
    down: the rest would fail the same way) and list what is left. A server whose ``/health`` does not
    answer is not asked anything else (:meth:`ablate.tracking.Link.answers`); with ``wait`` > 0 it is
    asked again every second first (the end of a run: a short outage then ends in an upload, not in a
    second command), saying so once on ``stream``.

    How long: an outage is as old as the oldest kept trial. A short one gets ``wait`` seconds from now, so
    that one whose end the wait covers ends in an upload: younger than half the run (``ran_for`` seconds
    so far), and begun after the server took some of the run's trials (fewer are kept than the
    ``finished`` trials of this run; not asked when None). Any other (the server down for most of the
    run, or for all of it), or any when ``ran_for`` is None, gets ``wait`` seconds in all from the oldest
    kept trial: with the default wait (a tenth of the run, :meth:`ablate.running.session.RunSettings.end_wait`)
    it is not waited for at all."""
    from ablate.tracking import TRACKING_ERRORS, first_line

    out = OutboxResult()
    files = unsent_files(study_name, runs)
    if files and not tracker.link.answers():  # one quick question, not a request that retries
        down_for = max(0.0, time.time() - min(_mtime(p) for p in files))
        fresh = ran_for is not None and down_for < ran_for / 2 and (finished is None or len(files) < finished)
        left = wait if fresh else wait - down_for
        if left > 0:
            if stream is not None:
                since = "from the run's end: a short outage" if fresh else "from the first"
                print(f"ablate: MLflow {tracker.uri} does not answer ({tracker.link.why}); waiting up to {left:.0f} s "
                      f"more to upload {len(files)} trial(s) kept meanwhile (--tracking-wait {wait:g} s {since}, "
                      f"kept {down_for:.0f} s ago)", file=stream, flush=True)
            deadline = time.monotonic() + left
            while time.monotonic() < deadline and not tracker.link.answers(timeout=min(5.0, left)):
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        if not tracker.link.up:
            out.error, out.left = tracker.link.why or "it does not answer", [p.parent.name for p in files]
            return out
    for path in files:
        if out.error is not None:
            out.left.append(path.parent.name)
            continue
        try:
            upload_file(tracker, path)
            out.sent.append(path.parent.name)
        except TRACKING_ERRORS as exc:
            out.error = first_line(exc)
            out.left.append(path.parent.name)
    return out


__all__ = ["UNSENT_FILE", "OutboxResult", "unsent_files", "upload_file", "upload_unsent", "write_unsent"]
