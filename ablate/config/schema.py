"""The typed configuration of one trial: :class:`TrialConfig`.

A trial is one fully specified configuration plus a seed, trained and evaluated. Every choice a study
can compare is a field here, reachable by a dotted path (``loss.aggregation``), so that a new factor
of a study needs no code. Every field carries a one-line description with its allowed values, why
you would pick each, and the paper it comes from; ``docs/config.md`` is generated from them
(``python -m ablate.config_docs``).

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
against :data:`ablate.registry.ALL_REGISTRIES` after importing the built-in modules in
:data:`BUILTIN_MODULES`; components from a study's ``plugins:`` must be imported before the
configuration is built.

Configurations are immutable (frozen pydantic models): derive a new one with
:meth:`TrialConfig.with_overrides`, never with ``model_copy(update=...)``, which skips validation.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import re
import sys
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from ablate.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from ablate.registry import Registry

__all__ = [
    "BUILTIN_MODULES",
    "CRITIC_ESTIMATORS",
    "GROUP_ESTIMATORS",
    "KEY_EXCLUDED_PATHS",
    "SEQUENCE_RATIO_LEVELS",
    "AlgoConfig",
    "ConfigWarning",
    "CriticConfig",
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
    "Problem",
    "RULES",
    "RewardConfig",
    "RolloutConfig",
    "SoftOverlongRewardConfig",
    "TaskConfig",
    "TrainConfig",
    "TrialConfig",
    "TrialConfigError",
    "WarmstartConfig",
    "autocast_dtype",
    "describe_path",
    "field_paths",
    "load_builtin_registries",
    "nearest_path",
    "registry_of",
    "resolve_device",
]

# --------------------------------------------------------------------------------------------------
# Errors and warnings
# --------------------------------------------------------------------------------------------------


class ConfigWarning(UserWarning):
    """A legal configuration that is probably not what was meant (the message says why and the fix)."""


@dataclass(frozen=True)
class Problem:
    """One problem of a configuration.

    Attributes:
        path: the dotted path concerned (``"loss.clip_low"``, ``"reward.components[1]"``), or ``""``
            for a problem of the whole configuration.
        message: what is wrong and how to fix it.
        line: the line of the YAML file that set ``path``, when the configuration came from a file.
    """

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path or "(configuration)"
        if self.line is not None:
            where += f" (line {self.line})"
        return f"{where}: {self.message}"


class TrialConfigError(ConfigError):
    """Every problem of a trial configuration at once.

    Attributes:
        problems: the individual :class:`Problem` s, in the order found.
        source: where the configuration came from (``"config file 'x.yaml'"``), or ``None``.
    """

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        n = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head}invalid trial configuration ({n} problem{'s' if n != 1 else ''}):\n{lines}")


class _RuleViolations(ValueError):
    """Raised inside pydantic by the cross-field rules; carries every violated rule."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


# --------------------------------------------------------------------------------------------------
# Registries of the built-in components
# --------------------------------------------------------------------------------------------------

#: Modules whose import registers the built-in components (tasks, models, losses, estimators, rewards).
BUILTIN_MODULES: tuple[str, ...] = ("ablate.rl", "ablate.tasks", "ablate.models", "ablate.rewards")

_builtins_loaded = False


def load_builtin_registries() -> None:
    """Import :data:`BUILTIN_MODULES` once, so that their registries are filled.

    A module that does not exist yet is skipped (only a :class:`ModuleNotFoundError` for that exact
    module; any other import error propagates).
    """
    global _builtins_loaded
    if _builtins_loaded:
        return
    for name in BUILTIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    _builtins_loaded = True


def registry_of(kind: str) -> Registry | None:
    """The registry of ``kind`` (e.g. ``"task"``) after loading the built-ins, or None if there is none.

    A registry with no entries counts as none (its module exists but registers nothing yet), so
    that names are not checked against an empty table.
    """
    from ablate.registry import ALL_REGISTRIES

    load_builtin_registries()
    reg = ALL_REGISTRIES.get(kind)
    return reg if reg is not None and len(reg) > 0 else None


def _registered(kind: str) -> AfterValidator:
    """A validator that accepts only names registered in the registry of ``kind`` (if it exists)."""

    def check(value: str) -> str:
        reg = registry_of(kind)
        if reg is not None and value not in reg:
            raise ValueError(reg.unknown_message(value))
        return value

    return AfterValidator(check)


def _check_model_name(value: str) -> str:
    reg = registry_of("model")
    if reg is None or value in reg or Path(value).expanduser().is_dir():
        return value
    raise ValueError(reg.unknown_message(value) + "; or give the path of an existing local checkpoint directory")


def _check_kl_estimator(value: str) -> str:
    if value == "auto":
        return value
    reg = registry_of("kl estimator")
    if reg is not None and value not in reg:
        raise ValueError(reg.unknown_message(value) + " (or 'auto')")
    return value


_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def _check_device(value: str) -> str:
    if not _DEVICE_RE.match(value):
        raise ValueError(f"device must be auto, cpu, mps, cuda or cuda:N, got {value!r}")
    return value


def _check_json_mapping(value: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must hold only JSON-like values (strings, numbers, lists, mappings): {exc}") from None
    return value


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


class _Section(BaseModel):
    """Base of every section: immutable, unknown keys rejected, defaults validated, no NaN/inf."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))


def _d(text: str) -> str:
    """Join a description written over several source lines."""
    return " ".join(text.split())


class TaskConfig(_Section):
    """``task``: what the policy learns to solve (see ``ablate tasks``)."""

    name: typing.Annotated[str, _registered("task")] = Field(
        "addition",
        description=_d("""Task to train and evaluate on, by registered name (`ablate tasks` lists them with an
        example); `jsonl` reads your own problems from a JSON-lines file named in task.options."""),
    )
    difficulty: int | None = Field(
        None,
        ge=1,
        description=_d("""The task's difficulty knob (digits of an addition, operations of a chain, numbers of a
        countdown): larger is harder; null = the task's default (`ablate tasks` shows each task's knob
        and range). Pick it so that the warm-started policy lands in the warm start's accuracy band."""),
    )
    train_size: int = Field(
        10_000,
        ge=1,
        strict=True,
        description=_d("""Problems in the train pool that RL prompts are drawn from (generated with
        task.data_seed, disjoint from the eval split; for jsonl, at most the file's train prompts). Small
        pools let RL memorize."""),
    )
    eval_size: int = Field(
        500,
        ge=1,
        strict=True,
        description="Problems in the held-out eval split; eval.n_problems of them are evaluated.",
    )
    data_seed: int = Field(
        0,
        ge=0,
        strict=True,
        description=_d("""Seed of the problem generator, kept apart from the trial seed so that every arm and
        seed of a study trains and is evaluated on the same splits (paired comparisons)."""),
    )
    options: typing.Annotated[dict[str, Any], AfterValidator(_check_json_mapping)] = Field(
        default_factory=dict,
        description=_d("""Task-specific settings passed to the task, e.g. {path: data.jsonl, extract: last_number}
        for jsonl; see `ablate tasks` for each task's options."""),
    )


class ModelConfig(_Section):
    """``model``: the policy network (see ``ablate models``)."""

    name: typing.Annotated[str, AfterValidator(_check_model_name)] = Field(
        "tiny-llama",
        description=_d("""Policy model: a zoo name (`ablate models` lists them with sizes; the tiny ones train
        on 2 CPU cores) or the path of a local Hugging Face causal-LM checkpoint directory (model plus
        tokenizer). The trial key records the path, not the weights."""),
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description=_d("""Compute precision. auto: bfloat16 autocast on CUDA, float32 elsewhere; float32: never
        autocast (bit-reproducible across devices, slower on GPU); bfloat16: autocast on every device
        (slow on most CPUs). Weights and optimizer state stay float32 in every mode."""),
    )


