"""One tolerance for every float comparison of tensors in the suite (issue 53).

Two floating-point results of the same computation differ by rounding when anything changes the order of
their sums: another ATen kernel set (``ATEN_CPU_CAPABILITY=default | avx2 | avx512``), another thread
count, another batch shape, another library's arrangement of the same algebra. That rounding is
proportional to the *magnitude of the values being summed*, not to the one entry compared: a gradient entry
near 0 that is a sum of terms of size 1 carries an error of size ``eps``, not ``eps * |entry|``. So the
tolerance here is

    |actual - expected| <= ulps * eps(dtype) * scale,    scale = max(max|expected|, max|actual|)

for every entry: ``ulps`` units in the last place of the comparison's largest value. A fixed absolute
``atol`` (``1e-7`` for gradients whose largest entry is 0.3) is what failed on an AVX-512 processor.

The ``ulps`` levels below are the computations' own, each set with headroom over the largest error
measured under every kernel set and one and two threads (``ABLATE_TOLERANCE_LOG=path`` appends each
comparison's measured error in ulps, so the headroom can be re-measured on any processor:
``tests/test_tolerance.py`` says how):

- ``EXACT``: the same float64 arithmetic in another arrangement, or a hand-computed float64 value: a few
  operations, each rounded once. Exactness is the point, so the comparisons run in float64.
- ``OPS``: float32 elementwise operations and short reductions (a loss over a [B, T] batch, advantages).
- ``MODEL``: a float32 forward or backward pass of a model computed two ways (another batch shape, padding,
  kernel or library): every matmul of every layer sums in another order, and the errors pass through
  softmax, layer norm and the log-softmax over the vocabulary.

Measured on an AMD EPYC under ATen's default, avx2 and avx512 kernels with 1 and 2 threads (benchmarks/RESULTS.md,
"Float comparisons across kernels"): the largest errors were 4.1 ulps (EXACT), 0.7 (OPS) and 17 (MODEL), so
each bound has at least 15x headroom. A wrong result (a shifted position, another normalizer, a dropped term)
differs at 1e-3 to 1 of the scale: ``MODEL``'s bound is 512 * 1.19e-7 = 6.1e-5 of the scale, so the
comparisons still catch it (tests/test_tolerance.py).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

EXACT = 64  # float64: 64 * 2.2e-16 = 1.4e-14 of the scale
OPS = 128  # float32: 128 * 1.19e-7 = 1.5e-5 of the scale
MODEL = 512  # float32: 512 * 1.19e-7 = 6.1e-5 of the scale


def _tensor(x: Any, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if like is not None:
        return torch.as_tensor(np.asarray(x), dtype=like.dtype, device=like.device)
    return torch.as_tensor(np.asarray(x))


def _eps(*tensors: torch.Tensor) -> float:
    """The unit roundoff of the coarser of the tensors' floating dtypes (float64 for integers)."""
    floats = [t.dtype for t in tensors if t.dtype.is_floating_point]
    return max((torch.finfo(d).eps for d in floats), default=torch.finfo(torch.float64).eps)


def error_ulps(actual: Any, expected: Any, scale: float | None = None) -> tuple[float, float]:
    """``(error, scale)``: the largest ``|actual - expected|`` in units of ``eps * scale``, and the scale:
    ``max(max|expected|, max|actual|)``, or the ``scale`` given, for a result that is a small difference of
    large terms (a loss whose advantages cancel), whose rounding is that of its terms. Shapes must match;
    NaNs must sit at the same entries."""
    e = _tensor(expected)
    a = _tensor(actual, like=e)
    assert a.shape == e.shape, f"shapes differ: {tuple(a.shape)} vs {tuple(e.shape)}"
    a64, e64 = a.to(torch.float64).cpu(), e.to(torch.float64).cpu()
    nan_a, nan_e = torch.isnan(a64), torch.isnan(e64)
    assert torch.equal(nan_a, nan_e), "NaN at different entries"
    a64, e64 = a64[~nan_a], e64[~nan_e]
    if a64.numel() == 0:
        return 0.0, 0.0
    scale = max(float(e64.abs().max()), float(a64.abs().max()), scale or 0.0)
    diff = float((a64 - e64).abs().max())
    if scale == 0.0:
        return 0.0, 0.0
    return diff / (_eps(a, e) * scale), scale


def is_close(actual: Any, expected: Any, ulps: float = OPS, *, scale: float | None = None,
             atol: float = 0.0) -> bool:
    """Whether every entry of ``actual`` is within ``ulps * eps * scale + atol`` of ``expected`` (see the
    module). ``atol`` is for a stated difference that is not rounding: the digits a published value was
    printed with, another epsilon in a denominator; it is 0 for rounding alone."""
    error, scale_used = error_ulps(actual, expected, scale)
    return error <= ulps + _allowance(atol, actual, expected, scale_used)


def _allowance(atol: float, actual: Any, expected: Any, scale: float) -> float:
    """``atol`` in ulps of the scale (0 when no allowance is given)."""
    if atol == 0.0:
        return 0.0
    e = _tensor(expected)
    return atol / (_eps(_tensor(actual, like=e), e) * scale) if scale > 0 else float("inf")


def assert_close(actual: Any, expected: Any, ulps: float = OPS, *, scale: float | None = None,
                 atol: float = 0.0, msg: str = "") -> None:
    """Assert :func:`is_close`, naming the error in ulps of the scale and the bound it broke."""
    error, scale = error_ulps(actual, expected, scale)
    bound = ulps + _allowance(atol, actual, expected, scale)
    if atol == 0.0:
        _log(error, ulps)
    assert error <= bound, (f"{msg + ': ' if msg else ''}largest difference {error:.1f} ulps of the scale "
                            f"{scale:.3g} (bound {ulps} ulps" + (f" + atol {atol:g})" if atol else ")"))


def _log(error: float, ulps: float) -> None:
    path = os.environ.get("ABLATE_TOLERANCE_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"test": test, "error_ulps": error, "bound": ulps}) + "\n")
