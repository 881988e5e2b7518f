"""The schema of one trial: :class:`TrialConfig`, its sections, how it is built and its identity (trial key).

A trial is one fully specified configuration plus a seed, trained and evaluated. Every choice a study
can compare is a field, reachable by a dotted path (``loss.aggregation``); the sections live in
:mod:`ablate.config.sections`, the cross-field rules in :mod:`ablate.config.rules`, the override
engine in :mod:`ablate.config.overrides`. Configurations are immutable (frozen pydantic models):
derive a new one with :meth:`TrialConfig.with_overrides`, never with ``model_copy(update=...)``,
which skips validation.
"""

from __future__ import annotations

import hashlib
import json
import sys
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator

from ablate.config.overrides import (
    Layer,
    apply_layer,
    file_lines,
    flatten_into,
    problems_from_validation_error,
    with_line,
)
from ablate.config.paths import describe_field, is_section, leaf_paths, nearest_of, section_defaults
from ablate.config.problems import ConfigProblem, ConfigWarning, RuleViolations, TrialConfigError
from ablate.config.rules import check_rules
from ablate.config.sections import (
    AlgoConfig,
    CriticConfig,
    EngineConfig,
    EvalConfig,
    KLConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    Section,
    TaskConfig,
    TrainConfig,
    WarmstartConfig,
    one_line,
)
from ablate.config.validators import check_device
from ablate.yamlio import FileProblem, LineDict, YamlError, plain, read_yaml

__all__ = ["KEY_EXCLUDED_PATHS", "KEY_OMITTED_AT_DEFAULT", "KEY_OMITTED_WHEN_INERT", "TrialConfig", "caller_stacklevel", "describe_path", "field_paths", "nearest_path"]

#: Paths that do not change what a trial computes, left out of :meth:`TrialConfig.trial_key`: where
#: and how fast it runs (device, threads, grad_accum), and bookkeeping (logging, checkpoints, cache).
KEY_EXCLUDED_PATHS: frozenset[str] = frozenset(
    {"device", "threads", "algo.grad_accum", "train.log_every", "train.checkpoint_every", "warmstart.cache_dir"}
)

#: Paths added to the schema after results were first committed, each with the value that reproduces
#: what every trial computed before the path existed. A path holding that value is left out of
#: :meth:`TrialConfig.trial_key`, so adding an option never renames the trials that ran without it;
#: any other value is part of the key as usual. Add a new option here with its neutral default.
KEY_OMITTED_AT_DEFAULT: dict[str, Any] = {
    "algo.adv_mean": "group",
    "algo.adv_std": "group",
    "model.lm_head_dtype": None,
    "rollout.dtype": None,
    "loss.rollout_correction": "none",
    "loss.rollout_correction_cap": 2.0,
    "loss.rollout_correction_floor": None,
    "algo.zero_variance_filter": False,
    "algo.drop_solved_at": None,
    "stream": 0,
    "optim.implementation": "auto",
    "rollout.behaviour_logp": "recompute",
    "model.attention": "sdpa",
    "algo.filter_on": "all",
    "reward.overlong_baseline": "exclude",
    "algo.constant_groups": "rounding",
    "task.dataset": None,
    "train.packed": False,
    "rollout.cuda_graph": False,
    "engine.name": "ablate",
    "engine.processes": 1,
    "model.tokenizer": "auto",
    "optim.decay_params": "all",
    "engine.positions": "trl",
    "engine.prompts": "text",
}

#: Zoo models whose checkpoints load the same tokenizer under either model.tokenizer: AutoTokenizer keeps
#: the class saved for the Llama and GPT-2 model types, and a pretrained entry loads no warm start. Not
#: tiny-qwen2: AutoTokenizer gives model type qwen2 Qwen2Tokenizer whatever the class saved (issue 54).
TOKENIZER_ALIKE_MODELS: frozenset[str] = frozenset(
    {"micro-llama", "tiny-llama", "small-llama", "base-llama", "tiny-gpt2", "smollm2-135m"}
)
#: Tasks whose prompts are digits, operators, commas, colons and '=' only, which both tokenizers encode
#: alike (and both decode every single token alike): model.tokenizer changes nothing on them.
DIGIT_PROMPT_TASKS: frozenset[str] = frozenset({"addition", "chain", "countdown"})


def tokenizer_load_inert(c: Any) -> bool:
    """Whether ``model.tokenizer`` cannot change what the trial of ``c`` computes: no checkpoint is loaded
    (a zoo model without a warm start), the zoo model loads its tokenizer alike either way
    (:data:`TOKENIZER_ALIKE_MODELS`), or the task's prompts are encoded alike (:data:`DIGIT_PROMPT_TASKS`). A
    checkpoint directory as ``model.name`` always counts."""
    from ablate.registry import known_names

    if c.model.name not in (known_names("model") or ()):
        return False
    return (not c.warmstart.enabled or c.model.name in TOKENIZER_ALIKE_MODELS
            or c.task.name in DIGIT_PROMPT_TASKS)