class WarmstartConfig(_Section):
    """``warmstart``: supervised fine-tuning on reference solutions before RL, cached on disk."""

    enabled: bool = Field(
        True,
        strict=True,
        description=_d("""SFT the model on the task's reference solutions until its eval accuracy is in
        [target_min, target_max] before RL. A randomly initialised zoo model almost never earns a reward,
        so RL would have no signal; false suits pretrained checkpoints that already solve some problems."""),
    )
    target_min: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description=_d("""Lower end of the warm start's target eval accuracy: RL needs reward variance inside
        groups, and below ~0.1 most GRPO groups are all-wrong and give no gradient."""),
    )
    target_max: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description=_d("""Upper end of the target eval accuracy: above it little headroom is left for RL, so
        arms of a study can hardly differ."""),
    )
    max_steps: int = Field(
        2000,
        ge=1,
        strict=True,
        description="Most SFT optimizer steps, whether or not the accuracy band is reached.",
    )
    batch_size: int = Field(32, ge=1, strict=True, description="Reference solutions per SFT optimizer step.")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate of the warm start.")
    seed: int | None = Field(
        0,
        ge=0,
        description=_d("""Which warm start each trial starts from. An integer (shared): one warm start, trained
        with that seed, built once and cached, shared by every arm and seed of a study; seed-to-seed
        variation then measures RL noise alone, from one start policy (the usual choice: cheap, and
        arms are compared from the same start). null (per trial): each trial seed starts from its own
        warm start, trained with the trial seed and cached per seed, so that seed-to-seed variation
        also covers the start policy and a finding holds over start policies, not for one of them; it
        costs one warm start per seed. A learned PRM (reward.prm.source=learned) follows the same
        warm-start seed."""),
    )
    cache_dir: str | None = Field(
        None,
        description=_d("""Where warm starts are cached (keyed by a hash of everything that determines them);
        null = the default cache folder ($ABLATE_CACHE, else ~/.cache/ablate). Not part of the trial key."""),
    )


class RolloutConfig(_Section):
    """``rollout``: how completions are sampled at each RL step."""

    group_size: int = Field(
        8,
        ge=1,
        strict=True,
        description=_d("""Completions sampled per prompt (G). Group estimators (grpo, dr_grpo, rloo, grpo_process)
        compare each completion with the rest of its group, so they need G >= 2; a larger G gives a
        lower-variance baseline and fewer all-equal groups at G times the sampling cost (DeepSeekMath
        uses 64, DAPO 16)."""),
    )
    prompts_per_step: int = Field(
        8,
        ge=1,
        strict=True,
        description="Prompts per RL step: a step trains on prompts_per_step x group_size completions (64).",
    )
    max_new_tokens: int = Field(
        64,
        ge=1,
        strict=True,
        description=_d("""Longest completion in tokens; a completion that reaches it without EOS is truncated
        (see the missing_eos and soft_overlong rewards, reward.overlong_filter). Also Dr. GRPO's normalizer by default
        (loss.max_len)."""),
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description=_d("""Sampling temperature; the behaviour log-probs use the same scaling, so the ratio is 1
        before the first update. 1.0 samples the policy itself (what the policy gradient assumes);
        lower explores less."""),
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description=_d("""Nucleus sampling: sample only from the smallest set of tokens whose probability
        reaches top_p. 1.0 = off; below 1 the samples come from a truncated distribution, so the
        training objective is slightly off-policy."""),
    )


class FinalAnswerRewardConfig(_Section):
    """``reward.final_answer``: correctness of the final answer, on the last active token."""

    weight: float = Field(
        1.0,
        description="Scale of the final-answer reward: weight x (1 if the answer is correct else 0).",
    )


class PRMRewardConfig(_Section):
    """``reward.prm``: a process reward for each reasoning step, on the last token of the step."""

    weight: float = Field(1.0, description="Scale of every step reward of the process reward model.")
    source: Literal["oracle", "noisy", "learned"] = Field(
        "oracle",
        description=_d("""Where step labels come from. oracle: the task's exact step checker (an upper bound on
        what a PRM can give); noisy: oracle labels flipped with probability flip_prob (to study how PRM
        quality matters); learned: a small classifier on the policy's architecture trained on oracle-
        labelled warm-start samples (a realistic PRM, Lightman et al. 2024)."""),
    )
    flip_prob: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Probability that a step label is flipped when source is noisy (0.5 = no information).",
    )
    correct_reward: float = Field(1.0, description="Reward of a step judged correct, before the weight.")
    incorrect_reward: float = Field(
        0.0,
        description="Reward of a step judged wrong, before the weight (e.g. -1 to punish wrong steps).",
    )
    normalize: bool = Field(
        True,
        strict=True,
        description=_d("""Divide each step reward by the reference solution's number of steps, so that a fully
        correct solution's step rewards sum to correct_reward (comparable to final_answer); false gives
        long solutions more total reward."""),
    )
    learned_samples: int = Field(
        2048,
        ge=8,
        strict=True,
        description=_d("""source=learned: completions sampled from the start policy at temperature 1 on train
        problems (4 per problem), whose steps the task's step checker labels to train the PRM; a fifth of
        the problems is held out to measure it."""),
    )
    learned_steps: int = Field(
        200,
        ge=0,
        strict=True,
        description=_d("""source=learned: fine-tuning steps of the whole PRM (binary cross-entropy per step),
        after its head was fitted as a linear probe on the frozen start policy; 0 = the probe alone."""),
    )
    learned_batch_size: int = Field(
        64, ge=1, strict=True, description="source=learned: completions per optimizer step of the PRM classifier."
    )
    learned_lr: float = Field(
        3e-4,
        gt=0.0,
        description=_d("""source=learned: AdamW learning rate of the PRM (its backbone starts from the start
        policy's weights, its head from the linear probe). The trained PRM is cached beside the warm
        starts, keyed by the start policy, the task, these settings and the warm-start seed."""),
    )


class FormatRewardConfig(_Section):
    """``reward.format``: whether the completion follows the task's format (tags, delimiters)."""

    weight: float = Field(
        0.1,
        description=_d("""Scale of the format reward; small next to final_answer so that it shapes the format
        without outweighing correctness."""),
    )
    mode: Literal["sequence", "local"] = Field(
        "sequence",
        description=_d("""sequence: one reward for the whole completion's format, on its last token; local: a
        penalty on the tokens where the format breaks (a token-level signal)."""),
    )


class PartialRewardConfig(_Section):
    """``reward.partial``: partial credit (e.g. fraction of correct digits), on the last token."""

    weight: float = Field(0.5, description="Scale of the partial-credit reward (a fraction in [0, 1]).")


class MissingEOSRewardConfig(_Section):
    """``reward.missing_eos``: a penalty for completions cut at the length limit without EOS."""

    weight: float = Field(
        1.0,
        description=_d("""Scale of the missing-EOS penalty: -weight on the last token of a completion that hit
        rollout.max_new_tokens without EOS. Discourages rambling without touching finished answers."""),
    )


class SoftOverlongRewardConfig(_Section):
    """``reward.soft_overlong``: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13)."""

    weight: float = Field(1.0, description="Scale of the soft overlong penalty (which goes from 0 to -1).")
    buffer: int = Field(
        16,
        ge=1,
        strict=True,
        description=_d("""DAPO's L_cache: a completion longer than rollout.max_new_tokens - buffer gets a penalty
        growing linearly to -1 at max_new_tokens (at most max_new_tokens; DAPO uses 4k of 20k tokens)."""),
    )


