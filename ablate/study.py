"""Study files: the YAML schema, its validation, and the expansion of a study into trials.

A study compares *arms* (combinations of factor levels) over paired *seeds* at a named *budget*::

    name: quickstart                 # required; [a-z0-9_-]+; names the MLflow experiment and reports/<name>/
    description: What question this study answers.            # optional string
    plugins: []                      # optional; modules imported (only these) to register extra components
    base: {task.name: addition, model.name: tiny-llama}        # optional; dotted overrides of TrialConfig
    factors:                         # required; at least one factor
      loss_norm:
        description: How per-token losses are averaged.        # optional string
        levels:                      # level name -> dotted overrides ({} = the defaults)
          sequence: {loss.aggregation: seq-mean-token-mean}
          token:    {loss.aggregation: token-mean}
      clip_high: {path: loss.clip_high, values: [0.2, 0.28]}   # shorthand: one path, several values
    design: full                     # optional (default full); a name or {name: ..., option: ...}
    baseline: {loss_norm: sequence, clip_high: 0.2}           # the control arm (required by one_at_a_time)
    exclude: [{loss_norm: token, clip_high: 0.28}]            # optional; combinations not to run
    seeds: 3                         # required; n (seeds 0..n-1), a list of distinct ints, or {min: 4, max: 16}
    budgets: {smoke: {train.steps: 2}, full: {train.steps: 400}}  # optional; 'default' always exists
    objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 3}   # required
    tune: {params: {optim.lr: {low: 1.0e-5, high: 1.0e-3, log: true}}, trials: 8, budget: smoke, seeds: 1}
    report: {metrics: [response/length_incorrect, response/length_correct]}   # optional
    primary: [loss_norm]             # optional; the contrast(s) the study exists for: factor or factor=level
    min_effect: 0.03                 # optional; the smallest effect worth finding, in the objective's units

Keys, one by one:

- ``name``: ``[a-z0-9_-]+``.
- ``description``: a string: the question the study answers.
- ``plugins``: a list of importable module names (installed, or on ``PYTHONPATH``) or of ``.py``
  files relative to the study file's folder (``plugins/brevity.py``). They are imported before
  anything else is checked, so that the components and designs they register can be named in the
  file. Nothing else is ever imported on a study's behalf.
- ``base``: a mapping of dotted TrialConfig paths to values, applied to every trial.
- ``factors``: factor name (``[A-Za-z0-9_-]+``) -> either ``levels: {level name: {overrides}}`` or the
  shorthand ``{path: dotted.path, values: [...]}``, each with an optional ``description``. Shorthand
  level names are the values written as text: ``str(value)``, except ``true``/``false``/``null`` as
  YAML writes them and lists joined by ``+`` (``[final, prm]`` -> ``final+prm``). Level names may
  not contain ``,`` or ``=`` (they make up arm names). Two factors may not set the same path.
- ``design``: ``full`` | ``one_at_a_time`` | ``fractional`` | ``random`` | a plugin's design; as a
  mapping, ``name`` plus the design's options: ``{name: fractional, resolution: 4}`` (3, 4, 5 or
  III, IV, V; default 4), ``{name: random, n: 6, seed: 0}``. See :mod:`ablate.designs`.
- ``baseline``: factor -> level (a level name, or the value of a shorthand factor), one for every
  factor. The control arm; may not be excluded.
- ``exclude``: a list of mappings factor -> level. Every arm that matches all the given levels is
  dropped (an entry may name only some factors). Applies to every design.
- ``seeds``: ``n`` (a positive int: seeds 0, 1, ..., n-1) or a list of distinct ints. Every arm runs
  the same seeds, so arms can be compared seed by seed (paired). ``{min: a, max: b}`` (1 <= a <= b)
  makes the seed count adaptive: the study runs seeds 0..a-1 first, and ``ablate run`` adds seeds in
  rounds, up to b, as variance-only sample-size re-estimation asks (see :mod:`ablate.planning`); it
  needs ``min_effect``, the effect the seeds are planned for.
- ``budgets``: budget name (``[a-z0-9_-]+``) -> dotted overrides (e.g. ``train.steps``), chosen with
  ``--budget``; ``default`` always exists (``{}`` unless given).
- ``objective``: ``metric`` (a logged metric name), ``mode`` (``max`` | ``min``), ``summary``
  (how a trial's metric history becomes one number: ``last`` = mean of the last ``last_n`` logged
  values; ``mean`` / ``max`` / ``min`` over the history; ``auc`` = area under the curve over steps
  divided by the step range), ``last_n`` (int >= 1, default 1; used by ``last``).
- ``tune``: per-arm tuning: ``params`` (dotted path -> ``{low, high, log}``, low < high, ``log``
  false by default and needing low > 0), ``trials`` (int >= 1, per arm), ``budget`` (an existing
  budget, default ``default``), ``seeds`` (as ``seeds``, default 1). A tuned path may not be a factor.
- ``report``: ``metrics``: logged metric names (docs/metrics.md) that the report also compares level
  by level against the baseline, each summarised per trial as the mean of its last 10% of logged
  values, with the same paired CIs as the objective but no "better" or "worse" (a diagnostic such as
  the length of incorrect completions has no preferred direction).

- ``primary``: a list of contrasts the study exists for, each ``factor`` (every level of it against
  the baseline level) or ``factor=level`` (that level against the baseline level). The report's
  headline; every other contrast is labelled exploratory. Default: every contrast is exploratory.
- ``min_effect``: the smallest difference worth finding, in the objective's units (a fraction for
  eval/accuracy: 0.03 is 3 points), > 0. Equivalence ("no effect as large as min_effect") can only
  be claimed with it, and ``ablate plan`` plans seeds for it.

Precedence when a trial's configuration is built: TrialConfig defaults < ``base`` < the budget's
overrides < the arm's levels (in factor order) < the trial's seed (path ``seed``, which only
``seeds:`` may set). Every arm's configuration is built, for every budget, when the file is
loaded: a bad level fails :func:`load_study`, never a running study.

:func:`load_study` checks everything and raises one :class:`StudyError` listing every problem as
``FILE:LINE: key: problem; allowed ...; did you mean ...?``. YAML is read with a safe loader that
also rejects duplicate keys (which ``yaml.safe_load`` silently collapses to the last one).
"""

