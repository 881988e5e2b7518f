"""The policy: tokenizer, tiny model zoo, local HF checkpoints, batched sampling, log-probs.

``load_policy(name_or_path)`` is the one entry point: a zoo name (``ablate models`` lists them) or a
local Hugging Face checkpoint directory; ``save_policy(policy, path)`` writes one.
"""

from ablate.models.checkpoint import load_checkpoint, save_policy
from ablate.models.policy import Policy
from ablate.models.tokenizer import build_tokenizer
from ablate.models.zoo import DEFAULT_MODEL, MODELS, ZooEntry, load_policy

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Policy",
    "ZooEntry",
    "build_tokenizer",
    "load_checkpoint",
    "load_policy",
    "save_policy",
]
