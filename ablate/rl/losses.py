"""Policy loss, loss aggregation and value loss: pure functions over [B, T] tensors.

Three independent ablation axes, each a :class:`~ablate.registry.Registry`:

* **ratio level** (:data:`RATIO_LEVELS`) -- the importance ratio per token (PPO / GRPO) or per
  sequence (GSPO);
* **surrogate** (:data:`SURROGATES`) -- how the ratio and the advantage make a per-token loss:
  PPO's hard clip, CISPO's clipped-weight REINFORCE, SAPO's soft sigmoid gate;
* **aggregation** (:data:`AGGREGATIONS`) -- how per-token losses become one scalar: over tokens,
  over sequences, over prompts.

:func:`policy_loss` always returns a per-token loss [B, T] (a sequence-level ratio is broadcast
over its tokens), so that the aggregation stays a separate choice made by :func:`aggregate_loss`.

Padding (``mask`` 0) is removed with ``torch.where`` before any arithmetic: every per-token output
is exactly 0 there, and whatever padding holds (``1e4``, ``-1e4``) changes no value and no gradient.

Gradient accumulation
---------------------
:func:`aggregate_loss` divides by totals of the *whole optimizer step* when they are given, so that
the micro-batch losses of one step add up exactly to the full-batch loss (and so do the gradients).
Compute them once per step with :func:`step_totals` on the full step's mask and group ids::

    totals = step_totals(mask, group_ids)                  # whole optimizer step
    for rows in micro_batches:                             # e.g. slices or index tensors
        per_token, metrics = policy_loss(logp[rows], old_logp[rows], adv[rows], mask[rows])
        loss = aggregate_loss(per_token, mask[rows], mode, group_ids=group_ids[rows],
                              max_len=max_len, **totals.for_rows(rows))
        loss.backward()                                    # no division by the number of micro-batches

Without totals each call normalizes by its own batch (correct only without accumulation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ablate.errors import ConfigError
from ablate.registry import Registry
from ablate.rl.masking import as_bool_mask, check_same_shape, masked_mean, zero_padding

if TYPE_CHECKING:
    from ablate.config import LossConfig

__all__ = [
    "AGGREGATIONS",
    "NORMALIZERS",
    "RATIO_LEVELS",
    "SURROGATES",
    "AggregationContext",
    "RatioLevel",
    "StepTotals",
    "SurrogateParams",
    "aggregate_loss",
    "balanced_row_weights",
    "effective_normalizer",
    "policy_loss",
    "policy_loss_from_config",
    "row_signs",
    "step_totals",
    "value_loss",
]

#: Log-ratios are clamped to [-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT] before ``exp`` so that a ratio is
#: always finite (as verl does); the clamp only acts at ratios beyond e**20.
LOG_RATIO_LIMIT = 20.0

# --------------------------------------------------------------------------------------------------
# ratio levels


@dataclass(frozen=True)
class RatioLevel:
    """One way to form the importance ratio.

    Attributes:
        log_ratio: ``fn(logp, old_logp, mask) -> [B, T]``, ``mask`` a bool [B, T]; returns the
            log-ratio per token (0 on padding) carrying the gradient structure of the level;
            ``old_logp`` is already detached.
        per_sequence: the ratio is one number per sequence (then the clip fractions and the ratio
            statistics of :func:`policy_loss` are over sequences, not tokens).
        description: one line, for listings.
    """

    log_ratio: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    per_sequence: bool
    description: str


#: ``name -> RatioLevel``.
RATIO_LEVELS: Registry[RatioLevel] = Registry("ratio level")


def _token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return zero_padding(logp - old_logp, mask)  # (B, T)


def _sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    d = zero_padding(logp - old_logp, mask)  # (B, T)
    length = mask.sum(dim=-1).clamp(min=1).to(d.dtype)  # (B,)
    per_seq = d.sum(dim=-1) / length  # (B,)
    return zero_padding(per_seq.unsqueeze(-1).expand_as(d), mask)  # (B, T)


def _sequence_token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    seq = _sequence_log_ratio(logp, old_logp, mask).detach()  # (B, T): sg[log s_i]
    lp = zero_padding(logp, mask)
    return zero_padding(seq + lp - lp.detach(), mask)  # value log s_i, gradient d logp_t


RATIO_LEVELS.register(
    "token",
    RatioLevel(_token_log_ratio, False, "r_t = exp(logp_t - old_logp_t) (PPO, GRPO)"),
)
RATIO_LEVELS.register(
    "sequence",
    RatioLevel(
        _sequence_log_ratio,
        True,
        "s_i = exp(mean_t (logp - old_logp)), one ratio per sequence (GSPO, Zheng et al. 2025)",
    ),
)
RATIO_LEVELS.register(
    "sequence_token",
    RatioLevel(
        _sequence_token_log_ratio,
        True,
        "s_i,t = sg[s_i] * exp(logp_t - sg[logp_t]): value s_i, gradient per token (GSPO-token)",
    ),
)

# --------------------------------------------------------------------------------------------------
# surrogates


@dataclass(frozen=True)
class SurrogateParams:
    """The constants of every surrogate (each surrogate reads the ones it needs).

    Attributes:
        clip_low: PPO: lower clip ``1 - clip_low``; CISPO: lower bound of the weight when
            ``cispo_lower_bound``.
        clip_high: PPO: upper clip ``1 + clip_high`` (``> clip_low`` is DAPO's clip-higher);
            CISPO: cap ``1 + clip_high`` of the weight.
        dual_clip: PPO only: ``c > 1`` caps the loss of negative advantages at ``-A * c``.
        tau_pos: SAPO temperature for positive advantages.
        tau_neg: SAPO temperature for negative (and zero) advantages.
        cispo_lower_bound: CISPO: also clamp the weight below at ``1 - clip_low``.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    cispo_lower_bound: bool = False

    def validate(self, surrogate: str) -> None:
        """Raise ConfigError for impossible values (naming the key and the fix)."""
        if not 0.0 <= self.clip_low < 1.0:
            raise ConfigError(
                f"clip_low={self.clip_low!r} must be in [0, 1) (the lower clip is 1 - clip_low)"
            )
        if not self.clip_high >= 0.0:
            raise ConfigError(f"clip_high={self.clip_high!r} must be >= 0 (the upper clip is 1 + clip_high)")
        if self.dual_clip is not None:
            if surrogate != "ppo":
                raise ConfigError(
                    f"dual_clip={self.dual_clip!r} applies to surrogate 'ppo' only, not {surrogate!r}; "
                    "set dual_clip to null"
                )
            if not self.dual_clip > 1.0:
                raise ConfigError(f"dual_clip={self.dual_clip!r} must be > 1 (e.g. 3.0), or null to disable")
        if not (self.tau_pos > 0.0 and self.tau_neg > 0.0):
            raise ConfigError(
                f"SAPO temperatures must be > 0, got tau_pos={self.tau_pos!r}, tau_neg={self.tau_neg!r}"
            )


#: ``fn(ratio, log_ratio, advantages, params) -> (loss, flags)``: ``ratio`` and ``log_ratio`` [B, T]
#: carry the gradient of the ratio level, ``advantages`` [B, T] are detached (all three 0 or 1 on
#: padding, which the caller masks out). ``loss`` is the per-token loss to minimize; ``flags`` maps
#: ``"clip_low"``, ``"clip_high"``, ``"dual_clip"`` to bool [B, T] tensors marking where that clip
#: acted (see each surrogate).
SurrogateFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, SurrogateParams],
    tuple[torch.Tensor, dict[str, torch.Tensor]],
]