from __future__ import annotations

import importlib
import itertools
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.config import ConfigWarning, TrialConfig
from ablate.designs import DESIGNS, AliasStructure, Design
from ablate.errors import AblateError, ConfigError
from ablate.registry import nearest
from ablate.yamlio import LineDict, LineList, YamlError, plain
from ablate.yamlio import read_yaml as _read_yaml

#: Top-level keys of a study file, with what each holds (for error messages).
STUDY_KEYS: dict[str, str] = {
    "name": "the study's name, [a-z0-9_-]+",
    "description": "the question the study answers",
    "plugins": "modules to import to register extra components",
    "base": "dotted overrides applied to every trial",
    "factors": "factor -> levels",
    "design": "which arms to run",
    "baseline": "the control arm: factor -> level",
    "exclude": "combinations not to run",
    "seeds": "n or a list of seeds, the same for every arm",
    "budgets": "named override sets chosen with --budget",
    "objective": "the metric the study compares",
    "tune": "per-arm hyper-parameter tuning",
    "report": "extra metrics the report compares level by level",
    "primary": "the contrasts the study exists for: factor or factor=level",
    "min_effect": "the smallest effect worth finding, in the objective's units",
}
REQUIRED_KEYS = ("name", "factors", "seeds", "objective")
FACTOR_KEYS = ("description", "levels", "path", "values")
OBJECTIVE_KEYS = ("metric", "mode", "summary", "last_n")
OBJECTIVE_MODES = ("max", "min")
OBJECTIVE_SUMMARIES = ("last", "mean", "max", "min", "auc")
TUNE_KEYS = ("params", "trials", "budget", "seeds")
REPORT_KEYS = ("metrics",)
SEED_RANGE_KEYS = ("min", "max")
TUNE_PARAM_KEYS = ("low", "high", "log")
DEFAULT_BUDGET = "default"
SEED_PATH = "seed"

NAME_RE = re.compile(r"[a-z0-9_-]+\Z")
FACTOR_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
PATH_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
MODULE_RE = PATH_RE
_PATTERN_TEXT = {NAME_RE: "[a-z0-9_-]+", FACTOR_RE: "[A-Za-z0-9_-]+"}
#: At most this many per-arm configuration failures are listed one by one.
MAX_ARM_PROBLEMS = 20


# --------------------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a study file.

    Attributes:
        file: the study file.
        line: 1-based line of the key at fault (None when there is no file position).
        key: where in the file, as a dotted path (``factors.loss_norm.levels.token``).
        message: what is wrong, what is allowed and the nearest valid name.
    """

    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.key}: {self.message}"


class StudyError(AblateError):
    """An invalid study file; ``problems`` lists everything found, all at once."""

    def __init__(self, file: str, problems: Sequence[Problem]) -> None:
        self.file = file
        self.problems = list(problems)
        n = len(self.problems)
        head = f"invalid study file {file} ({n} problem{'s' if n != 1 else ''}):"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))

    def __str__(self) -> str:
        return str(self.args[0])


def _did_you_mean(name: object, choices: Iterable[str]) -> str:
    guess = nearest(str(name), list(choices))
    return f"; did you mean {guess!r}?" if guess is not None else ""


def _unknown(kind: str, name: object, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    return f"unknown {kind} {name!r}; allowed: {', '.join(allowed) or '(none)'}" + _did_you_mean(name, allowed)


def _indent(text: str) -> str:
    """A multi-line message on one problem line: continuation lines indented."""
    return str(text).strip().replace("\n", "\n      ")


# --------------------------------------------------------------------------------------- YAML


def read_yaml(path: str | Path) -> Any:
    """:func:`ablate.yamlio.read_yaml` (the one reader of user files), its error as a :class:`StudyError`."""
    try:
        return _read_yaml(path)
    except YamlError as exc:
        raise StudyError(exc.file, exc.problems) from None  # YamlProblem: same fields as Problem


# --------------------------------------------------------------------------------------- data


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
        raise AblateError(_unknown(f"level of factor {self.name!r}", name, self.level_names()))

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
        warnings: the configuration warnings of the arms (``arm <name>: <warning>``), each once: a
            legal but suspicious combination, e.g. a PPO-sized clip range on a sequence ratio.
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
    warnings: tuple[str, ...] = ()
    primary: tuple[str, ...] = ()
    min_effect: float | None = None
    seed_range: SeedRange | None = None
    configs: Mapping[tuple[str, str], TrialConfig] = field(default_factory=dict, repr=False, compare=False)

    @property
    def baseline_levels(self) -> dict[str, str]:
        """The baseline level of every factor (``baseline:``, else each factor's first level)."""
        return dict(self.baseline) if self.baseline else {f.name: f.levels[0].name for f in self.factors}

    def with_seeds(self, seeds: Sequence[int]) -> Study:
        """The same study with other seeds (adaptive rounds add seeds this way)."""
        from dataclasses import replace

        return replace(self, seeds=tuple(int(s) for s in seeds))

    def factor(self, name: str) -> Factor:
        """The factor called ``name``."""
        for f in self.factors:
            if f.name == name:
                return f
        raise AblateError(_unknown("factor", name, [f.name for f in self.factors]))

    def check_budget(self, budget: str) -> None:
        """Raise AblateError naming the budgets if ``budget`` is not one of them."""
        if budget not in self.budgets:
            raise AblateError(
                f"study {self.name!r} ({self.path}): "
                + _unknown("budget", budget, self.budgets)
                + "; add it under 'budgets:' or pass one of these to --budget"
            )

    def overrides(self, arm: Arm | Mapping[str, str], budget: str = DEFAULT_BUDGET) -> dict[str, Any]:
        """The merged dotted overrides of an arm at a budget: base < budget < levels."""
        self.check_budget(budget)
        levels = arm.levels if isinstance(arm, Arm) else arm
        out = {**self.base, **self.budgets[budget]}
        for f in self.factors:
            out.update(f.level(levels[f.name]).overrides)
        return out

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
        for a study made without it); its seed is the default: :class:`ablate.plan.Plan` sets each trial's."""
        config = self.configs.get((arm.name, budget))
        return config if config is not None else self.config(arm, budget)

    @property
    def n_trials(self) -> int:
        """Arms x seeds (the same at every budget)."""
        return len(self.arms) * len(self.seeds)