class RewardConfig(_Section):
    """``reward``: which reward components are summed into ``token_rewards``, and their settings."""

    components: tuple[typing.Annotated[str, _registered("reward component")], ...] = Field(
        ("final_answer",),
        description=_d("""Reward components summed into token_rewards [B, T], each placed at the token it credits:
        final_answer (last token), prm (last token of each step), kl (every token; listed exactly when
        kl.placement is reward), format (last token, or local), partial (last token), missing_eos and
        soft_overlong (length penalties, last token). The reward-granularity factor of a study."""),
    )
    final_answer: FinalAnswerRewardConfig = Field(
        default_factory=FinalAnswerRewardConfig, description="Settings of the final_answer component."
    )
    prm: PRMRewardConfig = Field(default_factory=PRMRewardConfig, description="Settings of the prm component.")
    format: FormatRewardConfig = Field(
        default_factory=FormatRewardConfig, description="Settings of the format component."
    )
    partial: PartialRewardConfig = Field(
        default_factory=PartialRewardConfig, description="Settings of the partial component."
    )
    missing_eos: MissingEOSRewardConfig = Field(
        default_factory=MissingEOSRewardConfig, description="Settings of the missing_eos component."
    )
    soft_overlong: SoftOverlongRewardConfig = Field(
        default_factory=SoftOverlongRewardConfig, description="Settings of the soft_overlong component."
    )
    overlong_filter: bool = Field(
        False,
        strict=True,
        description=_d("""DAPO's overlong filtering: truncated completions (no EOS) are masked out of the loss,
        so that a correct reasoning cut off by the length limit is not punished as wrong."""),
    )

    @field_validator("components", mode="before")
    @classmethod
    def _one_name_is_a_list(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value


class AlgoConfig(_Section):
    """``algo``: the advantage estimator and the shape of the PPO update."""

    advantage: typing.Annotated[str, _registered("advantage estimator")] = Field(
        "grpo",
        description=_d("""Advantage estimator. grpo (DeepSeekMath, Shao et al. 2024): (R - group mean) / group
        std; dr_grpo (Liu et al. 2025): R - group mean, without the std that favours too easy and too hard
        prompts; rloo (Ahmadian et al. 2024): R minus the mean of the other G-1; grpo_process (DeepSeekMath
        process supervision): group-normalized step rewards summed to go, needs prm; gae (Schulman et al.
        2016): from a learned value function, needs critic.enabled."""),
    )
    gamma: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description=_d("""Discount of gae and of rewards-to-go; 1.0 is standard for LLM RL (short episodes, no
        time preference)."""),
    )
    lam: float = Field(
        0.95,
        ge=0.0,
        le=1.0,
        description=_d("""GAE lambda: 1.0 = Monte-Carlo returns minus values (unbiased, high variance), 0 =
        one-step TD (low variance, biased by the critic). Used by gae only."""),
    )
    whiten: bool = Field(
        False,
        strict=True,
        description=_d("""Normalize gae advantages to zero mean and unit std over the step's active tokens
        (PPO practice); the group estimators normalize per group already."""),
    )
    dynamic_sampling: bool = Field(
        False,
        strict=True,
        description=_d("""DAPO dynamic sampling (Yu et al. 2025): drop groups whose rewards are all equal (zero
        advantage, no gradient) and sample more prompts until the step is full again."""),
    )
    max_resample_rounds: int = Field(
        3,
        ge=0,
        strict=True,
        description="Most extra sampling rounds per step with dynamic_sampling; the step then trains on what it has.",
    )
    ppo_epochs: int = Field(
        1,
        ge=1,
        strict=True,
        description=_d("""Passes over each step's rollouts. With ppo_epochs = 1 and minibatches = 1 every ratio
        is exactly 1 and clipping never binds."""),
    )
    minibatches: int = Field(
        2,
        ge=1,
        strict=True,
        description=_d("""Optimizer steps per epoch: the step's completions are split into this many minibatches
        (it must divide prompts_per_step x group_size). After the first, the policy has moved, so ratios
        leave 1 and the clipping choices matter."""),
    )
    grad_accum: int = Field(
        1,
        ge=1,
        strict=True,
        description=_d("""Micro-batches per minibatch, accumulated into one optimizer step. Memory only: the
        loss is normalized by the whole minibatch's token and sequence counts, so results do not change
        (not part of the trial key)."""),
    )


class LossConfig(_Section):
    """``loss``: the policy loss: surrogate, importance-ratio level, clipping, aggregation."""

    surrogate: typing.Annotated[str, _registered("policy loss surrogate")] = Field(
        "ppo",
        description=_d("""Policy loss. ppo: the clipped surrogate max(-A r, -A clip(r)) (Schulman et al. 2017);
        cispo: a clipped, stop-gradient importance weight times A log p, so that clipped tokens still get
        a gradient (MiniMax-M1, 2025); sapo: a smooth sigmoid gate instead of the hard clip."""),
    )
    ratio_level: typing.Annotated[str, _registered("ratio level")] = Field(
        "token",
        description=_d("""Importance ratio. token: one ratio per token (PPO, GRPO); sequence: GSPO (Zheng et al.
        2025), the length-normalized sequence ratio clipped per sequence; sequence_token: GSPO-token, the
        same value with a per-token gradient. Sequence ratios need tiny clip ranges (~3e-4)."""),
    )
    clip_low: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description=_d("""The ratio is clipped below at 1 - clip_low: PPO's epsilon, 0.2. GSPO uses 3e-4 with
        sequence ratios."""),
    )
    clip_high: float = Field(
        0.2,
        gt=0.0,
        description=_d("""The ratio is clipped above at 1 + clip_high: 0.2 in PPO; DAPO's clip-higher (0.28)
        lets unlikely tokens grow, against entropy collapse; GSPO uses 4e-4."""),
    )
    dual_clip: float | None = Field(
        None,
        gt=1.0,
        description=_d("""Dual-clip PPO (Ye et al. 2020): for negative advantages the loss is also capped at
        -A c, so that a huge ratio cannot blow up the update; typically 3; null = off."""),
    )
    aggregation: typing.Annotated[str, _registered("loss aggregation")] = Field(
        "seq-mean-token-mean",
        description=_d("""How per-token losses become one number (the loss-granularity factor). seq-mean-token-
        mean: mean per sequence, then over sequences, each completion weighs the same (GRPO); token-mean:
        mean over all active tokens, each token weighs the same (DAPO); seq-mean-token-sum: token sum per
        sequence, mean over sequences; seq-mean-token-sum-norm: token sum / max_len, mean over sequences
        (Dr. GRPO, no length bias); prompt-mean: token mean per prompt group, then over groups (DAPO,
        ScaleRL)."""),
    )
    max_len: int | None = Field(
        None,
        ge=1,
        description=_d("""The constant normalizer of seq-mean-token-sum-norm (Dr. GRPO); null =
        rollout.max_new_tokens, as in Dr. GRPO. Never the padded width of a batch, which varies."""),
    )
    sapo_tau_pos: float = Field(
        1.0,
        gt=0.0,
        description="SAPO's gate temperature for positive advantages (paper default 1.0); surrogate=sapo only.",
    )
    sapo_tau_neg: float = Field(
        1.05,
        gt=0.0,
        description=_d("""SAPO's gate temperature for negative advantages (paper default 1.05: a slightly
        sharper gate, negative updates being the less stable); surrogate=sapo only."""),
    )
    cispo_lower_bound: bool = Field(
        False,
        strict=True,
        description=_d("""CISPO: also clamp the importance weight below at 1 - clip_low (MiniMax-M1 caps it only
        above, at 1 + clip_high); surrogate=cispo only."""),
    )
    entropy_coef: float = Field(
        0.0,
        ge=0.0,
        description=_d("""Weight of the entropy bonus subtracted from the loss, aggregated like the policy loss;
        0 = off (GRPO, DAPO use none); ~1e-3 slows entropy collapse."""),
    )


