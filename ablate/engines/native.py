"""ablate's own trainer as a trial engine (``engine.name: ablate``): :func:`ablate.train.run_trial`, CleanRL's one
loop, populations included. It joins the seam's registry (:data:`ablate.engines.base.ENGINES`) when imported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ablate.config.problems import ConfigProblem
from ablate.engines.base import ENGINES, EngineJob

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.train import TrialResult


class AblateEngine:
    """ablate's own trainer: :func:`ablate.train.run_trial` (CleanRL's one loop, populations included)."""

    name = "ablate"

    def has_checkpoint(self, workdir: Path | None) -> bool:
        """Whether ``workdir`` holds ablate's trainer checkpoint (``trainer.pt``)."""
        from ablate.train import CHECKPOINT_FILE

        return workdir is not None and (workdir / CHECKPOINT_FILE).exists()

    def train(self, job: EngineJob) -> TrialResult:
        from ablate.train import run_trial

        return run_trial(job.config, job.log, workdir=job.workdir)

    def refusals(self, config: TrialConfig) -> list[ConfigProblem]:
        """One trial on several processes (``engine.processes > 1``): that is the trl engine's."""
        if config.engine.processes != 1:
            return [ConfigProblem("engine.processes", (
                "engine.processes > 1 needs engine.name=trl (ablate's own trainer runs a trial in one process; "
                "ablate run --workers N trains N trials at once)"))]
        return []


ENGINES.register("ablate", AblateEngine())

__all__ = ["AblateEngine"]
