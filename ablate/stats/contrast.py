"""A contrast (one level of one factor against its baseline, over paired seeds) and the seeds it improved on:
the types :mod:`ablate.stats.inference` computes and :mod:`ablate.stats.sequential` extends, in a module of
their own so that neither of the two imports the other for them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.stats.intervals import MIN_SEEDS


@dataclass(frozen=True)
class Improvement:
    """The seeds on which the level improved on the baseline: ``k`` of ``n`` untied seeds, the
    fraction, and its exact (Clopper-Pearson) 95% interval."""

    k: int
    n: int
    fraction: float
    low: float
    high: float



@dataclass(frozen=True)
class Contrast:
    """One level of one factor against the factor's baseline level.

    Attributes:
        factor, level, baseline: what is compared.
        method: ``paired t`` or ``linear model`` (see the module docstring).
        n_seeds: seeds with both values; cells: matched cells averaged (1 for a paired comparison).
        level_mean, baseline_mean: means over seeds (matched cells), objective units.
        estimate: level - baseline (objective units); se: its standard error; df: its degrees of
            freedom (n - 1, or the model's residual df).
        ci_low, ci_high: the 95% interval (NaN below :data:`MIN_SEEDS` seeds).
        p: two-sided p-value of "no difference"; p_tost: TOST p-value at +-min_effect (NaN without one).
        seeds, per_seed: the seeds and the per-seed differences (matched cells averaged).
        d_z: the paired effect size; improved: seeds improved (:func:`seeds_improved`).
        primary: the study names it in ``primary:``.
    """

    factor: str
    level: str
    baseline: str
    method: str
    n_seeds: int
    cells: int
    level_mean: float
    baseline_mean: float
    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    p: float
    p_tost: float
    seeds: tuple[int, ...]
    per_seed: tuple[float, ...]
    d_z: float
    improved: Improvement
    primary: bool = False

    @property
    def name(self) -> str:
        """``factor: level vs baseline``."""
        return f"{self.factor}: {self.level} vs {self.baseline}"

    @property
    def degenerate(self) -> bool:
        """Enough seeds for a test but a standard error of exactly 0: every per-seed difference is the
        same (identical samples when they are all 0). No interval or p-value applies; the report says so
        in words."""
        return self.n_seeds >= MIN_SEEDS and self.se == 0

    @property
    def identical(self) -> bool:
        """A degenerate contrast whose per-seed differences are all exactly 0 (identical samples)."""
        return self.degenerate and all(v == 0 for v in self.per_seed)

    def degenerate_text(self, factor: float = 1.0, unit: str = "") -> str:
        """The sentence a degenerate contrast gets instead of a test ("" for one that is not)."""
        if not self.degenerate:
            return ""
        u = f" {unit}" if unit else ""
        if self.identical:
            return (f"identical in all {self.n_seeds} seeds (every per-seed difference is exactly 0{u}): no test "
                    "applies to identical samples; the two arms reached the same values")
        return (f"every one of the {self.n_seeds} seeds differs by exactly {self.estimate * factor:+.3g}{u}: with "
                "zero spread no interval or test applies")

    @property
    def sd_per_seed(self) -> float:
        """The standard deviation of one seed's difference implied by the interval: ``se sqrt(n)``."""
        return self.se * math.sqrt(self.n_seeds) if self.n_seeds else math.nan


__all__ = ["Contrast", "Improvement"]