# --------------------------------------------------------------------------------------- checks


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


def _line(node: Any, key: Any = None) -> int | None:
    if isinstance(node, LineDict):
        if key is not None and key in node.key_lines:
            return node.key_lines[key]
        return node.line
    if isinstance(node, LineList):
        if isinstance(key, int) and 0 <= key < len(node.item_lines):
            return node.item_lines[key]
        return node.line
    return None


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "empty"}.get(
        type(plain(value)), type(value).__name__
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Checker:
    """Collects the problems of one study file."""

    def __init__(self, file: str, doc: Any) -> None:
        self.file = file
        self.doc = doc
        self.problems: list[Problem] = []

    def add(self, line: int | None, key: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, key, message))

    # -- generic pieces -------------------------------------------------------------------------

    def duplicates(self, node: Any, path: str) -> None:
        """Report every duplicate key anywhere in the document."""
        if isinstance(node, LineDict):
            for key, line, first in node.duplicates:
                where = f"{path}.{key}" if path else str(key)
                self.add(line, where, f"duplicate key (first at line {first}); keep only one of them")
            for key, value in node.items():
                self.duplicates(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, LineList):
            for i, value in enumerate(node):
                self.duplicates(value, f"{path}[{i}]")

    def keys(self, node: LineDict, path: str, allowed: Sequence[str], what: str) -> None:
        for key in node:
            if key not in allowed:
                self.add(_line(node, key), f"{path}.{key}" if path else str(key), _unknown(what, key, allowed))

    def overrides(self, parent: Any, key: Any, path: str) -> dict[str, Any] | None:
        """Check a mapping of dotted overrides (``parent[key]``); None if malformed. Empty -> {}."""
        node = parent[key]
        line = _line(parent, key)
        if node is None:
            return {}
        if not isinstance(node, dict):
            self.add(
                line, path, f"must be a mapping of dotted config paths to values, got {_type_name(node)} "
                f"{plain(node)!r}; e.g. {{loss.clip_high: 0.28}}"
            )
            return None
        ok = True
        for k in node:
            kline = _line(node, k)
            if not isinstance(k, str) or not PATH_RE.match(k):
                self.add(kline, f"{path}.{k}", "not a dotted config path; write e.g. loss.aggregation")
                ok = False
            elif k == SEED_PATH:
                self.add(kline, f"{path}.{k}", "the seed is set by 'seeds:', not by overrides; remove it here")
                ok = False
        return {k: plain(v) for k, v in node.items()} if ok else None

    def seed_range(self, parent: Any, key: str, path: str) -> SeedRange | None:
        """``{min: a, max: b}`` with 1 <= a <= b."""
        node = parent[key]
        line = _line(parent, key)
        self.keys(node, path, SEED_RANGE_KEYS, "seeds key")
        lo, hi = node.get("min"), node.get("max")
        if not (_is_int(lo) and _is_int(hi) and 1 <= lo <= hi):
            self.add(line, path, f"got {plain(node)!r}; allowed: {{min: a, max: b}} with integers 1 <= a <= b, "
                                 "e.g. {min: 4, max: 16}")
            return None
        return SeedRange(lo, hi)

    def seeds(self, parent: Any, key: str, path: str, allow_range: bool = False) -> tuple[int, ...] | None:
        value = parent[key]
        line = _line(parent, key)
        allowed = "allowed: a positive integer n (seeds 0..n-1) or a list of distinct integers >= 0"
        if allow_range:
            allowed += ", or {min: a, max: b} (adaptive)"
        if _is_int(value):
            if value >= 1:
                return tuple(range(value))
            self.add(line, path, f"must be at least 1, got {value}; {allowed}")
            return None
        if isinstance(value, list) and value and all(_is_int(v) and v >= 0 for v in value):
            dup = sorted({v for v in value if value.count(v) > 1})
            if dup:
                self.add(line, path, f"seeds repeat: {dup}; {allowed}")
                return None
            return tuple(value)
        self.add(line, path, f"got {plain(value)!r}; {allowed}")
        return None

    def name_like(self, parent: Any, key: Any, path: str, value: Any, pattern: re.Pattern, what: str) -> bool:
        if isinstance(value, str) and pattern.match(value):
            return True
        fix = re.sub(r"[^a-z0-9_-]+", "-", str(value).lower()).strip("-") if pattern is NAME_RE else None
        msg = f"{what} {value!r} must match {_PATTERN_TEXT[pattern]}"
        if fix:
            msg += f"; did you mean {fix!r}?"
        self.add(_line(parent, key), path, msg)
        return False


def _import_plugins(ck: _Checker, doc: LineDict) -> tuple[str, ...]:
    if "plugins" not in doc or doc["plugins"] is None:
        return ()
    node = doc["plugins"]
    if not isinstance(node, list):
        ck.add(_line(doc, "plugins"), "plugins", f"must be a list of module names, got {plain(node)!r}")
        return ()
    names: list[str] = []
    for i, mod in enumerate(node):
        line = _line(node, i)
        is_file = isinstance(mod, str) and mod.endswith(".py")
        if not isinstance(mod, str) or not (is_file or MODULE_RE.match(mod)):
            ck.add(line, f"plugins[{i}]", f"{mod!r} is not a module name or a .py file; write e.g. "
                   "my_package.my_rewards or plugins/my_rewards.py (relative to the study file)")
            continue
        try:
            if is_file:
                _import_plugin_file(Path(ck.file).parent / mod)
            else:
                importlib.import_module(mod)
        except FileNotFoundError:
            ck.add(line, f"plugins[{i}]", f"no such file: {Path(ck.file).parent / mod} (a .py plugin is found "
                   "relative to the study file's folder)")
            continue
        except Exception as exc:  # any failure inside a plugin is the plugin's problem, reported
            ck.add(
                line,
                f"plugins[{i}]",
                f"cannot import {mod!r}: {type(exc).__name__}: {exc}; install the module or add its "
                "folder to PYTHONPATH",
            )
            continue
        names.append(mod)
    return tuple(names)


