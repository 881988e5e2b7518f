"""Per-arm tuning (``tune:`` in a study file): the same Optuna TPE search for every arm.

A study that compares arms at one learning rate favours the arm that rate suits. With ``tune:``,
every arm gets the same search: ``tune.trials`` Optuna trials with a TPE sampler of a fixed seed over
the listed parameters, each trial trained at ``tune.budget`` for each of ``tune.seeds`` (offset by
:data:`TUNE_SEED_OFFSET`, so tuning never reuses the main seeds' data order), scored by the study's
objective (its summary over the history, averaged over the seeds). The main trials then run at each
arm's best values: they are added to the arm's overrides, so they are part of the trial keys, of the
configuration logged to MLflow (``optim.lr`` and so on) and of the design frozen in the study store.

Storage: one Optuna study per arm, named ``<study>/tune/<arm>`` (:func:`tuning_study_name`), on the
study store's storage (journal file or PostgreSQL). Completed tuning trials are kept there, so a
rerun continues where the last one stopped and a tuned arm is never tuned again. Best values are
recorded as the tuning study's user attribute ``best``.

Tuning runs sequentially, in the process of ``ablate run``, before any main trial; do not run two
``ablate run`` of one tuned study at once while it tunes. ``ablate worker`` reads the best values
from the store and refuses to start before tuning is complete.

The tuner does not train: it is given the trial function (``train``), which the runner builds so that
tuning trials are logged to MLflow like any other trial (:func:`ablate.running.runner.tuning_trainer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import optuna
from optuna.trial import TrialState

from ablate.errors import AblateError
from ablate.objective import direction, summarize_history
from ablate.store import open_storage

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.study import Arm, Study, TuneParam, TuneSpec
    from ablate.train import TrialResult

#: The trial function: ``train(arm, seed, config) -> TrialResult`` (the runner's logs to MLflow).
TrainFn = Callable[["Arm", int, "TrialConfig"], "TrialResult"]

#: Tuning seed = this + a seed of ``tune.seeds`` (distinct from the main seeds below 1000).
TUNE_SEED_OFFSET = 1000
#: The TPE sampler's seed (plus the number of trials already in the arm's tuning study, so that a
#: resumed search does not repeat its first samples).
SAMPLER_SEED = 0


def tuning_study_name(study_name: str, arm: str, label: str = "") -> str:
    """The Optuna study that tunes ``arm``: ``<study>/tune/<arm>`` (``<study>/tune<label>/<arm>`` for
    a labelled tuning, see :func:`tuning_for_budget`)."""
    return f"{study_name}/tune{label}/{arm}"


#: The budget at which tuning is only a plumbing check (see :func:`tuning_for_budget`).
SMOKE_BUDGET = "smoke"


def tuning_for_budget(study: Study, budget: str) -> Study:
    """The study whose tuning a run at ``budget`` does: the study itself, except at the budget named
    ``smoke`` (plumbing only), where every arm is tuned with one trial at the smoke budget, in Optuna
    studies of their own (``<study>/tune@smoke/<arm>``), so that a smoke run checks the tuning's
    plumbing in seconds and never leaves values that a real run would reuse."""
    import dataclasses

    if study.tune is None or budget != SMOKE_BUDGET or SMOKE_BUDGET not in study.budgets:
        return study
    tune = dataclasses.replace(study.tune, budget=SMOKE_BUDGET, trials=1, label="@smoke")
    return dataclasses.replace(study, tune=tune)


def tuning_seeds(tune: TuneSpec) -> list[int]:
    """The seeds of the tuning trials: :data:`TUNE_SEED_OFFSET` + each seed of ``tune.seeds``."""
    return [TUNE_SEED_OFFSET + int(s) for s in tune.seeds]


def _is_int_range(param: TuneParam) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in (param.low, param.high))


def _distributions(tune: TuneSpec) -> dict[str, optuna.distributions.BaseDistribution]:
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for p in tune.params:
        if _is_int_range(p):
            out[p.path] = optuna.distributions.IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[p.path] = optuna.distributions.FloatDistribution(float(p.low), float(p.high), log=p.log)
    return out


class Tuner:
    """The per-arm tuning of one study on one storage.

    Args:
        study: the loaded :class:`~ablate.study.Study` (``study.tune`` must be set).
        storage: the resolved storage of the study store (journal file path or PostgreSQL URL).
        train: the trial function (None: the tuner can only read best values).
    """

    def __init__(self, study: Study, storage: str, *, train: TrainFn | None = None) -> None:
        if study.tune is None:
            raise AblateError(f"study {study.name!r} ({study.path}) has no 'tune:' section")
        self.study = study
        self.tune: TuneSpec = study.tune
        self.url = storage
        self.train = train
        self.storage = open_storage(storage)
        self.direction = direction(study.objective.mode)

    def _optuna_study(self, arm: str, n_existing: int = 0) -> optuna.Study:
        return optuna.create_study(
            storage=self.storage, study_name=tuning_study_name(self.study.name, arm, self.tune.label),
            direction=self.direction,
            sampler=optuna.samplers.TPESampler(seed=SAMPLER_SEED + n_existing), load_if_exists=True,
        )

    def completed(self, arm: str) -> list[optuna.trial.FrozenTrial]:
        """The completed tuning trials of ``arm`` (none when its tuning never started)."""
        return [t for t in self._optuna_study(arm).get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]

    def objective(self, arm: Arm, values: Mapping[str, Any]) -> float:
        """Train ``arm`` at ``tune.budget`` with ``values`` for every tuning seed; the mean objective.

        Raises:
            AblateError: a seed's history has no finite value of the objective's metric, or the tuner
                has no trial function.
        """
        if self.train is None:
            raise AblateError(f"study {self.study.name!r}: this tuner only reads best values (no trial function)")
        obj = self.study.objective
        scores = []
        for seed in tuning_seeds(self.tune):
            config = self.study.config(arm, self.tune.budget, seed).with_overrides(dict(values))
            result = self.train(arm, seed, config)
            value = summarize_history(result.history, obj.metric, obj.summary, obj.last_n)
            if value is None or not math.isfinite(value):
                raise AblateError(f"tuning arm {arm.name} (seed {seed}, {dict(values)}): the objective metric "
                                  f"{obj.metric!r} has no finite value; check 'objective.metric'")
            scores.append(value)
        return sum(scores) / len(scores)

    def tune_arm(self, arm: Arm, stream: TextIO | None = None) -> dict[str, Any]:
        """Run the tuning trials ``arm`` still lacks (up to ``tune.trials`` completed); its best values.

        A tuning trial that raises is recorded as FAIL in Optuna and the error is raised again.
        """
        n_existing = len(self._optuna_study(arm.name).get_trials(deepcopy=False))
        ostudy = self._optuna_study(arm.name, n_existing)
        dists = _distributions(self.tune)
        done = len(self.completed(arm.name))
        while done < self.tune.trials:
            trial = ostudy.ask(dists)
            trial.set_user_attr("seeds", tuning_seeds(self.tune))
            trial.set_user_attr("budget", self.tune.budget)
            try:
                value = self.objective(arm, trial.params)
            except BaseException:
                ostudy.tell(trial, state=TrialState.FAIL)
                raise
            ostudy.tell(trial, value)
            done += 1
            if stream is not None:
                print(f"  tune {arm.name} trial {done}/{self.tune.trials}: {trial.params} -> "
                      f"{self.study.objective.metric} = {value:.4g}", file=stream)
        best = self.best_values(arm.name)
        ostudy.set_user_attr("best", best)
        return best

    def tune_all(self, stream: TextIO | None = None) -> dict[str, dict[str, Any]]:
        """Tune every arm of the study (those already tuned are not run again); arm -> best values."""
        out = {}
        for arm in self.study.arms:
            out[arm.name] = self.tune_arm(arm, stream)
            if stream is not None:
                print(f"  tuned {arm.name}: {out[arm.name]}", file=stream)
        return out

    def best_values(self, arm: str) -> dict[str, Any]:
        """Dotted path -> the value of the best completed tuning trial of ``arm``.

        Raises:
            AblateError: ``arm`` has fewer than ``tune.trials`` completed tuning trials.
        """
        trials = self.completed(arm)
        if len(trials) < self.tune.trials:
            raise AblateError(f"study {self.study.name!r}: arm {arm} has {len(trials)} of {self.tune.trials} tuning "
                              "trials; run `ablate run` on this study (it tunes every arm first)")
        pick = max if self.direction == "maximize" else min
        best = pick(trials, key=lambda t: (t.value, -t.number))  # ties: the earliest trial
        return {p.path: best.params[p.path] for p in self.tune.params}

    def all_best_values(self) -> dict[str, dict[str, Any]]:
        """Arm -> its best values (every arm must be tuned, see :meth:`best_values`)."""
        return {a.name: self.best_values(a.name) for a in self.study.arms}


__all__ = [
    "SAMPLER_SEED",
    "TUNE_SEED_OFFSET",
    "Tuner",
    "TrainFn",
    "tuning_seeds",
    "tuning_study_name",
]
