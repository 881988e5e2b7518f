"""Saving and resuming a trial: ``<workdir>/trainer.pt`` holds the trial state's tensors and
counters, the history logged so far and the eval rows, written atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ablate.train.setup import TrialState

#: The checkpoint's file name inside a trial's working directory.
CHECKPOINT_FILE = "trainer.pt"

History = list[tuple[int, dict[str, float]]]


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
    """The part of ``state`` that changes during training: model, critic, optimizer, scheduler, counters."""
    return {
        "model": state.model.state_dict(),
        "critic": None if state.critic is None else state.critic.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "beta": state.beta,
        "tokens_so_far": state.tokens_so_far,
        "samples_so_far": state.samples_so_far,
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
    saved = torch.load(path, map_location=state.device, weights_only=False)
    if saved["key"] != key:
        raise RuntimeError(f"{path} belongs to trial {saved['key']}, not {key}")
    load_state_dict(state, saved["trainer"])
    return Resume(
        step=saved["step"],
        history=[(int(s), dict(m)) for s, m in saved["history"]],
        eval_rows=[dict(r) for r in saved.get("eval_problems", [])],  # absent in checkpoints of older versions
    )


def save_checkpoint(
    state: TrialState, path: Path, step: int, history: History, eval_rows: list[dict[str, Any]]
) -> None:
    """Write the checkpoint of ``state`` after RL step ``step`` to ``path`` (via a temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"key": state.config.trial_key(), "step": step, "trainer": state_dict(state), "history": history,
                "eval_problems": eval_rows}, tmp)
    os.replace(tmp, path)
