"""Mask helpers shared by the RL math: padding-safe selection, masked reductions, whitening.

Every function here treats positions where ``mask`` is 0 as absent: their values are never read
into a result (they are replaced with ``torch.where`` *before* any arithmetic, so that garbage such
as ``1e4`` or ``inf`` on padding cannot leak into a value or produce a NaN gradient).
"""

from __future__ import annotations

import torch

__all__ = [
    "as_bool_mask",
    "check_same_shape",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "zero_padding",
]


def as_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` ([B, T], bool / int / float) as a bool tensor: True on active tokens."""
    return mask if mask.dtype == torch.bool else mask != 0


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` [B, T] with every padded position (``mask`` 0) set to exactly 0.

    Uses ``torch.where``, so whatever sits on padding (large numbers, inf) gets no gradient and
    cannot turn a gradient into NaN, unlike ``x * mask``.
    """
    return torch.where(as_bool_mask(mask), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` [B, T] over active positions, over ``dim`` (all dimensions when None)."""
    x = zero_padding(x, mask)
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` [B, T] over active positions, over ``dim``; 0 where nothing is active."""
    count = as_bool_mask(mask).to(x.dtype)
    count = count.sum() if dim is None else count.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and unbiased variance over the active positions
    of the whole tensor; 0 on padding. With fewer than two active positions the variance is 0.

    Args:
        x: [B, T] values.
        mask: [B, T], 1 on active positions.
        eps: added to the variance.

    Returns:
        [B, T] whitened values (the shift of the mean included), exactly 0 where ``mask`` is 0.
    """
    m = as_bool_mask(mask)
    n = m.sum().to(x.dtype)
    mean = masked_sum(x, m) / n.clamp(min=1)
    centered = zero_padding(x - mean, m)
    var = (centered**2).sum() / (n - 1).clamp(min=1)
    return zero_padding(centered * torch.rsqrt(var + eps), m)


def check_same_shape(**tensors: torch.Tensor | None) -> None:
    """Raise ValueError unless every given (non-None) tensor has the same shape.

    These are programming errors (a caller passed misaligned tensors), not user errors.
    """
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
        raise ValueError(f"tensors must have the same [B, T] shape, got {listed}")
    for name, shape in shapes.items():
        if len(shape) != 2:
            raise ValueError(f"{name} must be [B, T] (2-D), got shape {list(shape)}")