class KLConfig(_Section):
    """``kl``: a KL penalty to the frozen reference policy (the warm-started model)."""

    placement: Literal["none", "reward", "loss"] = Field(
        "none",
        description=_d("""none: no KL term (DAPO, Dr. GRPO); reward: -beta x KL on every token of token_rewards,
        so that it flows through the advantages (InstructGPT-style PPO; then list kl in reward.components);
        loss: beta x KL added to the loss with the policy loss's aggregation (GRPO)."""),
    )
    beta: float = Field(
        0.04,
        ge=0.0,
        description=_d("""KL coefficient (the initial one when adaptive): DeepSeekMath's GRPO uses 0.04 in the
        loss; InstructGPT ~0.02 in the reward."""),
    )
    estimator: typing.Annotated[str, AfterValidator(_check_kl_estimator)] = Field(
        "auto",
        description=_d("""KL estimator (Schulman, "Approximating KL divergence", 2020). k1: log-ratio, unbiased
        value; k2: half squared log-ratio, whose gradient is the reverse-KL gradient; k3: exp(-x) + x - 1,
        unbiased and non-negative; auto: k1 in the reward, k3 in the loss (the usual pairs)."""),
    )
    adaptive: bool = Field(
        False,
        strict=True,
        description=_d("""Adaptive KL controller (Ziegler et al. 2019): after each step beta is multiplied by
        1 + clip(KL / target - 1, -0.2, 0.2) x n / horizon, steering the KL toward target."""),
    )
    target: float = Field(
        6.0,
        gt=0.0,
        description="Target KL of the adaptive controller, in nats per sequence (summed over tokens), as Ziegler et al.",
    )
    horizon: int = Field(
        10_000,
        ge=1,
        strict=True,
        description="Horizon of the adaptive controller in sequences: larger adapts beta more slowly.",
    )


class CriticConfig(_Section):
    """``critic``: a learned value function, for ``algo.advantage=gae``."""

    enabled: bool = Field(
        False,
        strict=True,
        description=_d("""Train a value function alongside the policy. Required by algo.advantage=gae and
        rejected with the group estimators, which never read values."""),
    )
    value_clip: float | None = Field(
        0.2,
        gt=0.0,
        description=_d("""PPO value clipping: the loss is the larger of the squared errors of the new value and
        of the value clipped to old value +- value_clip; null = plain squared error (Andrychowicz et al.
        2020 found clipping does not help)."""),
    )
    vf_coef: float = Field(
        0.5,
        ge=0.0,
        description="Weight of the value loss added to the policy loss (CleanRL 0.5, TRL's PPO 0.1).",
    )
    lr: float | None = Field(None, gt=0.0, description="Learning rate of the critic's parameters; null = optim.lr.")


class OptimConfig(_Section):
    """``optim``: the AdamW optimizer of the RL phase."""

    lr: float = Field(
        2e-5,
        gt=0.0,
        description=_d("""AdamW learning rate of the RL phase. 2e-5 suits the tiny zoo models (measured: on the
        default warm start, 1e-4 destroys greedy accuracy within ten steps while 2e-5 raises it); ~1e-6
        to 1e-5 for pretrained checkpoints."""),
    )
    betas: tuple[float, float] = Field(
        (0.9, 0.999),
        description="AdamW's (beta1, beta2), each in [0, 1): momentum of the gradient and of its square.",
    )
    eps: float = Field(1e-8, gt=0.0, description="AdamW's epsilon, added to the denominator.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay of AdamW; 0 = off.")
    max_grad_norm: float | None = Field(
        1.0,
        gt=0.0,
        description="Clip the global gradient norm to this before each optimizer step; null = no clipping.",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        strict=True,
        description="Linear learning-rate warm-up over this many optimizer steps, then constant; 0 = off.",
    )

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError(f"each beta must be in [0, 1), got {list(value)}")
        return value


class TrainConfig(_Section):
    """``train``: the length and bookkeeping of the RL run."""

    steps: int = Field(
        100,
        ge=1,
        strict=True,
        description="RL steps (rollout, score, update); study budgets usually set this.",
    )
    checkpoint_every: int = Field(
        25,
        ge=0,
        strict=True,
        description=_d("""Save a resumable checkpoint every N steps; 0 = never (an interrupted trial restarts
        from scratch). Not part of the trial key: resuming gives the same result."""),
    )
    log_every: int = Field(
        1,
        ge=1,
        strict=True,
        description="Log training metrics every N steps. Not part of the trial key.",
    )


class EvalConfig(_Section):
    """``eval``: held-out evaluation during and after training."""

    every: int = Field(
        10,
        ge=0,
        strict=True,
        description="Evaluate every N RL steps, and always before the first and after the last; 0 = only those.",
    )
    n_problems: int = Field(
        500,
        ge=1,
        strict=True,
        description=_d("""Eval-split problems per evaluation (at most task.eval_size), drawn with task.data_seed:
        the same problems for every seed, and every arm that leaves task.* alone. The standard error of an accuracy near 50% is
        0.5 / sqrt(n): 5 points at 100, 3.5 at 200, 2.2 at 500; the cost is proportional (measured in
        docs/metrics.md: 1.6 s per evaluation of 500 problems for tiny-llama on 2-digit addition, one
        CPU thread)."""),
    )
    pass_k: int = Field(
        1,
        ge=1,
        strict=True,
        description=_d("""Also report pass@k from k samples per problem at rollout.temperature (the unbiased
        estimator of Chen et al. 2021); 1 = off."""),
    )
    greedy: bool = Field(
        True,
        strict=True,
        description=_d("""Headline accuracy from greedy decoding (deterministic, less noise between seeds);
        false = one sample at rollout.temperature (the policy that is actually trained)."""),
    )


# --------------------------------------------------------------------------------------------------
# The trial configuration
# --------------------------------------------------------------------------------------------------

#: Advantage estimators that read a value function (need ``critic.enabled``).
CRITIC_ESTIMATORS: frozenset[str] = frozenset({"gae"})
#: Built-in estimators that compare completions within a group (need ``group_size >= 2``, never read values).
GROUP_ESTIMATORS: frozenset[str] = frozenset({"grpo", "dr_grpo", "rloo", "grpo_process"})
#: Ratio levels with one ratio per sequence (GSPO), which stays within ~1e-3 of 1.
SEQUENCE_RATIO_LEVELS: frozenset[str] = frozenset({"sequence", "sequence_token"})
#: Paths that do not change what a trial computes, left out of :meth:`TrialConfig.trial_key`: where
#: and how fast it runs (device, threads, grad_accum), and bookkeeping (logging, checkpoints, cache).
KEY_EXCLUDED_PATHS: frozenset[str] = frozenset(
    {"device", "threads", "algo.grad_accum", "train.log_every", "train.checkpoint_every", "warmstart.cache_dir"}
)
#: Clip ranges at or above this are "PPO-sized" for the GSPO warning.
_PPO_SIZED_CLIP = 0.01

#: The cross-field rules of :func:`_check_rules`, in words (rendered into docs/config.md).
RULES: tuple[str, ...] = (
    "error: `algo.advantage=gae` needs `critic.enabled=true` (GAE reads a learned value function).",
    "error: `critic.enabled=true` with a group estimator (grpo, dr_grpo, rloo, grpo_process): they never read "
    "values, and the critic's value loss would still change a shared backbone, confounding the comparison "
    "(plugin estimators are not checked).",
    "error: `algo.advantage=grpo_process` needs `prm` in `reward.components` (it normalizes step rewards).",
    "error: `kl` is in `reward.components` exactly when `kl.placement=reward` (the kl reward component is the "
    "KL placed in the reward; `kl.placement=loss` adds it to the loss instead).",
    "error: `kl.adaptive=true` with `kl.beta=0` (the controller multiplies beta, which would stay 0).",
    "error: `reward.components` empty or with a name listed twice.",
    "error: group estimators and `algo.dynamic_sampling` need `rollout.group_size >= 2`.",
    "error: `algo.minibatches` must divide `rollout.prompts_per_step x rollout.group_size`, and "
    "`algo.grad_accum` the minibatch size.",
    "error: `loss.dual_clip` applies to `loss.surrogate=ppo` only.",
    "error: `reward.soft_overlong.buffer` at most `rollout.max_new_tokens` when soft_overlong is used.",
    "error: `task.difficulty` inside the task's declared range; `eval.n_problems <= task.eval_size`; "
    "`warmstart.target_min < warmstart.target_max`.",
    "warning: a sequence ratio level (GSPO) with a clip range >= 0.01: sequence ratios stay within ~1e-3 of 1, "
    "so PPO-sized ranges almost never bind; GSPO uses 3e-4 / 4e-4.",
    "warning: `loss.ratio_level=token` with both clip ranges < 0.01: nearly every token would be clipped.",
    "warning: `loss.aggregation=prompt-mean` with `rollout.group_size=1` (the same as seq-mean-token-mean).",
    "warning: `kl.placement=loss` with the k1 estimator, whose gradient has zero expectation under the policy.",
)


