"""The typed configuration of one trial: :class:`TrialConfig` (this package's public face).

A trial is one fully specified configuration plus a seed, trained and evaluated. Every choice a study
can compare is a field, reachable by a dotted path (``loss.aggregation``), so that a new factor of a
study needs no code. Every field carries a one-line description with its allowed values, why you
would pick each, and the paper it comes from; ``docs/config.md`` is generated from them
(``python -m ablate.config.docs``).

Build a configuration from defaults plus dotted overrides, or from a YAML file::

    from ablate.config import TrialConfig

    cfg = TrialConfig.from_overrides({"loss.aggregation": "token-mean", "seed": 3})
    cfg = TrialConfig.from_overrides(["loss.ratio_level=sequence", "loss.clip_low=3e-4"], base=cfg)
    cfg = TrialConfig.from_file("trial.yaml", overrides=["train.steps=10"])
    cfg.trial_key()          # '3f0c…' (12 hex digits): the trial's identity in a study
    cfg.to_flat_dict()       # {'task.name': 'addition', ...}: MLflow params

Every problem of a configuration (unknown paths, bad values, unknown registered names, impossible
combinations) is collected and raised once as a :class:`TrialConfigError` (an
:class:`~ablate.errors.ConfigError`) whose message names each path, the allowed values and the
nearest valid path. Combinations that are legal but probably not meant (a GSPO sequence ratio with
PPO-sized clip ranges) emit a :class:`ConfigWarning`.

Names of registered components (tasks, models, estimators, losses, reward components) are checked
against :func:`ablate.registry.known_names`: the built-in names declared in
:data:`ablate.registry.BUILTIN_NAMES` plus whatever has been registered (a study's ``plugins:``),
or the loaded registries once :func:`load_builtin_registries` has run (at the edge: the CLI).
Validating a configuration never imports torch.

The package, one job per module:

- :mod:`~ablate.config.schema`: :class:`TrialConfig`, how it is built, exported and keyed.
- :mod:`~ablate.config.sections`: the sections (``loss``, ``kl``, ...), their fields and descriptions.
- :mod:`~ablate.config.validators`: single-field checks (registered names, devices, JSON mappings).
- :mod:`~ablate.config.rules`: the cross-field rules (errors and warnings).
- :mod:`~ablate.config.overrides`: applying dotted overrides and collecting what goes wrong.
- :mod:`~ablate.config.paths`: what a dotted path names, its default and allowed values.
- :mod:`~ablate.config.problems`: the problems, the error and the warning.
- :mod:`~ablate.config.device`: the torch device and autocast dtype of a trial.
"""

from __future__ import annotations

from ablate.config.device import autocast_dtype, parameter_dtype, resolve_device, rollout_autocast_dtype
from ablate.config.problems import ConfigProblem, ConfigWarning, TrialConfigError
from ablate.config.rules import (
    CRITIC_ESTIMATORS,
    GROUP_ESTIMATORS,
    RULES,
    SEQUENCE_RATIO_LEVELS,
    WARNING_RULES,
)
from ablate.config.schema import (
    KEY_EXCLUDED_PATHS,
    KEY_OMITTED_AT_DEFAULT,
    TrialConfig,
    describe_path,
    field_paths,
    nearest_path,
)
from ablate.config.sections import (
    AlgoConfig,
    CriticConfig,
    EngineConfig,
    EvalConfig,
    FinalAnswerRewardConfig,
    FormatRewardConfig,
    KLConfig,
    LossConfig,
    MissingEOSRewardConfig,
    ModelConfig,
    OptimConfig,
    PartialRewardConfig,
    PRMRewardConfig,
    RewardConfig,
    RolloutConfig,
    SoftOverlongRewardConfig,
    TaskConfig,
    TrainConfig,
    WarmstartConfig,
)
from ablate.registry import BUILTIN_MODULES, load_builtin_registries, registry_of

__all__ = [
    "BUILTIN_MODULES",
    "CRITIC_ESTIMATORS",
    "GROUP_ESTIMATORS",
    "KEY_EXCLUDED_PATHS",
    "KEY_OMITTED_AT_DEFAULT",
    "SEQUENCE_RATIO_LEVELS",
    "AlgoConfig",
    "ConfigProblem",
    "ConfigWarning",
    "CriticConfig",
    "EngineConfig",
    "EvalConfig",
    "FinalAnswerRewardConfig",
    "FormatRewardConfig",
    "KLConfig",
    "MissingEOSRewardConfig",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "PRMRewardConfig",
    "PartialRewardConfig",
    "RULES",
    "RewardConfig",
    "RolloutConfig",
    "SoftOverlongRewardConfig",
    "TaskConfig",
    "TrainConfig",
    "TrialConfig",
    "TrialConfigError",
    "WARNING_RULES",
    "WarmstartConfig",
    "autocast_dtype",
    "describe_path",
    "field_paths",
    "load_builtin_registries",
    "nearest_path",
    "parameter_dtype",
    "registry_of",
    "resolve_device",
    "rollout_autocast_dtype",
]
