"""Per-token KL estimators between the policy and a reference policy.

Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html). With
``d = logp - ref_logp`` the log-ratio of the sampled token (sampled from the policy):

==========  ==================================  ============================================
name        per-token value                     notes
==========  ==================================  ============================================
``k1``      ``d``                               unbiased for KL(pi||ref), can be negative,
                                                high variance; the classic RLHF reward penalty
``k2``      ``0.5 * d**2``                      biased, low variance, always >= 0
``k3``      ``exp(-d) + d - 1``                 unbiased, always >= 0 (GRPO's loss term);
                                                ``= exp(ref_logp - logp) - (ref_logp - logp) - 1``
==========  ==================================  ============================================

The result is differentiable with respect to ``logp`` (for a KL *loss*); detach it to use it as a
*reward* (``ablate.rewards`` places ``-beta * kl`` on every token).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ablate.registry import Registry
from ablate.rl.masking import check_same_shape, zero_padding

__all__ = ["KL_ESTIMATORS", "kl_penalty"]

#: ``name -> fn(d) -> [B, T]`` where ``d = logp - ref_logp`` (already 0 on padding).
KL_ESTIMATORS: Registry[Callable[[torch.Tensor], torch.Tensor]] = Registry("kl estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(d: torch.Tensor) -> torch.Tensor:
    """k1 = d = logp - ref_logp, [B, T] (Schulman 2020)."""
    return d


@KL_ESTIMATORS.register("k2")
def kl_k2(d: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * d**2, [B, T] (Schulman 2020)."""
    return 0.5 * d**2


@KL_ESTIMATORS.register("k3")
def kl_k3(d: torch.Tensor) -> torch.Tensor:
    """k3 = exp(-d) + d - 1 = exp(ref_logp - logp) - (ref_logp - logp) - 1, [B, T] (Schulman 2020)."""
    return torch.expm1(-d) + d


def kl_penalty(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    *,
    estimator: str = "k1",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference policy.

    Args:
        logp: [B, T] log-prob of each sampled token under the current policy.
        ref_logp: [B, T] log-prob of the same tokens under the reference policy.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"`` (see the module docstring; any name in
            :data:`KL_ESTIMATORS`).
        mask: optional [B, T], 1 on generated tokens. When given, the result is exactly 0 on padding
            and whatever padding holds (large numbers) influences no value and no gradient. Without
            it every position is computed.

    Returns:
        [B, T] per-token KL estimate, differentiable with respect to ``logp`` and ``ref_logp``.

    Raises:
        UnknownNameError: ``estimator`` is not registered.
    """
    fn = KL_ESTIMATORS.get(estimator)
    check_same_shape(logp=logp, ref_logp=ref_logp, mask=mask)
    d = logp - ref_logp
    if mask is None:
        return fn(d)
    return zero_padding(fn(zero_padding(d, mask)), mask)
