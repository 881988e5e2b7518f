"""The data of a validated study: factors, levels, arms, objective, seeds, tuning, and the Study itself
(frozen dataclasses; build them with :func:`ablate.study.load_study`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.config import ConfigWarning, TrialConfig
from ablate.errors import AblateError
from ablate.registry import nearest
from ablate.study.designs import AliasStructure, Design

DEFAULT_BUDGET = "default"
SEED_PATH = "seed"
OBJECTIVE_MODES = ("max", "min")
OBJECTIVE_SUMMARIES = ("last", "mean", "max", "min", "auc")
#: The largest ``objective.last_n`` :meth:`Study.owns` tries when it looks for the objective of a binding made
#: before the analysis left the study's identity (every predefined study has 1 or 3).
LEGACY_LAST_N = 10


def _did_you_mean(name: object, choices: Iterable[str]) -> str:
    guess = nearest(str(name), list(choices))
    return f"; did you mean {guess!r}?" if guess is not None else ""


def unknown_choice(kind: str, name: object, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    return f"unknown {kind} {name!r}; allowed: {', '.join(allowed) or '(none)'}" + _did_you_mean(name, allowed)


@dataclass(frozen=True)
class Level:
    """One level of a factor: a name and the dotted overrides it applies."""

    name: str
    overrides: dict[str, Any]
    value: Any = None  # the shorthand value this level was made from, if any


@dataclass(frozen=True)
class Factor:
    """A choice the study varies: its levels in file order.

    Attributes:
        path: the dotted path of a shorthand factor (None for explicit ``levels:``).
    """

    name: str
    levels: tuple[Level, ...]
    description: str | None = None
    path: str | None = None

    def level(self, name: str) -> Level:
        """The level called ``name``."""
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise AblateError(unknown_choice(f"level of factor {self.name!r}", name, self.level_names()))

    def level_names(self) -> list[str]:
        """The level names, in file order."""
        return [lv.name for lv in self.levels]

    def paths(self) -> set[str]:
        """Every dotted path some level of this factor sets."""
        return {p for lv in self.levels for p in lv.overrides}


@dataclass(frozen=True)
class Arm:
    """One combination of levels.

    Attributes:
        name: stable, ``factor=level`` joined by ``,`` in factor order
            (``loss_norm=token,clip_high=0.28``).
        levels: factor name -> level name, in factor order.
        baseline: True for the study's baseline arm.
    """

    name: str
    levels: dict[str, str]
    baseline: bool = False

    @staticmethod
    def name_of(levels: Mapping[str, str]) -> str:
        """The arm name of ``levels`` (given in factor order)."""
        return ",".join(f"{f}={lv}" for f, lv in levels.items())


@dataclass(frozen=True)
class Objective:
    """What the study compares: ``summary`` of ``metric`` over a trial's history, to ``mode``."""

    metric: str
    mode: str
    summary: str = "last"
    last_n: int = 1


@dataclass(frozen=True)
class EntryRule:
    """``entry:``, how a context of a study with ``contexts:`` enters its verdicts, fixed before the run.

    Attributes:
        learns: the smallest gain of the baseline over its own step-0 objective (objective units, in the
            objective's direction) a pilot of at least 3 seeds must have shown, its 95% paired interval
            above 0, for the context to be in the study file (the file's record; :mod:`ablate.report.learning`
            checks the same in the study's own trials and says where it did not hold).
        band: the baseline's mean step-0 objective in the study's own trials must lie in ``[low, high]``;
            a context outside it is dropped when the report is made (never pooled) and the report says so.
        pilot: where the pilot's figures are (a path relative to the repository), or None.
    """

    learns: float
    band: tuple[float, float]
    pilot: str | None = None


@dataclass(frozen=True)
class SeedRange:
    """Adaptive seeds: start with ``min`` seeds (0..min-1), add rounds up to ``max``."""

    min: int
    max: int


@dataclass(frozen=True)
class TuneParam:
    """A tuned parameter: ``low`` <= value <= ``high``, sampled on a log scale when ``log``."""

    path: str
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class TuneSpec:
    """Per-arm tuning: ``trials`` Optuna trials per arm at ``budget`` with ``seeds``."""

    params: tuple[TuneParam, ...]
    trials: int
    budget: str = DEFAULT_BUDGET
    seeds: tuple[int, ...] = (0,)
    #: added to the Optuna study names of the tuning (``<study>/tune<label>/<arm>``): "" for the
    #: study's own tuning, ``@smoke`` for the plumbing check of ``--budget smoke``
    label: str = ""