#: ``name -> SurrogateFn``.
SURROGATES: Registry[SurrogateFn] = Registry("policy loss surrogate")


def _no_flags(like: torch.Tensor) -> dict[str, torch.Tensor]:
    none = torch.zeros_like(like, dtype=torch.bool)
    return {"clip_low": none, "clip_high": none, "dual_clip": none}


@SURROGATES.register("ppo")
def ppo_surrogate(
    ratio: torch.Tensor, log_ratio: torch.Tensor, advantages: torch.Tensor, params: SurrogateParams
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate as a loss (Schulman et al. 2017), [B, T].

    ``loss = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))``: ``torch.max`` of the two
    *losses* is the min of the two objectives, the pessimistic bound. Where the clip binds in the
    favourable direction (``A > 0, r > 1 + clip_high`` or ``A < 0, r < 1 - clip_low``) the loss is
    a constant and its gradient is 0; in the unfavourable direction the unclipped term wins and the
    gradient stays. ``clip_high > clip_low`` is DAPO's clip-higher (Yu et al. 2025).

    Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"): with
    ``dual_clip = c > 1`` the loss of a negative advantage is also capped at ``-A * c``, so that a
    huge ratio on a bad token cannot produce an unbounded loss (its gradient is then 0).

    Flags: ``clip_high`` where ``A > 0`` and ``r > 1 + clip_high``; ``clip_low`` where ``A < 0`` and
    ``r < 1 - clip_low`` (the clip binds, gradient 0); ``dual_clip`` where ``A < 0`` and ``r > c``.
    """
    lo, hi = 1.0 - params.clip_low, 1.0 + params.clip_high
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(lo, hi)
    loss = torch.maximum(unclipped, clipped)
    flags = _no_flags(ratio)
    flags["clip_high"] = (advantages > 0) & (ratio > hi)
    flags["clip_low"] = (advantages < 0) & (ratio < lo)
    if params.dual_clip is not None:
        cap = -advantages * params.dual_clip
        loss = torch.where(advantages < 0, torch.minimum(loss, cap), loss)
        flags["dual_clip"] = (advantages < 0) & (ratio > params.dual_clip)
    return loss, flags


@SURROGATES.register("cispo")
def cispo_surrogate(
    ratio: torch.Tensor, log_ratio: torch.Tensor, advantages: torch.Tensor, params: SurrogateParams
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO: clipped importance-sampling weight policy optimization (MiniMax-M1, 2025), [B, T].

    The paper's loss is ``-sg(min(r, 1 + clip_high)) * A * logp``: REINFORCE with a truncated,
    stop-gradient importance weight, so that *no* token loses its gradient (PPO drops clipped
    tokens); only the weight is capped. Written here as ``-sg(w) * A * log r`` with
    ``log r = logp - old_logp`` (for the sequence levels, the level's log-ratio): the same
    gradient as the paper's form (``old_logp`` is a constant) and a value that is 0 on-policy.
    ``w = min(r, 1 + clip_high)``; with ``cispo_lower_bound`` also ``w >= 1 - clip_low`` (the paper
    allows a lower bound but uses none: it sets its lower epsilon very large).

    Flags: ``clip_high`` where ``r > 1 + clip_high`` (weight capped, gradient kept, scaled down);
    ``clip_low`` where the lower bound is on and ``r < 1 - clip_low``; ``dual_clip`` never.
    """
    hi = 1.0 + params.clip_high
    lo = 1.0 - params.clip_low if params.cispo_lower_bound else None
    weight = ratio.detach().clamp(min=lo, max=hi)
    loss = -weight * advantages * log_ratio
    flags = _no_flags(ratio)
    flags["clip_high"] = ratio > hi
    if lo is not None:
        flags["clip_low"] = ratio < lo
    return loss, flags


