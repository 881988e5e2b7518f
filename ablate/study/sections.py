"""The sections of a study file, parsed and checked one by one: plugins, factors, design, objective,
report, primary contrasts, tuning, and the arms a design gives."""

from __future__ import annotations

import importlib
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.metrics import unknown_metric
from ablate.study.checker import (
    FACTOR_KEYS,
    FACTOR_RE,
    MODULE_RE,
    OBJECTIVE_KEYS,
    PATH_RE,
    REPORT_KEYS,
    TUNE_KEYS,
    TUNE_PARAM_KEYS,
    Checker,
    is_int,
    is_number,
    line_of,
    type_name,
)
from ablate.study.designs import DESIGNS, AliasStructure, Design
from ablate.study.model import (
    DEFAULT_BUDGET,
    OBJECTIVE_MODES,
    OBJECTIVE_SUMMARIES,
    SEED_PATH,
    Arm,
    Factor,
    Level,
    Objective,
    TuneParam,
    TuneSpec,
    level_name,
    unknown_choice,
)
from ablate.yamlio import LineDict, plain


def import_plugins(ck: Checker, doc: LineDict) -> tuple[str, ...]:
    if "plugins" not in doc or doc["plugins"] is None:
        return ()
    node = doc["plugins"]
    if not isinstance(node, list):
        ck.add(line_of(doc, "plugins"), "plugins", f"must be a list of module names, got {plain(node)!r}")
        return ()
    names: list[str] = []
    for i, mod in enumerate(node):
        line = line_of(node, i)
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


def _parse_named_levels(ck: Checker, spec: LineDict, fpath: str) -> list[Level]:
    """The levels of a factor written as ``levels: {name: {overrides}}``."""
    lnode = spec["levels"]
    if not isinstance(lnode, dict) or not lnode:
        got = "" if isinstance(lnode, dict) else f" (got {type_name(lnode)})"
        ck.add(line_of(spec, "levels"), f"{fpath}.levels",
               f"needs at least one level, as a mapping {{level_name: {{dotted.path: value}}}}{got}")
        return []
    levels = []
    for lname, _ in lnode.items():
        lpath = f"{fpath}.levels.{lname}"
        if not isinstance(lname, (str, int, float)) or isinstance(lname, bool):
            ck.add(line_of(lnode, lname), lpath, "a level name must be a string")
            continue
        lname_s = str(lname)
        if "," in lname_s or "=" in lname_s or not lname_s:
            ck.add(line_of(lnode, lname), lpath, "a level name may not be empty or contain ',' or '='")
            continue
        ov = ck.overrides(lnode, lname, lpath)
        if ov is not None:
            levels.append(Level(lname_s, ov))
    return levels


def _parse_shorthand(ck: Checker, spec: LineDict, fpath: str) -> tuple[str | None, list[Level]]:
    """The path and levels of a factor written as the shorthand ``{path: dotted.path, values: [...]}``."""
    path = spec.get("path")
    values = spec.get("values")
    if not isinstance(path, str) or not PATH_RE.match(path):
        ck.add(line_of(spec, "path"), f"{fpath}.path",
               f"must be a dotted config path (e.g. loss.clip_high), got {plain(path)!r}")
        path = None
    elif path == SEED_PATH:
        ck.add(line_of(spec, "path"), f"{fpath}.path", "the seed is set by 'seeds:', not by a factor")
        path = None
    if not isinstance(values, list) or not values:
        ck.add(line_of(spec, "values"), f"{fpath}.values",
               f"must be a non-empty list of values, got {plain(values)!r}; e.g. values: [0.2, 0.28]")
        return path, []
    if path is None:
        return path, []
    levels, seen = [], set()
    for i, v in enumerate(values):
        vline, vpath = line_of(values, i), f"{fpath}.values[{i}]"
        if isinstance(v, dict):
            ck.add(vline, vpath, "a mapping value needs 'levels:' with a name")
            continue
        name = level_name(v)
        if name in seen:
            ck.add(vline, vpath, f"value {name!r} is listed twice")
            continue
        if "," in name or "=" in name or not name:
            ck.add(vline, vpath, f"level name {name!r} may not be empty or contain ',' or '='; use 'levels:'")
            continue
        seen.add(name)
        levels.append(Level(name, {path: plain(v)}, value=plain(v)))
    return path, levels


