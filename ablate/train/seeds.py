"""Seeds of a trial: every random draw of step ``s`` comes from a generator seeded by ``(seed, s, ...)``.

:func:`trial_stream` gives the leading parts of every such seed: the trial seed, and ``stream=k`` when
the config's ``stream`` is not 0 (an A/A control: the same trial in distribution, other random draws).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ablate.config import TrialConfig


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from its parts, stable across processes and Python versions."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def seeded_generator(device: torch.device, *parts: int | str) -> torch.Generator:
    """A generator on ``device`` seeded by :func:`derive_seed` of ``parts`` (e.g. ``seed, "rollout", step``)."""
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))


def trial_stream(config: TrialConfig) -> tuple[int | str, ...]:
    """The leading parts of every seed of a trial's RL phase: ``(seed,)``, or ``(seed, "stream=k")``.

    ``stream`` 0 gives exactly the seeds every trial had before the field existed; any other value
    gives independent draws (prompt order, sampling, reward noise, minibatch order, new heads'
    initialisation) from the same distribution. The warm start and a learned PRM (inputs shared by the
    arms of a study) do not depend on it.
    """
    stream = int(getattr(config, "stream", 0))
    return (config.seed,) if stream == 0 else (config.seed, f"stream={stream}")
