"""Saving and resuming a trial: ``<workdir>/trainer.pt`` holds the trial state's tensors and
counters, the history logged so far and the eval rows, written atomically (a temporary file renamed
into place).

A checkpoint that cannot be read back (cut short by a full disk, garbled, not an ablate checkpoint)
never blocks its trial: it is moved aside to ``trainer.pt.corrupt``, a :class:`CorruptCheckpointWarning`
names both files and why, and the trial starts again from step 0 (only the last checkpoint is kept,
so there is no earlier one to fall back to). A readable checkpoint of another trial is an error."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ablate.train.setup import TrialState

#: The checkpoint's file name inside a trial's working directory.
CHECKPOINT_FILE = "trainer.pt"

History = list[tuple[int, dict[str, float]]]

#: What every checkpoint holds at its top level.
_KEYS = frozenset({"key", "step", "trainer", "history"})


class CorruptCheckpointWarning(RuntimeWarning):
    """A checkpoint could not be read back; it was moved aside and its trial starts from step 0."""


@dataclass
class Resume:
    """Where a trial (re)starts: the checkpoint's step (None: a fresh start), and what was logged up to it."""

    step: int | None = None
    history: History = field(default_factory=list)
    eval_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def next_step(self) -> int:
        """The first RL step (1-based) still to run."""
        return 1 if self.step is None else self.step + 1


def state_dict(state: TrialState) -> dict[str, Any]:
    """The part of ``state`` that changes during training: model, critic, optimizer, scheduler, counters,
    the training pool."""
    return {
        "model": state.model.state_dict(),
        "critic": None if state.critic is None else state.critic.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "beta": state.beta,
        "tokens_so_far": state.tokens_so_far,
        "samples_so_far": state.samples_so_far,
        "pool": list(state.pool),
    }


def load_state_dict(state: TrialState, saved: Mapping[str, Any]) -> None:
    """Restore what :func:`state_dict` saved into a freshly set-up ``state``."""
    state.model.load_state_dict(saved["model"])
    if state.critic is not None and saved["critic"] is not None:
        state.critic.load_state_dict(saved["critic"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    state.beta = saved["beta"]
    state.tokens_so_far = saved["tokens_so_far"]
    state.samples_so_far = saved["samples_so_far"]
    state.pool = list(saved.get("pool", state.pool))  # checkpoints from before the pool was saved: all of it


def checkpoint_path(workdir: str | os.PathLike[str] | None) -> Path | None:
    """``<workdir>/trainer.pt``, or None without a working directory (no checkpoints)."""
    return Path(workdir) / CHECKPOINT_FILE if workdir is not None else None


def resume(state: TrialState, path: Path | None) -> Resume:
    """Load the checkpoint at ``path`` into ``state`` if there is one; a fresh :class:`Resume` otherwise.

    Raises:
        RuntimeError: the checkpoint belongs to another trial (another trial key).
    """
    if path is None or not path.exists():
        return Resume()
    key = state.config.trial_key()
    saved = read_checkpoint(path, state.device)
    if saved is None:
        return Resume()
    if saved["key"] != key:
        raise RuntimeError(f"{path} belongs to trial {saved['key']}, not {key}")
    load_state_dict(state, saved["trainer"])
    return Resume(
        step=saved["step"],
        history=[(int(s), dict(m)) for s, m in saved["history"]],
        eval_rows=[dict(r) for r in saved.get("eval_problems", [])],  # absent in checkpoints of older versions
    )


def read_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint at ``path``, or None when it cannot be read back: then it is moved aside to
    ``<path>.corrupt`` (replacing an older one) and a :class:`CorruptCheckpointWarning` says so."""
    try:
        saved = torch.load(path, map_location=device, weights_only=False)
        if not isinstance(saved, dict) or not _KEYS <= saved.keys():
            raise ValueError("not an ablate checkpoint (its top-level keys are missing)")
        return saved
    except Exception as exc:  # noqa: BLE001 - torch.load raises many types for a cut or garbled file
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        why = (str(exc).strip().splitlines() or [""])[0]
        warnings.warn(f"{path}: the checkpoint cannot be read ({type(exc).__name__}: {why}); moved to {aside}; "
                      "the trial starts again from step 0", CorruptCheckpointWarning, stacklevel=2)
        return None


#: Held while a checkpoint file is written and renamed: the trials of a population (threads of one process)
#: save at the same steps, and one at a time each holds its last checkpoint and the next only while it writes,
#: so a process holds at most one checkpoint more than it has trials (``ablate.running.footprint``).
_WRITING = threading.Lock()


def save_checkpoint(
    state: TrialState, path: Path, step: int, history: History, eval_rows: list[dict[str, Any]]
) -> None:
    """Write the checkpoint of ``state`` after RL step ``step`` to ``path`` (via a temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    payload = {"key": state.config.trial_key(), "step": step, "trainer": state_dict(state), "history": history,
               "eval_problems": eval_rows}
    with _WRITING:  # the members of a population write one at a time: one holds two checkpoints at once, not all
        try:
            # Through a Python file object: a full disk then raises OSError(ENOSPC) naming the file (given
            # a path, torch's C++ writer only says "basic_ios::clear: iostream error").
            with open(tmp, "wb") as fh:
                torch.save(payload, fh)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a partial file helps nobody, and its space may be what the next write needs
            raise
        os.replace(tmp, path)