def _import_plugin_file(path: Path) -> None:
    """Import a plugin given as a file, once per resolved path (a module named after the path), so
    that loading the same study twice does not register its components twice."""
    import hashlib
    import importlib.util
    import sys

    path = path.resolve(strict=True)
    name = f"ablate_plugin_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _parse_factors(ck: _Checker, doc: LineDict) -> list[Factor] | None:
    node = doc["factors"]
    if not isinstance(node, dict) or not node:
        ck.add(
            _line(doc, "factors"),
            "factors",
            "must be a non-empty mapping factor -> {levels: {name: {overrides}}} or {path: ..., values: [...]}",
        )
        return None
    factors: list[Factor] = []
    ok = True
    for fname, spec in node.items():
        fpath = f"factors.{fname}"
        fline = _line(node, fname)
        if not ck.name_like(node, fname, fpath, fname, FACTOR_RE, "factor name"):
            ok = False
            continue
        if not isinstance(spec, dict):
            ck.add(fline, fpath, "must be a mapping with 'levels:' or with 'path:' and 'values:'")
            ok = False
            continue
        before = len(ck.problems)
        ck.keys(spec, fpath, FACTOR_KEYS, "factor key")
        desc = spec.get("description")
        if desc is not None and not isinstance(desc, str):
            ck.add(_line(spec, "description"), f"{fpath}.description", "must be a string")
        levels: list[Level] = []
        path: str | None = None
        if "levels" in spec and ("path" in spec or "values" in spec):
            ck.add(
                _line(spec, "levels"),
                fpath,
                "give either 'levels:' or the shorthand 'path:' + 'values:', not both",
            )
        elif "levels" in spec:
            lnode = spec["levels"]
            if not isinstance(lnode, dict) or not lnode:
                got = "" if isinstance(lnode, dict) else f" (got {_type_name(lnode)})"
                ck.add(
                    _line(spec, "levels"),
                    f"{fpath}.levels",
                    f"needs at least one level, as a mapping {{level_name: {{dotted.path: value}}}}{got}",
                )
            else:
                for lname, _ in lnode.items():
                    lpath = f"{fpath}.levels.{lname}"
                    if not isinstance(lname, (str, int, float)) or isinstance(lname, bool):
                        ck.add(_line(lnode, lname), lpath, "a level name must be a string")
                        continue
                    lname_s = str(lname)
                    if "," in lname_s or "=" in lname_s or not lname_s:
                        ck.add(_line(lnode, lname), lpath, "a level name may not be empty or contain ',' or '='")
                        continue
                    ov = ck.overrides(lnode, lname, lpath)
                    if ov is not None:
                        levels.append(Level(lname_s, ov))
        elif "path" in spec or "values" in spec:
            path = spec.get("path")
            values = spec.get("values")
            if not isinstance(path, str) or not PATH_RE.match(path):
                ck.add(
                    _line(spec, "path"),
                    f"{fpath}.path",
                    f"must be a dotted config path (e.g. loss.clip_high), got {plain(path)!r}",
                )
                path = None
            elif path == SEED_PATH:
                ck.add(_line(spec, "path"), f"{fpath}.path", "the seed is set by 'seeds:', not by a factor")
                path = None
            if not isinstance(values, list) or not values:
                ck.add(
                    _line(spec, "values"),
                    f"{fpath}.values",
                    f"must be a non-empty list of values, got {plain(values)!r}; e.g. values: [0.2, 0.28]",
                )
            elif path is not None:
                seen: dict[str, int] = {}
                for i, v in enumerate(values):
                    vline = _line(values, i)
                    if isinstance(v, dict):
                        ck.add(vline, f"{fpath}.values[{i}]", "a mapping value needs 'levels:' with a name")
                        continue
                    name = level_name(v)
                    if name in seen:
                        ck.add(vline, f"{fpath}.values[{i}]", f"value {name!r} is listed twice")
                        continue
                    if "," in name or "=" in name or not name:
                        ck.add(
                            vline,
                            f"{fpath}.values[{i}]",
                            f"level name {name!r} may not be empty or contain ',' or '='; use 'levels:'",
                        )
                        continue
                    seen[name] = i
                    levels.append(Level(name, {path: plain(v)}, value=plain(v)))
        else:
            ck.add(fline, fpath, "needs 'levels:' or the shorthand 'path:' + 'values:'")
        if len(ck.problems) > before:
            ok = False
        else:
            factors.append(Factor(str(fname), tuple(levels), desc, path))
    # two factors setting one path (or one path inside another) cannot both be varied
    for a, b in itertools.combinations(factors, 2):
        for pa in sorted(a.paths()):
            for pb in sorted(b.paths()):
                if pa == pb or pa.startswith(pb + ".") or pb.startswith(pa + "."):
                    ck.add(
                        _line(node, b.name),
                        f"factors.{b.name}",
                        f"sets {pb!r}, which factor {a.name!r} also sets ({pa!r}); one path can be varied "
                        "by one factor only: merge them into one factor with combined levels",
                    )
                    ok = False
    return factors if ok else None


def _resolve_level(factor: Factor, value: Any) -> str | None:
    """The level of ``factor`` that ``value`` names (a level name, or a shorthand value)."""
    names = factor.level_names()
    for candidate in (value, level_name(value)):
        if isinstance(candidate, (str, int, float)) and str(candidate) in names:
            return str(candidate)
    return None


