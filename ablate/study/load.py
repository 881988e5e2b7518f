"""Loading a study file: read, check every section, build every arm's configuration, return the Study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.config import TrialConfig
from ablate.study.checker import (
    NAME_RE,
    REQUIRED_KEYS,
    STUDY_KEYS,
    Checker,
    StudyError,
    is_int,
    is_number,
    line_of,
    read_yaml,
)
from ablate.study.configs import check_configs, check_keys
from ablate.study.model import DEFAULT_BUDGET, Arm, EntryRule, Factor, SeedRange, Study, unknown_choice
from ablate.study.sections import (
    design_arms,
    import_plugins,
    parse_contexts,
    parse_design,
    parse_factors,
    parse_level_map,
    parse_objective,
    parse_primary,
    parse_report,
    parse_tune,
)
from ablate.yamlio import LineDict, plain


def _read_document(file: str, path: str | Path) -> tuple[LineDict, Checker]:
    """The file as a mapping, with its top-level keys checked; raises at once when it is no mapping."""
    doc = read_yaml(path)
    ck = Checker(file, doc)
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(plain(doc)).__name__}"
        ck.add(line_of(doc) or 1, "study", f"the file is {what}; a study file is a mapping with keys "
               + ", ".join(REQUIRED_KEYS) + " (see `ablate validate --help`)")
        raise StudyError(file, ck.problems)
    ck.duplicates(doc, "")
    ck.keys(doc, "", list(STUDY_KEYS), "top-level key")
    for key in REQUIRED_KEYS:
        if key not in doc:
            ck.add(1, key, f"missing; add '{key}:' ({STUDY_KEYS[key]})")
    return doc, ck


#: The one key of a budget that is not a dotted override: how many of the study's seeds it runs.
BUDGET_SEEDS_KEY = "seeds"


def _parse_budgets(ck: Checker, doc: LineDict) -> tuple[dict[str, dict[str, Any]], bool, dict[str, int]]:
    """``budgets:`` with ``default`` always present: the budgets that parsed, whether every one did, and the
    budgets that run only the study's first n seeds (``seeds: n`` in the budget)."""
    budgets: dict[str, dict[str, Any]] = {DEFAULT_BUDGET: {}}
    budget_seeds: dict[str, int] = {}
    if doc.get("budgets") is None:
        return budgets, True, budget_seeds
    bnode = doc["budgets"]
    if not isinstance(bnode, dict):
        ck.add(line_of(doc, "budgets"), "budgets", "must be a mapping budget name -> {dotted overrides}")
        return budgets, False, budget_seeds
    ok = True
    for bname in bnode:
        if not ck.name_like(bnode, bname, f"budgets.{bname}", bname, NAME_RE, "budget name"):
            ok = False
            continue
        ov = ck.overrides(bnode, bname, f"budgets.{bname}")
        if ov is not None and BUDGET_SEEDS_KEY in ov:
            n = ov.pop(BUDGET_SEEDS_KEY)
            if is_int(n) and n >= 1:
                budget_seeds[bname] = n
            else:
                ck.add(line_of(bnode[bname], BUDGET_SEEDS_KEY), f"budgets.{bname}.{BUDGET_SEEDS_KEY}",
                       f"must be an integer >= 1 (the budget runs the study's first n seeds), got {plain(n)!r}")
        if ov is None:
            ok = False
        else:
            budgets[bname] = ov
    return budgets, ok, budget_seeds


def _check_budget_seeds(ck: Checker, doc: LineDict, budget_seeds: dict[str, int], seeds: tuple[int, ...] | None,
                        seed_range: SeedRange | None) -> None:
    """A budget's ``seeds: n`` takes the first n of the study's fixed seeds."""
    for bname, n in budget_seeds.items():
        line = line_of(doc["budgets"][bname], BUDGET_SEEDS_KEY)
        if seed_range is not None:
            ck.add(line, f"budgets.{bname}.{BUDGET_SEEDS_KEY}", "a budget cannot set seeds in a study with adaptive "
                   "seeds {min, max}: remove it, or give the study a fixed seed count")
        elif seeds is not None and n > len(seeds):
            ck.add(line, f"budgets.{bname}.{BUDGET_SEEDS_KEY}", f"{n} is more than the study's {len(seeds)} seeds: "
                   f"a budget runs the first n of them; use at most {len(seeds)}")