@SURROGATES.register("sapo")
def sapo_surrogate(
    ratio: torch.Tensor, log_ratio: torch.Tensor, advantages: torch.Tensor, params: SurrogateParams
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO: soft adaptive policy optimization (Gao et al., Qwen 2025, arXiv:2511.20347), [B, T].

    The hard clip is replaced by a smooth gate: ``loss = -f(r) * A`` with
    ``f(r) = sigmoid(tau * (r - 1)) * 4 / tau``, ``tau = tau_pos`` where ``A > 0`` and ``tau_neg``
    otherwise (paper defaults 1.0 and 1.05: negative advantages are damped faster, since pushing
    down one token's probability spreads mass over the whole vocabulary). The gradient weight
    ``f'(r) = 4 sigmoid(tau (r-1)) (1 - sigmoid(tau (r-1)))`` is 1 at ``r = 1`` (on-policy it equals
    the unclipped policy gradient) and decays smoothly as ``r`` leaves 1, never abruptly to 0.
    The value is ``-2 A / tau`` on-policy (a constant offset; the gradient is what matters).

    Flags: none (no hard clip acts); the clip fractions of SAPO are 0.
    """
    tau = torch.where(
        advantages > 0,
        torch.tensor(params.tau_pos, dtype=ratio.dtype, device=ratio.device),
        torch.tensor(params.tau_neg, dtype=ratio.dtype, device=ratio.device),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return -gate * advantages, _no_flags(ratio)


# --------------------------------------------------------------------------------------------------
# policy loss


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ratio_level: str = "token",
    surrogate: str = "ppo",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    cispo_lower_bound: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token policy loss (to minimize) and its metrics.

    Ratio levels (:data:`RATIO_LEVELS`):

    * ``"token"``: ``r_t = exp(logp_t - old_logp_t)`` (PPO, GRPO).
    * ``"sequence"`` (GSPO, Zheng et al. 2025): ``s_i = exp(mean over active t of (logp - old_logp))``,
      clipped per sequence and broadcast over the sequence's active tokens.
    * ``"sequence_token"`` (GSPO-token): ``s_i,t = sg[s_i] * exp(logp_t - sg[logp_t])``, value ``s_i``,
      gradient through each token's own ``logp_t``; equal to ``"sequence"`` in value always, and in
      gradient when advantages are constant within each sequence.

    Surrogates (:data:`SURROGATES`): ``"ppo"`` (hard clip, optional dual clip), ``"cispo"``
    (MiniMax-M1), ``"sapo"`` (Qwen's soft gate); see :func:`ppo_surrogate`,
    :func:`cispo_surrogate`, :func:`sapo_surrogate` for formulas and constants.

    Args:
        logp: [B, T] log-prob of the sampled tokens under the current policy (differentiable).
        old_logp: [B, T] log-prob under the behaviour policy that sampled them (treated as a
            constant: detached).
        advantages: [B, T] per-token advantages (treated as a constant: detached).
        mask: [B, T], 1 on generated tokens (EOS included), 0 on padding.
        ratio_level: a name in :data:`RATIO_LEVELS`.
        surrogate: a name in :data:`SURROGATES`.
        clip_low: PPO lower clip ``1 - clip_low``, in [0, 1).
        clip_high: PPO upper clip ``1 + clip_high`` (DAPO's clip-higher: 0.28); CISPO's weight cap.
        dual_clip: PPO only, ``c > 1``: cap of the loss of negative advantages at ``-A * c``; None off.
        tau_pos: SAPO temperature for positive advantages (paper default 1.0).
        tau_neg: SAPO temperature for negative advantages (paper default 1.05).
        cispo_lower_bound: CISPO: also bound the weight below at ``1 - clip_low``.

    Returns:
        ``(per_token, metrics)``: ``per_token`` [B, T] loss, exactly 0 where ``mask`` is 0 (a
        sequence-level loss is broadcast over the sequence's tokens); ``metrics`` a dict of Python
        floats (detached, already on the host), always with the same keys:

        * ``clip_frac_low`` / ``clip_frac_high``: fraction of units where the surrogate's lower /
          upper clip acted (PPO: the clip binds, so the gradient is 0; CISPO: the weight was
          truncated; SAPO: always 0). Units are active tokens for ``"token"``, sequences (with at
          least one active token) for the sequence levels; a sequence counts when the clip acted on
          any of its tokens (with per-sequence advantages, GSPO's setting, on all of them).
        * ``dual_clip_frac``: fraction of units whose loss the dual clip capped (0 unless PPO with
          ``dual_clip``).
        * ``ratio_mean`` / ``ratio_max``: mean and max of the ratio used, over the same units.
        * ``approx_kl``: estimate of KL(old || new) over active tokens, from token-level ratios
          whatever the ratio level: mean of ``(r_t - 1) - log r_t`` (Schulman's k3, >= 0).

        With no active token every metric is NaN.

    Raises:
        UnknownNameError: an unknown ``ratio_level`` or ``surrogate``.
        ConfigError: an impossible constant (``clip_low`` outside [0, 1), ``dual_clip <= 1`` or
            with a surrogate other than PPO, a temperature <= 0).
    """
    params = SurrogateParams(clip_low, clip_high, dual_clip, tau_pos, tau_neg, cispo_lower_bound)
    return _policy_loss(logp, old_logp, advantages, mask, ratio_level, surrogate, params)


def policy_loss_from_config(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`policy_loss` with the ratio level, surrogate and constants of a trial's ``loss`` section.

    Args:
        logp, old_logp, advantages, mask: [B, T], as for :func:`policy_loss`.
        loss: the :class:`~ablate.config.LossConfig` (``ratio_level``, ``surrogate``, ``clip_low``,
            ``clip_high``, ``dual_clip``, ``sapo_tau_pos``, ``sapo_tau_neg``, ``cispo_lower_bound``;
            its aggregation and entropy coefficient are the caller's business).

    Returns:
        ``(per_token [B, T], metrics)`` exactly as :func:`policy_loss` returns them.
    """
    params = SurrogateParams(
        loss.clip_low, loss.clip_high, loss.dual_clip, loss.sapo_tau_pos, loss.sapo_tau_neg, loss.cispo_lower_bound
    )
    return _policy_loss(logp, old_logp, advantages, mask, loss.ratio_level, loss.surrogate, params)


def _policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ratio_level: str,
    surrogate: str,
    params: SurrogateParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The body of :func:`policy_loss`: per-token loss [B, T] and metrics for validated names and constants."""
    level = RATIO_LEVELS.get(ratio_level)
    surrogate_fn = SURROGATES.get(surrogate)
    params.validate(surrogate)
    check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)

    m = as_bool_mask(mask)  # (B, T)
    old_logp = old_logp.detach()
    log_ratio = level.log_ratio(logp, old_logp, m)  # (B, T), 0 on padding
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))  # (B, T), 1 on padding
    adv = zero_padding(advantages.detach(), m)  # (B, T)
    loss, flags = surrogate_fn(ratio, log_ratio, adv, params)
    per_token = zero_padding(loss, m)  # (B, T)
    metrics = _policy_metrics(logp.detach(), old_logp, ratio.detach(), flags, m, level.per_sequence)
    return per_token, metrics


