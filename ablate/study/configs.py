"""Every arm's TrialConfig at every budget, built when a study file is loaded; a failure reported where
it comes from (``base:``, a budget, a level, or a combination of levels)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from ablate.config import ConfigWarning, TrialConfig
from ablate.errors import ConfigError
from ablate.study.checker import MAX_ARM_PROBLEMS, Checker, indented, line_of
from ablate.study.model import DEFAULT_BUDGET, Arm, Factor, TuneSpec, layer_overrides, level_name
from ablate.yamlio import LineDict

#: An (arm name, budget name) pair.
ArmBudget = tuple[str, str]


@dataclass
class _Builder:
    """Builds TrialConfigs from overrides; collects each arm's configuration warnings once."""

    warned: list[tuple[str, str | None, str]] | None = None

    def __call__(self, overrides: dict[str, Any], arm: str | None = None) -> tuple[TrialConfig | None, str | None]:
        """``(config, None)``, or ``(None, the error in words)``."""
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConfigWarning)
                cfg = TrialConfig.from_overrides(overrides)
            for w in caught:
                if issubclass(w.category, ConfigWarning) and arm is not None and self.warned is not None:
                    entry = (arm, getattr(w.message, "rule", None), str(w.message))
                    if entry not in self.warned:
                        self.warned.append(entry)
                elif not issubclass(w.category, ConfigWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            return cfg, None
        except (ConfigError, ValueError, TypeError) as exc:
            problems = getattr(exc, "problems", None)
            return None, "; ".join(map(str, problems)) if problems else str(exc)

    def own_problems(self, key: str, value: Any) -> list[str]:
        """The problems of ``key`` set to ``value`` alone (on the defaults) that concern that key itself: an
        unknown path or a value its field refuses, not a rule between several keys; their messages."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConfigWarning)  # one key on the defaults: its warnings are no news
                TrialConfig.from_overrides({key: value})
        except (ConfigError, ValueError, TypeError) as exc:
            return [p.message for p in getattr(exc, "problems", None) or ()
                    if p.path == key and not getattr(p, "rule", False)]
        return []


@dataclass
class _Context:
    """What the checks below share: the file, its parsed sections, and the builder."""

    ck: Checker
    doc: LineDict
    base: dict[str, Any]
    budgets: dict[str, dict[str, Any]]
    factors: list[Factor]
    arms: list[Arm]
    build: _Builder
    failed: dict[ArmBudget, str] = field(default_factory=dict)
    explained: set[ArmBudget] = field(default_factory=set)
    contexts: tuple[str, ...] = ()  # context factors: their levels sit below the budget (layer_overrides)
    bad: set[tuple[str, str]] = field(default_factory=set)  # (where, key): reported at the key's own line

    def base_ov(self) -> dict[str, Any]:
        """``base:`` without the keys already reported."""
        return {k: v for k, v in self.base.items() if ("base", k) not in self.bad}

    def budget_ov(self, b: str) -> dict[str, Any]:
        """Budget ``b``'s overrides without the keys already reported."""
        return {k: v for k, v in self.budgets[b].items() if (f"budgets.{b}", k) not in self.bad}

    def level_ov(self, f: Factor, lv: Any) -> dict[str, Any]:
        """Level ``lv`` of factor ``f``'s overrides without the keys already reported."""
        where = f"factors.{f.name}.levels.{lv.name}"
        return {k: v for k, v in lv.overrides.items() if (where, k) not in self.bad}


def check_keys(ck: Checker, doc: LineDict, base: dict[str, Any] | None, budgets: dict[str, dict[str, Any]],
               factors: list[Factor]) -> set[tuple[str, str]]:
    """Every override key of ``base:``, of each budget and of each level, checked on its own: an unknown path or
    a value its field refuses (never a rule between keys, which depends on the others) is reported at the key's
    own line, once. Needs no arm, so that it runs beside the study-level checks (a baseline that names no
    level, an unknown metric) and one pass reports both; :func:`check_configs` then leaves these keys out of
    the builds that follow, and reports what only a combination of keys gets wrong.

    Args:
        base, budgets, factors: what parsed of ``base:``, ``budgets:`` and ``factors:`` (those that parsed,
            when some did not).

    Returns:
        The keys reported, as (where, key): ``("base", "task.name")``, ``("factors.clip.levels.high",
        "loss.clip_hihg")``.
    """
    build = _Builder()
    bad: set[tuple[str, str]] = set()
    bnode = doc.get("budgets") if isinstance(doc.get("budgets"), dict) else {}
    sources: list[tuple[str, Any, dict[str, Any]]] = [("base", doc.get("base"), base)] if base else []
    sources += [(f"budgets.{b}", bnode.get(b), bov) for b, bov in budgets.items() if b in bnode]
    for f in factors:
        if f.path is None:
            levels = doc["factors"][f.name]["levels"]
            sources += [(f"factors.{f.name}.levels.{lv.name}", levels.get(lv.name), lv.overrides) for lv in f.levels]
        else:
            bad |= _check_shorthand(ck, doc, build, f)
    for where, node, overrides in sources:
        for key, value in overrides.items():
            own = build.own_problems(key, value)
            if not own:
                continue
            line = line_of(node, key) if isinstance(node, dict) else None
            ck.add(line or line_of(doc, where.split(".")[0]), f"{where}.{key}", indented("; ".join(own)))
            bad.add((where, key))
    return bad


def _check_shorthand(ck: Checker, doc: LineDict, build: _Builder, f: Factor) -> set[tuple[str, str]]:
    """A shorthand factor's values checked on their own: a problem every value shares (an unknown path) once at
    ``path:``, else each value's at its own line; the (where, key) of each level reported."""
    assert f.path is not None
    spec = doc["factors"][f.name]
    own = {lv.name: build.own_problems(f.path, lv.value) for lv in f.levels}
    if not any(own.values()):
        return set()
    if all(own.values()) and len({tuple(m) for m in own.values()}) == 1:
        ck.add(line_of(spec, "path"), f"factors.{f.name}.path",
               f"invalid: {f.path}: {indented('; '.join(own[f.levels[0].name]))}")
    else:
        names = [level_name(v) for v in spec["values"]]
        for lv in f.levels:
            if own[lv.name]:
                i = names.index(lv.name)
                ck.add(line_of(spec["values"], i), f"factors.{f.name}.values[{i}]",
                       f"invalid overrides: {f.path}: {indented('; '.join(own[lv.name]))}")
    return {(f"factors.{f.name}.levels.{name}", f.path) for name, problems in own.items() if problems}


def _build_all(cx: _Context) -> dict[ArmBudget, TrialConfig]:
    """Every arm's configuration at every budget; the failures go to ``cx.failed``."""
    fmap = {f.name: f for f in cx.factors}
    configs: dict[ArmBudget, TrialConfig] = {}
    for b in cx.budgets:
        for arm in cx.arms:
            levels = [(f.name, cx.level_ov(fmap[f.name], fmap[f.name].level(arm.levels[f.name]))) for f in cx.factors]
            ov = layer_overrides(cx.base_ov(), cx.budget_ov(b), levels, cx.contexts)
            cfg, err = cx.build(ov, arm.name)
            if cfg is not None:
                configs[(arm.name, b)] = cfg
            else:
                cx.failed[(arm.name, b)] = err or ""
    return configs


def _explain_base_and_budgets(cx: _Context) -> bool:
    """Report failures that ``base:`` or a budget alone explain; False when base alone is invalid
    (nothing else is reported then)."""
    ck, doc, base = cx.ck, cx.doc, cx.base_ov()
    if len(cx.failed) == len(cx.arms) * len(cx.budgets):
        _, err = cx.build(dict(base))
        if err is not None:
            ck.add(line_of(doc, "base"), "base", f"invalid overrides: {indented(err)}")
            return False
    bnode = doc.get("budgets")
    for b in cx.budgets:
        if all((a.name, b) in cx.failed for a in cx.arms):
            _, err = cx.build({**base, **cx.budget_ov(b)})
            if err is not None:
                line = line_of(bnode, b) if isinstance(bnode, dict) else line_of(doc, "budgets")
                ck.add(line, f"budgets.{b}", f"invalid overrides: {indented(err)}")
                cx.explained.update((a.name, b) for a in cx.arms)
    return True


def _explain_shorthand_path(cx: _Context, f: Factor) -> bool:
    """Report a bad shorthand path once (not once per value); True when it explains the failures (or
    :func:`check_keys` reported it already)."""
    if any((f"factors.{f.name}.levels.{lv.name}", f.path) in cx.bad for lv in f.levels):
        return True
    errs = {lv.name: cx.build({**cx.base_ov(), **lv.overrides})[1] for lv in f.levels}
    if len(set(errs.values())) != 1 or None in errs.values():
        return False
    keys = [(a.name, b) for a in cx.arms for b in cx.budgets if (a.name, b) not in cx.explained]
    if not all(k in cx.failed for k in keys):
        return False
    spec = cx.doc["factors"][f.name]
    cx.ck.add(line_of(spec, "path"), f"factors.{f.name}.path", f"invalid: {indented(errs[f.levels[0].name])}")
    cx.explained.update(keys)
    return True


def _explain_levels(cx: _Context) -> None:
    """Report failures that one level alone explains (every arm with it fails, and so does base + it)."""
    for f in cx.factors:
        if f.path is not None and _explain_shorthand_path(cx, f):
            continue
        for lv in f.levels:
            with_level = [(a.name, b) for a in cx.arms for b in cx.budgets if a.levels[f.name] == lv.name]
            todo = [k for k in with_level if k not in cx.explained]
            if not todo or not all(k in cx.failed for k in todo):
                continue
            _, err = cx.build({**cx.base_ov(), **cx.level_ov(f, lv)})
            if err is None:
                continue
            spec = cx.doc["factors"][f.name]
            if f.path is None:
                line, key = line_of(spec["levels"], lv.name), f"factors.{f.name}.levels.{lv.name}"
            else:
                i = [level_name(v) for v in spec["values"]].index(lv.name)
                line, key = line_of(spec["values"], i), f"factors.{f.name}.values[{i}]"
            cx.ck.add(line, key, f"invalid overrides: {indented(err)}")
            cx.explained.update(todo)


def _report_arms(cx: _Context) -> None:
    """Report the failures nothing else explains: combinations of levels, one problem per arm."""
    by_arm: dict[str, list[str]] = {}
    for arm_name, b in (k for k in cx.failed if k not in cx.explained):
        by_arm.setdefault(arm_name, []).append(b)
    fline = line_of(cx.doc, "factors")
    for arm_name, bs in list(by_arm.items())[:MAX_ARM_PROBLEMS]:
        err = cx.failed[(arm_name, bs[0])]
        at = "" if len(bs) == len(cx.budgets) else f" at budget {', '.join(bs)}"
        cx.ck.add(fline, f"arm {arm_name}", f"this combination of levels is invalid{at}: {indented(err)}; change a "
                  "level or add the combination to 'exclude:'")
    if len(by_arm) > MAX_ARM_PROBLEMS:
        cx.ck.add(fline, "factors", f"... and {len(by_arm) - MAX_ARM_PROBLEMS} more invalid arms")


def _check_distinct_arms(cx: _Context, configs: dict[ArmBudget, TrialConfig]) -> None:
    """Arms that resolve to the same configuration would be the same trial twice."""
    seen: dict[str, str] = {}
    for arm in cx.arms:
        key = configs[(arm.name, DEFAULT_BUDGET)].trial_key()
        if key in seen:
            cx.ck.add(line_of(cx.doc, "factors"), f"arm {arm.name}",
                      f"resolves to the same configuration as arm {seen[key]}; their levels set the same values "
                      "(a level equal to the defaults?); make the levels differ or drop one")
        else:
            seen[key] = arm.name


def _check_tuned_params(cx: _Context, tune: TuneSpec) -> None:
    """Tuned parameters must be valid paths with valid values at both ends of the range, and no factor's."""
    tnode = cx.doc["tune"]["params"]
    varied = {p for f in cx.factors for p in f.paths()}
    for param in tune.params:
        line = line_of(tnode, param.path)
        if param.path in varied:
            cx.ck.add(line, f"tune.params.{param.path}",
                      "is varied by a factor; tuning it per arm would erase the factor; remove one of them")
            continue
        for end in (param.low, param.high):
            _, err = cx.build({**cx.base, **cx.budgets[tune.budget], **{param.path: end}})
            if err is not None:
                cx.ck.add(line, f"tune.params.{param.path}", f"invalid at {end}: {indented(err)}")
                break


def check_configs(
    ck: Checker,
    doc: LineDict,
    base: dict[str, Any],
    budgets: dict[str, dict[str, Any]],
    factors: list[Factor],
    arms: list[Arm],
    tune: TuneSpec | None,
    warned: list[tuple[str, str | None, str]] | None = None,
    bad: set[tuple[str, str]] | None = None,
    contexts: tuple[str, ...] = (),
) -> dict[ArmBudget, TrialConfig]:
    """Build every arm's TrialConfig at every budget; report failures where they come from.

    ``bad``: the keys :func:`check_keys` reported, left out of every build (checked here when not given).
    ``contexts``: the context factors, whose levels sit below the budget (:func:`~ablate.study.model.layer_overrides`).

    A failure is reported at ``base:`` when every arm fails and base alone fails, at a budget when
    every arm fails at that budget and base + budget alone fails, at a level when every arm with
    that level fails and base + level alone fails; any other failure is a combination of levels
    and is reported per arm. ``warned`` collects each arm's configuration warnings once, as (arm, rule, message).

    Returns:
        (arm name, budget name) -> its configuration (the arms that built).
    """
    cx = _Context(ck, doc, base, budgets, factors, arms, _Builder(warned), contexts=contexts)
    cx.bad = check_keys(ck, doc, base, budgets, factors) if bad is None else set(bad)
    configs = _build_all(cx)
    if cx.failed:
        if not _explain_base_and_budgets(cx):
            return configs
        _explain_levels(cx)
    _report_arms(cx)
    if not cx.failed and not cx.bad:
        _check_distinct_arms(cx, configs)
    if tune is not None and arms and not cx.failed and not cx.bad:
        _check_tuned_params(cx, tune)
    return configs
