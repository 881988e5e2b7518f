"""The PPO update of one RL step: advantages, then epochs over minibatches, gradient accumulation
over micro-batches inside each minibatch, one optimizer step per minibatch.

Shapes: B completions, P prompt tokens, T completion tokens; ``rows`` index a minibatch, ``micro`` a
micro-batch of it. The loss of a micro-batch is normalized by totals of its whole minibatch
(:func:`ablate.rl.step_totals`), so accumulation gives the full-minibatch gradient. With more than one
micro-batch (``algo.grad_accum``), the micro-batches are length buckets: the minibatch's rows sorted by
completion length, and each micro-batch cut to the positions its own rows use (its longest prompt and
completion), so that its forward and backward skip the padding the whole batch carries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ablate.models.batching import backward
from ablate.models.logprobs import token_logprobs, token_logprobs_and_entropy
from ablate.rl import (
    StepTotals,
    aggregate_loss,
    compute_advantages,
    effective_normalizer,
    kl_penalty,
    masked_mean,
    mismatch_metrics,
    policy_loss_from_config,
    rollout_correction_weights,
    row_signs,
    step_totals,
    value_loss,
)
from ablate.rl.advantages import constant_group_rows, constant_groups_have_zero_advantage
from ablate.train.batch import StepBatch, truncated_leave_statistics
from ablate.train.guards import check_finite
from ablate.train.seeds import seeded_generator, trial_stream
from ablate.train.setup import TrialState, autocast

#: The loss parts logged as ``loss/<part>`` (sums over a minibatch's micro-batches).
LOSS_PARTS = ("policy", "entropy", "kl", "value", "total")


def nan_mean(values: list[float]) -> float:
    """The mean of the non-NaN ``values`` (NaN when there are none)."""
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


#: A metric whose last name part has one of these words (``policy/ratio_max``, ``mismatch/max_ratio``) is
#: a largest / smallest value: :func:`step_metric` reduces it by max / min.
EXTREME_WORDS: dict[str, Callable[[list[float]], float]] = {"max": max, "min": min}


def step_metric(name: str, values: list[float]) -> float:
    """One step's value of metric ``name`` from its ``values`` over the step's micro-batches and
    minibatches (and epochs), NaNs skipped (NaN when none is left): the largest of a max-type metric,
    the smallest of a min-type one (a word ``max`` / ``min`` in the name's last part, split at ``_``), so
    that they are the step's, whatever ``algo.grad_accum`` and ``algo.minibatches``; the mean of
    every other (:func:`nan_mean`)."""
    words = name.rsplit("/", 1)[-1].split("_")
    for word, reduce in EXTREME_WORDS.items():
        if word in words:
            finite = [v for v in values if not math.isnan(v)]
            return float(reduce(finite)) if finite else float("nan")
    return nan_mean(values)


@dataclass
class UpdateInputs:
    """The tensors every minibatch of an update reads.

    Attributes:
        input_ids, attention_mask: [B, P + T] model inputs; num_prompt_tokens: P.
        loss_mask: [B, T] the completion mask, with truncated rows zeroed under ``reward.overlong_filter``.
        advantages: [B, T]; returns: [B, T] critic targets (None without a critic).
        old_values: [B, T] critic values at rollout time (None without a critic).
        old_logp: [B, T] the trainer's recomputation of the behaviour log-probs (PPO's old log-probs
            when the mismatch is measured, see ``TrialState.measures_mismatch``), else None (the
            rollout's are used).
        correction: [B, T] the constant weight of ``loss.rollout_correction`` (None when none).
        mismatch: the ``mismatch/*`` metrics (empty when the mismatch is not measured).
        signs: [B] the sign of each row's advantage (``loss.aggregation: balanced-mean``, else None):
            0 for every row of a group whose rewards are all equal under a group-baseline estimator
            (:func:`advantage_signs`).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    num_prompt_tokens: int
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor | None
    old_values: torch.Tensor | None
    old_logp: torch.Tensor | None = None
    correction: torch.Tensor | None = None
    mismatch: dict[str, float] = field(default_factory=dict)
    signs: torch.Tensor | None = None


@dataclass
class UpdateTally:
    """What an update accumulates for its metrics: per-name value lists (reduced at the end by
    :func:`step_metric`, NaNs skipped) and the behaviour policy's entropy summed over the first epoch's active tokens."""

    lists: dict[str, list[float]] = field(default_factory=dict)
    entropy_sum: float = 0.0
    entropy_count: float = 0.0

    def add(self, name: str, value: float) -> None:
        """Append ``value`` to the list of metric ``name``."""
        self.lists.setdefault(name, []).append(float(value))


def loss_mask_of(state: TrialState, batch: StepBatch) -> torch.Tensor:
    """[B, T] the tokens the loss sees: ``batch.mask``, minus truncated rows under ``reward.overlong_filter``."""
    if state.config.reward.overlong_filter:
        return batch.mask * (~batch.truncated).to(batch.mask.dtype).unsqueeze(1)
    return batch.mask


def update_inputs(state: TrialState, batch: StepBatch, step: int) -> UpdateInputs:
    """Critic values at rollout time and the advantages [B, T] of ``batch`` (``algo.*``)."""
    c = state.config
    loss_mask = loss_mask_of(state, batch)  # (B, T)
    input_ids, attn, p = batch.input_ids, batch.attention_mask, batch.num_prompt_tokens  # (B, P + T)
    old_values = None
    if state.critic is not None:
        with torch.no_grad(), autocast(state):
            old_values = state.critic(input_ids, attn, p).float()  # (B, T)
    # reward.overlong_baseline include (DAPO, TRL): truncated rows stay in the group statistics, out of the loss
    stats_mask = loss_mask if truncated_leave_statistics(c) else batch.mask
    adv, returns = compute_advantages(
        batch.token_rewards, stats_mask, batch.group_ids,
        estimator=c.algo.advantage, values=old_values, gamma=c.algo.gamma, lam=c.algo.lam,
        step_mask=batch.step_mask, whiten=c.algo.whiten, mean_scope=c.algo.adv_mean, std_scope=c.algo.adv_std,
        exact_constant=c.algo.constant_groups == "zero",
    )  # (B, T), (B, T) or None
    if stats_mask is not loss_mask:
        adv = adv * loss_mask
        returns = returns * loss_mask if returns is not None else None
    check_finite(adv, "advantages", step)
    x = UpdateInputs(input_ids, attn, p, loss_mask, adv, returns, old_values)
    if c.loss.aggregation == "balanced-mean":
        x.signs = advantage_signs(state, batch, adv, loss_mask, stats_mask)  # (B,)
    if state.measures_mismatch:
        measure_mismatch(state, batch, x)
    return x


def advantage_signs(state: TrialState, batch: StepBatch, adv: torch.Tensor, loss_mask: torch.Tensor,
                    stats_mask: torch.Tensor) -> torch.Tensor:
    """[B] the sign of each row's advantage ``adv`` [B, T] over ``loss_mask`` [B, T] (balanced-mean's
    subsets), with sign 0 for every row of a group whose rewards (over ``stats_mask``, the rows the group
    statistics used) are all equal, where the estimator's baseline is the group's own
    (:func:`ablate.rl.advantages.constant_groups_have_zero_advantage`): decided from the rewards, so the
    group mean's rounding (~1e-8 in float32 under dr_grpo, rloo, grpo with std none or batch) cannot put
    such a group into the step's denominator."""
    c = state.config
    zero = None
    if constant_groups_have_zero_advantage(c.algo.advantage, mean_scope=c.algo.adv_mean, std_scope=c.algo.adv_std,
                                           exact_constant=c.algo.constant_groups == "zero", whiten=c.algo.whiten):
        zero = constant_group_rows(batch.token_rewards, stats_mask, batch.group_ids)  # (B,)
    return row_signs(adv, loss_mask, zero)


def measure_mismatch(state: TrialState, batch: StepBatch, x: UpdateInputs) -> None:
    """Recompute the behaviour log-probs in the trainer's precision (no grad, eval mode, the whole
    batch at once as the rollout does); set ``x.old_logp``, the correction weights and ``x.mismatch``.

    ``mismatch/kl`` and ``mismatch/max_ratio`` are over ``batch.mask`` (every sampled token);
    ``mismatch/corrected_frac`` (with a correction) over the loss mask.
    """
    c = state.config
    with torch.no_grad(), autocast(state):
        old = token_logprobs(
            state.model, x.input_ids, x.attention_mask, num_prompt_tokens=x.num_prompt_tokens,
            temperature=c.rollout.temperature,
        )  # (B, T)
    x.old_logp = old
    x.mismatch = {"mismatch/" + k: v for k, v in mismatch_metrics(old, batch.old_logp, batch.mask).items()}
    if c.loss.rollout_correction != "none":
        x.correction, cm = rollout_correction_weights(
            old, batch.old_logp, x.loss_mask, mode=c.loss.rollout_correction,
            cap=c.loss.rollout_correction_cap, floor=c.loss.rollout_correction_floor,
        )  # (B, T)
        x.mismatch.update({"mismatch/" + k: v for k, v in cm.items()})


def minibatches(state: TrialState, n: int, step: int, epoch: int) -> list[torch.Tensor]:
    """A seeded permutation of the ``n`` rows cut into ``algo.minibatches`` index tensors.

    A group may be split across minibatches: the step totals of prompt-mean handle that.
    """
    perm = torch.randperm(n, generator=seeded_generator(torch.device("cpu"), *trial_stream(state.config), "perm", step, epoch))
    k = min(state.config.algo.minibatches, n)
    return [chunk.to(state.device) for chunk in torch.tensor_split(perm, k)]


def micro_positions(x: UpdateInputs, rows: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Positions in ``rows`` of each of ``n`` micro-batches: all of them for n = 1, else the rows sorted by
    completion length (stable) in n consecutive buckets of near-equal size."""
    positions = torch.arange(rows.numel())
    if n <= 1:
        return [positions]
    lengths = x.attention_mask[rows, x.num_prompt_tokens:].sum(-1).cpu()  # (b,) completion tokens
    order = torch.sort(lengths, stable=True).indices
    return list(torch.tensor_split(order, min(n, rows.numel())))


def used_span(attention_mask: torch.Tensor, num_prompt_tokens: int) -> tuple[int, int]:
    """``(lo, t)``: the columns rows of ``attention_mask`` [b, P + T] use: prompt columns from ``lo`` (left
    padding before it in every row) and the first ``t`` completion columns (right padding after them)."""
    p = num_prompt_tokens
    prompt_any = attention_mask[:, :p].any(0)
    lo = int(prompt_any.int().argmax()) if bool(prompt_any.any()) else 0
    completion_any = attention_mask[:, p:].any(0).int()
    t = int(completion_any.numel() - completion_any.flip(0).argmax()) if bool(completion_any.any()) else 1
    return lo, t


def micro_batch_loss(
    state: TrialState, batch: StepBatch, x: UpdateInputs, micro: torch.Tensor, agg: dict[str, Any],
    totals: StepTotals, cut: bool = False,
) -> tuple[dict[str, torch.Tensor], dict[str, float], torch.Tensor]:
    """The loss of the rows ``micro``: policy loss (times the mismatch correction's weight, with
    ``loss.rollout_correction``) minus the entropy bonus, plus the KL term (``kl.placement=loss``) and
    the value loss (with a critic). ``agg`` holds the keyword arguments
    of :func:`aggregate_loss` for these rows (group ids, ``loss.max_len``, the minibatch's totals).

    Returns:
        ``({part: 0-dim tensor}`` for every part of :data:`LOSS_PARTS` (``total`` carries the
        gradient), the policy loss metrics, the entropy [b, t] of the micro-batch's tokens). With ``cut``
        the micro-batch runs on the positions its rows use (:func:`used_span`): t <= T completion columns.
    """
    c = state.config
    ids, attn, p = x.input_ids[micro], x.attention_mask[micro], x.num_prompt_tokens  # (b, P + T)
    lo, t = used_span(attn, p) if cut else (0, ids.shape[1] - p)
    ids, attn, p = ids[:, lo : p + t], attn[:, lo : p + t], p - lo  # (b, P - lo + t)

    def rows_of(v: torch.Tensor) -> torch.Tensor:  # a [B, T] tensor's micro-batch rows, its first t columns
        return v[micro][:, :t]

    m_mask = rows_of(x.loss_mask)  # (b, t)
    with autocast(state):
        logp, entropy = token_logprobs_and_entropy(
            state.model, ids, attn, num_prompt_tokens=p, temperature=c.rollout.temperature
        )  # (b, t), (b, t)
    if x.old_logp is not None:
        old_logp = rows_of(x.old_logp)  # (b, t) the trainer's recomputation
    else:
        old_logp = logp.detach() if batch.old_logp is None else rows_of(batch.old_logp)  # (b, t)
    per_token, pm = policy_loss_from_config(logp, old_logp, rows_of(x.advantages), m_mask, c.loss)  # (b, t)
    if x.correction is not None:
        per_token = per_token * rows_of(x.correction)  # (b, t)
    pg = aggregate_loss(per_token, m_mask, c.loss.aggregation, **agg)
    ent = aggregate_loss(entropy, m_mask, c.loss.aggregation, **agg)
    loss = pg - c.loss.entropy_coef * ent
    kl_term = torch.zeros((), device=state.device)
    if c.kl.placement == "loss":
        kl_t = kl_penalty(logp, rows_of(batch.ref_logp), estimator=c.kl_estimator, mask=m_mask)  # (b, t)
        kl_term = aggregate_loss(kl_t, m_mask, c.loss.aggregation, **agg)
        loss = loss + state.beta * kl_term
    vf = torch.zeros((), device=state.device)
    if state.critic is not None:
        with autocast(state):
            v = state.critic(ids, attn, p).float()  # (b, t)
        vf_t = value_loss(v, rows_of(x.old_values), rows_of(x.returns), m_mask, clip=c.critic.value_clip)  # (b, t)
        vf = aggregate_loss(vf_t, m_mask, "token-mean", num_tokens=totals.num_tokens)
        loss = loss + c.critic.vf_coef * vf
    return {"policy": pg, "entropy": ent, "kl": kl_term, "value": vf, "total": loss}, pm, entropy


def minibatch_step(
    state: TrialState, batch: StepBatch, x: UpdateInputs, rows: torch.Tensor, step: int, epoch: int,
    tally: UpdateTally,
) -> None:
    """One optimizer step on the minibatch ``rows``: accumulate the gradients of its
    ``algo.grad_accum`` micro-batches, clip the gradient norm, step optimizer and scheduler."""
    c = state.config
    signs = x.signs[rows] if x.signs is not None else None  # (b,) balanced-mean's
    totals = step_totals(x.loss_mask[rows], batch.group_ids[rows], signs)  # (balanced-mean: the step's weights)
    state.optimizer.zero_grad(set_to_none=True)
    sums = dict.fromkeys(LOSS_PARTS, 0.0)
    buckets = micro_positions(x, rows, c.algo.grad_accum)
    for pos in buckets:
        pos = pos.to(rows.device)
        micro = rows[pos]
        agg = dict(group_ids=batch.group_ids[micro], max_len=c.loss_max_len, **totals.for_rows(pos))
        parts, pm, entropy = micro_batch_loss(state, batch, x, micro, agg, totals, cut=len(buckets) > 1)
        check_finite(parts["total"].detach(), "loss", step)
        backward(parts["total"])  # joined with the other members' in a population
        for k in LOSS_PARTS:
            sums[k] += float(parts[k].detach())
        for k, v in pm.items():
            tally.add("policy/" + k, v)
        if epoch == 0:
            m_mask = x.loss_mask[micro][:, : entropy.shape[1]]  # (b, t)
            tally.entropy_sum += float((entropy.detach() * m_mask).sum())
            tally.entropy_count += float(m_mask.sum())
    params = [q for g in state.optimizer.param_groups for q in g["params"]]
    max_norm = c.optim.max_grad_norm if c.optim.max_grad_norm is not None else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    check_finite(grad_norm, "gradient norm", step)
    state.optimizer.step()
    state.scheduler.step()
    tally.add("optim/grad_norm", float(grad_norm))
    tally.add("loss/normalizer", effective_normalizer(c.loss.aggregation, totals, c.loss_max_len))
    for k, v in sums.items():
        tally.add("loss/" + k, v)


@torch.no_grad()
def update_summary(x: UpdateInputs, tally: UpdateTally) -> dict[str, float]:
    """The advantage statistics, the behaviour entropy and (with a critic) the value statistics."""
    adv, mask = x.advantages, x.loss_mask  # (B, T)
    out = {
        "adv/mean": float(masked_mean(adv, mask)),
        "adv/std": float(masked_mean((adv - masked_mean(adv, mask)) ** 2, mask).sqrt()),
        "policy/entropy": tally.entropy_sum / max(tally.entropy_count, 1.0),
    }
    if x.old_values is not None:
        var_r = masked_mean((x.returns - masked_mean(x.returns, mask)) ** 2, mask)
        resid = x.returns - x.old_values  # (B, T)
        var_e = masked_mean((resid - masked_mean(resid, mask)) ** 2, mask)
        out["critic/value_mean"] = float(masked_mean(x.old_values, mask))
        out["critic/explained_variance"] = float(1.0 - var_e / var_r) if var_r > 0 else float("nan")
    return out


def ppo_update(state: TrialState, batch: StepBatch, step: int) -> dict[str, float]:
    """``algo.ppo_epochs`` epochs over ``algo.minibatches`` minibatches of ``batch``; the update's metrics.

    Metrics: the mean over micro-batches of every ``policy/*`` loss metric but the largest / smallest
    values (``policy/ratio_max``: the step's largest ratio, :func:`step_metric`), the mean over
    minibatches of ``loss/*`` and ``optim/grad_norm``, the ``mismatch/*`` metrics when measured (see
    :func:`measure_mismatch`), then :func:`update_summary`'s and ``optim/lr``.

    Raises:
        NonFiniteError: non-finite advantages, loss or gradient norm.
    """
    x = update_inputs(state, batch, step)
    tally = UpdateTally()
    state.model.train()
    if state.critic is not None:
        state.critic.train()
    for epoch in range(state.config.algo.ppo_epochs):
        for rows in minibatches(state, x.input_ids.shape[0], step, epoch):
            minibatch_step(state, batch, x, rows, step, epoch, tally)
    state.model.eval()
    out = {k: step_metric(k, v) for k, v in tally.lists.items()}
    out.update(x.mismatch)
    out.update(update_summary(x, tally))
    out["optim/lr"] = float(state.optimizer.param_groups[0]["lr"])
    return out
