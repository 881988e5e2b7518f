"""The plan of a study at one budget: the frozen list of trials that run, in the order they run.

A :class:`Plan` is the one expansion of a study. Every reader of "which trials does this study
have" takes one: the runner and its workers (what to enqueue and train), ``ablate status`` (what
to count), :func:`ablate.tracking.results.load_results` and the report (what to read back), ``ablate show``
and the seed planner (what it costs). Nothing else expands a study::

    study = load_study("studies/quickstart.yaml")   # validates every arm's config at every budget
    plan = Plan.of(study, "default")                 # arms x seeds, from those validated configs
    plan = plan.with_tuned(best)                     # a study with ``tune:``: each arm at its tuned values
    plan = plan.with_seeds(range(5))                 # adaptive seeds: the seeds a round added

A tuned plan's trials carry the tuned values in their configurations, hence in their trial keys; the
runner records them (and an adaptive study's seed count) on the study's MLflow parent run
(:data:`TAG_TUNED`, :data:`TAG_SEEDS`), and :meth:`Plan.recorded` rebuilds the plan that ran from
those tags, so a report reads the trials that actually ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ablate.config import TrialConfig
from ablate.study import DEFAULT_BUDGET, Study, TrialSpec

#: Parent-run tag: the seed count of a study with ``seeds: {min, max}`` (adaptive rounds add seeds).
TAG_SEEDS = "ablate.adaptive_seeds.n"
#: Parent-run tag: the tuned values of a study with ``tune:`` (JSON: arm -> {dotted path: value}).
TAG_TUNED = "ablate.tuned"


@dataclass(frozen=True)
class Plan:
    """The trials of ``study`` at ``budget``: every arm at every seed, seed-major.

    Build it with :meth:`of`; derive tuned or grown plans with :meth:`with_tuned` and
    :meth:`with_seeds` (a plan is never changed in place).

    Attributes:
        study: the study at the budget (its ``seeds`` are the plan's seeds: the budget's first n where it
            sets ``seeds: n``).
        budget: the budget's name.
        tuned: arm name -> its tuned values (dotted path -> value); empty for an untuned plan.
        specs: the trials, seed-major (all arms at the first seed, then all at the second ...), arms
            in design order, so that a study stopped early holds complete paired comparisons.
    """

    study: Study
    budget: str
    tuned: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    specs: tuple[TrialSpec, ...] = ()

    @classmethod
    def of(cls, study: Study, budget: str = DEFAULT_BUDGET, *,
           tuned: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
        """The plan of ``study`` at ``budget`` (with each arm's ``tuned`` values, when given).

        The arms' configurations are the ones :func:`ablate.study.load_study` validated; each
        trial's is its arm's with the trial's seed (and tuned values) set.

        Raises:
            AblateError: ``budget`` is not a budget of the study (the message lists them).
        """
        study.check_budget(budget)
        study = study.at_budget(budget)  # a budget may run only the first n seeds (``seeds: n``)
        tuned = {arm: dict(values) for arm, values in (tuned or {}).items() if values}
        specs = []
        for seed in study.seeds:
            for arm in study.arms:
                config = _with_seed(study.arm_config(arm, budget), seed)
                if arm.name in tuned:
                    config = config.with_overrides(tuned[arm.name])
                specs.append(TrialSpec(study.name, arm.name, dict(arm.levels), seed, budget, config,
                                       config.trial_key()))
        return cls(study, budget, tuned, tuple(specs))

    def with_tuned(self, best: Mapping[str, Mapping[str, Any]] | None) -> Plan:
        """This plan with each arm at its tuned values (``best``: arm -> values; None: unchanged)."""
        if not best:
            return self
        return Plan.of(self.study, self.budget, tuned=best)

    def with_seeds(self, seeds: Iterable[int]) -> Plan:
        """This plan at other seeds (an adaptive round adds seeds this way)."""
        seeds = tuple(int(s) for s in seeds)
        if seeds == self.study.seeds:
            return self
        return Plan.of(self.study.with_seeds(seeds), self.budget, tuned=self.tuned)

    def recorded(self, tags: Mapping[str, str]) -> Plan:
        """The plan that ran, from the study's parent-run ``tags``: the seed count an adaptive study
        reached (:data:`TAG_SEEDS`, never fewer seeds than this plan's) and the tuned values
        (:data:`TAG_TUNED`, when this plan has none). Unreadable tags are ignored."""
        plan = self
        n = tags.get(TAG_SEEDS)
        if self.study.seed_range is not None and n is not None and n.isdigit():
            plan = plan.with_seeds(range(max(int(n), len(self.study.seeds))))
        text = tags.get(TAG_TUNED)
        if self.study.tune is not None and not self.tuned and text:
            try:
                best = json.loads(text)
            except ValueError:
                best = None
            if isinstance(best, dict):
                plan = plan.with_tuned(best)
        return plan

    @property
    def seeds(self) -> tuple[int, ...]:
        """The plan's seeds."""
        return self.study.seeds

    @property
    def keys(self) -> tuple[str, ...]:
        """The trial keys, in plan order."""
        return tuple(s.key for s in self.specs)

    @property
    def by_key(self) -> dict[str, TrialSpec]:
        """Trial key -> its spec."""
        return {s.key: s for s in self.specs}

    @property
    def steps(self) -> int:
        """RL steps per trial (the same for every trial of a budget; 0 for an empty plan)."""
        return self.specs[0].config.train.steps if self.specs else 0

    def arm_overrides(self) -> dict[str, dict[str, Any]]:
        """Arm name -> its merged overrides at the plan's budget with its tuned values on top (kept in
        the study store to explain a design change)."""
        return {a.name: {**self.study.overrides(a, self.budget), **self.tuned.get(a.name, {})}
                for a in self.study.arms}

    def tuned_tag(self) -> str:
        """The value of :data:`TAG_TUNED` for this plan (canonical JSON)."""
        return json.dumps({a: dict(v) for a, v in self.tuned.items()}, sort_keys=True)

    def __len__(self) -> int:
        return len(self.specs)


def _with_seed(config: TrialConfig, seed: int) -> TrialConfig:
    """``config`` at ``seed``: the seed is an integer the study file's checks validated and no rule
    reads it, so the validated configuration is copied with it, not validated again."""
    return config if config.seed == seed else config.model_copy(update={"seed": int(seed)})


def load_plan(path: str, budget: str = DEFAULT_BUDGET) -> Plan:
    """Load and validate a study file and plan it at ``budget`` (:func:`ablate.study.load_study`)."""
    from ablate.study import load_study

    return Plan.of(load_study(path), budget)


__all__ = ["Plan", "TAG_SEEDS", "TAG_TUNED", "load_plan"]
