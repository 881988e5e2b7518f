"""A trl trial of ``engine.processes = N > 1``: N processes under torchrun, the worker's ``log`` fed from rank 0.

The worker's process (the attempt: heartbeats, the MLflow run, the outbox) starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m ablate.engines.trl_rank FOLDER`` and
stays the one that logs. Every rank runs :func:`ablate.engines.trl.train_here` on the trial's configuration
(``FOLDER/config.yaml``): TRL's ``GRPOTrainer`` under accelerate, gloo on CPU, NCCL on GPU, each rank generating
and training on its share of every minibatch. Rank 0 evaluates and appends each logged step to
``FOLDER/steps.jsonl``, which the worker reads as it grows and hands to the attempt's ``log``; at the end it
writes the trial's result to ``FOLDER/result.json``.

Ranks die with their trial (issue 55): torchrun starts each rank in a session of its own, so killing the worker
or its process group used to leave torchrun and its ranks training, writing checkpoints into the trial's folder
that the retry then resumed from. On Linux the chain is tied by parent-death signals: torchrun is started
through :func:`launcher_main`, which asks the kernel for SIGKILL when the worker dies (``prctl
PR_SET_PDEATHSIG``, kept across its ``exec`` of torchrun), and each rank asks the same of torchrun
(:func:`die_with_parent` in :mod:`ablate.engines.trl_rank`). Whatever kills the worker, torchrun and then every
rank get SIGKILL; the next attempt resumes from TRL's last checkpoint written before the kill. A launch folder
left by a killed worker (``ablate-trl-ranks-*`` in the temporary directory) is removed by the next trl trial on
the machine (:func:`sweep_stale_folders`: its owner's pid is gone).
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
    from ablate.engines.base import EngineJob
    from ablate.train.loop import TrialResult

#: Files of the launch folder.
CONFIG_FILE, JOB_FILE, STEPS_FILE, RESULT_FILE = "config.yaml", "job.json", "steps.jsonl", "result.json"
#: The launch folder's owner: the pid of the worker that made it, and that process's start time (a later
#: process given the same pid is not its owner).
OWNER_FILE = "owner.pid"
#: The launch folders' prefix in the temporary directory.
PREFIX = "ablate-trl-ranks-"
#: prctl's option: the signal the kernel sends a process when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere
    nothing), and exit now if the parent is already gone (it died before the call): this process's parent
    is no longer ``parent`` (default: the parent it had just before the call)."""
    parent = os.getppid() if parent is None else parent
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def launch_command(folder: Path, processes: int) -> list[str]:
    """torchrun of :mod:`ablate.engines.trl_rank` on ``processes`` local processes (``--standalone``: a free port),
    started through :func:`launcher_main` so that it dies with this process."""
    return [sys.executable, "-m", "ablate.engines.trl_ranks", str(os.getpid()), sys.executable, "-m",
            "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", "-m", "ablate.engines.trl_rank",
            str(folder)]


def launcher_main(argv: list[str]) -> None:
    """``python -m ablate.engines.trl_ranks PARENT_PID PROGRAM ARGS...``: die with the parent, then become
    ``PROGRAM ARGS...`` (``exec`` keeps the parent-death signal)."""
    die_with_parent(int(argv[0]))
    os.execv(argv[1], argv[1:])


def sweep_stale_folders(root: str | Path | None = None) -> list[Path]:
    """Remove the launch folders under ``root`` (default: the temporary directory) whose owner's pid no longer
    runs: left by a worker that was killed. Returns what was removed."""
    import shutil

    from ablate.store.queue import pid_alive

    gone = []
    for folder in Path(root or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            pid, _, started = (folder / OWNER_FILE).read_text().partition(" ")
            owner = int(pid)
        except (OSError, ValueError):
            continue  # not ours to judge (being made, or another version's)
        if not pid_alive(owner, started or None):
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


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
    from ablate.store.queue import process_start
    from ablate.train.loop import TrialResult

    c = job.config
    sweep_stale_folders()
    with tempfile.TemporaryDirectory(prefix=PREFIX) as tmp:
        folder = Path(tmp)
        (folder / OWNER_FILE).write_text(f"{os.getpid()} {process_start(os.getpid()) or ''}".strip())
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


if __name__ == "__main__":
    launcher_main(sys.argv[1:])