@torch.no_grad()
def _policy_metrics(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ratio: torch.Tensor,
    flags: dict[str, torch.Tensor],
    m: torch.Tensor,
    per_sequence: bool,
) -> dict[str, float]:
    keys = ("clip_frac_low", "clip_frac_high", "dual_clip_frac", "ratio_mean", "ratio_max", "approx_kl")
    if not bool(m.any()):
        return dict.fromkeys(keys, float("nan"))
    token_lr = zero_padding(logp - old_logp, m).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    approx_kl = masked_mean(torch.expm1(token_lr) - token_lr, m)
    if per_sequence:
        units = m.any(dim=-1)  # (B,)
        unit_ratio = torch.where(m, ratio, torch.zeros_like(ratio)).amax(dim=-1)[units]  # one per seq
        unit_flag = {k: (f & m).any(dim=-1)[units] for k, f in flags.items()}
    else:
        unit_ratio = ratio[m]
        unit_flag = {k: f[m] for k, f in flags.items()}
    fl = {k: v.to(ratio.dtype).mean() for k, v in unit_flag.items()}
    values = (
        fl["clip_low"],
        fl["clip_high"],
        fl["dual_clip"],
        unit_ratio.mean(),
        unit_ratio.max(),
        approx_kl,
    )
    return {k: float(v) for k, v in zip(keys, values)}


# --------------------------------------------------------------------------------------------------
# aggregation


@dataclass(frozen=True)
class AggregationContext:
    """What an aggregation may need besides the per-token loss and the mask.

    Every total is over the whole optimizer step when given (see :func:`step_totals`), and is
    computed from the current batch when None.

    Attributes:
        group_ids: [B] prompt id of each row (``"prompt-mean"``).
        num_tokens: active tokens in the step (``"token-mean"``).
        num_seqs: sequences with at least one active token in the step (``"seq-mean-*"``).
        max_len: the configured maximum completion length (``"seq-mean-token-sum-norm"``).
        num_groups: groups with at least one active token in the step (``"prompt-mean"``).
        group_num_tokens: [B], for each row the active tokens of its whole group in the step
            (``"prompt-mean"``).
        signs: [B] the sign (+1, -1 or 0) of each row's advantage (``"balanced-mean"``).
        balanced_weights: [B] each row's per-token weight before the division by the balanced groups,
            over the whole step; balanced_groups: groups with a positive or negative row in the step
            (``"balanced-mean"``, see :func:`balanced_row_weights`).
    """

    group_ids: torch.Tensor | None = None
    num_tokens: float | torch.Tensor | None = None
    num_seqs: float | torch.Tensor | None = None
    max_len: int | None = None
    num_groups: float | torch.Tensor | None = None
    group_num_tokens: torch.Tensor | None = None
    signs: torch.Tensor | None = None
    balanced_weights: torch.Tensor | None = None
    balanced_groups: float | torch.Tensor | None = None