def _parse_level_map(
    ck: _Checker, parent: Any, key: Any, path: str, factors: list[Factor], complete: bool
) -> dict[str, str] | None:
    """A mapping factor -> level (baseline, exclude entries); None when malformed."""
    node = parent[key]
    if not isinstance(node, dict) or not node:
        ck.add(_line(parent, key), path, "must be a non-empty mapping factor -> level, e.g. {loss_norm: token}")
        return None
    by_name = {f.name: f for f in factors}
    out: dict[str, str] = {}
    ok = True
    for fname, value in node.items():
        line = _line(node, fname)
        if fname not in by_name:
            ck.add(line, f"{path}.{fname}", _unknown("factor", fname, by_name))
            ok = False
            continue
        lv = _resolve_level(by_name[fname], value)
        if lv is None:
            ck.add(line, f"{path}.{fname}", _unknown(f"level of {fname!r}", plain(value), by_name[fname].level_names()))
            ok = False
            continue
        out[fname] = lv
    if complete and ok:
        missing = [f for f in by_name if f not in out]
        if missing:
            ck.add(
                _line(parent, key),
                path,
                "must give a level of every factor; missing: "
                + ", ".join(f"{f} (levels: {', '.join(by_name[f].level_names())})" for f in missing),
            )
            ok = False
    if not ok:
        return None
    return {f.name: out[f.name] for f in factors if f.name in out}  # factor order


def _parse_design(ck: _Checker, doc: LineDict) -> tuple[str, Design | None, dict[str, Any]]:
    node = doc.get("design", "full")
    line = _line(doc, "design")
    if isinstance(node, str):
        name, options, onode = node, {}, None
    elif isinstance(node, dict):
        if "name" not in node:
            ck.add(line, "design", f"a design mapping needs 'name:' ({', '.join(DESIGNS.names())})")
            return "", None, {}
        name = node["name"]
        options = {k: plain(v) for k, v in node.items() if k != "name"}
        onode = node
    else:
        ck.add(line, "design", f"must be a design name or a mapping {{name: ..., options}}, got {plain(node)!r}")
        return "", None, {}
    if not isinstance(name, str) or name not in DESIGNS:
        where = _line(onode, "name") if onode is not None else line
        ck.add(where, "design" if onode is None else "design.name", _unknown("design", name, DESIGNS.names()))
        return str(name), None, options
    design, problems = DESIGNS.get(name).from_options(options)
    for p in problems:
        key = f"design.{p.option}" if p.option else "design"
        where = _line(onode, p.option) if (onode is not None and p.option) else line
        ck.add(where, key, p.message)
    return name, design, options


def _parse_objective(ck: _Checker, doc: LineDict) -> Objective | None:
    node = doc["objective"]
    line = _line(doc, "objective")
    if not isinstance(node, dict):
        ck.add(line, "objective", "must be a mapping {metric: ..., mode: max|min, summary: ..., last_n: ...}")
        return None
    before = len(ck.problems)
    ck.keys(node, "objective", OBJECTIVE_KEYS, "objective key")
    metric = node.get("metric")
    if not isinstance(metric, str) or not metric:
        ck.add(_line(node, "metric"), "objective.metric", "must be a metric name (a string), e.g. eval/accuracy")
    mode = node.get("mode")
    if mode not in OBJECTIVE_MODES:
        msg = "is required" if mode is None else _unknown("mode", mode, OBJECTIVE_MODES)
        if mode is None:
            msg += f"; allowed: {', '.join(OBJECTIVE_MODES)}"
        ck.add(_line(node, "mode"), "objective.mode", msg)
    summary = node.get("summary", "last")
    if summary not in OBJECTIVE_SUMMARIES:
        ck.add(_line(node, "summary"), "objective.summary", _unknown("summary", summary, OBJECTIVE_SUMMARIES))
    last_n = node.get("last_n", 1)
    if not _is_int(last_n) or last_n < 1:
        ck.add(_line(node, "last_n"), "objective.last_n", f"must be an integer >= 1, got {plain(last_n)!r}")
    if len(ck.problems) > before:
        return None
    return Objective(metric, mode, summary, last_n)


def _parse_report(ck: _Checker, doc: LineDict) -> tuple[str, ...]:
    from ablate.metrics import METRICS, known_metric

    node = doc["report"]
    if not isinstance(node, dict):
        ck.add(_line(doc, "report"), "report", "must be a mapping {metrics: [metric names]}")
        return ()
    ck.keys(node, "report", REPORT_KEYS, "report key")
    metrics = node.get("metrics", [])
    if not isinstance(metrics, list):
        ck.add(_line(node, "metrics"), "report.metrics", f"must be a list of metric names, got {plain(metrics)!r}")
        return ()
    out = []
    for i, m in enumerate(metrics):
        line = _line(metrics, i) or _line(node, "metrics")
        if not isinstance(m, str) or not known_metric(m):
            ck.add(line, f"report.metrics[{i}]", _unknown("metric", plain(m), METRICS)
                   + " (docs/metrics.md lists what a trial logs)")
        elif m in out:
            ck.add(line, f"report.metrics[{i}]", f"{m!r} is listed twice")
        else:
            out.append(m)
    return tuple(out)


def _parse_primary(ck: _Checker, doc: LineDict, factors: list[Factor] | None,
                   baseline: dict[str, str] | None) -> tuple[str, ...]:
    node = doc["primary"]
    if isinstance(node, str):
        node = [node]
    if not isinstance(node, list) or not node:
        ck.add(_line(doc, "primary"), "primary", "must be a list of contrasts, each 'factor' or 'factor=level', "
                                                 "e.g. [loss_norm] or [loss_norm=token]")
        return ()
    if factors is None:
        return ()
    fmap = {f.name: f for f in factors}
    out: list[str] = []
    for i, entry in enumerate(node):
        line = _line(node, i) if isinstance(doc["primary"], list) else _line(doc, "primary")
        path = f"primary[{i}]"
        if not isinstance(entry, str):
            ck.add(line, path, f"must be 'factor' or 'factor=level', got {plain(entry)!r}")
            continue
        fname, _, level = entry.partition("=")
        if fname not in fmap:
            ck.add(line, path, _unknown("factor", fname, fmap))
            continue
        names = fmap[fname].level_names()
        base = (baseline or {}).get(fname, names[0])
        if level:
            if level not in names:
                ck.add(line, path, _unknown(f"level of {fname}", level, names))
                continue
            if level == base:
                ck.add(line, path, f"{level!r} is the baseline level of {fname}: a primary contrast compares another "
                                   f"level with it; name one of {[n for n in names if n != base]}")
                continue
        if entry in out:
            ck.add(line, path, f"{entry!r} is listed twice")
            continue
        out.append(entry)
    return tuple(out)


