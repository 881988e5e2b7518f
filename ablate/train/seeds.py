"""Seeds of a trial: every random draw of step ``s`` comes from a generator seeded by ``(seed, s, ...)``."""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from its parts, stable across processes and Python versions."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def seeded_generator(device: torch.device, *parts: int | str) -> torch.Generator:
    """A generator on ``device`` seeded by :func:`derive_seed` of ``parts`` (e.g. ``seed, "rollout", step``)."""
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))