def _parse_factor(ck: Checker, node: LineDict, fname: str, spec: object) -> Factor | None:
    """One entry of ``factors:``; None (with its problems added) when it is invalid."""
    fpath = f"factors.{fname}"
    fline = line_of(node, fname)
    if not ck.name_like(node, fname, fpath, fname, FACTOR_RE, "factor name"):
        return None
    if not isinstance(spec, dict):
        ck.add(fline, fpath, "must be a mapping with 'levels:' or with 'path:' and 'values:'")
        return None
    before = len(ck.problems)
    ck.keys(spec, fpath, FACTOR_KEYS, "factor key")
    desc = spec.get("description")
    if desc is not None and not isinstance(desc, str):
        ck.add(line_of(spec, "description"), f"{fpath}.description", "must be a string")
    levels: list[Level] = []
    path: str | None = None
    if "levels" in spec and ("path" in spec or "values" in spec):
        ck.add(line_of(spec, "levels"), fpath, "give either 'levels:' or the shorthand 'path:' + 'values:', not both")
    elif "levels" in spec:
        levels = _parse_named_levels(ck, spec, fpath)
    elif "path" in spec or "values" in spec:
        path, levels = _parse_shorthand(ck, spec, fpath)
    else:
        ck.add(fline, fpath, "needs 'levels:' or the shorthand 'path:' + 'values:'")
    if len(ck.problems) > before:
        return None
    return Factor(str(fname), tuple(levels), desc, path)


def parse_factors(ck: Checker, doc: LineDict) -> tuple[list[Factor] | None, list[Factor]]:
    """``factors:``: every factor checked; (the factors, None when any is invalid or two set one path;
    the factors that parsed, whose levels' keys can be checked even then)."""
    node = doc["factors"]
    if not isinstance(node, dict) or not node:
        ck.add(line_of(doc, "factors"), "factors",
               "must be a non-empty mapping factor -> {levels: {name: {overrides}}} or {path: ..., values: [...]}")
        return None, []
    parsed = [_parse_factor(ck, node, fname, spec) for fname, spec in node.items()]
    factors = [f for f in parsed if f is not None]
    ok = len(factors) == len(parsed)
    # two factors setting one path (or one path inside another) cannot both be varied
    for a, b in itertools.combinations(factors, 2):
        for pa in sorted(a.paths()):
            for pb in sorted(b.paths()):
                if pa == pb or pa.startswith(pb + ".") or pb.startswith(pa + "."):
                    ck.add(line_of(node, b.name), f"factors.{b.name}",
                           f"sets {pb!r}, which factor {a.name!r} also sets ({pa!r}); one path can be varied "
                           "by one factor only: merge them into one factor with combined levels")
                    ok = False
    return (factors if ok else None), factors


def _resolve_level(factor: Factor, value: Any) -> str | None:
    """The level of ``factor`` that ``value`` names (a level name, or a shorthand value)."""
    names = factor.level_names()
    for candidate in (value, level_name(value)):
        if isinstance(candidate, (str, int, float)) and str(candidate) in names:
            return str(candidate)
    return None


def parse_level_map(
    ck: Checker, parent: Any, key: Any, path: str, factors: list[Factor], complete: bool
) -> dict[str, str] | None:
    """A mapping factor -> level (baseline, exclude entries); None when malformed."""
    node = parent[key]
    if not isinstance(node, dict) or not node:
        ck.add(line_of(parent, key), path, "must be a non-empty mapping factor -> level, e.g. {loss_norm: token}")
        return None
    by_name = {f.name: f for f in factors}
    out: dict[str, str] = {}
    ok = True
    for fname, value in node.items():
        line = line_of(node, fname)
        if fname not in by_name:
            ck.add(line, f"{path}.{fname}", unknown_choice("factor", fname, by_name))
            ok = False
            continue
        lv = _resolve_level(by_name[fname], value)
        if lv is None:
            names = by_name[fname].level_names()
            ck.add(line, f"{path}.{fname}", unknown_choice(f"level of {fname!r}", plain(value), names))
            ok = False
            continue
        out[fname] = lv
    if complete and ok:
        missing = [f for f in by_name if f not in out]
        if missing:
            ck.add(
                line_of(parent, key),
                path,
                "must give a level of every factor; missing: "
                + ", ".join(f"{f} (levels: {', '.join(by_name[f].level_names())})" for f in missing),
            )
            ok = False
    if not ok:
        return None
    return {f.name: out[f.name] for f in factors if f.name in out}  # factor order