def character_tokenizer(c: Any) -> bool:
    """Whether ``c``'s model is a zoo model with the character tokenizer (no chat template)."""
    from ablate.registry import known_names

    return c.model.name in (known_names("model") or ()) and c.model.name != "smollm2-135m"


def one_prompt_length(c: Any) -> bool:
    """Whether every prompt of ``c``'s task has one length in tokens: addition (operands of exactly
    ``difficulty`` digits) on a zoo model with the character tokenizer. ``engine.positions`` changes nothing
    there (no row is left-padded)."""
    return c.task.name == "addition" and character_tokenizer(c)


#: Paths left out of :meth:`TrialConfig.trial_key` where they cannot change what the trial computes,
#: with the test of that (on the configuration); elsewhere they are part of the key like any path.
KEY_OMITTED_WHEN_INERT: dict[str, Callable[[Any], bool]] = {
    "algo.filter_on": lambda c: not (c.reward.overlong_filter
                                     and (c.algo.dynamic_sampling or c.algo.zero_variance_filter)),
    "reward.overlong_baseline": lambda c: not c.reward.overlong_filter,
    # only grpo's division by a group std amplifies rounding; integer rewards have exact group means
    "algo.constant_groups": lambda c: (c.algo.advantage != "grpo" or c.algo.adv_std != "group"
                                       or (tuple(c.reward.components) == ("final_answer",)
                                           and float(c.reward.final_answer.weight).is_integer())),
    "model.tokenizer": tokenizer_load_inert,
    "optim.decay_params": lambda c: c.optim.weight_decay == 0,
    "engine.positions": lambda c: c.engine.name != "trl" or one_prompt_length(c),
    "engine.prompts": lambda c: c.engine.name != "trl" or character_tokenizer(c),
}


