"""A trl trial of ``engine.processes = N > 1``: N processes under torchrun, the worker's ``log`` fed from rank 0.

The worker's process (the attempt: heartbeats, the MLflow run, the outbox) starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m ablate.engines.trl_rank FOLDER`` and
stays the one that logs. Every rank runs :func:`ablate.engines.trl.train_here` on the trial's configuration
(``FOLDER/config.yaml``): TRL's ``GRPOTrainer`` under accelerate, gloo on CPU, NCCL on GPU, each rank generating
and training on its share of every minibatch. Rank 0 evaluates and appends each logged step to
``FOLDER/steps.jsonl``, which the worker reads as it grows and hands to the attempt's ``log``; at the end it
writes the trial's result to ``FOLDER/result.json``. A killed worker takes its torchrun (one process group) with
it; the next attempt resumes every rank from TRL's last checkpoint in the trial's folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.engine import EngineJob
    from ablate.train.loop import TrialResult

#: Files of the launch folder.
CONFIG_FILE, JOB_FILE, STEPS_FILE, RESULT_FILE = "config.yaml", "job.json", "steps.jsonl", "result.json"


def launch_command(folder: Path, processes: int) -> list[str]:
    """torchrun of :mod:`ablate.engines.trl_rank` on ``processes`` local processes (``--standalone``: a free port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "ablate.engines.trl_rank", str(folder)]


class StepReader:
    """Reads the steps rank 0 appended to ``steps.jsonl`` since the last call (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new_steps(self) -> list[tuple[int, dict[str, float]]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [(int(row["step"]), row["metrics"]) for row in map(json.loads, data[:end].splitlines())]


def train_distributed(job: EngineJob) -> TrialResult:
    """Train ``job`` with ``engine.processes`` ranks under torchrun, logging rank 0's steps through ``job.log``.

    Raises:
        RuntimeError: the ranks failed (their exit code and the last lines of their output).
    """
    from ablate.train.loop import TrialResult

    c = job.config
    with tempfile.TemporaryDirectory(prefix="ablate-trl-ranks-") as tmp:
        folder = Path(tmp)
        (folder / CONFIG_FILE).write_text(c.to_yaml(), encoding="utf-8")
        (folder / JOB_FILE).write_text(json.dumps({"workdir": str(job.workdir) if job.workdir else None}))
        reader = StepReader(folder / STEPS_FILE)
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, c.threads))}
        with open(folder / "ranks.log", "wb") as out:
            proc = subprocess.Popen(launch_command(folder, c.engine.processes), stdout=out, stderr=subprocess.STDOUT,
                                    env=env)
            try:
                while proc.poll() is None:
                    for step, metrics in reader.new_steps():
                        job.log(metrics, step)
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:  # the attempt stopped (its log raised, an interrupt): stop the ranks
                    proc.kill()
                    proc.wait()
        for step, metrics in reader.new_steps():
            job.log(metrics, step)
        if proc.returncode != 0 or not (folder / RESULT_FILE).exists():
            tail = (folder / "ranks.log").read_text(errors="replace").strip().splitlines()[-15:]
            raise RuntimeError(f"the trial's {c.engine.processes} processes failed (exit {proc.returncode}):\n"
                               + "\n".join(tail))
        data = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    data["history"] = [(int(s), m) for s, m in data["history"]]
    return TrialResult(**data)