def parse_design(ck: Checker, doc: LineDict) -> tuple[str, Design | None, dict[str, Any]]:
    node = doc.get("design", "full")
    line = line_of(doc, "design")
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
        where = line_of(onode, "name") if onode is not None else line
        ck.add(where, "design" if onode is None else "design.name", unknown_choice("design", name, DESIGNS.names()))
        return str(name), None, options
    design, problems = DESIGNS.get(name).from_options(options)
    for p in problems:
        key = f"design.{p.option}" if p.option else "design"
        where = line_of(onode, p.option) if (onode is not None and p.option) else line
        ck.add(where, key, p.message)
    return name, design, options


def reward_components() -> list[str]:
    """The reward component names a configuration may give (the built-in ones and those the study's
    plugins registered, which are imported first): each is logged as ``reward/<name>``."""
    from ablate.registry import known_names

    return known_names("reward component") or []


def parse_objective(ck: Checker, doc: LineDict) -> Objective | None:
    """``objective:``: its keys, and its metric one a trial logs (:func:`ablate.metrics.unknown_metric`)."""
    node = doc["objective"]
    line = line_of(doc, "objective")
    if not isinstance(node, dict):
        ck.add(line, "objective", "must be a mapping {metric: ..., mode: max|min, summary: ..., last_n: ...}")
        return None
    before = len(ck.problems)
    ck.keys(node, "objective", OBJECTIVE_KEYS, "objective key")
    metric = node.get("metric")
    if not isinstance(metric, str) or not metric:
        ck.add(line_of(node, "metric"), "objective.metric", "must be a metric name (a string), e.g. eval/accuracy")
    else:
        problem = unknown_metric(metric, reward_components())
        if problem is not None:
            ck.add(line_of(node, "metric"), "objective.metric", problem)
    mode = node.get("mode")
    if mode not in OBJECTIVE_MODES:
        msg = "is required" if mode is None else unknown_choice("mode", mode, OBJECTIVE_MODES)
        if mode is None:
            msg += f"; allowed: {', '.join(OBJECTIVE_MODES)}"
        ck.add(line_of(node, "mode"), "objective.mode", msg)
    summary = node.get("summary", "last")
    if summary not in OBJECTIVE_SUMMARIES:
        ck.add(line_of(node, "summary"), "objective.summary", unknown_choice("summary", summary, OBJECTIVE_SUMMARIES))
    last_n = node.get("last_n", 1)
    if not is_int(last_n) or last_n < 1:
        ck.add(line_of(node, "last_n"), "objective.last_n", f"must be an integer >= 1, got {plain(last_n)!r}")
    if len(ck.problems) > before:
        return None
    return Objective(metric, mode, summary, last_n)


def parse_report(ck: Checker, doc: LineDict) -> tuple[str, ...]:
    node = doc["report"]
    if not isinstance(node, dict):
        ck.add(line_of(doc, "report"), "report", "must be a mapping {metrics: [metric names]}")
        return ()
    ck.keys(node, "report", REPORT_KEYS, "report key")
    metrics = node.get("metrics", [])
    if not isinstance(metrics, list):
        ck.add(line_of(node, "metrics"), "report.metrics", f"must be a list of metric names, got {plain(metrics)!r}")
        return ()
    out = []
    components = reward_components()
    for i, m in enumerate(metrics):
        line = line_of(metrics, i) or line_of(node, "metrics")
        problem = unknown_metric(plain(m), components)
        if problem is not None:
            ck.add(line, f"report.metrics[{i}]", problem)
        elif m in out:
            ck.add(line, f"report.metrics[{i}]", f"{m!r} is listed twice")
        else:
            out.append(m)
    return tuple(out)