@dataclass(frozen=True)
class TrialSpec:
    """One trial of a study: an arm at one seed and one budget, with its resolved configuration.

    Attributes:
        study: the study's name.
        arm: the arm's name (``factor=level,...``).
        levels: factor name -> level name.
        seed: the trial's seed (also ``config.seed``).
        budget: the budget's name.
        config: the resolved TrialConfig.
        key: ``config.trial_key()``, the trial's identity in the study store.
    """

    study: str
    arm: str
    levels: dict[str, str]
    seed: int
    budget: str
    config: TrialConfig
    key: str

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class Study:
    """A validated study file (build it with :func:`load_study`).

    Attributes:
        path: the study file.
        raw: the file's contents as plain dicts and lists.
        arms: the arms to run (after exclusions), in the design's order.
        excluded: the design's arms that ``exclude:`` dropped.
        aliasing: the confounding of a fractional design (None for other designs).
        report_metrics: the ``report.metrics`` diagnostics.
        warnings: the configuration warnings of the arms (``arm <name>: <warning> [<rule>]``), each once:
            a legal but suspicious combination, e.g. a PPO-sized clip range on a sequence ratio; those
            the file acknowledges are not among them.
        budget_seeds: budget name -> n for the budgets that run only the study's first n seeds (a
            budget's ``seeds: n``, e.g. a cheap smoke budget); :meth:`at_budget` applies it.
        acknowledged: the warnings the file lists under ``acknowledge:`` (run on purpose), each as
            (rule, the arms it applies to).
        extended_after: ``extended_after:``, the seed counts whose report was read before the seeds were
            extended; the last one is the first stage of the report's two-stage test (:mod:`ablate.stats.sequential`).
        contexts: ``contexts:``, the factors replicated over rather than compared (task, model, size ...):
            every compared arm runs in every combination of their levels, and each contrast is estimated
            within each context and pooled across them (:mod:`ablate.stats.meta`).
        entry: ``entry:``, the rule by which a context enters (:class:`EntryRule`), or None; a study with
            ``contexts:`` and no rule gets :attr:`entry_warning`.
        evidence: ``evidence:``, false for a demo (the quickstart, README's main command): its report is the
            reader's own run on the reader's processor, so it is never committed, opens with
            :data:`ablate.report.findings.DEMO_LINE` and is never an input of ``ablate ledger``.
    """

    path: Path
    raw: dict[str, Any]
    name: str
    description: str | None
    plugins: tuple[str, ...]
    base: dict[str, Any]
    factors: tuple[Factor, ...]
    design_name: str
    design: Design
    design_options: dict[str, Any]
    baseline: dict[str, str] | None
    exclude: tuple[dict[str, str], ...]
    seeds: tuple[int, ...]
    budgets: dict[str, dict[str, Any]]
    objective: Objective
    tune: TuneSpec | None
    arms: tuple[Arm, ...]
    excluded: tuple[Arm, ...] = ()
    aliasing: AliasStructure | None = None
    report_metrics: tuple[str, ...] = ()
    budget_seeds: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    acknowledged: tuple[tuple[str, tuple[str, ...]], ...] = ()
    primary: tuple[str, ...] = ()
    min_effect: float | None = None
    seed_range: SeedRange | None = None
    extended_after: tuple[int, ...] = ()
    contexts: tuple[str, ...] = ()
    evidence: bool = True
    entry: EntryRule | None = None
    configs: Mapping[tuple[str, str], TrialConfig] = field(default_factory=dict, repr=False, compare=False)

    @property
    def baseline_levels(self) -> dict[str, str]:
        """The baseline level of every factor (``baseline:``, else each factor's first level)."""
        return dict(self.baseline) if self.baseline else {f.name: f.levels[0].name for f in self.factors}

    def with_seeds(self, seeds: Sequence[int]) -> Study:
        """The same study with other seeds (adaptive rounds add seeds this way)."""
        from dataclasses import replace

        return replace(self, seeds=tuple(int(s) for s in seeds))

    def at_budget(self, budget: str) -> Study:
        """The study with the seeds that ``budget`` runs: its first n seeds where the budget sets
        ``seeds: n`` and the study has more, else the study itself."""
        n = self.budget_seeds.get(budget)
        if n is None or n >= len(self.seeds):
            return self
        return self.with_seeds(self.seeds[:n])

    def factor(self, name: str) -> Factor:
        """The factor called ``name``."""
        for f in self.factors:
            if f.name == name:
                return f
        raise AblateError(unknown_choice("factor", name, [f.name for f in self.factors]))

    def check_budget(self, budget: str) -> None:
        """Raise AblateError naming the budgets if ``budget`` is not one of them."""
        if budget not in self.budgets:
            raise AblateError(
                f"study {self.name!r} ({self.path}): "
                + unknown_choice("budget", budget, self.budgets)
                + "; add it under 'budgets:' or pass one of these to --budget"
            )

    def overrides(self, arm: Arm | Mapping[str, str], budget: str = DEFAULT_BUDGET) -> dict[str, Any]:
        """The merged dotted overrides of an arm at a budget: base < context levels < budget < compared
        levels (:func:`layer_overrides`)."""
        self.check_budget(budget)
        levels = arm.levels if isinstance(arm, Arm) else arm
        return layer_overrides(self.base, self.budgets[budget],
                               [(f.name, f.level(levels[f.name]).overrides) for f in self.factors], self.contexts)

    def config(
        self, arm: Arm | Mapping[str, str], budget: str = DEFAULT_BUDGET, seed: int | None = None
    ) -> TrialConfig:
        """The TrialConfig of an arm at a budget (and seed, when given). Its configuration warnings
        were collected once when the file was loaded (:attr:`warnings`) and are not raised again."""
        overrides = self.overrides(arm, budget)
        if seed is not None:
            overrides[SEED_PATH] = seed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)
            return TrialConfig.from_overrides(overrides)

    def arm_config(self, arm: Arm, budget: str = DEFAULT_BUDGET) -> TrialConfig:
        """The TrialConfig of ``arm`` at ``budget`` as :func:`load_study` validated it (built again only
        for a study made without it); its seed is the default: :class:`ablate.study.plan.Plan` sets each trial's."""
        config = self.configs.get((arm.name, budget))
        return config if config is not None else self.config(arm, budget)

    def identity(self) -> dict[str, Any]:
        """What makes a study this study, whatever its budgets, seeds and added levels: its base, its
        factors' names and its design (JSON-ready); and its objective when the study has ``tune:``, whose
        tuning picks each arm's values (so the trials that run) by the objective. A store and an MLflow
        experiment are bound to the :meth:`fingerprint` of the study that first used them; ``--extend`` may
        still add levels and seeds, and a changed level is caught per budget by the store's frozen design.

        The analysis is not in it: ``objective`` (of a study without ``tune:``), ``min_effect``, ``primary``,
        ``report`` and ``extended_after`` are read with the trials' logged histories when the report is built,
        so a file that changes only them is the same study: its trials are reused and its report rebuilt.
        Trial keys never depend on any of these (they are the trials' configurations)."""
        out: dict[str, Any] = {
            "base": {k: self.base[k] for k in sorted(self.base)}, "factors": [f.name for f in self.factors],
            "design": {"name": self.design_name, **{k: self.design_options[k] for k in sorted(self.design_options)}}}
        if self.tune is not None:
            out["objective"] = self._objective_identity()
        return out

    def _objective_identity(self) -> dict[str, Any]:
        obj = self.objective
        return {"metric": obj.metric, "mode": obj.mode, "summary": obj.summary, "last_n": obj.last_n}

    def fingerprint(self) -> str:
        """A short hash of :meth:`identity` (16 hex digits of its canonical JSON's SHA-256)."""
        return _hash_identity(self.identity())

    def legacy_fingerprint(self, objective: Mapping[str, Any] | None = None) -> str:
        """The fingerprint as ablate computed it before the analysis left the identity (the objective was in
        it whether or not the study tunes; this study's, or ``objective``): a store or MLflow experiment bound
        then holds one. See :meth:`owns`; the next run binds it to :meth:`fingerprint`."""
        return _hash_identity({**self.identity(), "objective": dict(objective or self._objective_identity())})

    def owns(self, held: str | None) -> bool:
        """Whether ``held``, the fingerprint a store or experiment is bound to, is this study's: its
        :meth:`fingerprint`, or a :meth:`legacy_fingerprint` of a binding made before the analysis left the
        identity: with this study's objective, or (a study without ``tune:``) with any objective whose metric
        is a name of the glossary or ``reward/<c>`` (:func:`ablate.metrics.metric_names`), with any ``mode``,
        ``summary`` and ``last_n`` up to :data:`LEGACY_LAST_N`, since such a binding may predate a change of the
        objective alone. Its old
        objective's metric is recorded nowhere the check can read: a metric outside the glossary (a typo, which
        validation refuses now) is not found, and that binding is refused as another study's."""
        if held is None:
            return False
        if held in (self.fingerprint(), self.legacy_fingerprint()):
            return True
        return self.tune is None and any(self.legacy_fingerprint(o) == held for o in self._legacy_objectives())

    def _legacy_objectives(self) -> Iterator[dict[str, Any]]:
        """Every objective :meth:`owns` tries in an old binding (some thousands; only when the binding is
        neither this study's fingerprint nor its legacy one)."""
        from ablate.metrics import metric_names
        from ablate.registry import known_names

        metrics = dict.fromkeys([self.objective.metric, *metric_names(known_names("reward component") or [])])
        for metric in metrics:
            for mode in OBJECTIVE_MODES:
                for summary in OBJECTIVE_SUMMARIES:
                    for last_n in range(1, LEGACY_LAST_N + 1):
                        yield {"metric": metric, "mode": mode, "summary": summary, "last_n": last_n}

    @property
    def acknowledged_line(self) -> str | None:
        """One sentence naming the acknowledged warnings and their arms, or None when there are none."""
        if not self.acknowledged:
            return None
        from ablate.config import WARNING_RULES

        parts = [f"{rule} ({WARNING_RULES.get(rule, rule)}; arm{'s' if len(arms) > 1 else ''} {', '.join(arms)})"
                 for rule, arms in self.acknowledged]
        return "run on purpose, as the study file acknowledges: " + "; ".join(parts)

    @property
    def entry_warning(self) -> str | None:
        """One line for a study with ``contexts:`` whose file commits no learning threshold (``entry:``)."""
        if not self.contexts or self.entry is not None:
            return None
        return ("contexts: but no entry: rule: the study commits no learning threshold for its contexts, so a "
                "verdict across contexts may rest on contexts where the baseline did not learn; add "
                "'entry: {learns: <the baseline's smallest gain in a pilot of >= 3 seeds>, band: [<low>, <high>] "
                "(its step-0 objective)}' (docs/contexts.md)")

    @property
    def compared(self) -> tuple[Factor, ...]:
        """The factors the study compares: every factor but its contexts."""
        return tuple(f for f in self.factors if f.name not in self.contexts)

    def context_of(self, levels: Mapping[str, str]) -> str:
        """The context an arm (its levels) runs in: ``task=chain,model=tiny-gpt2`` ("" without contexts)."""
        return ",".join(f"{f}={levels[f]}" for f in self.contexts)

    @property
    def n_trials(self) -> int:
        """Arms x seeds (the same at every budget)."""
        return len(self.arms) * len(self.seeds)


