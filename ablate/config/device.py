"""Where a trial runs: the one :func:`resolve_device` (configurations, the model zoo), :func:`autocast_dtype`
and :func:`rollout_autocast_dtype`.

torch is imported inside the functions, so importing :mod:`ablate.config` stays torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ablate.config.schema import TrialConfig
from ablate.config.validators import DEVICE_RE
from ablate.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["autocast_dtype", "parameter_dtype", "resolve_device", "rollout_autocast_dtype"]


def resolve_device(device: TrialConfig | str | torch.device) -> torch.device:
    """The torch device of a configuration, a device string or a ``torch.device``.

    ``auto`` is CUDA when available, else CPU; a string must be auto, cpu, mps, cuda or cuda:N. A
    CUDA or MPS device (given as a string or as a ``torch.device``) must exist here.

    Raises:
        ConfigError: a malformed device string, or a CUDA / MPS device asked for where there is none.
    """
    import torch

    if isinstance(device, TrialConfig):
        device = device.device
    if isinstance(device, str):
        if not DEVICE_RE.match(device):
            raise ConfigError(f"device must be auto, cpu, mps, cuda or cuda:N, got {device!r}")
        if device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = str(device)
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but CUDA is not available here; use device=auto or device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device={name} but only {torch.cuda.device_count()} CUDA device(s) exist; use cuda:0 .. "
                f"cuda:{torch.cuda.device_count() - 1} or device=auto"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={name} but MPS is not available here; use device=auto or device=cpu")
    return device


def autocast_dtype(config: TrialConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``model.dtype`` on ``device``: bfloat16, or None for plain float32.

    ``auto`` autocasts to bfloat16 on CUDA only; ``bfloat16`` on every device; ``float32`` never.
    """
    import torch

    mode = config.model.dtype
    if mode == "bfloat16" or (mode == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def parameter_dtype(config: TrialConfig) -> torch.dtype:
    """The dtype of the policy's weights (and so of its optimizer state) under ``model.dtype``: float32
    in every mode. ``auto`` and ``bfloat16`` choose the autocast of the computation
    (:func:`autocast_dtype`), never the stored weights; and never torch's default dtype, so a warm
    start cached while it was float64 loads as float32 (:func:`ablate.train.warmstart.warm_start`)."""
    import torch

    del config  # every model.dtype mode keeps float32 weights
    return torch.float32


def rollout_autocast_dtype(config: TrialConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the rollout (``rollout.dtype``) on ``device``: bfloat16, or None for float32.

    null follows the trainer (:func:`autocast_dtype`); bfloat16 autocasts on every device; float32 never.
    """
    import torch

    mode = config.rollout.dtype
    if mode is None:
        return autocast_dtype(config, device)
    return torch.bfloat16 if mode == "bfloat16" else None
