"""The built-in reward components. Each returns a ``[B, T]`` tensor, zero where ``mask == 0``.

| name | granularity | placement | value |
|---|---|---|---|
| ``final_answer`` | sequence | last token | 1 if the final answer is correct else 0 |
| ``prm`` | step | last token of each step | ``correct`` / ``incorrect`` per step (oracle, noisy or learned labels) |
| ``kl`` | token | every token | ``-beta * k1 = -beta * (logp - ref_logp)`` (KL in the reward, InstructGPT) |
| ``format`` | sequence or local | last token, or the tokens where the format breaks | 1 if well-formed (sequence) / ``-1`` per offending token (local) |
| ``partial`` | sequence | last token | the task's partial credit in [0, 1] |
| ``missing_eos`` | sequence | last token | -1 when the completion was cut at the length limit |
| ``soft_overlong`` | sequence | last token | DAPO's soft overlong punishment (0 down to -1) |

Component weights are applied by :func:`ablate.rewards.compute_token_rewards`, not here.
"""

from __future__ import annotations

import torch

from ablate.errors import ConfigError
from ablate.rewards.base import REWARDS, RewardContext, place_on_last_token, step_end_tokens

PRM_SOURCES = ("oracle", "noisy", "learned")
FORMAT_MODES = ("sequence", "local")


@REWARDS.register("final_answer")
def final_answer(ctx: RewardContext) -> torch.Tensor:
    """Outcome reward: 1 for a correct final answer, else 0, on the last active token.

    Shapes: ``ctx.mask`` [B, T] → [B, T]. Outcome supervision (Lightman et al., 2024; DeepSeekMath).
    """
    values = torch.tensor([float(g.answer_correct) for g in ctx.grades], device=ctx.mask.device)
    return place_on_last_token(values, ctx.mask)


@REWARDS.register("prm")
def prm(
    ctx: RewardContext,
    *,
    source: str = "oracle",
    flip_prob: float = 0.0,
    correct: float = 1.0,
    incorrect: float = 0.0,
    normalize: bool = True,
) -> torch.Tensor:
    """Process reward: one reward per reasoning step, on the last token of that step.

    Step labels come from ``source``:

    * ``"oracle"`` — the task's step checker (a perfect PRM);
    * ``"noisy"`` — the oracle label flipped with probability ``flip_prob`` per step (independently,
      drawn from ``ctx.generator``), to study how PRM quality matters;
    * ``"learned"`` — per-step probabilities of correctness from a learned PRM, passed in
      ``ctx.extra["prm_scores"]`` (B lists, one score in [0, 1] per step); the reward is
      ``incorrect + score * (correct - incorrect)``.

    A correct step earns ``correct``, an incorrect one ``incorrect``; with ``normalize`` both are
    divided by the reference solution's number of steps, so that a fully correct solution's
    process rewards sum to ``correct`` (comparable to the final-answer reward).

    Shapes: ``ctx.mask`` [B, T] → [B, T]. Process supervision: Lightman et al. (2024) "Let's Verify
    Step by Step"; DeepSeekMath (Shao et al., 2024) §4.1.3.
    """
    if source not in PRM_SOURCES:
        raise ConfigError(f"reward.prm.source: unknown PRM source {source!r}; allowed: {', '.join(PRM_SOURCES)}")
    if not 0.0 <= flip_prob <= 1.0:
        raise ConfigError(f"reward.prm.flip_prob must be in [0, 1], got {flip_prob}")
    out = torch.zeros(ctx.mask.shape, dtype=torch.float32, device=ctx.mask.device)
    lengths = ctx.lengths.tolist()
    scores = ctx.extra.get("prm_scores") if source == "learned" else None
    if source == "learned" and scores is None:
        raise ConfigError("reward.prm.source=learned needs a learned PRM's scores (ctx.extra['prm_scores'])")
    for b, (grade, offs) in enumerate(zip(ctx.grades, ctx.offsets)):
        ends = step_end_tokens(grade, offs, lengths[b])
        scale = 1.0 / max(grade.num_reference_steps, 1) if normalize else 1.0
        for k, (step, t) in enumerate(zip(grade.steps, ends)):
            if t < 0:
                continue
            if source == "learned":
                p = float(scores[b][k])  # type: ignore[index]
                value = incorrect + p * (correct - incorrect)
            else:
                label = step.correct
                if source == "noisy" and flip_prob > 0:
                    flip = torch.rand((), generator=ctx.generator).item() < flip_prob
                    label = label != flip
                value = correct if label else incorrect
            out[b, t] += value * scale
    return out * ctx.mask.to(out.dtype)