def parse_primary(ck: Checker, doc: LineDict, factors: list[Factor] | None,
                   baseline: dict[str, str] | None) -> tuple[str, ...]:
    node = doc["primary"]
    if isinstance(node, str):
        node = [node]
    if not isinstance(node, list) or not node:
        ck.add(line_of(doc, "primary"), "primary", "must be a list of contrasts, each 'factor' or 'factor=level', "
                                                 "e.g. [loss_norm] or [loss_norm=token]")
        return ()
    if factors is None:
        return ()
    fmap = {f.name: f for f in factors}
    out: list[str] = []
    for i, entry in enumerate(node):
        line = line_of(node, i) if isinstance(doc["primary"], list) else line_of(doc, "primary")
        path = f"primary[{i}]"
        if not isinstance(entry, str):
            ck.add(line, path, f"must be 'factor' or 'factor=level', got {plain(entry)!r}")
            continue
        fname, _, level = entry.partition("=")
        if fname not in fmap:
            ck.add(line, path, unknown_choice("factor", fname, fmap))
            continue
        names = fmap[fname].level_names()
        base = (baseline or {}).get(fname, names[0])
        if level:
            if level not in names:
                ck.add(line, path, unknown_choice(f"level of {fname}", level, names))
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


def parse_contexts(ck: Checker, doc: LineDict, factors: list[Factor] | None,
                    primary: tuple[str, ...]) -> tuple[str, ...]:
    """``contexts:``: the factors the study replicates its comparisons over (task, model, model size ...)
    rather than compares. Each must be a factor and not primary; at least one factor stays compared, and the
    contexts give at least two combinations. (A context cannot change a compared option: no two factors
    may set one dotted path, which the factors' own check refuses.)"""
    node = doc["contexts"]
    line = line_of(doc, "contexts")
    names = [node] if isinstance(node, str) else node
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        ck.add(line, "contexts", "must be a list of factor names the study replicates over rather than compares, "
                                 f"e.g. [task, model]; got {plain(node)!r}")
        return ()
    if factors is None:
        return ()
    fmap = {f.name: f for f in factors}
    out: list[str] = []
    for i, name in enumerate(names):
        where = line_of(node, i) if isinstance(node, list) else line
        path = f"contexts[{i}]"
        if name not in fmap:
            ck.add(where, path, unknown_choice("factor", name, fmap) + "; a context is one of the study's factors")
        elif any(p.partition("=")[0] == name for p in primary):
            ck.add(where, path, f"{name!r} is also in 'primary:': a context is replicated over, not compared; remove "
                                f"it from one of them")
        elif name in out:
            ck.add(where, path, f"{name!r} is listed twice")
        else:
            out.append(name)
    if len(out) < len(names):
        return ()
    compared = [f for f in factors if f.name not in out]
    if not compared:
        ck.add(line, "contexts", "names every factor: keep at least one factor to compare (the others are contexts)")
        return ()
    combos = 1
    for name in out:
        combos *= len(fmap[name].levels)
    if combos < 2:
        ck.add(line, "contexts", f"{', '.join(out)} give{'s' if len(out) == 1 else ''} one context: a verdict across "
                                 "contexts needs at least two; add levels to a context factor, or drop 'contexts:'")
    return tuple(out)


def parse_tune(ck: Checker, doc: LineDict, budgets: dict[str, dict[str, Any]] | None) -> TuneSpec | None:
    node = doc["tune"]
    line = line_of(doc, "tune")
    if not isinstance(node, dict):
        ck.add(line, "tune", "must be a mapping {params: {...}, trials: n, budget: name, seeds: n}")
        return None
    before = len(ck.problems)
    ck.keys(node, "tune", TUNE_KEYS, "tune key")
    params: list[TuneParam] = []
    pnode = node.get("params")
    if not isinstance(pnode, dict) or not pnode:
        ck.add(
            line_of(node, "params"),
            "tune.params",
            "must be a non-empty mapping dotted.path -> {low: ..., high: ..., log: true|false}",
        )
    else:
        for path, spec in pnode.items():
            ppath = f"tune.params.{path}"
            pline = line_of(pnode, path)
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
                if not is_number(v):
                    ck.add(line_of(spec, k), f"{ppath}.{k}", f"must be a number, got {plain(v)!r} (write 1.0e-5, not 1e-5)")
                    good = False
            if not isinstance(log, bool):
                ck.add(line_of(spec, "log"), f"{ppath}.log", f"must be true or false, got {plain(log)!r}")
                good = False
            if good and not low < high:
                ck.add(pline, ppath, f"needs low < high, got low={low}, high={high}")
                good = False
            if good and log and low <= 0:
                ck.add(line_of(spec, "low"), f"{ppath}.low", f"a log-scale range needs low > 0, got {low}")
                good = False
            if good:
                params.append(TuneParam(path, low, high, log))
    trials = node.get("trials")
    if not is_int(trials) or trials < 1:
        ck.add(line_of(node, "trials"), "tune.trials", f"must be an integer >= 1 (trials per arm), got {plain(trials)!r}")
    budget = node.get("budget", DEFAULT_BUDGET)
    if budgets is not None and budget not in budgets:
        ck.add(line_of(node, "budget"), "tune.budget", unknown_choice("budget", budget, budgets))
    seeds: tuple[int, ...] | None = (0,)
    if "seeds" in node:
        seeds = ck.seeds(node, "seeds", "tune.seeds")
    if len(ck.problems) > before or seeds is None:
        return None
    return TuneSpec(tuple(params), trials, budget, seeds)