class TrialConfig(_Section):
    """The complete configuration of one trial: every section, the seed and the device.

    Build it with :meth:`from_overrides` or :meth:`from_file`; constructing it directly
    (``TrialConfig(loss=LossConfig(...))``) or with ``model_validate`` also validates everything and
    raises :class:`TrialConfigError`. Sections constructed on their own raise pydantic's
    ``ValidationError``.
    """

    task: TaskConfig = Field(default_factory=TaskConfig, description="The task and its data splits.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model and its precision.")
    warmstart: WarmstartConfig = Field(
        default_factory=WarmstartConfig, description="Supervised warm start before RL."
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling of completions.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward components and shaping.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="Advantage estimator and update schedule.")
    loss: LossConfig = Field(default_factory=LossConfig, description="Policy loss, ratio, clipping, aggregation.")
    kl: KLConfig = Field(default_factory=KLConfig, description="KL penalty to the reference policy.")
    critic: CriticConfig = Field(default_factory=CriticConfig, description="Value function for gae.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer of the RL phase.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Length and bookkeeping of the run.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    seed: int = Field(
        0,
        ge=0,
        strict=True,
        description=_d("""Seed of everything random in the trial (sampling, prompt order, new heads); a study
        runs the same seeds for every arm, so that comparisons are paired."""),
    )
    device: typing.Annotated[str, AfterValidator(_check_device)] = Field(
        "auto",
        description=_d("""Where the trial runs: auto (CUDA if present, else CPU), cpu, mps, cuda or cuda:N. Not
        part of the trial key: a trial is the same experiment on any device (the device used is logged)."""),
    )
    threads: int = Field(
        0,
        ge=0,
        strict=True,
        description="CPU threads for torch (torch.set_num_threads); 0 = torch's default. Not part of the trial key.",
    )

    def __init__(self, /, **data: Any) -> None:
        # Missing sections are filled with their default data (not their default_factory) so that every
        # field is validated in this one pass, with full dotted paths in the errors.
        for name, fi in type(self).model_fields.items():
            if name not in data and _is_section(fi.annotation):
                data[name] = _section_defaults(fi.annotation)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise TrialConfigError(_problems_from_validation_error(exc)) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> TrialConfig:  # type: ignore[override]
        """Validate nested data (or return a TrialConfig as is); raises :class:`TrialConfigError`."""
        if isinstance(obj, Mapping) and not kwargs:
            return cls(**dict(obj))
        return super().model_validate(obj, **kwargs)

    # -- cross-field rules ------------------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_field_rules(self) -> TrialConfig:
        errors, notes = _check_rules(self)
        if errors:
            raise _RuleViolations(errors)
        for note in notes:
            warnings.warn(note, ConfigWarning, stacklevel=_caller_stacklevel())
        return self

    # -- derived values ---------------------------------------------------------------------------

    @property
    def completions_per_step(self) -> int:
        """Completions trained on per RL step: ``rollout.prompts_per_step * rollout.group_size``."""
        return self.rollout.prompts_per_step * self.rollout.group_size

    @property
    def loss_max_len(self) -> int:
        """The Dr. GRPO normalizer in effect: ``loss.max_len``, or ``rollout.max_new_tokens`` when null."""
        return self.loss.max_len if self.loss.max_len is not None else self.rollout.max_new_tokens

    @property
    def kl_estimator(self) -> str:
        """The KL estimator in effect: ``kl.estimator``, with ``auto`` resolved (k1 in the reward, else k3)."""
        if self.kl.estimator != "auto":
            return self.kl.estimator
        return "k1" if self.kl.placement == "reward" else "k3"

    @property
    def critic_lr(self) -> float:
        """The critic's learning rate in effect: ``critic.lr``, or ``optim.lr`` when null."""
        return self.critic.lr if self.critic.lr is not None else self.optim.lr

    # -- construction -----------------------------------------------------------------------------

    @classmethod
    def from_overrides(
        cls,
        overrides: Mapping[str, Any] | Iterable[str] = (),
        base: TrialConfig | Mapping[str, Any] | None = None,
    ) -> TrialConfig:
        """The configuration ``base`` (defaults when None) with dotted ``overrides`` applied.

        Args:
            overrides: either a mapping from dotted paths to values (``{"loss.aggregation":
                "token-mean"}``; nested mappings of sections are accepted too: ``{"loss": {"clip_low":
                0.1}}``; a string given for a non-string field is read as YAML: ``{"seed": "3"}``), or
                ``"path=value"`` strings (``["loss.clip_high=0.28"]``) whose values are
                parsed as YAML scalars or lists (``reward.components=[final_answer, prm]``); a later
                string wins over an earlier one for the same path.
            base: a configuration to start from, or a mapping of overrides of the defaults (as a
                study's ``base:``), applied before ``overrides``.

        Returns:
            The validated configuration; it may emit :class:`ConfigWarning` s.

        Raises:
            TrialConfigError: listing every problem: unknown paths (with the nearest valid path), bad
                values (with the allowed values), unknown registered names, violated cross-field rules.
        """
        layers: list[_Layer] = []
        if isinstance(base, TrialConfig):
            start = base.to_dict()
        else:
            start = TrialConfig._default_dict()
            if base is not None:
                layers.append(_Layer(base))
        layers.append(_Layer(overrides))
        return cls._build(start, layers, source=None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        """The configuration described by ``data``: nested and/or dotted keys over the defaults."""
        return cls.from_overrides(data)

    @classmethod
    def from_file(cls, path: str | Path, overrides: Mapping[str, Any] | Iterable[str] = ()) -> TrialConfig:
        """The configuration of a YAML file (nested and/or dotted keys over the defaults), then ``overrides``.

        Only safe YAML is read; a key given twice (also as ``loss: {clip_low: …}`` and
        ``loss.clip_low: …``) is an error.

        Raises:
            TrialConfigError: naming the file and, for each problem, the key and its line.
        """
        source = f"config file {str(path)!r}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise TrialConfigError([Problem("", f"cannot read the file: {exc.strerror or exc}")], source) from None
        data, lines, problems = _load_yaml(text)
        if problems:
            raise TrialConfigError(problems, source)
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise TrialConfigError(
                [Problem("", f"the top level must be a mapping of keys to values, got a {type(data).__name__}")],
                source,
            )
        layers = [_Layer(data, lines=lines), _Layer(overrides)]
        return cls._build(TrialConfig._default_dict(), layers, source=source)

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str]) -> TrialConfig:
        """A new configuration: this one with ``overrides`` applied (see :meth:`from_overrides`)."""
        return TrialConfig.from_overrides(overrides, base=self)

    @classmethod
    def _default_dict(cls) -> dict[str, Any]:
        return _section_defaults(cls)

    @classmethod
    def _build(cls, start: dict[str, Any], layers: list[_Layer], source: str | None) -> TrialConfig:
        problems: list[Problem] = []
        lines: dict[str, int] = {}
        for layer in layers:
            lines.update(layer.lines)
            _apply_layer(start, layer, problems)
        try:
            config = cls(**start)
        except TrialConfigError as exc:
            problems.extend(exc.problems)
            config = None
        if problems:
            raise TrialConfigError([_with_line(p, lines) for p in problems], source)
        assert config is not None
        return config

    # -- export -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The configuration as nested plain data (JSON-compatible: tuples become lists)."""
        return self.model_dump(mode="json")

    def to_flat_dict(self) -> dict[str, Any]:
        """The configuration with dotted keys (``{"loss.clip_low": 0.2, ...}``), e.g. for MLflow params.

        Mapping-valued fields (``task.options``) stay one entry; ``from_overrides(to_flat_dict())``
        gives back an equal configuration.
        """
        out: dict[str, Any] = {}
        _flatten_into(self.to_dict(), "", type(self), out)
        return out

    def to_yaml(self) -> str:
        """The configuration as a nested YAML document, readable by :meth:`from_file`."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def changed_from_defaults(self) -> dict[str, Any]:
        """The dotted paths whose value differs from the default, with their values."""
        default = TrialConfig._default_flat()
        return {k: v for k, v in self.to_flat_dict().items() if default.get(k) != v}

    @classmethod
    def _default_flat(cls) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _flatten_into(cls._default_dict(), "", cls, out)
        return out

    def trial_key(self) -> str:
        """The trial's identity: 12 hex digits of SHA-256 of the canonical JSON of the configuration.

        Every field counts (the seed included) except :data:`KEY_EXCLUDED_PATHS`, which do not change
        what the trial computes. The canonical form (sorted dotted keys, no whitespace, ASCII, floats
        in Python's shortest round-trip form) is the same in every process and Python version. Any
        change to the schema (a new field, a new default) changes every key: a key names exactly
        what ran.
        """
        flat = {k: v for k, v in self.to_flat_dict().items() if k not in KEY_EXCLUDED_PATHS}
        payload = json.dumps(flat, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return hashlib.sha256(payload.encode("ascii")).hexdigest()[:12]


# --------------------------------------------------------------------------------------------------
# Cross-field rules
# --------------------------------------------------------------------------------------------------


def _check_rules(c: TrialConfig) -> tuple[list[Problem], list[str]]:
    """Every cross-field rule of ``c``: (errors, warning messages)."""
    errors: list[Problem] = []
    notes: list[str] = []
    adv = c.algo.advantage
    comps = c.reward.components
    G = c.rollout.group_size

    # Critic: gae needs it, the group estimators never read it.
    if adv in CRITIC_ESTIMATORS and not c.critic.enabled:
        errors.append(Problem("critic.enabled", (
            f"algo.advantage={adv} estimates advantages from a learned value function: set "
            f"critic.enabled=true (or choose a critic-free estimator: {', '.join(sorted(GROUP_ESTIMATORS))})")))
    if c.critic.enabled and adv in GROUP_ESTIMATORS:
        errors.append(Problem("critic.enabled", (
            f"critic.enabled=true but algo.advantage={adv} never reads values: the critic would cost compute and "
            "its value loss would still change a shared backbone, confounding the comparison; set "
            "critic.enabled=false, or algo.advantage=gae")))

    # Rewards.
    dupes = sorted({n for n in comps if comps.count(n) > 1})
    if dupes:
        errors.append(Problem("reward.components", f"lists {', '.join(dupes)} more than once; list each once"))
    if not comps:
        errors.append(Problem("reward.components", "is empty: list at least one component, e.g. [final_answer]"))
    if adv == "grpo_process" and "prm" not in comps:
        errors.append(Problem("algo.advantage", (
            "grpo_process normalizes step rewards, which come from the prm component: add prm to "
            "reward.components (e.g. reward.components=[final_answer, prm]) or choose another estimator")))
    if c.kl.placement == "reward" and "kl" not in comps:
        errors.append(Problem("kl.placement", (
            "kl.placement=reward puts the KL penalty into token_rewards through the kl reward component: add kl "
            f"to reward.components (reward.components=[{', '.join([*comps, 'kl'])}]), or use kl.placement=loss")))
    if "kl" in comps and c.kl.placement != "reward":
        rest = [n for n in comps if n != "kl"]
        errors.append(Problem("reward.components", (
            f"lists kl but kl.placement={c.kl.placement}: the kl reward component is the KL placed in the reward; "
            f"set kl.placement=reward, or remove kl (reward.components=[{', '.join(rest)}])")))
    if c.kl.adaptive and c.kl.placement != "none" and c.kl.beta == 0.0:
        errors.append(Problem("kl.beta", (
            "the adaptive controller multiplies beta, so it stays 0 forever: give an initial kl.beta > 0")))
    if c.kl.placement == "loss" and c.kl_estimator == "k1":
        notes.append(
            "kl.placement=loss with kl.estimator=k1: the gradient of k1 = log p - log p_ref is the score function, "
            "whose expectation under the policy is zero, so this penalty does not pull toward the reference; use "
            "k3 (GRPO) or k2 (whose gradient is the reverse-KL gradient)")
    if "soft_overlong" in comps and c.reward.soft_overlong.buffer > c.rollout.max_new_tokens:
        errors.append(Problem("reward.soft_overlong.buffer", (
            f"{c.reward.soft_overlong.buffer} is longer than the completions can be (rollout.max_new_tokens="
            f"{c.rollout.max_new_tokens}); DAPO punishes the last buffer tokens before the limit: lower it "
            f"(e.g. {max(1, c.rollout.max_new_tokens // 4)})")))

    # Groups.
    if G < 2 and adv in GROUP_ESTIMATORS:
        errors.append(Problem("rollout.group_size", (
            f"algo.advantage={adv} compares completions within a group, which needs rollout.group_size >= 2 "
            f"(got {G}); raise it, or use algo.advantage=gae with critic.enabled=true")))
    if G < 2 and c.algo.dynamic_sampling:
        errors.append(Problem("algo.dynamic_sampling", (
            "a group of one completion always has zero reward variance, so dynamic sampling would drop every "
            "group: set rollout.group_size >= 2 or algo.dynamic_sampling=false")))
    if c.loss.aggregation == "prompt-mean" and G == 1:
        notes.append(
            "loss.aggregation=prompt-mean with rollout.group_size=1: each prompt group is one completion, so "
            "this is seq-mean-token-mean; raise rollout.group_size if you meant a per-prompt token mean")

    # Update shape.
    n = c.completions_per_step
    mb = c.algo.minibatches
    if n % mb:
        errors.append(Problem("algo.minibatches", (
            f"{mb} does not divide the {n} completions of a step (rollout.prompts_per_step x rollout.group_size "
            f"= {c.rollout.prompts_per_step} x {G}); choose a divisor of {n}")))
    elif (n // mb) % c.algo.grad_accum:
        errors.append(Problem("algo.grad_accum", (
            f"{c.algo.grad_accum} does not divide the minibatch of {n // mb} completions "
            f"({n} completions / {mb} minibatches); choose a divisor of {n // mb}")))

    if c.loss.dual_clip is not None and c.loss.surrogate != "ppo":
        errors.append(Problem("loss.dual_clip", (
            f"dual-clip applies to the ppo surrogate only, not loss.surrogate={c.loss.surrogate}: set "
            "loss.dual_clip=null (or loss.surrogate=ppo)")))

    # Ratio level and clip ranges.
    lo, hi = c.loss.clip_low, c.loss.clip_high
    if c.loss.ratio_level in SEQUENCE_RATIO_LEVELS and max(lo, hi) >= _PPO_SIZED_CLIP:
        notes.append(
            f"loss.ratio_level={c.loss.ratio_level} (GSPO) with loss.clip_low={lo}, loss.clip_high={hi}: a sequence "
            "ratio is the geometric mean of its token ratios and stays within ~1e-3 of 1, so PPO-sized clip ranges "
            "almost never bind; GSPO (Zheng et al. 2025) uses clip_low=3e-4, clip_high=4e-4. Set them, unless "
            "you mean to compare without effective clipping")
    if c.loss.ratio_level == "token" and max(lo, hi) < _PPO_SIZED_CLIP:
        notes.append(
            f"loss.ratio_level=token with GSPO-sized clip ranges (clip_low={lo}, clip_high={hi}): token ratios "
            "vary by far more than 1e-2, so nearly every token would be clipped and get no gradient; use ~0.2 "
            "with token ratios")

    # Task difficulty range, where the task class declares one.
    task_reg = registry_of("task")
    task_cls = task_reg.get(c.task.name) if task_reg is not None and c.task.name in task_reg else None
    lo_d, hi_d = getattr(task_cls, "min_difficulty", None), getattr(task_cls, "max_difficulty", None)
    if (c.task.difficulty is not None and getattr(task_cls, "default_difficulty", None) is not None
            and isinstance(lo_d, int) and isinstance(hi_d, int) and not lo_d <= c.task.difficulty <= hi_d):
        errors.append(Problem("task.difficulty", (
            f"{c.task.difficulty} is outside task {c.task.name}'s range {lo_d}..{hi_d}: choose a value in it, or "
            "null for the task's default")))

    # Evaluation and warm start.
    if c.eval.n_problems > c.task.eval_size:
        errors.append(Problem("eval.n_problems", (
            f"{c.eval.n_problems} is more than the eval split holds (task.eval_size={c.task.eval_size}): lower "
            "eval.n_problems or raise task.eval_size")))
    if c.warmstart.target_min >= c.warmstart.target_max:
        errors.append(Problem("warmstart.target_min", (
            f"the target band [{c.warmstart.target_min}, {c.warmstart.target_max}] is empty: target_min must be "
            "smaller than warmstart.target_max")))
    return errors, notes


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside pydantic and this module."""
    import pydantic

    internal = (str(Path(pydantic.__file__).parent), __file__)
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level


# --------------------------------------------------------------------------------------------------
# Schema paths
# --------------------------------------------------------------------------------------------------


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_mapping_field(fi: FieldInfo) -> bool:
    return typing.get_origin(fi.annotation) is dict


def _section_defaults(cls: type[BaseModel]) -> dict[str, Any]:
    return {name: (_section_defaults(fi.annotation) if _is_section(fi.annotation) else _default_of(fi))
            for name, fi in cls.model_fields.items()}


def _default_of(fi: FieldInfo) -> Any:
    value = fi.get_default(call_default_factory=True)
    return json.loads(json.dumps(value))  # plain JSON data: tuples become lists, copies mutables


@dataclass(frozen=True)
class _Target:
    """Where a dotted path points: a section, a leaf field, or keys inside a mapping-valued field."""

    kind: Literal["section", "leaf", "mapping"]
    field: FieldInfo | None
    section: type[BaseModel] | None
    parts: tuple[str, ...]  # path segments up to and including the field
    rest: tuple[str, ...]  # keys below a mapping-valued field


def _lookup(path: str) -> _Target | None:
    """Resolve a dotted path against the schema, or None if it names nothing."""
    parts = path.split(".")
    cls: type[BaseModel] = TrialConfig
    for i, part in enumerate(parts):
        fi = cls.model_fields.get(part)
        if fi is None:
            return None
        if _is_section(fi.annotation):
            if i == len(parts) - 1:
                return _Target("section", fi, fi.annotation, tuple(parts), ())
            cls = fi.annotation
            continue
        if _is_mapping_field(fi):
            if any(not p for p in parts[i + 1:]):
                return None
            return _Target("mapping", fi, None, tuple(parts[: i + 1]), tuple(parts[i + 1:]))
        if i < len(parts) - 1:
            return None
        return _Target("leaf", fi, None, tuple(parts), ())
    return None


def field_paths() -> list[str]:
    """Every settable dotted path of :class:`TrialConfig` (leaves and mapping-valued fields), in order."""
    out: list[str] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, fi in cls.model_fields.items():
            if _is_section(fi.annotation):
                walk(fi.annotation, prefix + name + ".")
            else:
                out.append(prefix + name)

    walk(TrialConfig, "")
    return out


def describe_path(path: str) -> str:
    """The description of the field at a dotted path, with its type and default.

    Raises:
        TrialConfigError: the path names no field (the message gives the nearest valid path).
    """
    target = _lookup(path)
    if target is None or target.field is None or target.rest:
        raise TrialConfigError([Problem(path, _unknown_path_message(path))])
    fi = target.field
    if target.kind == "section":
        return f"{path}: section ({fi.description})"
    return f"{path} ({_describe_type(fi)}; default {json.dumps(_default_of(fi))}): {fi.description}"


def nearest_path(path: str) -> str | None:
    """The valid dotted path nearest to ``path`` (difflib), or None when nothing is close."""
    paths = field_paths()
    found = difflib.get_close_matches(path, paths, n=1, cutoff=0.6)
    if found:
        return found[0]
    last = path.split(".")[-1]
    by_last: dict[str, list[str]] = {}
    for p in paths:
        by_last.setdefault(p.split(".")[-1], []).append(p)
    close = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.7)
    if close and len(by_last[close[0]]) == 1:
        return by_last[close[0]][0]
    return None