class TrialConfig(Section):
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
    engine: EngineConfig = Field(default_factory=EngineConfig, description="The trainer that runs the trial.")
    seed: int = Field(
        0,
        ge=0,
        strict=True,
        description=one_line("""Seed of everything random in the trial (sampling, prompt order, new heads); a study
        runs the same seeds for every arm, so that comparisons are paired."""),
    )
    stream: int = Field(
        0,
        ge=0,
        strict=True,
        description=one_line("""Offset of every random draw of the RL phase (prompt order, sampling, reward noise,
        minibatch order, new heads), leaving the seed's warm start and learned PRM alone: two values give
        the same trial in distribution with other random draws. An A/A factor (levels 0 and 1) is a
        study's false-alarm check: its report must not detect it. 0 = the draws of the seed alone."""),
    )
    device: typing.Annotated[str, AfterValidator(check_device)] = Field(
        "auto",
        description=one_line("""Where the trial runs: auto (CUDA if present, else CPU), cpu, mps, cuda or cuda:N. Not
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
            if name not in data and is_section(fi.annotation):
                data[name] = section_defaults(fi.annotation)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise TrialConfigError(problems_from_validation_error(type(self), exc)) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> TrialConfig:  # type: ignore[override]
        """Validate nested data (or return a TrialConfig as is); raises :class:`TrialConfigError`."""
        if isinstance(obj, Mapping) and not kwargs:
            return cls(**dict(obj))
        return super().model_validate(obj, **kwargs)

    # -- cross-field rules ------------------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_field_rules(self) -> TrialConfig:
        errors, notes = check_rules(self)
        if errors:
            raise RuleViolations(errors)
        for note in notes:
            warnings.warn(ConfigWarning(note.message, note.rule), stacklevel=caller_stacklevel())
        return self

    # -- derived values ---------------------------------------------------------------------------

    @property
    def completions_per_step(self) -> int:
        """Completions trained on per RL step: ``rollout.prompts_per_step * rollout.group_size``."""
        return self.rollout.prompts_per_step * self.rollout.group_size

    @property
    def single_pass_update(self) -> bool:
        """One epoch of one minibatch and no KL term: the update's own detached log-probs can serve as
        PPO's old log-probs (the trainer then skips the behaviour forward, unless it measures a
        rollout/trainer precision mismatch)."""
        return self.algo.ppo_epochs == 1 and self.algo.minibatches == 1 and self.kl.placement == "none"

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
        layers: list[Layer] = []
        if isinstance(base, TrialConfig):
            start = base.to_dict()
        else:
            start = TrialConfig._default_dict()
            if base is not None:
                layers.append(Layer(base))
        layers.append(Layer(overrides))
        return cls._build(start, layers, source=None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        """The configuration described by ``data``: nested and/or dotted keys over the defaults."""
        return cls.from_overrides(data)

    @classmethod
    def from_file(cls, path: str | Path, overrides: Mapping[str, Any] | Iterable[str] = ()) -> TrialConfig:
        """The configuration of a YAML file (nested and/or dotted keys over the defaults), then ``overrides``.

        The file is read by :func:`ablate.yamlio.read_yaml`, in the dialect of study files (only
        ``true``/``false`` are booleans; ``1e-4`` is a float); a key given twice (also as
        ``loss: {clip_low: …}`` and ``loss.clip_low: …``) is an error.

        Raises:
            TrialConfigError: naming the file and, for each problem, the key and its line.
        """
        source = f"config file {str(path)!r}"
        try:
            doc = read_yaml(path)
        except YamlError as exc:
            raise TrialConfigError([_yaml_problem(p) for p in exc.problems], source) from None
        if doc is None:  # an empty file: the defaults
            return cls._build(TrialConfig._default_dict(), [Layer(overrides)], source=source)
        if not isinstance(doc, LineDict):
            raise TrialConfigError([ConfigProblem(
                "", f"the top level must be a mapping of keys to values, got a {type(plain(doc)).__name__}")], source)
        lines, problems = file_lines(cls, doc)
        if problems:
            raise TrialConfigError(problems, source)
        data = plain(doc)
        layers = [Layer(data, lines=lines), Layer(overrides)]
        return cls._build(TrialConfig._default_dict(), layers, source=source)

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str]) -> TrialConfig:
        """A new configuration: this one with ``overrides`` applied (see :meth:`from_overrides`)."""
        return TrialConfig.from_overrides(overrides, base=self)

    @classmethod
    def _default_dict(cls) -> dict[str, Any]:
        return section_defaults(cls)

    @classmethod
    def _build(cls, start: dict[str, Any], layers: list[Layer], source: str | None) -> TrialConfig:
        problems: list[ConfigProblem] = []
        lines: dict[str, int] = {}
        for layer in layers:
            lines.update(layer.lines)
            apply_layer(cls, start, layer, problems)
        try:
            config = cls(**start)
        except TrialConfigError as exc:
            problems.extend(exc.problems)
            config = None
        if problems:
            raise TrialConfigError([with_line(p, lines) for p in problems], source)
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
        flatten_into(self.to_dict(), "", type(self), out)
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
        flatten_into(cls._default_dict(), "", cls, out)
        return out

    def trial_key(self) -> str:
        """The trial's identity: 12 hex digits of SHA-256 of the canonical JSON of the configuration.

        Every field counts (the seed included) except :data:`KEY_EXCLUDED_PATHS`, which do not change
        what the trial computes, the options of :data:`KEY_OMITTED_AT_DEFAULT` while they hold the
        value that computes what trials computed before those options existed, and those of
        :data:`KEY_OMITTED_WHEN_INERT` where the rest of the configuration makes them change nothing. The canonical form (sorted dotted keys, no whitespace, ASCII, floats
        in Python's shortest round-trip form) is the same in every process and Python version. Any
        other change to the schema (a new field outside that table, a new default) changes every key:
        a key names exactly what ran.
        """
        flat = {k: v for k, v in self.to_flat_dict().items()
                if k not in KEY_EXCLUDED_PATHS and not (k in KEY_OMITTED_AT_DEFAULT and v == KEY_OMITTED_AT_DEFAULT[k])
                and not (k in KEY_OMITTED_WHEN_INERT and KEY_OMITTED_WHEN_INERT[k](self))}
        payload = json.dumps(flat, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return hashlib.sha256(payload.encode("ascii")).hexdigest()[:12]


def task_options(task: Any) -> dict[str, Any]:
    """The keyword options a task is built with from a ``task`` section: ``task.options``, plus
    ``dataset`` from ``task.dataset`` when it is set."""
    out = dict(task.options)
    if task.dataset is not None:
        out["dataset"] = task.dataset
    return out


def _yaml_problem(problem: FileProblem) -> ConfigProblem:
    """A trial file's read or parse problem as a :class:`ConfigProblem` of the whole configuration."""
    if problem.key == "file":
        return ConfigProblem("", f"cannot read the file: {problem.message}")
    return ConfigProblem("", problem.message, problem.line)


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside pydantic and this package."""
    import pydantic

    internal = (str(Path(pydantic.__file__).parent), str(Path(__file__).parent))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level


def field_paths() -> list[str]:
    """Every settable dotted path of :class:`TrialConfig` (leaves and mapping-valued fields), in order."""
    return leaf_paths(TrialConfig)


def describe_path(path: str) -> str:
    """The description of the field at a dotted path, with its type and default.

    Raises:
        TrialConfigError: the path names no field (the message gives the nearest valid path).
    """
    return describe_field(TrialConfig, path)


def nearest_path(path: str) -> str | None:
    """The valid dotted path nearest to ``path`` (difflib), or None when nothing is close."""
    return nearest_of(TrialConfig, path)
