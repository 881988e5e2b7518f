"""The trainer's ``log(metrics, step)`` for one trial run: buffered, sent in batches, each (metric, step)
once across retries, outages and resumes (:class:`TrialLogger`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mlflow import MlflowClient
from mlflow.entities import Metric, RunTag

from ablate.disk import disk_full_error, is_disk_full

if TYPE_CHECKING:
    pass
from ablate.tracking.client import RETRY_SECONDS, TRACKING_ERRORS, first_line
from ablate.tracking.names import MAX_METRICS_PER_BATCH, TAG_LOGGED_STEP, metric_name


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
