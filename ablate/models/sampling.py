"""Drawing the next token from a batch of logits: the one sampler of every decode loop."""

from __future__ import annotations

import torch

__all__ = ["sample_next"]


def sample_next(logits: torch.Tensor, *, temperature: float, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from ``logits`` [B, V]: greedy at temperature 0, else tempered nucleus sampling.

    Nucleus (top-p) sampling keeps the smallest set of most likely tokens whose mass reaches ``top_p``
    (the most likely token is always kept), Holtzman et al. 2020. The draw is by inversion: one
    uniform number per row (``torch.rand`` with ``generator``) against the float64 cumulative
    distribution, so a batch of B rows consumes exactly B numbers whatever the logits are.

    Returns:
        [B] long token ids.
    """
    if temperature == 0.0:
        return logits.argmax(-1)
    logits = logits.float()
    probs = torch.softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)  # (B, V)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    cdf = probs.double().cumsum_(-1)  # (B, V)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=logits.device)
    # strictly below the total mass, so that the token found has a positive probability
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).squeeze(-1)
