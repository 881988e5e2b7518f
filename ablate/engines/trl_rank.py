"""One rank of a trl trial of ``engine.processes > 1``: what torchrun runs N times (see
:mod:`ablate.engines.trl_ranks`, the worker's side)::

    python -m torch.distributed.run --standalone --nproc_per_node N -m ablate.engines.trl_rank FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ablate.engines.trl_ranks import CONFIG_FILE, JOB_FILE, RESULT_FILE, STEPS_FILE, die_with_parent


def rank_main(folder: Path) -> int:
    """One rank of a trial: :func:`ablate.engines.trl.train_here`; rank 0 appends its steps and writes the result.
    The rank dies with torchrun, its parent (:func:`ablate.engines.trl_ranks.die_with_parent`)."""
    from dataclasses import asdict

    die_with_parent()

    from ablate.config import TrialConfig
    from ablate.engines.base import EngineJob
    from ablate.engines.trl import train_here
    from ablate.engines.trl_scoring import rank

    config = TrialConfig.from_file(folder / CONFIG_FILE)
    workdir = json.loads((folder / JOB_FILE).read_text())["workdir"]
    steps = open(folder / STEPS_FILE, "a", encoding="utf-8")

    def log(metrics: dict[str, float], step: int) -> None:
        steps.write(json.dumps({"step": step, "metrics": metrics}) + "\n")
        steps.flush()

    result = train_here(EngineJob(config, log, Path(workdir) if workdir else None))
    steps.close()
    if rank() == 0:
        payload: dict[str, Any] = asdict(result)
        tmp = folder / (RESULT_FILE + ".tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        tmp.replace(folder / RESULT_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(rank_main(Path(sys.argv[1])))
