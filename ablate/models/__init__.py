"""The policy: tokenizer, tiny model zoo, local HF checkpoints, batched sampling, log-probs."""

from ablate.models.policy import Policy

__all__ = ["Policy"]
