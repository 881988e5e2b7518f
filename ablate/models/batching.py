"""Where a thread's model computations go: itself, or a batcher that computes them with other trials'.

The model code (:mod:`ablate.models.logprobs`, :mod:`ablate.models.fast_decode`, the update's backward)
asks :func:`active_batcher` at its three heavy calls; in a member thread of a population
(:mod:`ablate.train.population`) the answer is that population's batcher, elsewhere None and the call
runs as it always has. A batcher may decline a model (returns None), which is then computed solo.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

_LOCAL = threading.local()


class Batcher(Protocol):
    """The three calls a population batches (see :class:`ablate.train.population.MemberBatcher`)."""

    def trunk(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              num_prompt_tokens: int) -> torch.Tensor | None:
        """The final hidden states [B, L, H] of ``model`` on [B, L] inputs, or None to compute them solo."""
        ...

    def decoder(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                max_new_tokens: int) -> Any | None:
        """An incremental decoder (``prefill``/``step``), or None to decode solo."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, joined with the other members' backward passes."""
        ...

    def at(self, step: int, phase: str) -> None:
        """The trial's position: RL step and phase (see :func:`at`)."""
        ...


def active_batcher() -> Batcher | None:
    """This thread's batcher (None outside a population)."""
    return getattr(_LOCAL, "batcher", None)


@contextmanager
def batching(batcher: Batcher) -> Iterator[None]:
    """Route this thread's model computations through ``batcher`` inside the block."""
    previous = active_batcher()
    _LOCAL.batcher = batcher
    try:
        yield
    finally:
        _LOCAL.batcher = previous


def at(step: int, phase: str) -> None:
    """Tell the thread's batcher (if any) where the trial is: RL step ``step``, in ``phase`` (``collect``,
    ``update`` or ``eval``); a population computes the members that are furthest behind first."""
    batcher = active_batcher()
    if batcher is not None:
        batcher.at(step, phase)


def backward(loss: torch.Tensor) -> None:
    """``loss.backward()``, through the thread's batcher when there is one."""
    batcher = active_batcher()
    if batcher is None:
        loss.backward()
    else:
        batcher.backward(loss)
