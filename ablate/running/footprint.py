"""How much disk a study uses at its peak, estimated before it runs (``ablate show``, ``ablate run``), and
how many packed trials a worker trains at once (:func:`pack_size`, from the device memory a member takes).

Where the bytes go, measured on quickstart at its default budget (8 trials of tiny-llama, 2 workers,
Intel Xeon, sampled every 0.3 s): ``runs/`` peaked at 23.4 MB, while two trials each held a 9.7 MB
checkpoint and one was writing the next; the SQLite MLflow store grew by 5.3 MB (18,120 logged metric
values, ~290 bytes each with their indexes), its artefacts by 61 kB a trial; the report took 3.0 MB.

The estimate is an upper bound of each part:

- **checkpoints** (``runs/<study>/trials/<key>/trainer.pt``): each running trial keeps one, and writes
  the next beside it before the rename, so ``2 x workers`` checkpoints at worst. A worker training a
  population of K trials (``--pack K``) holds K, and the members write one at a time, so ``K + 1`` at worst
  (measured within 1.3x at K = 1, 4, 8: benchmarks/bench_disk.py). A checkpoint holds the
  policy's float32 weights and AdamW's two float32 moments (12 bytes a parameter; the same again for a
  critic, a copy of the backbone), the history logged so far and the training pool's order. A finished trial's checkpoint is
  deleted (``--keep-checkpoints`` keeps them all: then every trial's counts).
- **the study store** (a journal file): a few kB a trial, with its heartbeats.
- **a local MLflow store** (``sqlite:///`` or a folder; a tracking server's disk is not ours to count):
  every logged value, and each trial's files.
- **the report**: its figures and tables.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.disk import human_bytes, local_tracking_folder

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.study import TrialSpec

#: Bytes a checkpoint holds per trainable parameter: float32 weights and AdamW's two float32 moments.
CHECKPOINT_BYTES_PER_PARAMETER = 12
#: Bytes a checkpoint holds per problem of the training pool (``task.train_size``; a pickled index).
POOL_BYTES_PER_PROBLEM = 10
#: Bytes of a checkpoint's file format around its tensors (names, headers, the zip directory).
CHECKPOINT_OVERHEAD = 64_000
#: Metrics a trial logs per logged step (43 in quickstart; KL, critic and PRM settings add a few).
METRICS_PER_STEP = 50
#: Bytes of one logged value in a checkpoint's history (a pickled name -> float entry).
HISTORY_BYTES_PER_VALUE = 40
#: Bytes of one logged value in a SQLite MLflow store (row and indexes; 290 measured on quickstart).
TRACKING_BYTES_PER_VALUE = 300
#: Bytes of a trial's files in MLflow besides history.csv and eval_problems.csv (config, samples, result).
TRACKING_FILES_BYTES = 10_000
#: Bytes of one logged value in history.csv; of one eval problem's row in eval_problems.csv.
CSV_BYTES_PER_VALUE = 14
CSV_BYTES_PER_PROBLEM = 200
#: Bytes of the study store per trial (its records and heartbeats; 2.2 kB measured on quickstart).
JOURNAL_BYTES_PER_TRIAL = 5_000
#: Bytes of a report: its fixed part and per arm (3.0 MB measured for quickstart's 4 arms).
REPORT_BYTES = 1_500_000
REPORT_BYTES_PER_ARM = 500_000


@functools.lru_cache(maxsize=32)
def parameter_count(model: str) -> int | None:
    """The parameters of ``model.name``: a zoo model's (instantiated on the ``meta`` device, no memory),
    or a local checkpoint directory's (from its ``config.json``, the same way); None when unknown."""
    from ablate.models import MODELS

    if model in MODELS:
        return MODELS.get(model).num_parameters()
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        return None
    try:
        from transformers import AutoConfig

        from ablate.models.zoo import meta_parameter_count

        return meta_parameter_count(AutoConfig.from_pretrained(path, local_files_only=True))
    except Exception:  # noqa: BLE001 - an estimate only: an unreadable config is found when the trial runs
        return None