def _parse_seeds(ck: Checker, doc: LineDict) -> tuple[tuple[int, ...] | None, SeedRange | None]:
    """``seeds:``: the seeds (0..min-1 for an adaptive range) and the range, if adaptive."""
    if isinstance(doc.get("seeds"), dict):
        seed_range = ck.seed_range(doc, "seeds", "seeds")
        return (tuple(range(seed_range.min)) if seed_range is not None else None), seed_range
    return (ck.seeds(doc, "seeds", "seeds", allow_range=True) if "seeds" in doc else None), None


def _parse_exclude(ck: Checker, doc: LineDict, factors: list[Factor] | None) -> list[dict[str, str]] | None:
    """``exclude:``: a list of partial level maps; None when any entry is invalid."""
    exclude: list[dict[str, str]] | None = []
    if doc.get("exclude") is None:
        return exclude
    enode = doc["exclude"]
    if not isinstance(enode, list):
        ck.add(line_of(doc, "exclude"), "exclude", "must be a list of mappings factor -> level")
        return None
    if factors is None:
        return exclude
    for i in range(len(enode)):
        entry = parse_level_map(ck, enode, i, f"exclude[{i}]", factors, complete=False)
        if entry is None:
            exclude = None
        elif exclude is not None:
            exclude.append(entry)
    return exclude


def _parse_acknowledge(ck: Checker, doc: LineDict) -> tuple[str, ...]:
    """``acknowledge:``: a list of configuration-warning names (:data:`ablate.config.WARNING_RULES`)."""
    from ablate.config import WARNING_RULES

    node = doc.get("acknowledge")
    if node is None:
        return ()
    if not isinstance(node, list) or not all(isinstance(v, str) for v in node):
        ck.add(line_of(doc, "acknowledge"), "acknowledge", "must be a list of warning names, e.g. [gspo-token-sum]; "
               f"allowed: {', '.join(WARNING_RULES)}")
        return ()
    out = []
    for i, rule in enumerate(node):
        if rule not in WARNING_RULES:
            ck.add(line_of(node, i) or line_of(doc, "acknowledge"), f"acknowledge[{i}]",
                   unknown_choice("warning name", rule, WARNING_RULES) + " (each warning names itself in [brackets])")
        elif rule in out:
            ck.add(line_of(node, i) or line_of(doc, "acknowledge"), f"acknowledge[{i}]",
                   f"{rule} is listed twice; list it once")
        else:
            out.append(rule)
    return tuple(out)


def _split_acknowledged(ck: Checker, doc: LineDict, acknowledge: tuple[str, ...],
                        warned: list[tuple[str, str | None, str]]) -> tuple[tuple[str, ...], tuple]:
    """The arms' warnings split into those still warned (``arm <name>: <message> [<rule>]``) and the
    acknowledged rules with their arms; an acknowledged rule that no arm triggers is a problem."""
    shown: list[str] = []
    arms_of: dict[str, list[str]] = {rule: [] for rule in acknowledge}
    for arm, rule, message in warned:
        if rule in arms_of:
            if arm not in arms_of[rule]:
                arms_of[rule].append(arm)
        else:
            shown.append(f"arm {arm}: {message}" + (f" [{rule}]" if rule else ""))
    node = doc.get("acknowledge")
    for rule in acknowledge:
        if not arms_of[rule]:
            line = line_of(node, node.index(rule)) if isinstance(node, list) else None
            ck.add(line or line_of(doc, "acknowledge"), "acknowledge",
                   f"{rule} is acknowledged but no arm of this study triggers it at any budget: remove it")
    return tuple(shown), tuple((rule, tuple(arms)) for rule, arms in arms_of.items() if arms)


def _parse_evidence(ck: Checker, doc: LineDict) -> bool:
    """``evidence:`` (true or false; default true)."""
    v = doc.get("evidence", True)
    if not isinstance(v, bool):
        ck.add(line_of(doc, "evidence"), "evidence", f"must be true or false (false: a demo whose report is never "
               f"committed nor read by ablate ledger); got {plain(v)!r}")
        return True
    return v


