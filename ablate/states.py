"""The one vocabulary of trial states, used by the study store, the runner, ``ablate status``, the
results reader and the report.

A trial of a plan is, at any moment, in exactly one state:

- ``pending``: not run yet, or waiting for a worker (a retry included);
- ``running``: a worker trains it now;
- ``done``: it finished and its results are recorded;
- ``failed``: its last attempt raised, or its worker died and no retry is left.

An *attempt* (one run of a trial, one Optuna trial in the study store) takes the same names.
"""

from __future__ import annotations

PENDING = "pending"
RUNNING = "running"
DONE = "done"
FAILED = "failed"

#: Every state, in the order tables print them.
STATES: tuple[str, ...] = (DONE, RUNNING, FAILED, PENDING)


def zero_counts() -> dict[str, int]:
    """``{state: 0}`` for every state, in :data:`STATES` order."""
    return dict.fromkeys(STATES, 0)


__all__ = ["DONE", "FAILED", "PENDING", "RUNNING", "STATES", "zero_counts"]
