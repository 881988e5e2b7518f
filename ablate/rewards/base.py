"""Reward components and their placement on the ``[B, T]`` token-reward tensor.

Reward *granularity* is where credit is given (DESIGN.md):

* a sequence-level reward (final answer, whole-sequence format check, partial credit, length
  penalties) is placed on the **last active token** of its completion;
* a step reward (a process reward model's score of one reasoning step) on the **last token of
  that step**;
* a token reward (the KL penalty to a reference policy) on **every active token**.

Every component is a pure function ``component(ctx, **options) -> [B, T]`` registered in
:data:`REWARDS`; the trainer sums the weighted components into ``token_rewards`` and logs each one
separately. Positions where ``mask == 0`` are always exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ablate.registry import Registry
from ablate.tasks.base import Grade, char_spans_to_token_spans

#: Reward components by name: ``fn(ctx: RewardContext, **options) -> Tensor [B, T]``.
REWARDS: Registry[Callable[..., torch.Tensor]] = Registry("reward component")


@dataclass
class RewardContext:
    """Everything a reward component may look at, for one rollout batch of B completions.

    Attributes:
        mask: [B, T] 1 on generated tokens (EOS included), 0 on padding.
        grades: B task grades of the completions (:class:`ablate.tasks.Grade`).
        offsets: B lists of per-token ``(start, end)`` character offsets into the completion text.
        truncated: [B] bool, True where the completion hit the length limit without EOS.
        logp: [B, T] behaviour log-probs of the sampled tokens (needed by ``kl``), or None.
        ref_logp: [B, T] reference-policy log-probs of the sampled tokens (``kl``), or None.
        generator: random source for stochastic components (``prm`` with label noise).
        extra: per-component precomputed inputs (e.g. a learned PRM's step scores).
    """

    mask: torch.Tensor
    grades: Sequence[Grade]
    offsets: Sequence[Sequence[tuple[int, int]]]
    truncated: torch.Tensor | None = None
    logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    generator: torch.Generator | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = self.mask.shape[0]
        if len(self.grades) != b or len(self.offsets) != b:
            raise ValueError(
                f"RewardContext: mask has {b} rows but {len(self.grades)} grades and "
                f"{len(self.offsets)} offset lists"
            )

    @property
    def lengths(self) -> torch.Tensor:
        """[B] number of active tokens per completion."""
        return self.mask.sum(dim=1).long()


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last active token of each row.

    Args:
        mask: [B, T] 0/1 mask (active tokens need not be contiguous).

    Returns:
        [B] long; 0 for a row with no active token.
    """
    t = mask.shape[1]
    positions = torch.arange(t, device=mask.device).expand_as(mask)
    return torch.where(mask > 0, positions, torch.zeros_like(positions)).max(dim=1).values


def place_on_last_token(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place one value per sequence on its last active token.

    Args:
        values: [B] one reward per completion.
        mask: [B, T].

    Returns:
        [B, T] zeros except ``out[b, last(b)] = values[b]`` (all zeros for an empty row).
    """
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    idx = last_token_index(mask)
    has_tokens = mask.sum(dim=1) > 0
    out[torch.arange(mask.shape[0], device=mask.device), idx] = values.to(out.dtype) * has_tokens.to(out.dtype)
    return out


def step_end_tokens(grade: Grade, offsets: Sequence[tuple[int, int]], num_active: int) -> list[int]:
    """Token index of the last token of each step of ``grade`` (one entry per step, in order).

    A step whose characters no sampled token covers (cannot happen for text decoded from the
    tokens, but can for a hand-made grade) gets -1 and receives no reward. Indices are clamped
    to the active tokens.
    """
    spans = char_spans_to_token_spans(list(offsets)[:num_active], [s.span for s in grade.steps])
    return [last - 1 if last > first else -1 for first, last in spans]


def step_mask_from_grades(ctx: RewardContext) -> torch.Tensor:
    """[B, T] 1.0 at the last token of every reasoning step found in each completion.

    This is the ``step_mask`` that process-style advantage estimators (``grpo_process``) use.
    """
    out = torch.zeros(ctx.mask.shape, dtype=torch.float32, device=ctx.mask.device)
    lengths = ctx.lengths.tolist()
    for b, (grade, offs) in enumerate(zip(ctx.grades, ctx.offsets)):
        for t in step_end_tokens(grade, offs, lengths[b]):
            if t >= 0:
                out[b, t] = 1.0
    return out * ctx.mask.to(out.dtype)