def _parse_tune(ck: _Checker, doc: LineDict, budgets: dict[str, dict[str, Any]] | None) -> TuneSpec | None:
    node = doc["tune"]
    line = _line(doc, "tune")
    if not isinstance(node, dict):
        ck.add(line, "tune", "must be a mapping {params: {...}, trials: n, budget: name, seeds: n}")
        return None
    before = len(ck.problems)
    ck.keys(node, "tune", TUNE_KEYS, "tune key")
    params: list[TuneParam] = []
    pnode = node.get("params")
    if not isinstance(pnode, dict) or not pnode:
        ck.add(
            _line(node, "params"),
            "tune.params",
            "must be a non-empty mapping dotted.path -> {low: ..., high: ..., log: true|false}",
        )
    else:
        for path, spec in pnode.items():
            ppath = f"tune.params.{path}"
            pline = _line(pnode, path)
            if not isinstance(path, str) or not PATH_RE.match(path) or path == SEED_PATH:
                ck.add(pline, ppath, "must be a dotted config path other than 'seed', e.g. optim.lr")
                continue
            if not isinstance(spec, dict):
                ck.add(pline, ppath, "must be a mapping {low: ..., high: ..., log: true|false}")
                continue
            ck.keys(spec, ppath, TUNE_PARAM_KEYS, "tune parameter key")
            low, high, log = spec.get("low"), spec.get("high"), spec.get("log", False)
            good = True
            for k, v in (("low", low), ("high", high)):
                if not _is_number(v):
                    ck.add(_line(spec, k), f"{ppath}.{k}", f"must be a number, got {plain(v)!r} (write 1.0e-5, not 1e-5)")
                    good = False
            if not isinstance(log, bool):
                ck.add(_line(spec, "log"), f"{ppath}.log", f"must be true or false, got {plain(log)!r}")
                good = False
            if good and not low < high:
                ck.add(pline, ppath, f"needs low < high, got low={low}, high={high}")
                good = False
            if good and log and low <= 0:
                ck.add(_line(spec, "low"), f"{ppath}.low", f"a log-scale range needs low > 0, got {low}")
                good = False
            if good:
                params.append(TuneParam(path, low, high, log))
    trials = node.get("trials")
    if not _is_int(trials) or trials < 1:
        ck.add(_line(node, "trials"), "tune.trials", f"must be an integer >= 1 (trials per arm), got {plain(trials)!r}")
    budget = node.get("budget", DEFAULT_BUDGET)
    if budgets is not None and budget not in budgets:
        ck.add(_line(node, "budget"), "tune.budget", _unknown("budget", budget, budgets))
    seeds: tuple[int, ...] | None = (0,)
    if "seeds" in node:
        seeds = ck.seeds(node, "seeds", "tune.seeds")
    if len(ck.problems) > before or seeds is None:
        return None
    return TuneSpec(tuple(params), trials, budget, seeds)


