"""What a step's batch says about the policy: the ``reward/*``, ``response/*`` and ``policy/kl_ref``
metrics, and the sample table of a trial's result."""

from __future__ import annotations

from typing import Any

import torch

from ablate.rl import kl_penalty
from ablate.train.batch import StepBatch
from ablate.train.update import nan_mean


def rollout_metrics(batch: StepBatch) -> dict[str, float]:
    """Rewards (total, per component, accuracy, format rate, step accuracy), response lengths (tokens;
    overall, of correct and of incorrect completions), the truncated fraction, and with reference
    log-probs the k1 KL to the reference summed over each completion (``policy/kl_ref``, nats)."""
    out: dict[str, float] = {}
    seq = batch.token_rewards.sum(dim=1)  # (B,)
    out["reward/total"] = float(seq.mean())
    for name, part in batch.parts.items():
        out[f"reward/{name}"] = float(part.sum(dim=1).mean())
    correct = torch.tensor([g.answer_correct for g in batch.grades], dtype=torch.bool)  # (B,)
    lengths = batch.mask.sum(dim=1).cpu()  # (B,)
    out["reward/accuracy"] = float(correct.float().mean())
    out["reward/format_rate"] = nan_mean([float(g.format_ok) for g in batch.grades])
    out["reward/step_accuracy"] = nan_mean([g.step_accuracy for g in batch.grades])
    out["response/length"] = float(lengths.mean())
    out["response/length_correct"] = float(lengths[correct].mean()) if correct.any() else float("nan")
    out["response/length_incorrect"] = float(lengths[~correct].mean()) if (~correct).any() else float("nan")
    out["response/truncated_frac"] = float(batch.truncated.float().mean())
    if batch.ref_logp is not None:
        k1 = kl_penalty(batch.old_logp, batch.ref_logp, estimator="k1", mask=batch.mask)  # (B, T)
        out["policy/kl_ref"] = float((k1 * batch.mask).sum(dim=1).mean())
    return out


def sample_table(batch: StepBatch, limit: int = 16) -> list[dict[str, Any]]:
    """The first ``limit`` completions of ``batch``: prompt, completion, correct, and each component's reward."""
    rows = []
    for i in range(min(limit, len(batch.texts))):
        g = int(batch.group_ids[i])
        rows.append({
            "prompt": batch.prompts[g],
            "completion": batch.texts[i],
            "correct": bool(batch.grades[i].answer_correct),
            **{f"reward/{k}": float(v[i].sum()) for k, v in batch.parts.items()},
        })
    return rows
