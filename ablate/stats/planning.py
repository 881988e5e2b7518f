"""How many seeds a study needs: planned from a pilot's variance (``ablate plan``), and re-estimated
in rounds while a study with ``seeds: {min: a, max: b}`` runs (``ablate run``).

The unit of replication is the seed, and every comparison is paired by seed (see
:mod:`ablate.stats.inference`). What decides how many seeds a contrast needs is the **standard deviation
of one seed's difference** (level - baseline), ``Contrast.sd_per_seed``: with n seeds the
difference's standard error is ``sd / sqrt(n)``. From it:

- **Seeds per arm** for a two-sided paired t-test to detect a true difference ``effect`` with
  probability ``power`` (:func:`ablate.stats.inference.seeds_for_power`, the exact power of
  :func:`ablate.stats.inference.paired_t_power`);
  ``effect`` is the study's ``min_effect`` (the smallest difference worth finding), or, when the
  study declares none, each contrast's observed difference (which makes the plan only as good as
  a noisy pilot estimate: say ``min_effect:``).
- **At the Bonferroni level alpha / m**, m = the size of the report's family of claims (every
  contrast and testable interaction: the report corrects them together with Holm's method), or,
  when the family size is not given, the number of contrasts planned for. Testing each of m claims
  at alpha / m keeps the chance of any false detection at most alpha, whatever their correlation;
  Holm's step-down test rejects at least what Bonferroni rejects, so seeds that power the
  Bonferroni test power the report's Holm test too. The contrasts planned for are the study's
  ``primary:`` contrasts, or every contrast when it declares none.
- **The recommendation** is the largest count over the planned contrasts (the contrast with the
  largest SD relative to its effect *drives* it), and never below :data:`~ablate.stats.inference.MIN_SEEDS`
  (the report gives no interval below 3 seeds).

**Adaptive seeds** (``seeds: {min: a, max: b}``, which needs ``min_effect``): ``ablate run`` runs
seeds 0..a-1, then in rounds (at most :data:`MAX_ROUNDS`) re-estimates the seeds needed from the
finished trials and adds seeds up to ``n_new = min(b, max(n, seeds needed))`` (:func:`reestimate`),
until n does not grow or b is reached. This is *variance-only sample-size re-estimation* with an
internal pilot (Wittes & Brittain 1990, "The role of internal pilot studies in increasing the
efficiency of clinical trials", Stat. Med. 9): the new n depends on the estimated SD of the planned
(primary) contrasts and on the fixed ``min_effect``, **never on the observed difference**. Why the
reported error rate stays (about) right: for normal per-seed differences the sample mean and the
sample variance are independent, so choosing n from the variance does not select for large (or
small) observed effects, and the final test, run on all seeds as if n had been fixed, keeps its type
I error rate up to a small inflation (it comes from the final test reusing the first seeds'
variance). Wittes, Schabenberger, Zucker, Brittain & Proschan (1999, "Internal pilot studies I: type
I error rate of the naive t-test", Stat. Med. 18) found it often negligible, especially in
*restricted* designs, whose n never falls below the first count (as here: n only grows); Kieser &
Friede (2000, Stat. Med. 19) bounded its maximum, which is largest for very small internal pilots
(prefer ``min: 4`` or more where the budget allows), and their blinded procedures (Kieser & Friede
2003, "Simple procedures for blinded sample size adjustment that do not affect the type I error
rate", Stat. Med. 22) avoid it. Choosing n from the observed *effect* ("run more seeds while it
looks promising") inflates the error rate badly, which is why the rule never looks at it.

Each round's decision is kept in the study store, so that running the same command again reuses it
for the seeds already enqueued (the seeds in the store count as the current n), and is recorded as
the MLflow tags :data:`TAG_ADAPTIVE` (the rule and the seed counts, in words) and
:data:`ablate.study.plan.TAG_SEEDS` (the seed count) of the study's parent run. Only ``ablate run`` decides;
``ablate worker`` runs the seeds the store holds.

The functions in the first part take and return data; :func:`read_pilot` (MLflow) is the edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.errors import AblateError
from ablate.states import DONE
from ablate.stats.inference import (
    ALPHA,
    MAX_SEEDS,
    MIN_SEEDS,
    POWER,
    Contrast,
    contrast_resolvable_effect,
    seeds_for_power,
)

if TYPE_CHECKING:

    from ablate.stats.inference import StudyInference
    from ablate.study import Study
    from ablate.study.plan import Plan
    from ablate.tracking.results import Results

#: MLflow tag of the study's parent run: the adaptive rule and its seed counts, in words
#: (``variance-only re-estimation: 3 -> 5 (max 5), ...``).
TAG_ADAPTIVE = "ablate.adaptive_seeds"
#: Rounds of re-estimation at most (each may add seeds).
MAX_ROUNDS = 4
#: Where the rounds' decisions are kept in the study store (``StudyStore.note``), + the budget.
STORE_NOTE = "adaptive_seeds:"

#: How the effect a contrast is planned for was chosen.
FROM_MIN_EFFECT, FROM_OBSERVED = "min_effect", "observed"


# ------------------------------------------------------------------------------------------ a plan


@dataclass(frozen=True)
class ContrastPlan:
    """The seeds one contrast needs.

    Attributes:
        name: ``factor: level vs baseline``; primary: the study names it in ``primary:``.
        pilot_seeds: seeds of the pilot with both levels.
        sd: SD of one seed's difference (objective units); NaN below 2 pilot seeds.
        estimate: the pilot's difference, level - baseline (objective units).
        effect: the (positive) difference planned for: ``min_effect`` or ``|estimate|``.
        seeds_needed: seeds per arm for the planned power at the planned level (NaN without an SD,
            ``inf`` when no count up to :data:`ablate.stats.inference.MAX_SEEDS` is enough, e.g. an
            observed difference of 0).
        resolvable: the smallest true difference the pilot's own design detects with the planned power
            at the planned level (:func:`ablate.stats.inference.contrast_resolvable_effect`: the contrast's
            standard error and df; NaN without an SD).
        verdict: the report's verdict on the pilot's trials (detected / equivalent / not resolved; ""
            when the plan was made from contrasts alone).
    """

    name: str
    primary: bool
    pilot_seeds: int
    sd: float
    estimate: float
    effect: float
    seeds_needed: float
    resolvable: float = math.nan
    verdict: str = ""


@dataclass(frozen=True)
class SeedPlan:
    """The seeds a study needs (see :func:`plan_seeds`).

    Attributes:
        contrasts: the contrasts planned for (the primary ones, or all when none is primary).
        primary_declared: the study declares ``primary:`` contrasts (else every contrast is planned for).
        effect_from: :data:`FROM_MIN_EFFECT` or :data:`FROM_OBSERVED`; min_effect: the study's.
        alpha: the family-wise error rate; m: contrasts planned for; level: ``alpha / m``.
        power: the power aimed for.
        family_size: claims in the report's Holm family (contrasts and interactions; 0: unknown).
    """

    contrasts: tuple[ContrastPlan, ...]
    primary_declared: bool
    effect_from: str
    min_effect: float | None
    alpha: float
    m: int
    level: float
    power: float
    family_size: int = 0

    @property
    def driver(self) -> ContrastPlan | None:
        """The contrast that needs the most seeds (the first of equals; one without an SD first)."""
        if not self.contrasts:
            return None
        return max(self.contrasts, key=lambda c: math.inf if math.isnan(c.seeds_needed) else c.seeds_needed)

    @property
    def seeds(self) -> float:
        """Seeds per arm: the largest need over the contrasts, at least :data:`MIN_SEEDS`; NaN when a
        contrast has no SD (fewer than 2 pilot seeds), ``inf`` when one cannot be powered."""
        if not self.contrasts or any(math.isnan(c.seeds_needed) for c in self.contrasts):
            return math.nan
        return max(float(MIN_SEEDS), *(c.seeds_needed for c in self.contrasts))

    @property
    def pilot_seeds(self) -> int:
        """The fewest pilot seeds over the contrasts."""
        return min((c.pilot_seeds for c in self.contrasts), default=0)


def planned_contrasts(contrasts: Sequence[Contrast]) -> tuple[tuple[Contrast, ...], bool]:
    """The contrasts to plan for: the primary ones, or every one when none is primary.

    Returns:
        ``(contrasts, primary_declared)``.
    """
    primary = tuple(c for c in contrasts if c.primary)
    return (primary, True) if primary else (tuple(contrasts), False)


def plan_seeds(contrasts: Sequence[Contrast], *, min_effect: float | None = None, alpha: float = ALPHA,
               power: float = POWER, family_size: int = 0, verdicts: Mapping[str, str] | None = None) -> SeedPlan:
    """The seeds per arm that give each planned contrast ``power`` at the Bonferroni level alpha / m.

    Args:
        contrasts: every contrast of the pilot (:attr:`ablate.stats.inference.StudyInference.contrasts`);
            the primary ones are planned for, or all when none is primary.
        min_effect: the study's minimum effect (objective units); None: plan each contrast for its
            observed difference.
        alpha: family-wise error rate; power: the power aimed for.
        family_size: claims in the report's family: the level is alpha / family_size (0: unknown, then
            alpha / the number of contrasts planned for).
        verdicts: contrast name -> the report's verdict on the pilot (carried into the plan's rows).
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise AblateError(f"alpha ({alpha:g}) and power ({power:g}) must lie strictly between 0 and 1")
    chosen, declared = planned_contrasts(contrasts)
    m = max(1, family_size or len(chosen))  # the report tests every claim of its family together
    level = alpha / m
    out = []
    for c in chosen:
        sd = c.sd_per_seed if c.n_seeds >= 2 else math.nan
        effect = float(min_effect) if min_effect else abs(c.estimate)
        need = seeds_for_power(sd, effect, alpha=level, power=power) if math.isfinite(sd) else math.nan
        mde = contrast_resolvable_effect(c, alpha=level, power=power) if math.isfinite(sd) else math.nan
        out.append(ContrastPlan(c.name, c.primary, c.n_seeds, sd, c.estimate, effect, need, mde,
                                (verdicts or {}).get(c.name, "")))
    return SeedPlan(tuple(out), declared, FROM_MIN_EFFECT if min_effect else FROM_OBSERVED, min_effect, alpha, m,
                    level, power, family_size)