#: ``fn(per_token, mask, ctx) -> scalar``; ``per_token`` [B, T] is already 0 on padding, ``mask``
#: is bool [B, T].
AggregationFn = Callable[[torch.Tensor, torch.Tensor, AggregationContext], torch.Tensor]

#: ``name -> AggregationFn``.
AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")


def _total(given: float | torch.Tensor | None, computed: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The step total if given, else the batch's, as a tensor >= 1 (an empty batch gives loss 0)."""
    value = computed if given is None else given
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).clamp(min=1)


def _num_seqs(mask: torch.Tensor, ctx: AggregationContext, like: torch.Tensor) -> torch.Tensor:
    return _total(ctx.num_seqs, mask.any(dim=-1).sum(), like)


@AGGREGATIONS.register("token-mean")
def token_mean(per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
    """``sum over active tokens / num_tokens``: every generated token weighs the same.

    The notes' token-normalized loss; DAPO's token-level loss (Yu et al. 2025). Divides by
    ``num_tokens`` (the step's active tokens) or, when None, this batch's active tokens.
    """
    return per_token.sum() / _total(ctx.num_tokens, mask.sum(), per_token)


@AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
    """``sum_i (sum_t loss_it / len_i) / num_seqs``: every completion weighs the same.

    The notes' sequence-normalized loss (GRPO, Shao et al. 2024). ``len_i`` is the sequence's own
    active length (always complete: a sequence is never split across micro-batches); divides by
    ``num_seqs`` or, when None, this batch's sequences with at least one active token.
    """
    length = mask.sum(dim=-1).clamp(min=1).to(per_token.dtype)  # (B,)
    return (per_token.sum(dim=-1) / length).sum() / _num_seqs(mask, ctx, per_token)


@AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
    """``sum_i sum_t loss_it / num_seqs``: a token sum per sequence, averaged over sequences.

    Divides by ``num_seqs`` or, when None, this batch's sequences with at least one active token.
    """
    return per_token.sum() / _num_seqs(mask, ctx, per_token)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext
) -> torch.Tensor:
    """``sum_i (sum_t loss_it / max_len) / num_seqs``: Dr. GRPO's constant normalizer (Liu et al. 2025).

    ``max_len`` is the configured maximum completion length, never the padded width of the batch
    (which changes from batch to batch). Divides by ``max_len * num_seqs`` (``num_seqs`` or, when
    None, this batch's sequences with at least one active token).
    """
    if ctx.max_len is None:
        raise ConfigError(
            "loss aggregation 'seq-mean-token-sum-norm' needs max_len (the configured maximum completion "
            "length, Dr. GRPO's constant normalizer); pass max_len=<max new tokens>"
        )
    if not ctx.max_len > 0:
        raise ConfigError(f"max_len={ctx.max_len!r} must be a positive number of tokens")
    longest = int(mask.sum(dim=-1).max()) if mask.numel() else 0
    if longest > ctx.max_len:
        raise ConfigError(
            f"max_len={ctx.max_len} is shorter than a completion of {longest} active tokens; pass the "
            "configured maximum completion length, not the padded width of a batch"
        )
    return per_token.sum() / ctx.max_len / _num_seqs(mask, ctx, per_token)


