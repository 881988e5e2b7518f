"""The rollout/trainer mismatch: how far the sampler's log-probs are from the trainer's, and the
per-token weight that corrects for it. Pure functions over [B, T] tensors.

When the rollout runs in another precision than the trainer (``rollout.dtype``), or another engine,
the token ``y_t`` was sampled from ``pi_rollout(theta_old)`` while PPO's ratio is taken against the
trainer's ``pi_train(theta_old)``. The mismatch weight of a token is (Yao et al. 2025, "Your efficient
RL framework secretly brings you off-policy RL training")::

    w_t = pi_train(y_t; theta_old) / pi_rollout(y_t; theta_old) = exp(old_logp_t - rollout_logp_t)

a constant (no gradient), computed from the trainer's recomputed old log-probs and the sampler's
log-probs. The corrected per-token loss is ``w_t * L_t`` (``L_t`` the PPO / CISPO / SAPO loss of the
token, ``rho = exp(logp - old_logp)`` unchanged), before aggregation. Modes:

======  =================================================  ==========================================
mode    weight                                             source
======  =================================================  ==========================================
none    ``1``                                              no correction
tis     ``min(w, cap)`` (and ``max(., floor)`` if given)   Yao et al. 2025; verl ``rollout_is=token``;
                                                           TRL ``token_truncate``
mis     ``w * 1[lo <= w <= cap]``, ``lo = floor`` or       IcePop (Ring-1T, 2025); TRL ``token_mask``
        ``1 / cap``
======  =================================================  ==========================================

Convention (TRL's): a masked token's weight is 0 but the token stays in the aggregation denominator
(verl's ``rollout_rs`` removes it from the mask instead). Log-differences are clamped to +-20 before
``exp``, as verl does, so a weight is always finite.
"""

from __future__ import annotations

import torch

from ablate.errors import ConfigError
from ablate.rl.kl import kl_penalty
from ablate.rl.masking import as_bool_mask, check_same_shape, zero_padding

__all__ = ["ROLLOUT_CORRECTIONS", "mismatch_metrics", "mismatch_weight", "rollout_correction_weights"]

#: The correction modes of :func:`rollout_correction_weights` (``loss.rollout_correction``).
ROLLOUT_CORRECTIONS: tuple[str, ...] = ("none", "tis", "mis")

#: Log-differences are clamped to this before ``exp`` (verl's ``rollout_correction``).
LOG_WEIGHT_LIMIT = 20.0


def mismatch_weight(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``w = exp(old_logp - rollout_logp)`` per token, [B, T], detached; 1 on padding.

    Args:
        old_logp: [B, T] the trainer's log-probs of the sampled tokens before the update.
        rollout_logp: [B, T] the sampler's log-probs of the same tokens.
        mask: [B, T], 1 on generated tokens.
    """
    check_same_shape(old_logp=old_logp, rollout_logp=rollout_logp, mask=mask)
    m = as_bool_mask(mask)
    d = zero_padding((old_logp - rollout_logp).detach(), m)  # (B, T)
    return torch.exp(d.clamp(-LOG_WEIGHT_LIMIT, LOG_WEIGHT_LIMIT))


def _check_bounds(mode: str, cap: float, floor: float | None) -> None:
    if mode not in ROLLOUT_CORRECTIONS:
        raise ConfigError(f"rollout_correction={mode!r} is not one of {', '.join(ROLLOUT_CORRECTIONS)}")
    if not cap > 1.0:
        raise ConfigError(f"rollout_correction_cap={cap!r} must be > 1 (the weight is 1 without mismatch)")
    if floor is not None and not 0.0 < floor < 1.0:
        raise ConfigError(f"rollout_correction_floor={floor!r} must be in (0, 1), or null")


def rollout_correction_weights(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    cap: float = 2.0,
    floor: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The per-token weight [B, T] to multiply into the policy loss, and its metrics.

    Args:
        old_logp, rollout_logp, mask: [B, T], as for :func:`mismatch_weight`.
        mode: ``"none"`` (weight 1), ``"tis"`` (``min(w, cap)``, raised to ``floor`` when given) or
            ``"mis"`` (``w`` where ``lo <= w <= cap``, else 0; ``lo = floor``, or ``1 / cap`` when None).
        cap: the upper bound, > 1.
        floor: the lower bound in (0, 1), or None (see ``mode``).

    Returns:
        ``(weights, metrics)``: ``weights`` [B, T] detached, exactly 0 on padding; ``metrics``
        ``{"corrected_frac": fraction of active tokens whose weight was truncated (tis) or masked
        (mis), 0 for none}`` (NaN with no active token).

    Raises:
        ConfigError: an unknown mode, ``cap <= 1`` or ``floor`` outside (0, 1).
    """
    _check_bounds(mode, cap, floor)
    m = as_bool_mask(mask)
    w = mismatch_weight(old_logp, rollout_logp, m)  # (B, T)
    if mode == "none":
        out, changed = torch.ones_like(w), torch.zeros_like(m)
    elif mode == "tis":
        out = w.clamp(min=floor, max=cap)
        changed = (w > cap) | (w < floor if floor is not None else torch.zeros_like(m))
    else:
        lo = floor if floor is not None else 1.0 / cap
        keep = (w >= lo) & (w <= cap)
        out, changed = torch.where(keep, w, torch.zeros_like(w)), ~keep
    n = m.sum()
    frac = float((changed & m).sum() / n) if n > 0 else float("nan")
    return zero_padding(out, m), {"corrected_frac": frac}


@torch.no_grad()
def mismatch_metrics(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the sampler was from the trainer, over active tokens.

    * ``kl``: mean over active tokens of Schulman's k3 estimate of KL(pi_rollout || pi_train) from
      tokens sampled by the rollout: ``k3 = w - 1 - log w`` with ``w = exp(old_logp - rollout_logp)``
      (>= 0, unbiased; 0 exactly when the two agree), in nats per token.
    * ``max_ratio``: the largest ``w`` (> 1: the trainer finds a token likelier than the sampler did).

    Args:
        old_logp, rollout_logp, mask: [B, T], as for :func:`mismatch_weight`.

    Returns:
        ``{"kl": ..., "max_ratio": ...}``, both NaN with no active token.
    """
    m = as_bool_mask(mask)
    n = m.sum()
    if n == 0:
        return {"kl": float("nan"), "max_ratio": float("nan")}
    k3 = kl_penalty(rollout_logp.detach(), old_logp.detach(), estimator="k3", mask=m)  # (B, T)
    w = mismatch_weight(old_logp, rollout_logp, m)  # (B, T)
    return {"kl": float(k3.sum() / n), "max_ratio": float(w[m].max())}
