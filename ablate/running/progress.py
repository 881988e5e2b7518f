"""The progress display of ``ablate run`` and ``ablate worker``: trials done / running / failed /
pending, each running trial's step, and an ETA, from the workers' events (:mod:`ablate.running.worker`)."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, TextIO

from ablate.running.session import Event


def format_seconds(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3725`` -> ``1h02m``; ``9`` -> ``9s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """The progress display of ``ablate run``: trials done / running / failed / pending, each running
    trial's step, and an ETA.

    On a terminal one status line is redrawn in place; otherwise (a log file, a pipe) a status line
    is printed every ``interval`` seconds. Finished and failed trials are always printed on their own
    line. ETA = the steps left (over every unfinished trial) / the steps per second observed so far.
    """

    def __init__(self, total: int, steps_per_trial: int, counts: dict[str, int], *, stream: TextIO | None = None,
                 live: bool | None = None, interval: float = 30.0, label: str = "") -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.interval = interval
        self.total = total
        self.steps_per_trial = steps_per_trial
        self.counts = dict(counts)
        self.label = label
        self.running: dict[str, dict[str, Any]] = {}
        self.steps_done = 0
        self._last_step: dict[str, int] = {}
        self._t_first: float | None = None
        self._last_print = time.monotonic()
        self._width = 0

    def handle(self, event: Event) -> None:
        """Update from one worker event."""
        kind, key = event.get("kind"), event.get("key", "")
        if kind == "population":
            self.line(f"packed {event.get('size')} trials into one population on {event.get('worker')} "
                      "(train.packed: their forward, backward and decode steps batched)")
        elif kind == "start":
            self.running[key] = dict(event, step=None)
        elif kind == "step":
            step = int(event["step"])
            prev = self._last_step.get(key)
            if prev is not None and step > prev:
                self.steps_done += step - prev
                if self._t_first is None:
                    self._t_first = time.monotonic()
            self._last_step[key] = step
            self.running.setdefault(key, dict(event))["step"] = step
        elif kind == "end":
            self.running.pop(key, None)
            self._last_step.pop(key, None)
            who = f"{event.get('arm')} seed={event.get('seed')}"
            took = format_seconds(float(event.get("seconds", 0.0)))
            if event.get("state") == "failed":
                self.line(f"FAILED {who} after {took}: {event.get('error', '')}")
            else:
                obj = event.get("objective")
                score = f", {event.get('metric')} = {obj:.4g}" if isinstance(obj, float) else ""
                self.line(f"done   {who} in {took}{score}")

    def set_counts(self, counts: dict[str, int]) -> None:
        """Counts from the store (they include other machines' workers)."""
        self.counts = dict(counts)

    def eta(self) -> float | None:
        """Seconds left, or None before the rate is known."""
        if self._t_first is None or self.steps_done <= 0:
            return None
        rate = self.steps_done / max(time.monotonic() - self._t_first, 1e-6)
        running_left = sum(max(0, self.steps_per_trial - int(r.get("step") or 0)) for r in self.running.values())
        queued = max(0, self.counts.get("pending", 0)) * self.steps_per_trial
        return (running_left + queued) / rate

    def status_line(self) -> str:
        """The one-line summary."""
        c = self.counts
        parts = [f"{c.get('done', 0)}/{self.total} done, {c.get('running', 0)} running, "
                 f"{c.get('failed', 0)} failed, {c.get('pending', 0)} pending"]
        for r in list(self.running.values())[:4]:
            step = r.get("step")
            parts.append(f"{r.get('arm')} s{r.get('seed')} " + ("starting" if step is None else f"{step}/{r.get('steps')}"))
        eta = self.eta()
        parts.append("ETA " + ("?" if eta is None or not math.isfinite(eta) else format_seconds(eta)))
        return (f"[{self.label}] " if self.label else "") + " | ".join(parts)

    def line(self, text: str) -> None:
        """Print a line (above the live status line)."""
        if self.live:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        if self.live:
            self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Redraw the status line (live), or print it when ``interval`` has passed (not live)."""
        now = time.monotonic()
        if self.live:
            self.stream.write("\r\x1b[K" + self.status_line()[: _terminal_width() - 1])
            self.stream.flush()
        elif force or now - self._last_print >= self.interval:
            self.stream.write(self.status_line() + "\n")
            self.stream.flush()
            self._last_print = now

    def close(self) -> None:
        """End the live line."""
        if self.live:
            self.stream.write("\r\x1b[K" + self.status_line()[: _terminal_width() - 1] + "\n")
            self.stream.flush()


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 160


__all__ = ["Progress", "format_seconds"]
