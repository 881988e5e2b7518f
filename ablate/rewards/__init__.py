"""Reward components (final answer, process, KL, format, partial credit) placed on ``[B, T]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ablate.rewards import components as _components  # noqa: F401  (registers the built-ins)
from ablate.rewards.base import (
    REWARDS,
    RewardContext,
    last_token_index,
    place_on_last_token,
    step_end_tokens,
    step_mask_from_grades,
)
from ablate.rewards.options import ComponentSpec, reward_components


def compute_token_rewards(
    ctx: RewardContext,
    components: Mapping[str, tuple[float, Mapping[str, Any]]],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sum weighted reward components into one ``token_rewards`` tensor.

    Args:
        ctx: the rollout batch (mask [B, T], grades, offsets, ...).
        components: name → ``(weight, options)``; each name is looked up in :data:`REWARDS` and
            called as ``fn(ctx, **options)``.

    Returns:
        ``(token_rewards [B, T], {name: weight * component [B, T]})`` — the per-component tensors
        are already weighted, so they sum to ``token_rewards``.
    """
    total = torch.zeros(ctx.mask.shape, dtype=torch.float32, device=ctx.mask.device)
    parts: dict[str, torch.Tensor] = {}
    for name, (weight, options) in components.items():
        fn = REWARDS.get(name)
        value = weight * fn(ctx, **dict(options))
        parts[name] = value
        total = total + value
    return total, parts


__all__ = [
    "REWARDS",
    "ComponentSpec",
    "RewardContext",
    "compute_token_rewards",
    "last_token_index",
    "place_on_last_token",
    "reward_components",
    "step_end_tokens",
    "step_mask_from_grades",
]