def checkpoint_copies(config: TrialConfig) -> int:
    """How many checkpoints a running trial of ``config`` holds at once at most: 0 when it saves none
    (``train.checkpoint_every`` 0 or above ``train.steps``), 1 when it saves once (the temporary file, then
    the checkpoint), 2 when it saves again (the next beside the last, until the rename). A trial of
    ``engine.name: trl`` keeps TRL's last 2 checkpoint folders (``save_total_limit``) and writes the third
    before TRL removes the oldest: 3 at once (issue 55: a trl trial held 3, and a disk sized for 2 filled)."""
    every = config.train.checkpoint_every
    most = 3 if config.engine.name == "trl" else 2
    return 0 if every == 0 else min(most, config.train.steps // every)


def checkpoint_bytes(config: TrialConfig) -> int | None:
    """The size of one checkpoint of a trial of ``config`` at its last step (an upper bound); None when
    its model's size is unknown."""
    params = parameter_count(config.model.name)
    if params is None:
        return None
    tensors = params * CHECKPOINT_BYTES_PER_PARAMETER * (2 if config.critic.enabled else 1)
    return (tensors + logged_values(config) * HISTORY_BYTES_PER_VALUE + config.task.train_size * POOL_BYTES_PER_PROBLEM
            + CHECKPOINT_OVERHEAD)


def logged_values(config: TrialConfig) -> int:
    """About how many metric values a trial of ``config`` logs (every ``train.log_every`` steps, and step 0)."""
    return (config.train.steps // config.train.log_every + 1) * METRICS_PER_STEP


def tracking_bytes(config: TrialConfig) -> int:
    """About how much a trial of ``config`` adds to a local MLflow store (logged values and files)."""
    values = logged_values(config)
    return (values * (TRACKING_BYTES_PER_VALUE + CSV_BYTES_PER_VALUE) + TRACKING_FILES_BYTES
            + config.eval.n_problems * CSV_BYTES_PER_PROBLEM)


#: Where a study's bytes land: ``--runs`` (checkpoints and the store), a local MLflow store, the report.
PARTS = ("runs", "tracking", "report")


@dataclass(frozen=True)
class DiskEstimate:
    """A study's peak disk use, by where it lands (bytes; upper bounds).

    Attributes:
        checkpoint: one trial's checkpoint (the largest), None when unknown.
        copies: checkpoints a trial holds at once while it writes one (0, 1 or 2: :func:`checkpoint_copies`);
            one trial per worker process writes at a time.
        checkpoints: the checkpoints under ``--runs`` at their peak (the running trials', and with
            ``--keep-checkpoints`` every finished trial's).
        kept: the checkpoints left when the study ends (0 unless ``--keep-checkpoints``).
        journal: the study store.
        tracking: what a local MLflow store gains (0 for a tracking server).
        report: the report folder.
        workers: the running trials counted (the worker processes times the population size); writers: the
            worker processes among them (each writes one checkpoint at a time); trials: the trials still to run.
    """

    checkpoint: int | None
    copies: int
    checkpoints: int
    kept: int
    journal: int
    tracking: int
    report: int
    workers: int
    trials: int
    writers: int = 1

    @property
    def runs(self) -> int:
        """The peak under ``--runs``: the store and the checkpoints."""
        return self.journal + self.checkpoints

    @property
    def total(self) -> int:
        """The peak with every part on one disk (:meth:`on_disk`)."""
        return self.on_disk(PARTS)

    def on_disk(self, parts: Collection[str]) -> int:
        """The peak on a disk that holds ``parts`` (of :data:`PARTS`: ``runs`` = the checkpoints and the
        store, ``tracking``, ``report``). The report is written once the last trial's checkpoint is
        deleted, so on one disk it counts against the checkpoints' peak, not on top of it."""
        runs, report = "runs" in parts, "report" in parts
        if runs and report:
            need = self.journal + max(self.checkpoints, self.kept + self.report)
        else:
            need = self.runs if runs else self.report if report else 0
        return need + (self.tracking if "tracking" in parts else 0)

    def text(self) -> str:
        """One line for people."""
        if self.copies == 0:
            ckpt = "no checkpoint is saved"
        elif self.checkpoint is None:
            ckpt = "checkpoints of a model of unknown size not counted"
        else:
            n = self.workers + (self.copies - 1) * self.writers
            ckpt = (f"{n} checkpoint{'s' if n != 1 else ''} of {human_bytes(self.checkpoint)} while {self.workers} "
                    f"trial{'s' if self.workers != 1 else ''} run" + (", and every finished trial's" if self.kept else ""))
        return (f"~{human_bytes(self.total)} at peak: runs/ {human_bytes(self.runs)} ({ckpt}), MLflow "
                f"{human_bytes(self.tracking)} ({self.trials} trials), report {human_bytes(self.report)} (written "
                "after the checkpoints are deleted)")


def estimate_disk(specs: list[TrialSpec], *, workers: int = 1, to_run: int | None = None,
                  tracking_uri: str | None = None, keep_checkpoints: bool = False, pack: int = 1) -> DiskEstimate:
    """The peak disk use of running ``specs`` on ``workers`` local workers.

    Args:
        specs: the study's trials at one budget.
        workers: local worker processes.
        pack: the trials one worker trains at once as a population (``--pack``; 1 for trials that do not
            set ``train.packed``): each member saves its own checkpoints, at the same steps as the others.
        to_run: how many of them still run (what MLflow and kept checkpoints gain); all by default.
        tracking_uri: the MLflow store; a server's disk is not counted.
        keep_checkpoints: ``--keep-checkpoints``: every trial run keeps its checkpoint.
    """
    configs = [s.config for s in specs]
    n = len(specs) if to_run is None else max(0, min(to_run, len(specs)))
    saved = [c for c in configs if checkpoint_copies(c) > 0]
    sizes = [b for b in (checkpoint_bytes(c) for c in saved) if b is not None]
    largest = max(sizes) if sizes else None
    copies = max((checkpoint_copies(c) for c in saved), default=0)
    running = max(1, min(workers * max(1, pack), n or 1))
    writers = min(workers, running)  # processes: the trials of one write their checkpoints one at a time
    kept = n * largest if keep_checkpoints and largest is not None else 0
    held = running + (copies - 1) * writers if copies else 0
    checkpoints = (0 if largest is None else held * largest) + kept
    tracking = 0
    if tracking_uri is None or local_tracking_folder(tracking_uri) is not None:
        mean = sum(tracking_bytes(c) for c in configs) / max(1, len(configs))
        tracking = int(mean * n)
    arms = len({s.arm for s in specs})
    return DiskEstimate(checkpoint=largest, copies=copies, checkpoints=checkpoints, kept=kept,
                        journal=len(specs) * JOURNAL_BYTES_PER_TRIAL, tracking=tracking,
                        report=REPORT_BYTES + REPORT_BYTES_PER_ARM * arms, workers=running, trials=n,
                        writers=writers)


# ------------------------------------------------------------------------------- populations


def pack_size(pack: int | str, config: TrialConfig) -> int:
    """The population size ``--pack`` gives trials like ``config`` (1 unless ``train.packed``).

    ``auto``: 1 on a CPU, where a population measured no faster than the same trials one after another
    (benchmarks/RESULTS.md, bench_study.py --pack); on a GPU as many as :func:`gpu_member_bytes` says fit
    in half its free memory, at most :data:`MAX_AUTO_PACK` (an estimate, not yet measured on a GPU)."""
    if not config.train.packed:
        return 1
    if pack != "auto":
        return int(pack)
    from ablate.config import resolve_device

    device = resolve_device(config)
    if device.type != "cuda":
        return 1
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    per_member = gpu_member_bytes(parameter_count(config.model.name) or 0)
    return max(1, min(MAX_AUTO_PACK, int(0.5 * free // per_member)))


#: Largest population ``--pack auto`` forms.
MAX_AUTO_PACK = 64


def gpu_member_bytes(params: int) -> int:
    """Device memory one member is assumed to take: 32 bytes a parameter (float32 weights, gradient, AdamW's
    two moments, the stacked copy of a forward, a reference model) and 256 MiB of activations."""
    return 32 * params + 256 * 2**20


__all__ = [
    "MAX_AUTO_PACK",
    "gpu_member_bytes",
    "pack_size",
    "CHECKPOINT_BYTES_PER_PARAMETER",
    "PARTS",
    "DiskEstimate",
    "checkpoint_bytes",
    "checkpoint_copies",
    "estimate_disk",
    "logged_values",
    "parameter_count",
    "tracking_bytes",
]
