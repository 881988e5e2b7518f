"""Precision of parts of a model: an LM head computed in float32 under autocast.

ScaleRL (Khatri et al. 2025, "The Art of Scaling Reinforcement Learning Compute for LLMs") computes the
LM head in float32 in both the generator and the trainer, which shrinks the gap between the sampler's
and the trainer's log-probs. :func:`use_float32_lm_head` does that for a Hugging Face causal LM: its
output embedding becomes a :class:`Float32Linear` (same parameters, so tied weights stay tied and the
state dict is unchanged), whose forward turns autocast off and multiplies in float32. Every path that
computes logits honours it: the model's own forward, the lean decoder (which calls the head module)
and :func:`ablate.models.logprobs.token_logprobs` (which reads :attr:`Float32Linear.float32_head`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ablate.errors import AblateError

__all__ = ["Float32Linear", "is_float32_head", "use_float32_lm_head"]


class Float32Linear(nn.Linear):
    """An ``nn.Linear`` computed in float32 with autocast off: ``x [.., K] -> float32 [.., V]``."""

    #: Read by the chunked log-prob kernel, which multiplies by the head's weight itself.
    float32_head = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            bias = None if self.bias is None else self.bias.float()
            return F.linear(x.float(), self.weight.float(), bias)


def is_float32_head(head: nn.Module | None) -> bool:
    """True when ``head`` is computed in float32 whatever autocast says (a :class:`Float32Linear`)."""
    return bool(getattr(head, "float32_head", False))


def use_float32_lm_head(model: nn.Module) -> None:
    """Make ``model``'s LM head (``get_output_embeddings()``) a :class:`Float32Linear`, in place.

    Raises:
        AblateError: the model has no ``nn.Linear`` output embedding.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise AblateError(
            f"model.lm_head_dtype=float32 needs a model whose output embedding is an nn.Linear, got "
            f"{type(head).__name__}; set model.lm_head_dtype=null"
        )
    head.__class__ = Float32Linear
