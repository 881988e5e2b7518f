"""The NaN guard: a trial stops at the first non-finite loss, reward, advantage or gradient."""

from __future__ import annotations

import torch


class NonFiniteError(RuntimeError):
    """A NaN or inf appeared in a loss, a reward or a gradient; the message names step and quantity."""


def check_finite(value: torch.Tensor, quantity: str, step: int) -> None:
    """Raise :class:`NonFiniteError` naming ``quantity`` and RL ``step`` if ``value`` holds a NaN or inf."""
    if not torch.isfinite(value).all():
        raise NonFiniteError(f"non-finite {quantity} at RL step {step}: stopping the trial")
