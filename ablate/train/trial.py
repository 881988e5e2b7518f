"""``run_trial``: train one trial, alone or, when ``train.packed``, as a member of a population."""

from __future__ import annotations

import os

from ablate.config import TrialConfig
from ablate.train.loop import LogFn, TrialResult, prepare_trial, train_prepared
from ablate.train.population import current_member, run_population, train_member


def run_trial(
    config: TrialConfig,
    log: LogFn | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    stop_after: int | None = None,
) -> TrialResult:
    """Train and evaluate one trial.

    Args:
        config: the fully resolved trial configuration (its seed included).
        log: called as ``log(metrics, step)`` after every logged step and evaluation; step 0 is the
            evaluation of the start policy. Metric names: :data:`METRICS`.
        workdir: where checkpoints go (``<workdir>/trainer.pt``); a checkpoint found there is resumed
            from. None: no checkpoints.
        progress: show a progress bar.
        stop_after: stop after this many steps of this call (for tests of resumption).

    Returns:
        The :class:`TrialResult`; ``history`` includes the steps logged before a resume.

    Raises:
        NonFiniteError: a NaN or inf in the loss, rewards, advantages or gradients.
    """
    if config.train.packed:  # see ablate.train.population
        if current_member() is not None:  # this thread is a member of a population
            return train_member(config, log, workdir, stop_after, progress)
        outcome = run_population([config], [log], [workdir], stop_after=stop_after, progress=progress)[0]  # of one
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return train_prepared(prepare_trial(config, workdir=workdir, progress=progress), log, stop_after=stop_after)