def _check_configs(
    ck: _Checker,
    doc: LineDict,
    base: dict[str, Any],
    budgets: dict[str, dict[str, Any]],
    factors: list[Factor],
    arms: list[Arm],
    tune: TuneSpec | None,
    warned: list[str] | None = None,
) -> dict[tuple[str, str], Any]:
    """Build every arm's TrialConfig at every budget; report failures where they come from.

    A failure is reported at ``base:`` when every arm fails and base alone fails, at a budget when
    every arm fails at that budget and base + budget alone fails, at a level when every arm with
    that level fails and base + level alone fails; any other failure is a combination of levels
    and is reported per arm.
    """
    def build(overrides: dict[str, Any], arm: str | None = None) -> tuple[Any, str | None]:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConfigWarning)
                cfg = TrialConfig.from_overrides(overrides)
            for w in caught:
                if issubclass(w.category, ConfigWarning) and arm is not None and warned is not None:
                    text = f"arm {arm}: {w.message}"
                    if text not in warned:
                        warned.append(text)
                elif not issubclass(w.category, ConfigWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            return cfg, None
        except (ConfigError, ValueError, TypeError) as exc:
            problems = getattr(exc, "problems", None)
            return None, "; ".join(map(str, problems)) if problems else str(exc)

    fmap = {f.name: f for f in factors}
    configs: dict[tuple[str, str], Any] = {}
    failed: dict[tuple[str, str], str] = {}
    for b, bov in budgets.items():
        for arm in arms:
            ov = {**base, **bov}
            for f in factors:
                ov.update(fmap[f.name].level(arm.levels[f.name]).overrides)
            cfg, err = build(ov, arm.name)
            if err is None:
                configs[(arm.name, b)] = cfg
            else:
                failed[(arm.name, b)] = err

    explained: set[tuple[str, str]] = set()
    if failed:
        if len(failed) == len(arms) * len(budgets):
            _, err = build(dict(base))
            if err is not None:
                ck.add(_line(doc, "base"), "base", f"invalid overrides: {_indent(err)}")
                return configs
        bnode = doc.get("budgets")
        for b, bov in budgets.items():
            if all((a.name, b) in failed for a in arms):
                _, err = build({**base, **bov})
                if err is not None:
                    line = _line(bnode, b) if isinstance(bnode, dict) else _line(doc, "budgets")
                    ck.add(line, f"budgets.{b}", f"invalid overrides: {_indent(err)}")
                    explained.update((a.name, b) for a in arms)
        fnode = doc["factors"]
        for f in factors:
            if f.path is not None:  # a bad shorthand path: one report, not one per value
                errs = {lv.name: build({**base, **lv.overrides})[1] for lv in f.levels}
                if len(set(errs.values())) == 1 and None not in errs.values():
                    keys = [(a.name, b) for a in arms for b in budgets if (a.name, b) not in explained]
                    if all(k in failed for k in keys):
                        spec = fnode[f.name]
                        ck.add(_line(spec, "path"), f"factors.{f.name}.path", f"invalid: {_indent(errs[f.levels[0].name])}")
                        explained.update(keys)
                        continue
            for lv in f.levels:
                with_level = [(a.name, b) for a in arms for b in budgets if a.levels[f.name] == lv.name]
                todo = [k for k in with_level if k not in explained]
                if not todo or not all(k in failed for k in todo):
                    continue
                _, err = build({**base, **lv.overrides})
                if err is None:
                    continue
                spec = fnode[f.name]
                if f.path is None:
                    line = _line(spec["levels"], lv.name)
                    key = f"factors.{f.name}.levels.{lv.name}"
                else:
                    i = [level_name(v) for v in spec["values"]].index(lv.name)
                    line = _line(spec["values"], i)
                    key = f"factors.{f.name}.values[{i}]"
                ck.add(line, key, f"invalid overrides: {_indent(err)}")
                explained.update(todo)
    rest = [k for k in failed if k not in explained]
    by_arm: dict[str, list[str]] = {}
    for arm_name, b in rest:
        by_arm.setdefault(arm_name, []).append(b)
    fline = _line(doc, "factors")
    for arm_name, bs in list(by_arm.items())[:MAX_ARM_PROBLEMS]:
        err = failed[(arm_name, bs[0])]
        at = "" if len(bs) == len(budgets) else f" at budget {', '.join(bs)}"
        ck.add(
            fline,
            f"arm {arm_name}",
            f"this combination of levels is invalid{at}: {_indent(err)}; change a level or add the "
            "combination to 'exclude:'",
        )
    if len(by_arm) > MAX_ARM_PROBLEMS:
        ck.add(fline, "factors", f"... and {len(by_arm) - MAX_ARM_PROBLEMS} more invalid arms")

    # arms that resolve to the same configuration would be the same trial twice
    if not failed:
        seen: dict[str, str] = {}
        for arm in arms:
            key = configs[(arm.name, DEFAULT_BUDGET)].trial_key()
            if key in seen:
                ck.add(
                    fline,
                    f"arm {arm.name}",
                    f"resolves to the same configuration as arm {seen[key]}; their levels set the same "
                    "values (a level equal to the defaults?); make the levels differ or drop one",
                )
            else:
                seen[key] = arm.name

    # tuned parameters must be valid paths with valid values at both ends of the range
    if tune is not None and arms and not failed:
        tnode = doc["tune"]["params"]
        varied = {p for f in factors for p in f.paths()}
        for param in tune.params:
            line = _line(tnode, param.path)
            if param.path in varied:
                ck.add(
                    line,
                    f"tune.params.{param.path}",
                    "is varied by a factor; tuning it per arm would erase the factor; remove one of them",
                )
                continue
            for end in (param.low, param.high):
                ov = {**base, **budgets[tune.budget], **{param.path: end}}
                _, err = build(ov)
                if err is not None:
                    ck.add(line, f"tune.params.{param.path}", f"invalid at {end}: {_indent(err)}")
                    break
    return configs


def load_study(path: str | Path) -> Study:
    """Read, validate and expand the design of a study file.

    Imports the listed plugins (and nothing else), checks every key, builds every arm's
    TrialConfig at every budget, and creates nothing on disk.

    Raises:
        StudyError: every problem found, each as ``FILE:LINE: key: problem``.
    """
    file = str(path)
    doc = read_yaml(path)
    ck = _Checker(file, doc)
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(plain(doc)).__name__}"
        ck.add(_line(doc) or 1, "study", f"the file is {what}; a study file is a mapping with keys "
               + ", ".join(REQUIRED_KEYS) + " (see `ablate validate --help`)")
        raise StudyError(file, ck.problems)
    ck.duplicates(doc, "")
    ck.keys(doc, "", list(STUDY_KEYS), "top-level key")
    for key in REQUIRED_KEYS:
        if key not in doc:
            ck.add(1, key, f"missing; add '{key}:' ({STUDY_KEYS[key]})")

    plugins = _import_plugins(ck, doc)

    name = doc.get("name")
    if "name" in doc:
        ck.name_like(doc, "name", "name", name, NAME_RE, "study name")
    description = doc.get("description")
    if description is not None and not isinstance(description, str):
        ck.add(_line(doc, "description"), "description", "must be a string")

    base: dict[str, Any] | None = {}
    if "base" in doc:
        base = ck.overrides(doc, "base", "base")

    budgets: dict[str, dict[str, Any]] | None = {DEFAULT_BUDGET: {}}
    if doc.get("budgets") is not None:
        bnode = doc["budgets"]
        if not isinstance(bnode, dict):
            ck.add(_line(doc, "budgets"), "budgets", "must be a mapping budget name -> {dotted overrides}")
            budgets = None
        else:
            for bname in bnode:
                if not ck.name_like(bnode, bname, f"budgets.{bname}", bname, NAME_RE, "budget name"):
                    budgets = None
                    continue
                ov = ck.overrides(bnode, bname, f"budgets.{bname}")
                if ov is None:
                    budgets = None
                elif budgets is not None:
                    budgets[bname] = ov

    seed_range = ck.seed_range(doc, "seeds", "seeds") if isinstance(doc.get("seeds"), dict) else None
    if seed_range is not None:
        seeds: tuple[int, ...] | None = tuple(range(seed_range.min))
    elif isinstance(doc.get("seeds"), dict):
        seeds = None
    else:
        seeds = ck.seeds(doc, "seeds", "seeds", allow_range=True) if "seeds" in doc else None
    objective = _parse_objective(ck, doc) if "objective" in doc else None
    factors = _parse_factors(ck, doc) if "factors" in doc else None
    design_name, design, design_options = _parse_design(ck, doc)

    baseline = None
    if factors is not None and doc.get("baseline") is not None:
        baseline = _parse_level_map(ck, doc, "baseline", "baseline", factors, complete=True)
    bad_baseline = doc.get("baseline") is not None and baseline is None

    exclude: list[dict[str, str]] | None = []
    if doc.get("exclude") is not None:
        enode = doc["exclude"]
        if not isinstance(enode, list):
            ck.add(_line(doc, "exclude"), "exclude", "must be a list of mappings factor -> level")
            exclude = None
        elif factors is not None:
            for i in range(len(enode)):
                entry = _parse_level_map(ck, enode, i, f"exclude[{i}]", factors, complete=False)
                if entry is None:
                    exclude = None
                elif exclude is not None:
                    exclude.append(entry)

    tune = _parse_tune(ck, doc, budgets) if doc.get("tune") is not None else None
    report_metrics = _parse_report(ck, doc) if doc.get("report") is not None else ()
    primary = _parse_primary(ck, doc, factors, baseline) if doc.get("primary") is not None else ()
    min_effect = None
    if doc.get("min_effect") is not None:
        v = doc["min_effect"]
        if _is_number(v) and v > 0 and v != float("inf"):
            min_effect = float(v)
        else:
            ck.add(_line(doc, "min_effect"), "min_effect", f"must be a number > 0 in the objective's units (e.g. "
                                                          f"0.03 for 3 points of accuracy), got {plain(v)!r}")
    if seed_range is not None and doc.get("min_effect") is None:
        ck.add(_line(doc, "seeds"), "seeds", "adaptive seeds {min, max} are re-estimated for the study's min_effect, "
               "which is missing; add 'min_effect:' (the smallest difference worth finding, in the objective's "
               "units, e.g. 0.03 for 3 points of accuracy) or give a fixed number of seeds")

    arms: list[Arm] = []
    excluded: list[Arm] = []
    aliasing = None
    if factors is not None and design is not None and not bad_baseline and exclude is not None:
        arms, excluded, aliasing = _design_arms(ck, doc, factors, design, baseline, exclude)

    config_warnings: list[str] = []
    configs: dict[tuple[str, str], TrialConfig] = {}
    if not ck.problems and arms:
        assert base is not None and budgets is not None and factors is not None
        configs = _check_configs(ck, doc, base, budgets, factors, arms, tune, config_warnings)

    if ck.problems:
        raise StudyError(file, sorted(ck.problems, key=lambda p: p.line or 0))
    assert factors is not None and design is not None and budgets is not None and base is not None
    assert seeds is not None and objective is not None
    return Study(
        path=Path(path),
        raw=plain(doc),
        name=name,
        description=description,
        plugins=plugins,
        base=base,
        factors=tuple(factors),
        design_name=design_name,
        design=design,
        design_options=design_options,
        baseline=baseline,
        exclude=tuple(exclude or ()),
        seeds=seeds,
        budgets=budgets,
        objective=objective,
        tune=tune,
        arms=tuple(arms),
        excluded=tuple(excluded),
        aliasing=aliasing,
        report_metrics=report_metrics,
        warnings=tuple(config_warnings),
        primary=primary,
        min_effect=min_effect,
        seed_range=seed_range,
        configs=configs,
    )