def at_level(plan: SeedPlan, m: int) -> float:
    """The recommendation of ``plan`` had its contrasts been tested at alpha / ``m`` instead (e.g.
    ``m`` = the report's whole family); NaN / inf as :attr:`SeedPlan.seeds`."""
    needs = []
    for c in plan.contrasts:
        if math.isnan(c.sd):
            return math.nan
        needs.append(seeds_for_power(c.sd, c.effect, alpha=plan.alpha / max(1, m), power=plan.power))
    return max(float(MIN_SEEDS), *needs) if needs else math.nan


# ------------------------------------------------------------------------------------ adaptive seeds


@dataclass(frozen=True)
class AdaptiveRound:
    """One round of variance-only re-estimation (see :func:`reestimate`).

    Attributes:
        round: 1, 2, ...; n: seeds when it decided; n_new: seeds after it (n <= n_new <= max).
        needed: the seeds the plan asked for (NaN when no SD could be estimated, inf when unreachable).
        sd: the SD per seed of the contrast that drives the plan (NaN without one); driver: its name.
        min_effect: the effect planned for; alpha, m: the family-wise rate and the contrasts planned
            for (each at alpha / m); power: the power aimed for; max: the study's maximum seed count.
    """

    round: int
    n: int
    n_new: int
    needed: float
    sd: float
    driver: str
    min_effect: float
    alpha: float
    m: int
    power: float
    max: int

    @property
    def level(self) -> float:
        """The per-contrast level alpha / m."""
        return self.alpha / max(1, self.m)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (non-finite numbers as None or ``"inf"``), as kept in the study store."""
        def num(x: float) -> Any:
            return None if math.isnan(x) else ("inf" if math.isinf(x) else x)

        return {"round": self.round, "n": self.n, "n_new": self.n_new, "needed": num(self.needed),
                "sd": num(self.sd), "driver": self.driver, "min_effect": self.min_effect, "alpha": self.alpha,
                "m": self.m, "power": self.power, "max": self.max}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> AdaptiveRound:
        """The inverse of :meth:`to_dict`."""
        def num(x: Any) -> float:
            return math.nan if x is None else (math.inf if x == "inf" else float(x))

        return AdaptiveRound(int(d["round"]), int(d["n"]), int(d["n_new"]), num(d.get("needed")), num(d.get("sd")),
                             str(d.get("driver", "")), float(d["min_effect"]), float(d["alpha"]), int(d["m"]),
                             float(d["power"]), int(d["max"]))

    def line(self, scale: float = 1.0, unit: str = "") -> str:
        """The round's decision in one line, objective values times ``scale`` in ``unit``, e.g.
        ``adaptive seeds: round 1: SD per seed 4.1 points (lr: 0.03 vs 0.001) -> 9 seeds needed for
        min_effect 3 points (power 0.8, alpha 0.05/1); running seeds 4-8``."""
        u = f" {unit}" if unit else ""
        if math.isnan(self.sd):
            why = (f"{self.n} seed{'s' if self.n != 1 else ''}: no SD can be estimated -> {MIN_SEEDS} seeds "
                   "first (the fewest with an interval)")
        else:
            need = f"more than {MAX_SEEDS}" if math.isinf(self.needed) else f"{int(self.needed)}"
            why = (f"SD per seed {fmt_value(self.sd * scale)}{u} ({self.driver}) -> {need} seeds needed for min_effect "
                   f"{fmt_value(self.min_effect * scale)}{u} (power {self.power:g}, alpha {self.alpha:g}/{self.m})")
        short = not self.needed <= self.n_new  # NaN and inf included
        if self.n_new > self.n:
            first, last = self.n, self.n_new - 1
            todo = f"seed {first}" if first == last else f"seeds {first}-{last}"
            return f"adaptive seeds: round {self.round}: {why}; running {todo}" + (
                f" (the max is {self.max})" if short and self.n_new == self.max else "")
        if short:
            return f"adaptive seeds: round {self.round}: {why}; stays at {self.n} seeds: the max ({self.max}) is reached"
        return f"adaptive seeds: round {self.round}: {why}; {self.n} seeds suffice: done"


def reestimate(plan: SeedPlan, n: int, max_seeds: int, round_: int) -> AdaptiveRound:
    """One round's decision: ``n_new = min(max_seeds, max(n, seeds needed))``.

    ``plan`` must plan for the study's ``min_effect`` (:func:`plan_seeds` with ``min_effect``): the
    decision then depends on the pilot's SD alone, never on its observed difference. Without an SD
    (fewer than 2 seeds) the next count is :data:`~ablate.stats.inference.MIN_SEEDS`, which uses no data.
    A count already above ``max_seeds`` (the file's max was lowered) stays.
    """
    if plan.effect_from != FROM_MIN_EFFECT or plan.min_effect is None:
        raise ValueError("variance-only re-estimation plans for the study's min_effect, never for an observed effect")
    need = plan.seeds
    driver = plan.driver
    target = float(MIN_SEEDS) if math.isnan(need) else need
    n_new = max(n, int(min(max_seeds, target)))
    return AdaptiveRound(round_, n, n_new, need, driver.sd if driver else math.nan, driver.name if driver else "",
                         float(plan.min_effect), plan.alpha, plan.m, plan.power, max_seeds)


def adaptive_summary(rounds: Sequence[AdaptiveRound], *, min_seeds: int, max_seeds: int, min_effect: float,
                     alpha: float = ALPHA, power: float = POWER, m: int = 1) -> str:
    """The value of :data:`TAG_ADAPTIVE`: ``variance-only re-estimation: 3 -> 5 (max 5), for 80%
    power at min_effect 0.01, alpha 0.05/1 per contrast`` (``..., not re-estimated yet`` before the
    first round)."""
    if rounds:
        counts = [rounds[0].n, *(r.n_new for r in rounds)]
        alpha, power, m = rounds[-1].alpha, rounds[-1].power, rounds[-1].m
    else:
        counts = [min_seeds]
    path = " -> ".join(str(c) for c in counts)
    text = (f"variance-only re-estimation: {path} (max {max_seeds}), for {power:.0%} power at min_effect "
            f"{min_effect:g}, alpha {alpha:g}/{m} per contrast")
    return text if rounds else text + ", not re-estimated yet"


def seeds_in_design(design: Mapping[str, Any] | None) -> int:
    """The seed count of a frozen design record (``{trials: {key: [arm, seed]}}``, see
    :func:`ablate.store.design_record`): the largest seed + 1 (seeds run 0..n-1); 0 without one."""
    if not design or not design.get("trials"):
        return 0
    return 1 + max(int(seed) for _, seed in design["trials"].values())


# --------------------------------------------------------------------------------------------- time


def study_seconds(study: Study, budget: str, seeds: int) -> float | None:
    """The estimated one-worker time of ``study`` at ``budget`` with ``seeds`` seeds per arm
    (:mod:`ablate.study.timing`; a trial's time does not depend on its seed); None without timing constants."""
    from ablate.study.plan import Plan
    from ablate.study.timing import estimate_study_seconds

    one = estimate_study_seconds(Plan.of(study.with_seeds([0]), budget).specs)
    return None if one is None else one * seeds


def context_seconds(study: Study, budget: str, seeds: int) -> dict[str, float | None]:
    """Per context of a study with ``contexts:``, the estimated one-worker time of its trials at ``budget``
    with ``seeds`` seeds per arm (as :func:`study_seconds`); empty without contexts."""
    from ablate.study.plan import Plan
    from ablate.study.timing import estimate_study_seconds

    by_context: dict[str, list] = {}
    for spec in Plan.of(study.with_seeds([0]), budget).specs:
        by_context.setdefault(study.context_of(spec.levels), []).append(spec)
    out: dict[str, float | None] = {}
    for ctx, specs in by_context.items() if study.contexts else ():
        one = estimate_study_seconds(specs)
        out[ctx] = None if one is None else one * seeds
    return out


def format_duration(seconds: float | None) -> str:
    """``~40 s``, ``~25 min``, ``~2.5 h``; ``unknown`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"~{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"~{round(seconds / 60)} min"
    return f"~{seconds / 3600:.1f} h"


def fmt_value(x: float) -> str:
    """A number for a line of text: 3 significant digits, no exponent for ordinary sizes."""
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


# ------------------------------------------------------------------------------------- reading a pilot


@dataclass(frozen=True)
class Pilot:
    """The finished trials of a study at one budget and their inference (the report's).

    Attributes:
        results: what :func:`ablate.tracking.results.load_results` read (None for a pilot read from a report
            folder's results.csv, :func:`read_report_pilot`).
        inference: the objective's contrasts and family (:func:`pilot_inference`).
        finished: trials with a result.
    """

    results: Results | None
    inference: StudyInference
    finished: int


def pilot_inference(study: Study, results: Results) -> StudyInference:
    """The inference a report makes on ``results`` (what
    :func:`ablate.report.statistics.compute_statistics` puts in ``.inference``): one objective value
    per finished trial (:func:`ablate.stats.analysis.trial_objectives`), then
    :func:`ablate.stats.inference.infer` with the study's design, mode, ``min_effect`` and ``primary:``.
    The report's other statistics (the compute-efficiency fits, seconds per arm) are not computed."""
    from ablate.stats.inference import study_inference

    return study_inference(study, results)[1]


def read_pilot(plan: Plan, tracking_uri: str | None = None) -> Pilot:
    """Read a plan's finished trials from MLflow (:func:`ablate.tracking.results.load_results`) and make the
    report's inference on them (:func:`pilot_inference`), so that the SDs planned with are the report's."""
    from ablate.tracking.results import load_results

    results = load_results(plan, tracking_uri=tracking_uri, allow_fewer=True)  # a pilot: what there is
    finished = int((results.trials["state"] == DONE).sum()) if not results.trials.empty else 0
    return Pilot(results, pilot_inference(plan.study, results), finished)


__all__ = [
    "AdaptiveRound",
    "ContrastPlan",
    "MAX_ROUNDS",
    "Pilot",
    "SeedPlan",
    "TAG_ADAPTIVE",
    "adaptive_summary",
    "at_level",
    "fmt_value",
    "format_duration",
    "plan_seeds",
    "pilot_inference",
    "planned_contrasts",
    "read_pilot",
    "reestimate",
    "seeds_in_design",
    "study_seconds",
]
