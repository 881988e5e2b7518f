"""Scoring one rollout: the per-token rewards [B, T], their per-component parts and the step mask."""

from __future__ import annotations

import torch

from ablate.models.rollout import Rollout
from ablate.rewards import RewardContext, compute_token_rewards, place_on_last_token, step_mask_from_grades
from ablate.tasks import Grade
from ablate.train.seeds import seeded_generator, trial_stream
from ablate.train.setup import TrialState, autocast


def prm_scores(state: TrialState, r: Rollout, grades: list[Grade]) -> dict[str, object]:
    """The learned PRM's step scores of ``r`` as ``RewardContext.extra`` (empty without a learned PRM)."""
    if state.prm is None:
        return {}
    with autocast(state):
        scores = state.prm.score(r.input_ids, r.attention_mask, r.num_prompt_tokens, grades, r.offsets, r.mask)
    return {"prm_scores": scores}


def reward_step_mask(ctx: RewardContext, token_rewards: torch.Tensor) -> torch.Tensor:
    """[B, T] 1.0 at every step end of process-style estimators (``grpo_process``).

    Every position that carries a reward counts as a step end: the last token of every reasoning
    step, the last active token (where sequence-level components put their reward) and every token
    with a non-zero reward; 0 on padding.
    """
    steps = step_mask_from_grades(ctx)  # (B, T)
    last = place_on_last_token(torch.ones(ctx.mask.shape[0], device=ctx.mask.device), ctx.mask)  # (B, T)
    return ((steps + last + (token_rewards != 0).float()) > 0).float() * ctx.mask


def score_rollout(
    state: TrialState,
    r: Rollout,
    grades: list[Grade],
    ref_logp: torch.Tensor | None,
    step: int,
    round_: int,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """Token rewards of one sampling round of RL step ``step``.

    Args:
        state: the trial (its reward table, current KL coefficient ``beta`` and learned PRM).
        r: the rollout [B, T]; grades: its B task grades; ref_logp: [B, T] reference log-probs or None.
        step, round_: seed the generator of stochastic components (``prm`` with label noise).

    Returns:
        ``(token_rewards [B, T], {component: weighted part [B, T]}, step_mask [B, T])``.
    """
    c = state.config
    ctx = RewardContext(
        mask=r.mask,
        grades=grades,
        offsets=r.offsets,
        truncated=r.truncated,
        logp=r.old_logp,
        ref_logp=ref_logp,
        generator=seeded_generator(torch.device("cpu"), *trial_stream(c), "reward", step, round_),
        extra=prm_scores(state, r, grades),
    )
    comps = {k: (w, dict(o, beta=state.beta) if k == "kl" else o) for k, (w, o) in state.components.items()}
    token_rewards, parts = compute_token_rewards(ctx, comps)
    return token_rewards, parts, reward_step_mask(ctx, token_rewards)