def _design_arms(
    ck: _Checker,
    doc: LineDict,
    factors: list[Factor],
    design: Design,
    baseline: dict[str, str] | None,
    exclude: list[dict[str, str]],
) -> tuple[list[Arm], list[Arm], AliasStructure | None]:
    """Run the design, apply the exclusions; report design problems and an excluded baseline."""
    level_names = {f.name: tuple(f.level_names()) for f in factors}
    line = _line(doc, "design") if "design" in doc else 1
    before = len(ck.problems)
    if design.needs_baseline and baseline is None:
        ck.add(line, "baseline", "the design needs a 'baseline:' giving a level of every factor; add one")
        return [], [], None
    for p in design.check(level_names, baseline):
        dnode = doc.get("design")
        where = _line(dnode, p.option) if isinstance(dnode, dict) and p.option else line
        ck.add(where, f"design.{p.option}" if p.option else "design", p.message)
    if len(ck.problems) > before:
        return [], [], None

    def is_excluded(levels: Mapping[str, str]) -> bool:
        return any(all(levels[f] == lv for f, lv in entry.items()) for entry in exclude)

    if baseline is not None and is_excluded(baseline):
        enode = doc["exclude"]
        i = next(i for i, e in enumerate(exclude) if all(baseline[f] == lv for f, lv in e.items()))
        ck.add(
            _line(enode, i),
            f"exclude[{i}]",
            f"excludes the baseline arm {Arm.name_of(baseline)}; change the baseline or this entry",
        )
        return [], [], None
    try:
        raw_arms = design.arms(level_names, baseline, allowed=lambda lv: not is_excluded(lv))
    except (ValueError, AblateError) as exc:
        ck.add(line, "design", str(exc))
        return [], [], None
    except Exception as exc:  # a plugin's design failing is reported, not a traceback
        ck.add(line, "design", f"the design failed: {type(exc).__name__}: {exc}")
        return [], [], None
    for levels in raw_arms:  # a plugin's design may return anything
        if not isinstance(levels, Mapping) or any(
            f not in levels or levels[f] not in names for f, names in level_names.items()
        ):
            ck.add(line, "design", f"the design returned an arm that is not one level of every factor: {levels!r}")
            return [], [], None
    arms, dropped, seen = [], [], set()
    for levels in raw_arms:
        ordered = {f.name: levels[f.name] for f in factors}
        arm = Arm(Arm.name_of(ordered), ordered, baseline is not None and ordered == baseline)
        if arm.name in seen:
            continue
        seen.add(arm.name)
        (dropped if is_excluded(ordered) else arms).append(arm)
    if not arms:
        ck.add(_line(doc, "exclude"), "exclude", "excludes every arm of the design; nothing would run")
    aliasing = design.aliasing(level_names)
    return arms, dropped, aliasing