def _unknown_path_message(path: str) -> str:
    msg = "unknown key"
    guess = nearest_path(path)
    if guess is not None:
        msg += f" (did you mean {guess!r}?)"
    parts = path.split(".")
    # the longest valid section prefix: list what it holds
    for i in range(len(parts) - 1, -1, -1):
        prefix = ".".join(parts[:i])
        target = _lookup(prefix) if prefix else _Target("section", None, TrialConfig, (), ())
        if target is not None and target.kind == "section" and target.section is not None:
            where = f"{prefix!r}" if prefix else "the top level"
            msg += f"; valid keys of {where}: {', '.join(target.section.model_fields)}"
            break
    return msg


def _describe_type(fi: FieldInfo) -> str:
    """Allowed values of a field in words: ``a number, > 0 and < 1``; ``one of 'none', 'reward', 'loss'``."""
    text = _describe_annotation(fi.annotation)
    bounds = []
    for m in fi.metadata:
        kind = _registry_kind_of(m)
        if kind is not None:
            text = kind
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            v = getattr(m, attr, None)
            if v is not None:
                bounds.append(f"{sym} {v}")
    if bounds:
        text += ", " + " and ".join(bounds)
    return text


def _describe_annotation(ann: Any) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        base = _describe_annotation(args[0])
        for meta in args[1:]:
            kind = _registry_kind_of(meta)
            if kind is not None:
                return kind
        return base
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe_annotation(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " or null" if type(None) in args else text
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            inner = _describe_annotation(args[0])
            return "a list of " + (inner[2:] + "s" if inner.startswith("a ") else inner)
        inners = {_describe_annotation(a) for a in args}
        if len(inners) == 1:
            inner = inners.pop()
            return f"a list of {len(args)} " + (inner[2:] + "s" if inner.startswith("a ") else inner)
        return "a list of " + ", ".join(_describe_annotation(a) for a in args)
    if origin is dict:
        return "a mapping"
    if ann is bool:
        return "true or false"
    if isinstance(ann, type):
        return {"str": "a string", "int": "an integer", "float": "a number"}.get(ann.__name__, ann.__name__)
    return str(ann)


def _registry_kind_of(meta: Any) -> str | None:
    """For a name-checking validator: the allowed values in words (``a registered task name``)."""
    func = getattr(meta, "func", None)
    if func is None:
        return None
    if func is _check_model_name:
        return "a registered model name or a checkpoint directory"
    if func is _check_kl_estimator:
        return "auto or a registered kl estimator name"
    if func is _check_device:
        return "auto, cpu, mps, cuda or cuda:N"
    for cell in getattr(func, "__closure__", None) or ():
        if isinstance(cell.cell_contents, str):
            return f"a registered {cell.cell_contents} name"
    return None


# --------------------------------------------------------------------------------------------------
# Applying overrides
# --------------------------------------------------------------------------------------------------


class _Layer:
    """One set of overrides (a mapping, or ``path=value`` strings), with YAML line numbers if any."""

    def __init__(self, overrides: Mapping[str, Any] | Iterable[str], lines: dict[str, int] | None = None):
        self.overrides = overrides
        self.lines = lines or {}


def _items_of(overrides: Mapping[str, Any] | Iterable[str], problems: list[Problem]) -> list[tuple[str, Any, bool]]:
    """(path, value, value_is_a_string_to_parse) for every override, nested mappings flattened."""
    out: list[tuple[str, Any, bool]] = []
    if isinstance(overrides, Mapping):
        _flatten_overrides(overrides, "", out, problems)
        return out
    if isinstance(overrides, str):
        overrides = [overrides]
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            problems.append(Problem(str(item), "an override must be a string path=value, e.g. loss.clip_high=0.28"))
            continue
        path, raw = item.split("=", 1)
        out.append((path.strip(), raw.strip(), True))
    return out


def _flatten_overrides(
    mapping: Mapping[Any, Any], prefix: str, out: list[tuple[str, Any, bool]], problems: list[Problem]
) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str):
            problems.append(Problem(f"{prefix}{key!r}", "keys must be strings (dotted paths)"))
            continue
        path = prefix + key
        target = _lookup(path)
        if target is not None and target.kind == "section" and (isinstance(value, Mapping) or value is None):
            _flatten_overrides(value or {}, path + ".", out, problems)
        else:
            out.append((path, value, False))


