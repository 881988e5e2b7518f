"""The trial engine seam: what trains one prepared trial, behind a small typed interface.

The attempt path (:mod:`ablate.running.attempt`) owns everything around a trial — the claimed attempt, its
heartbeats, the MLflow run, the outbox, the store's record — and hands the training itself to an engine::

    engine = engine_for(config)
    result = engine.train(EngineJob(config, log, workdir))    # -> TrialResult

An engine receives the trial's configuration, the function every logged step goes through (``log(metrics,
step)``: MLflow, heartbeats, progress), and the trial's folder, where it keeps its checkpoints and where a
killed attempt's resume state is (``resume``: a checkpoint is there). It returns a
:class:`ablate.train.TrialResult`: the history it logged, the final metrics, the evaluation's per-problem
records and samples. The store, queue, resume, MLflow run, evaluation, objective and report are the same
for every engine.

The seam knows no engine by import: the engines join :data:`ENGINES` (a :class:`~ablate.registry.Registry`,
as the components of ``ablate/rl/`` join theirs), and importing :mod:`ablate.engines` registers the two built
in, chosen by ``engine.name``: ``ablate``, this package's own trainer (:class:`ablate.engines.native.AblateEngine`
over :func:`ablate.train.run_trial`), and ``trl``, TRL's ``GRPOTrainer`` (:class:`ablate.engines.trl.TrlEngine`;
the map of options in :mod:`ablate.engines.trl_map`). An engine also says what it cannot honour
(:meth:`TrialEngine.refusals`): the configuration's rules ask the registered engine through
:func:`ablate.registry.engine_registry`, so that validation refuses such a trial without importing this layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ablate.registry import Registry

if TYPE_CHECKING:
    from ablate.config import ConfigProblem, TrialConfig
    from ablate.train import TrialResult

#: The function a trial logs each step through: ``log(metrics, step)``.
LogFn = Callable[[dict[str, float], int], None]


@dataclass(frozen=True)
class EngineJob:
    """What a trial engine receives.

    Attributes:
        config: the trial to train (validated; its key is the trial key).
        log: called with each logged step's metrics (MLflow, heartbeats and progress behind it; it may
            raise to stop the trial, e.g. when the study store cannot record it any more).
        workdir: the trial's folder for checkpoints (None: save none, start from scratch).
    """

    config: TrialConfig
    log: LogFn
    workdir: Path | None = None

    @property
    def resume(self) -> bool:
        """Whether a killed attempt left a checkpoint to resume from in :attr:`workdir`."""
        return engine_for(self.config).has_checkpoint(self.workdir)


def has_checkpoint(workdir: Path | None, config: TrialConfig | None = None) -> bool:
    """Whether a trial's folder holds a checkpoint to resume from (a killed attempt's): of ``config``'s
    engine, or of any engine when ``config`` is None."""
    engines = [engine_for(config)] if config is not None else [engine for _, engine in ENGINES.items()]
    return any(e.has_checkpoint(workdir) for e in engines)


class TrialEngine(Protocol):
    """Trains one trial: :meth:`train` returns its result or raises (the attempt records why)."""

    name: str

    def has_checkpoint(self, workdir: Path | None) -> bool:
        """Whether ``workdir`` holds this engine's checkpoint of a killed attempt."""
        ...

    def train(self, job: EngineJob) -> TrialResult:
        """Train ``job.config``, logging each step through ``job.log``, resuming from ``job.workdir``."""
        ...

    def refusals(self, config: TrialConfig) -> list[ConfigProblem]:
        """The options of ``config`` this engine cannot honour (validation refuses them; empty: none)."""
        ...


#: The engines by name (``engine.name``); each joins it when its module is imported (:mod:`ablate.engines`).
ENGINES: Registry[TrialEngine] = Registry("engine")


def engine_for(config: TrialConfig) -> TrialEngine:
    """The engine that trains ``config``: ``ENGINES.get(config.engine.name)``."""
    return ENGINES.get(config.engine.name)


__all__ = ["ENGINES", "EngineJob", "LogFn", "TrialEngine", "engine_for", "has_checkpoint"]
