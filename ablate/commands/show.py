"""``ablate show FILE``: the design of a study as a table of arms, with its size and aliasing."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.study import Study, TrialSpec

HELP = "show a study's arms (a table of factor levels), trial count and aliasing"
DESCRIPTION = """\
Validate a study file and print what it would run: the arms as a table (one row per arm, one column
per factor), the baseline and excluded arms, the levels with their overrides, the seeds, the number
of trials and the estimated time of every budget, the objective, and for a fractional design which
effects are aliased, and the study's estimated peak disk use (ablate/running/footprint.py: the running
trials' checkpoints, a local MLflow store, the report). Nothing is run or written.

Estimated times come from ablate/study/timing.py: constants measured per zoo model on one CPU thread
(benchmarks/calibrate_timing.py), for trials whose warm start is already cached; they lean high
(every completion is counted at full length). On a GPU a study runs much faster than printed.

  ablate show studies/quickstart.yaml --budget smoke
  ablate show studies/quickstart.yaml --json
"""

#: Printed for a budget whose trials have no timing constants (a model that was never calibrated).
UNKNOWN_TIME = "unknown (no timing constants for this model; see benchmarks/calibrate_timing.py)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="study file (YAML)")
    parser.add_argument("--budget", default="default", help="budget to count trials at (default: default)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="local workers the disk estimate counts (as ablate run --workers; default 1)")
    parser.add_argument("--pack", default="auto", metavar="K",
                        help="trials with train.packed: true that a worker trains at once, as ablate run --pack (the disk "
                             "estimate counts each member's checkpoints; default auto)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _fmt_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _fmt_overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in overrides.items()) or "(defaults)"


def _fmt_seconds(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m" if hours else f"{m}m{s:02d}s"


def _workers_phrase(disk: dict[str, Any]) -> str:
    """``2 workers``, and with ``--pack K`` > 1 ``, up to K packed trials per population`` (the worker processes, not
    the trials that run at once, which the disk line counts)."""
    w, k = disk["workers"], disk["population"]
    return f"{w} worker{'s' if w != 1 else ''}" + (f", up to {k} packed trials per population" if k > 1 else "")


def describe(study: Study, budget: str, workers: int = 1, pack: int | str = "auto") -> dict[str, Any]:
    """Everything ``ablate show`` prints, as JSON-ready data (``study`` is a loaded Study)."""
    from ablate.running.footprint import estimate_disk
    from ablate.study.plan import Plan
    from ablate.study.timing import estimate_study_seconds
    from ablate.tracking import resolve_tracking_uri

    specs = Plan.of(study, budget).specs
    seconds = estimate_study_seconds(specs)
    from ablate.running.footprint import pack_size

    members = max((pack_size(pack, s.config) for s in specs if s.config.train.packed), default=1)
    disk = estimate_disk(list(specs), workers=workers, tracking_uri=resolve_tracking_uri(), pack=members)
    budgets = {}
    for name in study.budgets:
        bspecs = specs if name == budget else Plan.of(study, name).specs
        budgets[name] = {"n_trials": len(bspecs), "estimated_seconds": estimate_study_seconds(bspecs),
                         "overrides": study.budgets[name], "seeds": study.budget_seeds.get(name)}
    contexts = {}
    for spec in specs:  # every compared arm runs in every context: trials and time per context
        contexts.setdefault(study.context_of(spec.levels), []).append(spec)
    return {
        "study": study.name,
        "file": str(study.path),
        "contexts": {"factors": list(study.contexts), "per_context": {
            ctx: {"n_trials": len(cs), "estimated_seconds": estimate_study_seconds(cs)}
            for ctx, cs in contexts.items()}} if study.contexts else None,
        "description": study.description,
        "design": {"name": study.design_name, "options": study.design_options},
        "factors": [
            {
                "name": f.name,
                "description": f.description,
                "path": f.path,
                "levels": {lv.name: lv.overrides for lv in f.levels},
            }
            for f in study.factors
        ],
        "baseline": study.baseline,
        "arms": [{"name": a.name, "levels": a.levels, "baseline": a.baseline} for a in study.arms],
        "excluded": [a.name for a in study.excluded],
        "seeds": list(study.at_budget(budget).seeds),
        "budget": budget,
        "budget_overrides": study.budgets[budget],
        "n_arms": len(study.arms),
        "n_trials": len(specs),
        "estimated_seconds": seconds,
        "disk": {"workers": disk.writers, "population": members, "running_trials": disk.workers, "peak_bytes": disk.total, "runs_bytes": disk.runs,
                 "tracking_bytes": disk.tracking, "report_bytes": disk.report, "checkpoint_bytes": disk.checkpoint,
                 "text": disk.text()},
        "budgets": budgets,
        "objective": vars(study.objective),
        "primary": list(study.primary),
        "min_effect": study.min_effect,
        "seed_range": None if study.seed_range is None else vars(study.seed_range),
        "tune": None
        if study.tune is None
        else {
            "params": {p.path: {"low": p.low, "high": p.high, "log": p.log} for p in study.tune.params},
            "trials": study.tune.trials,
            "budget": study.tune.budget,
            "seeds": list(study.tune.seeds),
        },
        "aliasing": None if study.aliasing is None else study.aliasing.to_dict(),
        "packing": packing(specs),
    }


def packing(specs: Sequence[TrialSpec]) -> dict[str, Any]:
    """Which trials train as populations (``train.packed``) and in how many shapes (each shape packs
    apart, :func:`ablate.train.population.population_shape`); ``auto``: the ``--pack auto`` size here."""
    from ablate.running.footprint import pack_size
    from ablate.train.population import population_shape

    packed = [s for s in specs if s.config.train.packed]
    return {"packed_trials": len(packed), "shapes": len({population_shape(s.config) for s in packed}),
            "auto": pack_size("auto", packed[0].config) if packed else 1}


def _context_lines(study: Study, d: dict[str, Any]) -> list[str]:
    """``ablate show``'s lines for a study with contexts: each context's trials and estimated time."""
    from ablate.study.timing import parallel_seconds

    per = d["contexts"]["per_context"]
    arms = len(study.arms) // len(per)
    out = [f"contexts ({', '.join(study.contexts)}): {len(per)}, each {arms} compared arm{'s' if arms != 1 else ''} "
           f"x {len(d['seeds'])} seed{'s' if len(d['seeds']) != 1 else ''}; each contrast is estimated within each "
           "context and pooled across them (ablate.stats.meta):"]
    width = max(len(c) for c in per)
    for ctx, c in per.items():
        t = c["estimated_seconds"]
        when = UNKNOWN_TIME if t is None else f"{_fmt_seconds(t)} / {_fmt_seconds(parallel_seconds(t, 2))}"
        out.append(f"  {ctx.ljust(width)}  {c['n_trials']} trials, {when}")
    return out


def render(study: Study, budget: str, workers: int = 1, pack: int | str = "auto") -> str:
    """The text that ``ablate show`` prints."""
    from ablate.study.timing import parallel_seconds

    d = describe(study, budget, workers, pack)
    out = [f"study {study.name} ({study.path})"]
    if study.description:
        out.append(f"  {study.description}")
    opts = ", ".join(f"{k}={v}" for k, v in study.design_options.items())
    out.append(f"design: {study.design_name}" + (f" ({opts})" if opts else ""))
    seeds = ", ".join(map(str, d["seeds"]))
    adaptive = (f"; adaptive: up to {study.seed_range.max}, added in rounds by `ablate run`"
                if study.seed_range is not None else "")
    first = (f"; this budget runs the first {len(d['seeds'])} of the study's {len(study.seeds)}"
             if len(d["seeds"]) < len(study.seeds) else "")
    out.append(f"seeds: {seeds} (paired: every arm runs every seed{adaptive}{first})")
    out.append(f"budget {budget}: {_fmt_overrides(study.budgets[budget])} (budgets: {', '.join(study.budgets)})")
    out.append(f"{d['n_arms']} arms x {len(d['seeds'])} seed{'s' if len(d['seeds']) != 1 else ''} = {d['n_trials']} trials")
    out.append("budgets (trials, estimated CPU time on 1 worker / 2 workers, warm start cached; a GPU is much faster):")
    width = max(len(b) for b in d["budgets"])
    for name, b in d["budgets"].items():
        mark = "*" if name == budget else " "
        t = b["estimated_seconds"]
        when = UNKNOWN_TIME if t is None else f"{_fmt_seconds(t)} / {_fmt_seconds(parallel_seconds(t, 2))}"
        first = f"first {b['seeds']} seed{'s' if b['seeds'] != 1 else ''}; " if b["seeds"] else ""
        out.append(f" {mark}{name.ljust(width)}  {b['n_trials']} trials, {when}  [{first}{_fmt_overrides(b['overrides'])}]")
    out.append(f"disk at budget {budget} with {_workers_phrase(d['disk'])}: {d['disk']['text']} "
               "; ablate run refuses to start with less free space")
    p = d["packing"]
    if p["packed_trials"]:
        out.append(f"packing: {p['packed_trials']} of {d['n_trials']} trials set train.packed and train in populations "
                   f"(`ablate run --pack K`; auto here: {p['auto']} trial{'s' if p['auto'] != 1 else ''} a population) "
                   f"of {p['shapes']} shape{'s' if p['shapes'] != 1 else ''}; the others run solo")
    if d["contexts"]:
        out.extend(_context_lines(study, d))
    out.append("")

    names = [f.name for f in study.factors]
    rows = [[str(i + 1), *(a.levels[n] for n in names), "baseline" if a.baseline else ""] for i, a in
            enumerate(study.arms)]
    header = ["#", *names, ""]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    for r in [header, *rows]:
        out.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    if study.excluded:
        out.append(f"excluded ({len(study.excluded)}): " + "; ".join(a.name for a in study.excluded))
    out.append("")

    out.append("levels:")
    for f in study.factors:
        head = f"  {f.name}" + (f" ({f.path})" if f.path else "")
        out.append(head + (f": {f.description}" if f.description else ""))
        width = max(len(lv.name) for lv in f.levels)
        for lv in f.levels:
            out.append(f"    {lv.name.ljust(width)}  {_fmt_overrides(lv.overrides)}")
    obj = study.objective
    how = f"mean of the last {obj.last_n}" if obj.summary == "last" and obj.last_n > 1 else obj.summary
    out.append(f"objective: {obj.metric} ({how}), {'higher' if obj.mode == 'max' else 'lower'} is better")
    out.append("primary: " + (", ".join(study.primary) if study.primary else "none declared (every contrast is "
                              "exploratory)") + "; min_effect: " + (f"{study.min_effect:g} ({obj.metric} units)"
                                                                    if study.min_effect else "none declared"))
    if study.tune is not None:
        t = study.tune
        params = ", ".join(f"{p.path} in [{p.low}, {p.high}]{' (log)' if p.log else ''}" for p in t.params)
        out.append(f"tune: {t.trials} trials per arm at budget {t.budget} with {len(t.seeds)} seed(s): {params}")
    if study.aliasing is not None:
        out.append("")
        out.append("aliasing:")
        out.extend("  " + line for line in study.aliasing.lines())
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Print the study's design (text or JSON)."""
    from ablate.commands.validate import print_warnings
    from ablate.study import load_study

    if args.pack != "auto" and not (args.pack.isdigit() and int(args.pack) >= 1):
        from ablate.errors import AblateError

        raise AblateError(f"--pack {args.pack}: must be a whole number of trials, 1 or more, or auto")
    study = load_study(args.file)
    print_warnings(study, notes_to_stderr=args.json)  # --json: stdout is one JSON document
    study.check_budget(args.budget)
    if args.json:
        print(json.dumps(describe(study, args.budget, args.workers, args.pack), indent=2))
    else:
        print(render(study, args.budget, args.workers, args.pack))
    return 0