def _apply_layer(data: dict[str, Any], layer: _Layer, problems: list[Problem]) -> None:
    """Set every override of ``layer`` into the nested ``data``; record unknown paths as problems."""
    items = _items_of(layer.overrides, problems)
    from_mapping = isinstance(layer.overrides, Mapping)
    seen: set[str] = set()
    for path, value, is_string in items:
        target = _lookup(path)
        if target is None:
            problems.append(Problem(path, _unknown_path_message(path)))
            continue
        if is_string or (isinstance(value, str) and target.kind == "leaf" and target.field is not None
                         and not _accepts_str(target.field.annotation)):
            # "path=value" text is YAML; so is a string given for a field that cannot hold one
            # ({"seed": "3"}), while strings meant as strings are never re-read.
            value = _parse_string(value, target)
        if target.kind == "section":
            if isinstance(value, Mapping):
                _apply_layer(data, _Layer({path: value}), problems)
            else:
                keys = ", ".join(target.section.model_fields) if target.section else ""
                problems.append(Problem(path, (
                    f"is a section, not a value (got {value!r}); set its keys, e.g. {path}.<key>=..., "
                    f"one of: {keys}")))
            continue
        if from_mapping and path in seen:
            problems.append(Problem(path, "is set twice (nested and dotted); set it once"))
            continue
        seen.add(path)
        _set_path(data, target, path, value, problems)