def _first_context(factors: list[Factor], contexts: tuple[str, ...],
                   baseline: dict[str, str] | None) -> dict[str, str]:
    """The context of the baseline arm: the baseline's levels of the context factors, else their first."""
    if baseline is None:
        return {f.name: f.level_names()[0] for f in factors if f.name in contexts}
    return {f: lv for f, lv in baseline.items() if f in contexts}


def design_arms(
    ck: Checker,
    doc: LineDict,
    factors: list[Factor],
    design: Design,
    baseline: dict[str, str] | None,
    exclude: list[dict[str, str]],
    contexts: tuple[str, ...] = (),
) -> tuple[list[Arm], list[Arm], AliasStructure | None]:
    """Run the design over the compared factors, cross every arm it gives with every combination of the
    ``contexts`` factors' levels (every compared arm in every context), apply the exclusions; report
    design problems and an excluded baseline."""
    context_levels = [[(f.name, lv) for lv in f.level_names()] for f in factors if f.name in contexts]
    compared = [f for f in factors if f.name not in contexts]
    full_baseline = baseline
    if baseline is not None and contexts:
        baseline = {f: lv for f, lv in baseline.items() if f not in contexts}
    level_names = {f.name: tuple(f.level_names()) for f in compared}
    line = line_of(doc, "design") if "design" in doc else 1
    before = len(ck.problems)
    if design.needs_baseline and baseline is None:
        ck.add(line, "baseline", "the design needs a 'baseline:' giving a level of every factor; add one")
        return [], [], None
    for p in design.check(level_names, baseline):
        dnode = doc.get("design")
        where = line_of(dnode, p.option) if isinstance(dnode, dict) and p.option else line
        ck.add(where, f"design.{p.option}" if p.option else "design", p.message)
    if len(ck.problems) > before:
        return [], [], None

    def is_excluded(levels: Mapping[str, str]) -> bool:
        return any(all(levels[f] == lv for f, lv in entry.items()) for entry in exclude)

    if baseline is not None and contexts:  # the baseline arm: the compared baseline in the first context
        baseline = {**baseline, **_first_context(factors, contexts, full_baseline)}
    if baseline is not None and is_excluded(baseline):
        enode = doc["exclude"]
        i = next(i for i, e in enumerate(exclude) if all(baseline.get(f) == lv for f, lv in e.items()))
        ck.add(
            line_of(enode, i),
            f"exclude[{i}]",
            f"excludes the baseline arm {Arm.name_of(baseline)}; change the baseline or this entry",
        )
        return [], [], None
    try:
        if contexts:  # the design over the compared factors, then every context
            inner = {f: lv for f, lv in baseline.items() if f not in contexts} if baseline is not None else None
            raw_arms = [{**arm, **dict(ctx)} for arm in design.arms(level_names, inner, allowed=lambda lv: True)
                        for ctx in itertools.product(*context_levels)]
        else:
            raw_arms = design.arms(level_names, baseline, allowed=lambda lv: not is_excluded(lv))
    except (ValueError, AblateError) as exc:
        ck.add(line, "design", str(exc))
        return [], [], None
    except Exception as exc:  # a plugin's design failing is reported, not a traceback
        ck.add(line, "design", f"the design failed: {type(exc).__name__}: {exc}")
        return [], [], None
    every = {f.name: tuple(f.level_names()) for f in factors}
    for levels in raw_arms:  # a plugin's design may return anything
        if not isinstance(levels, Mapping) or any(
            f not in levels or levels[f] not in names for f, names in every.items()
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
        ck.add(line_of(doc, "exclude"), "exclude", "excludes every arm of the design; nothing would run")
    aliasing = design.aliasing(level_names)
    return arms, dropped, aliasing