@AGGREGATIONS.register("prompt-mean")
def prompt_mean(per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
    """``sum_g (sum of group g's token losses / group g's active tokens) / num_groups``.

    The per-prompt token mean of DAPO and ScaleRL: inside a prompt's group every token weighs the
    same, and every prompt weighs the same. Needs ``group_ids``. For accumulation pass both
    ``num_groups`` (groups with an active token in the step) and ``group_num_tokens`` ([B]: each
    row's whole-group active tokens in the step), e.g. from :func:`step_totals`; with neither, both
    are computed from this batch.
    """
    if ctx.group_ids is None:
        raise ConfigError(
            "loss aggregation 'prompt-mean' needs group_ids (the prompt of each completion); pass "
            "group_ids=<[B] tensor>"
        )
    if (ctx.num_groups is None) != (ctx.group_num_tokens is None):
        raise ValueError(
            "prompt-mean: pass both num_groups and group_num_tokens (step totals, see step_totals) or neither"
        )
    if ctx.group_num_tokens is None:
        row_tokens, num_groups = _group_token_counts(mask, ctx.group_ids)
    else:
        row_tokens, num_groups = ctx.group_num_tokens, ctx.num_groups
        if tuple(row_tokens.shape) != (per_token.shape[0],):
            raise ValueError(
                f"group_num_tokens must be [B] = [{per_token.shape[0]}], got {list(row_tokens.shape)}"
            )
    row_tokens = row_tokens.to(device=per_token.device, dtype=per_token.dtype).clamp(min=1)
    return (per_token.sum(dim=-1) / row_tokens).sum() / _total(num_groups, torch.tensor(0), per_token)


def row_signs(advantages: torch.Tensor, mask: torch.Tensor, zero: torch.Tensor | None = None) -> torch.Tensor:
    """[B] the sign (+1, -1, 0) of each row's advantage: of the sum of ``advantages`` [B, T] over its
    active tokens (``mask`` [B, T]); outcome estimators give every token of a row the same advantage.

    ``zero`` [B] bool: rows whose advantage is 0 by definition, which get sign 0 whatever their float
    advantage: the rows of a group whose rewards are all equal under a group-baseline estimator
    (:func:`ablate.rl.advantages.constant_group_rows`), where the group mean's rounding (~1e-8 in
    float32) would otherwise count the group as positive or negative in ``"balanced-mean"``."""
    signs = torch.sign((advantages * as_bool_mask(mask).to(advantages.dtype)).sum(dim=-1))
    if zero is None:
        return signs
    if tuple(zero.shape) != (signs.shape[0],):
        raise ValueError(f"zero must be [B] = [{signs.shape[0]}], got {list(zero.shape)}")
    return torch.where(zero.to(device=signs.device, dtype=torch.bool), torch.zeros_like(signs), signs)


def balanced_row_weights(mask: torch.Tensor, group_ids: torch.Tensor,
                         signs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Balanced Aggregation's weights (Zeng et al. 2026, arXiv 2605.04077, as its abstract defines it).

    In group g, with n+ rows of positive and n- of negative advantage (rows with an active token) and
    T+, T- their active tokens, a positive row's tokens weigh ``(n+ / (n+ + n-)) / T+`` and a negative
    row's ``(n- / (n+ + n-)) / T-``: the token mean within each subset, combined with sequence-count
    weights. A row of zero advantage belongs to neither subset (weight 0).

    Returns:
        ``([B] weights, the number of groups with n+ + n- > 0)``; the step loss is
        ``sum_i w_i sum_t L_it / that number``.
    """
    m = as_bool_mask(mask)
    if tuple(group_ids.shape) != (m.shape[0],) or tuple(signs.shape) != (m.shape[0],):
        raise ValueError(f"group_ids and signs must be [B] = [{m.shape[0]}], got {list(group_ids.shape)} and "
                         f"{list(signs.shape)}")
    _, inverse = torch.unique(group_ids.to(m.device), return_inverse=True)  # (B,)
    g = int(inverse.max()) + 1 if inverse.numel() else 0
    active = m.any(dim=-1)  # (B,)
    row_len = m.sum(dim=-1).to(torch.float64)  # (B,)
    weights = torch.zeros(m.shape[0], dtype=torch.float64, device=m.device)
    counts = {}
    for side in (1, -1):
        member = (signs.to(m.device) == side) & active  # (B,)
        n = torch.zeros(g, dtype=torch.float64, device=m.device).index_add_(0, inverse, member.to(torch.float64))
        tokens = torch.zeros(g, dtype=torch.float64, device=m.device).index_add_(0, inverse, row_len * member)
        counts[side] = (n, tokens)
    both = counts[1][0] + counts[-1][0]  # (G,)
    for side in (1, -1):
        n, tokens = counts[side]
        per_group = torch.where(tokens > 0, (n / both.clamp(min=1)) / tokens.clamp(min=1), torch.zeros_like(n))
        member = (signs.to(m.device) == side) & active
        weights = torch.where(member, per_group[inverse], weights)
    return weights, (both > 0).sum()


@AGGREGATIONS.register("balanced-mean")
def balanced_mean(per_token: torch.Tensor, mask: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
    """Balanced Aggregation (Zeng et al. 2026, arXiv 2605.04077, the abstract's definition; the full text
    was not available): per group, the token mean of the positive-advantage completions and that of the
    negative ones, weighted by their sequence counts, ``L_g = n+/(n+ + n-) mean+ + n-/(n+ + n-) mean-``;
    the step loss is the mean of ``L_g`` over the groups with ``n+ + n- > 0``. Completions with zero
    advantage are in neither subset. Needs ``group_ids`` and ``signs`` (:func:`row_signs`); for
    accumulation pass the step's ``balanced_weights`` and ``balanced_groups`` (:func:`step_totals` with
    ``signs``), else both are computed from this batch."""
    if (ctx.balanced_weights is None) != (ctx.balanced_groups is None):
        raise ValueError("balanced-mean: pass both balanced_weights and balanced_groups (step totals, see "
                         "step_totals with signs) or neither")
    if ctx.balanced_weights is None:
        if ctx.group_ids is None or ctx.signs is None:
            raise ConfigError(
                "loss aggregation 'balanced-mean' needs group_ids and signs (the sign of each completion's "
                "advantage, row_signs(advantages, mask)); pass group_ids=<[B] tensor>, signs=<[B] tensor>"
            )
        weights, groups = balanced_row_weights(mask, ctx.group_ids, ctx.signs)
    else:
        weights, groups = ctx.balanced_weights, ctx.balanced_groups
        if tuple(weights.shape) != (per_token.shape[0],):
            raise ValueError(f"balanced_weights must be [B] = [{per_token.shape[0]}], got {list(weights.shape)}")
    w = weights.to(device=per_token.device, dtype=per_token.dtype)
    return (per_token.sum(dim=-1) * w).sum() / _total(groups, torch.tensor(0), per_token)


def _group_token_counts(mask: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B] active tokens of each row's group, number of groups with an active token)."""
    if tuple(group_ids.shape) != (mask.shape[0],):
        raise ValueError(f"group_ids must be [B] = [{mask.shape[0]}], got {list(group_ids.shape)}")
    _, inverse = torch.unique(group_ids.to(mask.device), return_inverse=True)  # (B,)
    row_len = mask.sum(dim=-1)  # (B,)
    per_group = torch.zeros(
        int(inverse.max()) + 1 if inverse.numel() else 0, dtype=row_len.dtype, device=mask.device
    ).index_add_(0, inverse, row_len)
    return per_group[inverse], (per_group > 0).sum()


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    group_ids: torch.Tensor | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
    max_len: int | None = None,
    num_groups: float | torch.Tensor | None = None,
    group_num_tokens: torch.Tensor | None = None,
    signs: torch.Tensor | None = None,
    balanced_weights: torch.Tensor | None = None,
    balanced_groups: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss [B, T] to the scalar to backpropagate.

    Modes (:data:`AGGREGATIONS`), with ``L_it`` the loss of token t of sequence i, sums over active
    tokens only, and each denominator exactly as written:

    =============================  ===========================================================
    ``"token-mean"``               ``sum_it L_it / num_tokens`` (notes' token-normalized; DAPO)
    ``"seq-mean-token-mean"``      ``sum_i (sum_t L_it / len_i) / num_seqs`` (notes'
                                   sequence-normalized; GRPO)
    ``"seq-mean-token-sum"``       ``sum_it L_it / num_seqs``
    ``"seq-mean-token-sum-norm"``  ``sum_it L_it / (max_len * num_seqs)`` (Dr. GRPO)
    ``"prompt-mean"``              ``sum_g (sum_{i in g, t} L_it / n_g) / num_groups``, ``n_g`` the
                                   group's active tokens (DAPO / ScaleRL per-prompt token mean)
    ``"balanced-mean"``            ``sum_g (n+/(n+ + n-) mean+_g + n-/(n+ + n-) mean-_g) / G``, the
                                   token means of g's positive and negative rows (Balanced
                                   Aggregation; :func:`balanced_row_weights`)
    =============================  ===========================================================

    ``len_i`` is the sequence's own active length. ``num_tokens``, ``num_seqs``, ``num_groups``
    and ``group_num_tokens`` are totals over the **whole optimizer step** (use
    :func:`step_totals` and ``StepTotals.for_rows``); each one that is None is computed from this
    batch (active tokens; rows with at least one active token; groups with at least one active
    token). With step totals, the losses of the micro-batches of a step sum exactly to the
    full-batch loss, and so do their gradients: do not divide by the number of micro-batches.
    Totals a mode does not use are ignored.

    Args:
        per_token: [B, T] per-token loss (e.g. from :func:`policy_loss`); padding is ignored.
        mask: [B, T], 1 on generated tokens, 0 on padding.
        mode: a name in :data:`AGGREGATIONS`.
        group_ids: [B] prompt id of each row; required by ``"prompt-mean"``.
        num_tokens: step total of active tokens.
        num_seqs: step total of sequences with at least one active token.
        max_len: the configured maximum completion length; required by ``"seq-mean-token-sum-norm"``.
        num_groups: step total of groups with at least one active token (``"prompt-mean"``).
        group_num_tokens: [B], per row, its group's active tokens over the step (``"prompt-mean"``).
        signs: [B] the sign of each row's advantage (``"balanced-mean"``, :func:`row_signs`).
        balanced_weights, balanced_groups: the step's :func:`balanced_row_weights` (``"balanced-mean"``).

    Returns:
        A 0-dim tensor.

    Raises:
        UnknownNameError: unknown ``mode``.
        ConfigError: ``max_len`` missing / too short for ``"seq-mean-token-sum-norm"``, ``group_ids``
            missing for ``"prompt-mean"``.
    """
    fn = AGGREGATIONS.get(mode)
    check_same_shape(per_token=per_token, mask=mask)
    m = as_bool_mask(mask)
    ctx = AggregationContext(group_ids, num_tokens, num_seqs, max_len, num_groups, group_num_tokens, signs,
                             balanced_weights, balanced_groups)
    return fn(zero_padding(per_token, m), m, ctx)


@dataclass(frozen=True)
class StepTotals:
    """Totals of one optimizer step, for exact gradient accumulation with :func:`aggregate_loss`.

    Attributes:
        num_tokens: active tokens in the step.
        num_seqs: sequences with at least one active token.
        num_groups: groups with at least one active token (None without group ids).
        group_num_tokens: [B] for each row of the step, the active tokens of its group (None
            without group ids); sliced per micro-batch by :meth:`for_rows`.
        balanced_weights, balanced_groups: :func:`balanced_row_weights` of the step (None without
            signs); the weights are sliced per micro-batch.
    """

    num_tokens: int
    num_seqs: int
    num_groups: int | None
    group_num_tokens: torch.Tensor | None
    balanced_weights: torch.Tensor | None = None
    balanced_groups: int | None = None

    def for_rows(self, rows: slice | torch.Tensor | list[int] | None = None) -> dict[str, Any]:
        """Keyword arguments of :func:`aggregate_loss` for the micro-batch made of ``rows`` of the
        step batch (a slice, an index tensor or a bool [B] tensor; None for all rows)."""
        kwargs: dict[str, Any] = {"num_tokens": self.num_tokens, "num_seqs": self.num_seqs}
        if self.group_num_tokens is not None:
            g = self.group_num_tokens if rows is None else self.group_num_tokens[rows]
            kwargs.update(num_groups=self.num_groups, group_num_tokens=g)
        if self.balanced_weights is not None:
            w = self.balanced_weights if rows is None else self.balanced_weights[rows]
            kwargs.update(balanced_weights=w, balanced_groups=self.balanced_groups)
        return kwargs


def step_totals(mask: torch.Tensor, group_ids: torch.Tensor | None = None,
                signs: torch.Tensor | None = None) -> StepTotals:
    """Totals of the whole optimizer step from its full ``mask`` [B, T], ``group_ids`` [B] and (for
    ``"balanced-mean"``) ``signs`` [B], the sign of each row's advantage.

    Call once per optimizer step, before splitting into micro-batches; pass
    ``**totals.for_rows(rows)`` to each micro-batch's :func:`aggregate_loss`.
    """
    m = as_bool_mask(mask)
    num_tokens = int(m.sum())
    num_seqs = int(m.any(dim=-1).sum())
    if group_ids is None:
        return StepTotals(num_tokens, num_seqs, None, None)
    row_tokens, groups = _group_token_counts(m, group_ids)
    if signs is None:
        return StepTotals(num_tokens, num_seqs, int(groups), row_tokens)
    weights, balanced = balanced_row_weights(m, group_ids, signs)
    return StepTotals(num_tokens, num_seqs, int(groups), row_tokens, weights, int(balanced))


#: What each built-in aggregation divides by, as :func:`effective_normalizer` reports it.
NORMALIZERS: dict[str, str] = {
    "token-mean": "num_tokens",
    "seq-mean-token-mean": "num_seqs",
    "seq-mean-token-sum": "num_seqs",
    "seq-mean-token-sum-norm": "max_len * num_seqs",
    "prompt-mean": "num_groups",
    "balanced-mean": "balanced_groups",
}


def effective_normalizer(mode: str, totals: StepTotals, max_len: int | None = None) -> float:
    """The outer denominator of one optimizer step's loss under aggregation ``mode`` (logged as
    ``loss/normalizer``), so that a reader sees the normalization at work: ``token-mean`` the step's
    active tokens, ``seq-mean-*`` its sequences (times ``max_len`` for Dr. GRPO's constant), ``prompt-mean``
    its groups, ``balanced-mean`` its groups with a non-zero advantage. Inside it, ``seq-mean-token-mean``
    also divides each sequence by its own length and ``prompt-mean`` each group by its own tokens. NaN for a plugin aggregation (unknown denominator).
    Units: tokens, sequences or groups; at least 1 (as :func:`aggregate_loss` clamps it).
    """
    what = NORMALIZERS.get(mode)
    if what is None:
        return math.nan
    if what == "num_tokens":
        return float(max(totals.num_tokens, 1))
    if what == "num_groups":
        return float(max(totals.num_groups or 0, 1))
    if what == "balanced_groups":
        return float(max(totals.balanced_groups or 0, 1))
    seqs = float(max(totals.num_seqs, 1))
    if what == "max_len * num_seqs":
        if max_len is None:
            return math.nan
        return float(max_len) * seqs
    return seqs


# --------------------------------------------------------------------------------------------------
# value loss


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float | None = None,
) -> torch.Tensor:
    """Per-token (optionally clipped) value loss, [B, T].

    ``0.5 * max((v - R)**2, (v_clip - R)**2)`` with ``v_clip = old_v + clamp(v - old_v, -clip, clip)``
    (PPO's value clipping, as in OpenAI baselines' ppo2): the critic trains on the worse of the
    two errors, so it cannot jump far from ``old_v`` in one update. ``clip=None`` gives the plain
    ``0.5 * (v - R)**2``. Aggregate the result with :func:`aggregate_loss` like the policy loss.

    Args:
        values: [B, T] current value predictions (differentiable).
        old_values: [B, T] values at rollout time (constant: detached).
        returns: [B, T] targets, e.g. GAE returns (constant: detached).
        mask: [B, T], 1 on generated tokens.
        clip: the value clip range (> 0), or None for no clipping.

    Returns:
        [B, T] per-token loss, exactly 0 where ``mask`` is 0.

    Raises:
        ConfigError: ``clip`` <= 0.
    """
    if clip is not None and not clip > 0:
        raise ConfigError(f"value clip={clip!r} must be > 0, or null for an unclipped value loss")
    check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    m = as_bool_mask(mask)
    v = zero_padding(values, m)
    target = zero_padding(returns.detach(), m)
    loss = (v - target) ** 2
    if clip is not None:
        old = zero_padding(old_values.detach(), m)
        v_clip = old + (v - old).clamp(-clip, clip)
        loss = torch.maximum(loss, (v_clip - target) ** 2)
    return zero_padding(0.5 * loss, m)