def _set_path(data: dict[str, Any], target: _Target, path: str, value: Any, problems: list[Problem]) -> None:
    node = data
    for part in target.parts[:-1]:
        node = node.setdefault(part, {})
    last = target.parts[-1]
    if not target.rest:
        node[last] = value
        return
    current = node.get(last)
    if not isinstance(current, dict):
        current = {}
    node[last] = current = dict(current)
    for key in target.rest[:-1]:
        nxt = current.get(key)
        if nxt is not None and not isinstance(nxt, dict):
            problems.append(Problem(path, f"cannot set a key inside {key!r}, which holds {nxt!r}, not a mapping"))
            return
        current[key] = current = dict(nxt or {})
    current[target.rest[-1]] = value


def _parse_string(raw: str, target: _Target) -> Any:
    """The value of a ``path=value`` string: YAML, but a string field keeps its text (``name=on`` stays 'on')."""
    try:
        parsed = yaml.load(raw, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError:
        return raw
    if (target.kind == "leaf" and target.field is not None and parsed is not None
            and not isinstance(parsed, str) and _accepts_str(target.field.annotation)):
        return raw
    return parsed


def _accepts_str(ann: Any) -> bool:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is str:
        return True
    if origin is typing.Annotated:
        return _accepts_str(args[0])
    if origin is Literal:
        return all(isinstance(a, str) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_str(a) for a in args if a is not type(None))
    return False


def _flatten_into(data: Mapping[str, Any], prefix: str, cls: type[BaseModel], out: dict[str, Any]) -> None:
    for name, fi in cls.model_fields.items():
        if _is_section(fi.annotation):
            _flatten_into(data[name], prefix + name + ".", fi.annotation, out)
        else:
            out[prefix + name] = data[name]


def _problems_from_validation_error(exc: ValidationError) -> list[Problem]:
    """One :class:`Problem` per pydantic error: dotted path, message, value given, allowed values."""
    problems: list[Problem] = []
    for err in exc.errors():
        ctx = err.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, _RuleViolations):
            problems.extend(inner.problems)
            continue
        loc = err["loc"]
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if err["type"] == "extra_forbidden":
            problems.append(Problem(path, _unknown_path_message(path)))
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        msg = f"{msg} (got {_short(err.get('input'))})"
        target = _lookup(".".join(str(p) for p in loc if not isinstance(p, int)))
        if err["type"] == "literal_error" and isinstance(err.get("input"), str):
            allowed = list(typing.get_args(target.field.annotation)) if target and target.field else []
            guess = difflib.get_close_matches(err["input"], [str(a) for a in allowed], n=1, cutoff=0.5)
            if guess:
                msg += f"; did you mean {guess[0]!r}?"
        elif target is not None and target.field is not None and target.kind == "leaf":
            if not msg.startswith("unknown "):
                msg += f"; expected {_describe_type(target.field)}"
        problems.append(Problem(path, msg))
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _with_line(problem: Problem, lines: Mapping[str, int]) -> Problem:
    if problem.line is not None or not lines:
        return problem
    path = re.sub(r"\[\d+\]$", "", problem.path)
    while path:
        if path in lines:
            return Problem(problem.path, problem.message, lines[path])
        path = path.rpartition(".")[0]
    return problem


# --------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` (no dot) as a float, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _load_yaml(text: str) -> tuple[Any, dict[str, int], list[Problem]]:
    """Parse safe YAML: (data, line of each dotted key, problems: syntax errors and duplicate keys)."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        return None, {}, [Problem("", f"invalid YAML: {getattr(exc, 'problem', None) or exc}", line)]
    lines: dict[str, int] = {}
    problems: list[Problem] = []
    if node is not None:
        _walk_node(node, "", lines, problems)
    if problems:
        return None, lines, problems
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as exc:  # e.g. an unhashable key
        return None, lines, [Problem("", f"invalid YAML: {exc}")]
    return data, lines, problems


def _walk_node(node: yaml.Node, prefix: str, lines: dict[str, int], problems: list[Problem]) -> None:
    if not isinstance(node, yaml.MappingNode):
        return
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        path = prefix + str(key_node.value)
        line = key_node.start_mark.line + 1
        if path in lines:
            problems.append(Problem(path, f"is given twice (also on line {lines[path]}); keep one", line))
            continue
        lines[path] = line
        target = _lookup(path)
        if target is not None and target.kind in ("section", "mapping"):
            _walk_node(value_node, path + ".", lines, problems)


# --------------------------------------------------------------------------------------------------
# Device
# --------------------------------------------------------------------------------------------------


def resolve_device(config: TrialConfig | str) -> torch.device:
    """The torch device of a configuration (or of a device string): ``auto`` is CUDA if present, else CPU.

    Raises:
        ConfigError: a CUDA or MPS device is asked for where there is none.
    """
    import torch

    name = config.device if isinstance(config, TrialConfig) else str(config)
    _check_device(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
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