def layer_overrides(base: Mapping[str, Any], budget: Mapping[str, Any],
                    levels: list[tuple[str, Mapping[str, Any]]], contexts: tuple[str, ...] = ()) -> dict[str, Any]:
    """One trial's dotted overrides: ``base`` < the context factors' levels < ``budget`` < the compared
    factors' levels, each group in factor order.

    A context level is where the study runs (a task, a model and the RL steps it learns in), a base of its
    own; a budget resizes every context alike, so a smoke budget's ``train.steps: 2`` also applies in a context
    whose level trains for 120. The compared levels come last: they are the choice under test.

    Args:
        base, budget: ``base:`` and the budget's overrides (path -> value).
        levels: (factor name, that factor's level's overrides), in factor order.
        contexts: the names of the context factors (``contexts:``).

    Returns:
        path -> value.
    """
    out = dict(base)
    for name, ov in levels:
        if name in contexts:
            out.update(ov)
    out.update(budget)
    for name, ov in levels:
        if name not in contexts:
            out.update(ov)
    return out


def level_name(value: Any) -> str:
    """The level name of a shorthand value: ``str(value)``, but ``true``/``false``/``null`` as YAML
    writes them, and lists joined by ``+``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "+".join(level_name(v) for v in value)
    return str(value)


def _hash_identity(identity: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``identity``'s canonical JSON."""
    import hashlib
    import json

    text = json.dumps(identity, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