def _parse_entry(ck: Checker, doc: LineDict, contexts: tuple[str, ...]) -> EntryRule | None:
    """``entry:`` (a study with ``contexts:``): ``learns`` (> 0), ``band`` ([low, high] with low < high) and an
    optional ``pilot`` path."""
    node = doc.get("entry")
    if node is None:
        return None
    line = line_of(doc, "entry")
    how = ("must be a mapping {learns: <the baseline's smallest gain over its step-0 objective in a pilot>, band: "
           "[<low>, <high>] (the baseline's step-0 objective), pilot: <path>}")
    if not isinstance(node, dict):
        ck.add(line, "entry", how)
        return None
    if not contexts:
        ck.add(line, "entry", "is the rule by which a context enters: it needs 'contexts:'; remove it or add contexts")
    unknown = [k for k in node if k not in ("learns", "band", "pilot")]
    for k in unknown:
        ck.add(line_of(node, k) or line, f"entry.{k}", unknown_choice("entry key", k, ("learns", "band", "pilot")))
    learns, band, pilot = node.get("learns"), node.get("band"), node.get("pilot")
    ok = not unknown
    if not (is_number(learns) and 0 < learns < float("inf")):
        ck.add(line_of(node, "learns") or line, "entry.learns", f"must be a number > 0 (objective units: 0.05 is "
               f"5 points of accuracy); got {plain(learns)!r}")
        ok = False
    if not (isinstance(band, list) and len(band) == 2 and all(is_number(v) for v in band) and band[0] < band[1]):
        ck.add(line_of(node, "band") or line, "entry.band", f"must be [low, high] with low < high (the baseline's "
               f"step-0 objective, e.g. [0.1, 0.9]); got {plain(band)!r}")
        ok = False
    if pilot is not None and not isinstance(pilot, str):
        ck.add(line_of(node, "pilot") or line, "entry.pilot", f"must be a path (the pilot's figures); got {plain(pilot)!r}")
        ok = False
    return EntryRule(float(learns), (float(band[0]), float(band[1])), pilot) if ok else None


def _parse_min_effect(ck: Checker, doc: LineDict, seed_range: SeedRange | None) -> float | None:
    """``min_effect:`` (> 0, finite), which adaptive seeds need."""
    min_effect = None
    if doc.get("min_effect") is not None:
        v = doc["min_effect"]
        if is_number(v) and v > 0 and v != float("inf"):
            min_effect = float(v)
        else:
            ck.add(line_of(doc, "min_effect"), "min_effect", f"must be a number > 0 in the objective's units (e.g. "
                                                          f"0.03 for 3 points of accuracy), got {plain(v)!r}")
    if seed_range is not None and doc.get("min_effect") is None:
        ck.add(line_of(doc, "seeds"), "seeds", "adaptive seeds {min, max} are re-estimated for the study's min_effect, "
               "which is missing; add 'min_effect:' (the smallest difference worth finding, in the objective's "
               "units, e.g. 0.03 for 3 points of accuracy) or give a fixed number of seeds")
    return min_effect


def _parse_extended_after(ck: Checker, doc: LineDict, seeds: tuple[int, ...] | None,
                          seed_range: SeedRange | None) -> tuple[int, ...]:
    """``extended_after:``: the seed counts n1 < n2 < ... at which a report of the study was read before its
    seeds were extended (a list of ints, each at least 2 and below the study's seed count; fixed seeds
    0..n-1 only). The report then tests each contrast as a two-stage design (:mod:`ablate.stats.sequential`)."""
    if doc.get("extended_after") is None:
        return ()
    v, line = doc["extended_after"], line_of(doc, "extended_after")
    values = [v] if isinstance(v, int) and not isinstance(v, bool) else v
    fix = ("a list of the seed counts whose report was read before the seeds were extended, increasing, each "
           "from 2 to below the study's seed count, e.g. [20] for a 20-seed report extended to 47 seeds")
    if not isinstance(values, list) or not values or not all(isinstance(x, int) and not isinstance(x, bool)
                                                            for x in values):
        ck.add(line, "extended_after", f"must be {fix}; got {plain(v)!r}")
        return ()
    if seed_range is not None or (seeds is not None and tuple(seeds) != tuple(range(len(seeds)))):
        ck.add(line, "extended_after", "applies to fixed seeds 0..n-1 (seeds: n): adaptive seeds and seed lists "
               "plan their own stages; remove it, or give 'seeds:' as a number")
        return ()
    n = len(seeds) if seeds is not None else None
    if sorted(set(values)) != values or values[0] < 2 or (n is not None and values[-1] >= n):
        ck.add(line, "extended_after", f"must be {fix}" + (f" (the study has {n} seeds)" if n else "")
               + f"; got {plain(v)!r}")
        return ()
    return tuple(values)


