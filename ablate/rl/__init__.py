"""The RL mathematics of ``ablate``: pure functions over [B, T] tensors.

::

    from ablate.rl import policy_loss, aggregate_loss, value_loss, kl_penalty, compute_advantages

    per_token, metrics = policy_loss(logp, old_logp, adv, mask, ratio_level="token", surrogate="ppo")
    loss = aggregate_loss(per_token, mask, "seq-mean-token-mean", **step_totals(mask).for_rows())

* :mod:`ablate.rl.losses` -- :func:`policy_loss` (ratio levels x surrogates),
  :func:`aggregate_loss` (loss normalization, exact under gradient accumulation with
  :func:`step_totals`), :func:`value_loss`;
* :mod:`ablate.rl.advantages` -- :func:`compute_advantages` (grpo, dr_grpo, rloo, grpo_process, gae);
* :mod:`ablate.rl.kl` -- :func:`kl_penalty` (Schulman's k1, k2, k3);
* :mod:`ablate.rl.mismatch` -- the rollout/trainer mismatch: :func:`mismatch_metrics` and the
  correction weights :func:`rollout_correction_weights` (TIS, MIS).

Each choice by name resolves through a registry exported here: :data:`RATIO_LEVELS`,
:data:`SURROGATES`, :data:`AGGREGATIONS`, :data:`ADVANTAGE_ESTIMATORS`, :data:`KL_ESTIMATORS`.
"""

from __future__ import annotations

from ablate.rl.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from ablate.rl.kl import KL_ESTIMATORS, kl_penalty
from ablate.rl.losses import (
    AGGREGATIONS,
    RATIO_LEVELS,
    SURROGATES,
    StepTotals,
    aggregate_loss,
    balanced_row_weights,
    effective_normalizer,
    policy_loss,
    policy_loss_from_config,
    row_signs,
    step_totals,
    value_loss,
)
from ablate.rl.masking import masked_mean, masked_whiten
from ablate.rl.mismatch import ROLLOUT_CORRECTIONS, mismatch_metrics, rollout_correction_weights

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "RATIO_LEVELS",
    "ROLLOUT_CORRECTIONS",
    "SURROGATES",
    "StepTotals",
    "aggregate_loss",
    "compute_advantages",
    "balanced_row_weights",
    "effective_normalizer",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "mismatch_metrics",
    "policy_loss",
    "policy_loss_from_config",
    "rollout_correction_weights",
    "row_signs",
    "step_totals",
    "value_loss",
]