@REWARDS.register("kl")
def kl(ctx: RewardContext, *, beta: float = 0.05, estimator: str = "k1") -> torch.Tensor:
    """Per-token KL penalty in the reward: ``-beta * kl_t`` on every active token.

    ``kl_t`` is Schulman's ``k1 = logp - ref_logp`` by default (its sum over a sequence is an
    unbiased estimate of KL(pi || ref) for samples from pi), computed on the behaviour log-probs,
    so it carries no gradient: the policy is pushed toward the reference only through the
    advantages (InstructGPT, Ouyang et al. 2022; Ziegler et al. 2019).

    Shapes: ``ctx.logp``, ``ctx.ref_logp``, ``ctx.mask`` [B, T] → [B, T].
    """
    if ctx.logp is None or ctx.ref_logp is None:
        raise ConfigError("the kl reward needs behaviour and reference log-probs (a reference policy)")
    from ablate.rl import kl_penalty

    per_token = kl_penalty(ctx.logp.detach().float(), ctx.ref_logp.detach().float(), estimator=estimator)
    return -beta * per_token * ctx.mask.to(per_token.dtype)


@REWARDS.register("format")
def format_reward(ctx: RewardContext, *, mode: str = "sequence") -> torch.Tensor:
    """Format reward.

    * ``mode="sequence"``: 1 on the last active token when the whole completion follows the task's
      format, else 0 (the DeepSeek-R1 style format reward);
    * ``mode="local"``: -1 on every token that overlaps a span where the format breaks (a format
      error at the very end, such as a missing closing tag, falls on the last active token), so
      the penalty lands where the mistake is.

    Shapes: ``ctx.mask`` [B, T] → [B, T].
    """
    if mode not in FORMAT_MODES:
        raise ConfigError(f"reward.format.mode: unknown mode {mode!r}; allowed: {', '.join(FORMAT_MODES)}")
    if mode == "sequence":
        values = torch.tensor([float(g.format_ok) for g in ctx.grades], device=ctx.mask.device)
        return place_on_last_token(values, ctx.mask)
    out = torch.zeros(ctx.mask.shape, dtype=torch.float32, device=ctx.mask.device)
    lengths = ctx.lengths.tolist()
    for b, (grade, offs) in enumerate(zip(ctx.grades, ctx.offsets)):
        n = lengths[b]
        if n == 0 or grade.format_ok:
            continue
        offs = list(offs)[:n]
        text_end = max((e for _, e in offs), default=0)
        for start, end in grade.format_errors:
            hit = [i for i, (a, e) in enumerate(offs) if e > a and a < max(end, start + 1) and e > start]
            if not hit or start >= text_end:
                hit = [n - 1]
            for i in hit:
                out[b, i] = -1.0
        if not grade.format_errors:
            out[b, n - 1] = -1.0
    return out * ctx.mask.to(out.dtype)


@REWARDS.register("partial")
def partial(ctx: RewardContext) -> torch.Tensor:
    """Partial credit (e.g. the fraction of correct answer digits), in [0, 1], on the last token.

    Shapes: ``ctx.mask`` [B, T] → [B, T].
    """
    values = torch.tensor([float(g.partial) for g in ctx.grades], device=ctx.mask.device)
    return place_on_last_token(values, ctx.mask)


@REWARDS.register("missing_eos")
def missing_eos(ctx: RewardContext) -> torch.Tensor:
    """-1 on the last token of a completion cut at the length limit without EOS, else 0.

    Shapes: ``ctx.mask`` [B, T], ``ctx.truncated`` [B] → [B, T].
    """
    if ctx.truncated is None:
        raise ConfigError("the missing_eos reward needs the rollout's truncated flags")
    return place_on_last_token(-ctx.truncated.float(), ctx.mask)


@REWARDS.register("soft_overlong")
def soft_overlong(ctx: RewardContext, *, max_len: int, cache: int) -> torch.Tensor:
    """DAPO's soft overlong punishment on the last token (Yu et al., 2025, eq. 13).

    For a completion of ``L`` tokens: 0 when ``L <= max_len - cache``; ``((max_len - cache) - L) /
    cache`` (from 0 down to -1) when ``max_len - cache < L <= max_len``; -1 beyond ``max_len``.

    Shapes: ``ctx.mask`` [B, T] → [B, T].
    """
    if cache <= 0 or cache > max_len:
        raise ConfigError(f"soft overlong: cache must be in (0, max_len={max_len}], got {cache}")
    length = ctx.lengths.float()
    start = float(max_len - cache)
    values = torch.where(
        length <= start,
        torch.zeros_like(length),
        torch.where(length <= max_len, (start - length) / cache, -torch.ones_like(length)),
    )
    return place_on_last_token(values, ctx.mask)