def load_study(path: str | Path) -> Study:
    """Read, validate and expand the design of a study file.

    Imports the listed plugins (and nothing else), checks every key, builds every arm's
    TrialConfig at every budget, and creates nothing on disk.

    Raises:
        StudyError: every problem found, each as ``FILE:LINE: key: problem``.
    """
    file = str(path)
    doc, ck = _read_document(file, path)
    plugins = import_plugins(ck, doc)
    name = doc.get("name")
    if "name" in doc:
        ck.name_like(doc, "name", "name", name, NAME_RE, "study name")
    description = doc.get("description")
    if description is not None and not isinstance(description, str):
        ck.add(line_of(doc, "description"), "description", "must be a string")
    base = ck.overrides(doc, "base", "base") if "base" in doc else {}
    parsed_budgets, budgets_ok, budget_seeds = _parse_budgets(ck, doc)
    budgets = parsed_budgets if budgets_ok else None
    seeds, seed_range = _parse_seeds(ck, doc)
    _check_budget_seeds(ck, doc, budget_seeds, seeds, seed_range)
    objective = parse_objective(ck, doc) if "objective" in doc else None
    factors, parsed_factors = parse_factors(ck, doc) if "factors" in doc else (None, [])
    design_name, design, design_options = parse_design(ck, doc)
    baseline = None
    if factors is not None and doc.get("baseline") is not None:
        baseline = parse_level_map(ck, doc, "baseline", "baseline", factors, complete=True)
    bad_baseline = doc.get("baseline") is not None and baseline is None
    exclude = _parse_exclude(ck, doc, factors)
    tune = parse_tune(ck, doc, budgets) if doc.get("tune") is not None else None
    report_metrics = parse_report(ck, doc) if doc.get("report") is not None else ()
    primary = parse_primary(ck, doc, factors, baseline) if doc.get("primary") is not None else ()
    contexts = parse_contexts(ck, doc, factors, primary) if doc.get("contexts") is not None else ()
    min_effect = _parse_min_effect(ck, doc, seed_range)
    extended_after = _parse_extended_after(ck, doc, seeds, seed_range)
    acknowledge = _parse_acknowledge(ck, doc)
    evidence = _parse_evidence(ck, doc)
    entry = _parse_entry(ck, doc, contexts)

    arms: list[Arm] = []
    excluded: list[Arm] = []
    aliasing = None
    if factors is not None and design is not None and not bad_baseline and exclude is not None:
        arms, excluded, aliasing = design_arms(ck, doc, factors, design, baseline, exclude, contexts)
    study_level_ok = not ck.problems
    # every key of base, budgets and levels on its own, whatever else is wrong: one pass reports both
    bad_keys = check_keys(ck, doc, base, parsed_budgets, parsed_factors)
    config_warnings: list[tuple[str, str | None, str]] = []
    configs: dict[tuple[str, str], TrialConfig] = {}
    shown: tuple[str, ...] = ()
    acknowledged: tuple = ()
    if study_level_ok and arms:  # the arms' configurations: what only a combination of keys gets wrong
        assert base is not None and budgets is not None and factors is not None
        configs = check_configs(ck, doc, base, budgets, factors, arms, tune, config_warnings, bad=bad_keys,
                                contexts=contexts)
        if not ck.problems:
            shown, acknowledged = _split_acknowledged(ck, doc, acknowledge, config_warnings)
    if ck.problems:
        raise StudyError(file, sorted(ck.problems, key=lambda p: p.line or 0))
    assert factors is not None and design is not None and budgets is not None and base is not None
    assert seeds is not None and objective is not None
    return Study(
        path=Path(path), raw=plain(doc), name=name, description=description, plugins=plugins, base=base,
        factors=tuple(factors), design_name=design_name, design=design, design_options=design_options,
        baseline=baseline, exclude=tuple(exclude or ()), seeds=seeds, budgets=budgets, objective=objective,
        tune=tune, arms=tuple(arms), excluded=tuple(excluded), aliasing=aliasing, report_metrics=report_metrics,
        budget_seeds=budget_seeds, warnings=shown, acknowledged=acknowledged, primary=primary, min_effect=min_effect, seed_range=seed_range,
        extended_after=extended_after, contexts=contexts, configs=configs, evidence=evidence, entry=entry,
    )
