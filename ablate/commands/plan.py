"""``ablate plan FILE``: how many seeds a study needs, planned from a pilot's variance."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.stats.planning import Pilot, SeedPlan
    from ablate.study import Study

HELP = "plan a study's seeds from a pilot: the seeds each primary contrast needs, trials and time"
DESCRIPTION = """\
Read the finished trials of a pilot from MLflow (the planned budget's own, or --pilot BUDGET's) and
print, for each contrast the study exists for (its primary: contrasts; every contrast when it declares
none), the SD of one seed's difference (level - baseline, the report's estimate), the seeds per arm a
two-sided paired t-test needs for --power to detect the study's min_effect (without one: the pilot's
observed difference, which makes the plan only as good as that noisy estimate), and then the study's
trials and estimated time at the recommended seed count with 1 and 2 workers. Nothing is run or
written.

Each planned contrast is tested at the Bonferroni level alpha / m, m = the claims of the report's
family (every contrast and testable interaction: the report corrects them together with Holm's
method): the chance of any false detection stays at most alpha whatever their correlation, and Holm's
correction rejects at least what Bonferroni rejects. The recommendation is the largest count over the
contrasts (the contrast that needs it "drives" it), never below 3 (the report gives no interval below
3 seeds).

A pilot at a shorter budget (--pilot smoke) is quick, but its SD is that budget's: a guide, not a
measurement. A study with seeds: {min: a, max: b} re-estimates its seeds itself while `ablate run`
runs (from the SD only; see ablate/stats/planning.py).

Each row also says what the pilot's own seeds resolve: the report's verdict on them (detected,
equivalent, not resolved) and the smallest true difference that the pilot's seed count detects with
--power at that level ("resolves at n"), so a finished study says whether it answered its question and,
if not, what effect its seeds could have found. --from reports/<study> reads the trials of a committed
report (its results.csv) instead of MLflow.

  ablate run studies/x.yaml --budget default        # a pilot: the study file's seeds (3 or 4)
  ablate plan studies/x.yaml                        # seeds for the default budget from that pilot
  ablate plan studies/x.yaml --budget full --pilot default --power 0.9
  ablate plan studies/x.yaml --from reports/x       # from a committed report, no MLflow needed

Exit code: 0 with a plan (or the advice to run more pilot seeds first), 2 on bad input (unknown budget,
no finished pilot trials).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="study file (YAML)")
    parser.add_argument("--budget", default="default", help="budget to plan, for trials and time (default: default)")
    parser.add_argument("--pilot", metavar="BUDGET",
                        help="read the finished trials of this budget as the pilot (default: the planned budget's own)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--power", type=float, default=0.8,
                        help="probability of detecting min_effect, per contrast (default: 0.8)")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="family-wise error rate over the planned contrasts (default: 0.05)")
    parser.add_argument("--from", dest="from_dir", metavar="DIR",
                        help="read the pilot from a report folder's results.csv (e.g. reports/<study>) instead of MLflow")


def _no_pilot(study: Study, pilot: str, where: str) -> str:
    """The message for a study without finished pilot trials."""
    head = f"{study.path}: no finished trials of budget {pilot!r} ({where}), so there is no pilot to plan from"
    fix = (f"run a pilot first, e.g. `ablate run {study.path} --budget {pilot}` with 3 or 4 seeds, or point --pilot / "
           "--tracking-uri at where one ran")
    if study.min_effect is None:
        fix += ("; the study also declares no min_effect, so there is no effect to plan for either: add 'min_effect:' "
                "(the smallest difference worth finding, in the objective's units, e.g. 0.03 for 3 points of accuracy)")
    return f"{head}; {fix}"


class _Units:
    """How ``ablate plan`` prints values of the objective (its report scale and unit)."""

    def __init__(self, study: Study) -> None:
        from ablate.report.statistics import Scale

        self.scale = Scale.of(study.objective.metric)
        self.unit = f" {self.scale.unit}" if self.scale.unit else ""

    def val(self, x: float, signed: bool = False) -> str:
        from ablate.stats.planning import fmt_value

        if not math.isfinite(x):
            return "-"
        text = fmt_value(x * self.scale.factor) + self.unit
        return ("+" + text) if signed and x > 0 else text


def _seeds_text(n: float) -> str:
    from ablate.stats.inference import MAX_SEEDS

    return "-" if math.isnan(n) else (f">{MAX_SEEDS}" if math.isinf(n) else str(int(n)))


def _header(study: Study, budget: str, pilot_budget: str, pilot: Pilot, plan: SeedPlan, u: _Units) -> list[str]:
    """What the plan is for: the pilot, the objective, the contrasts, the effect and the test."""
    from ablate.stats.planning import FROM_MIN_EFFECT

    obj = study.objective
    out = [f"study {study.name} ({study.path}): seeds for budget {budget!r}, planned from the {pilot.finished} "
           f"finished trials of budget {pilot_budget!r}"]
    out.append(f"objective: {obj.metric} ({obj.summary}), {'higher' if obj.mode == 'max' else 'lower'} is better")
    if plan.primary_declared:
        out.append(f"planned for: the study's {plan.m} primary contrast{'s' if plan.m != 1 else ''} (primary: "
                   f"{', '.join(study.primary)})")
    else:
        out.append(f"planned for: every contrast ({plan.m}): the study declares no primary: contrasts (add 'primary:' "
                   "to plan for the ones it exists for)")
    if plan.effect_from == FROM_MIN_EFFECT:
        out.append(f"effect: the study's min_effect, {u.val(plan.min_effect)}")
    else:
        out.append("effect: the study declares no min_effect, so each contrast is planned for its observed "
                   "difference (a noisy pilot estimate; add 'min_effect:' to plan for the smallest difference "
                   "worth finding)")
    out.append(f"test: two-sided paired t-test at alpha {plan.alpha:g} / {plan.m} = {plan.level:.3g} per contrast "
               + (f"(Bonferroni: the chance of any false detection among the {plan.m} stays <= {plan.alpha:g}), "
                  if plan.m > 1 else "(one contrast: nothing to correct), ") + f"power {plan.power:g}")
    return out


def _contrast_table(plan: SeedPlan, u: _Units) -> list[str]:
    """One line per planned contrast: pilot seeds, SD per seed, difference, effect, seeds needed."""
    header = ["contrast", "pilot seeds", "SD per seed", "difference", "effect", "seeds needed", "resolves at n",
              "verdict at n"]
    rows = [[c.name, str(c.pilot_seeds), u.val(c.sd), u.val(c.estimate, signed=True), u.val(c.effect),
             _seeds_text(c.seeds_needed), u.val(c.resolvable), c.verdict or "-"] for c in plan.contrasts]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                             enumerate(zip(r, widths))).rstrip() for r in [header, *rows]]


def _unresolvable(study: Study, pilot_budget: str, plan: SeedPlan, u: _Units) -> list[str] | None:
    """The closing lines when no seed count can be recommended (no SD yet, or none is enough); else None."""
    from ablate.stats.inference import MAX_SEEDS, MIN_SEEDS
    from ablate.stats.planning import FROM_MIN_EFFECT

    few = [c for c in plan.contrasts if math.isnan(c.sd)]
    if few:
        least = min(c.pilot_seeds for c in few)
        return [f"no SD can be estimated from {least} pilot seed{'s' if least != 1 else ''} (it needs 2 or more); run "
                f"at least {MIN_SEEDS} seeds of every arm first ({MIN_SEEDS} give the report's first intervals): "
                f"`seeds: {MIN_SEEDS}` in {study.path}, `ablate run {study.path} --budget {pilot_budget}`, then plan "
                "again", f"seeds: unknown  (run {MIN_SEEDS} pilot seeds first)"]
    flat = [c for c in plan.contrasts if c.sd == 0]
    if flat:
        return [f"no seed count can be planned from {', '.join(c.name for c in flat)}: the same difference in every "
                "pilot seed (zero spread) says nothing about the seed noise; plan from a pilot whose arms differ "
                "by seed noise (aa_control gives the SD of one seed's difference between identical arms)",
                "seeds: unknown  (zero spread in the pilot)"]
    if not math.isinf(plan.seeds):
        return None
    driver = plan.driver
    why = ("its observed difference is 0" if plan.effect_from != FROM_MIN_EFFECT and driver.estimate == 0
           else f"its SD per seed ({u.val(driver.sd)}) is too large for an effect of {u.val(driver.effect)}")
    return [f"driven by: {driver.name}: no seed count up to {MAX_SEEDS} gives it power {plan.power:g}: {why}; "
            "plan for a larger min_effect, a longer budget (less noise), or fewer primary contrasts",
            f"seeds: more than {MAX_SEEDS} per arm"]


def _recommendation(study: Study, budget: str, pilot: Pilot, plan: SeedPlan) -> list[str]:
    """The seed count, what drives it, what it costs, and how the study file should change."""
    from ablate.stats.inference import MIN_SEEDS
    from ablate.stats.planning import at_level, context_seconds, format_duration, study_seconds
    from ablate.study.timing import parallel_seconds

    n = int(plan.seeds)
    driver = plan.driver
    arms = len(study.arms)
    t1 = study_seconds(study, budget, n)
    t2 = None if t1 is None else parallel_seconds(t1, 2)
    floor = " (raised to the report's minimum of 3)" if driver.seeds_needed < MIN_SEEDS else ""
    out = [f"driven by: {driver.name} (it needs the most seeds){floor}"]
    if plan.family_size > plan.m:
        wider = at_level(plan, plan.family_size)
        out.append(f"note: the report tests these contrasts in one Holm family of {plan.family_size} claims (with the "
                   f"exploratory contrasts and interactions); at alpha {plan.alpha:g} / {plan.family_size} they would "
                   f"need {_seeds_text(wider)} seeds")
    when = ("time unknown (no timing constants for this model)" if t1 is None else
            f"{format_duration(t1)} on 1 worker, {format_duration(t2)} with --workers 2")
    out.append(f"at {n} seeds: {arms} arms x {n} seeds = {arms * n} trials at budget {budget!r}, {when} "
               "(timing model of `ablate show`, CPU, warm start cached)")
    per = context_seconds(study, budget, n)
    if per:
        each = arms // len(per)
        out.append(f"per context ({', '.join(study.contexts)}): {len(per)} contexts, each {each} arms x {n} seeds = "
                   f"{each * n} trials: " + "; ".join(f"{ctx} {format_duration(t)}" for ctx, t in per.items()))
    if pilot.finished and n <= plan.pilot_seeds:
        out.append(f"the pilot's {plan.pilot_seeds} seeds already suffice")
    if study.seed_range is not None:
        sr = study.seed_range
        out.append(f"the study's seeds: {{min: {sr.min}, max: {sr.max}}}: `ablate run` re-estimates this itself"
                   + (f"; {n} is above its max" if n > sr.max else ""))
    elif len(study.seeds) != n:
        out.append(f"the study file runs {len(study.seeds)} seeds: set `seeds: {n}` to follow this plan")
    out.append(f"seeds: {n}  ({arms * n} trials, "
               + ("time unknown" if t2 is None else f"{format_duration(t2)} with --workers 2") + ")")
    return out


def _resolution(plan: SeedPlan, u: _Units) -> list[str]:
    """Whether the pilot's seeds answered the planned contrasts, and what effect they can resolve."""
    from ablate.stats.inference import MIN_SEEDS, NOT_RESOLVED

    rated = [c for c in plan.contrasts if c.verdict]
    if not rated:
        return []
    open_ = [c for c in rated if c.verdict == NOT_RESOLVED]
    if not open_:
        return [f"resolved: every planned contrast ({len(rated)}) is detected or equivalent at the pilot's seeds", ""]
    parts = [f"{c.name}: {u.val(c.resolvable)} at {c.pilot_seeds} seeds" for c in open_ if math.isfinite(c.resolvable)]
    line = f"resolved: {len(rated) - len(open_)} of {len(rated)} planned contrasts"
    if parts:
        line += (f"; the others can resolve (power {plan.power:g}, alpha {plan.alpha:g} / {plan.m}) true differences of "
                 + "; ".join(parts))
    flat = [c for c in open_ if c.pilot_seeds >= MIN_SEEDS and c.sd == 0]
    if flat:
        line += ("; " + ", ".join(c.name for c in flat) + " had the same difference in every pilot seed (zero "
                 "spread): no test applies, so no difference is resolvable from them")
    untested = [c for c in open_ if c.pilot_seeds < MIN_SEEDS]
    if untested:
        line += (f"; below {MIN_SEEDS} seeds no claim is tested, so " + ", ".join(c.name for c in untested)
                 + " resolve no difference at the pilot's seeds (the seeds they need are in the table)")
    return [line, ""]


def render(study: Study, budget: str, pilot_budget: str, pilot: Pilot, plan: SeedPlan) -> str:
    """The text ``ablate plan`` prints (``pilot``: :class:`ablate.stats.planning.Pilot`, ``plan``:
    :class:`ablate.stats.planning.SeedPlan`)."""
    u = _Units(study)
    out = [*_header(study, budget, pilot_budget, pilot, plan, u), "", *_contrast_table(plan, u), "",
           *_resolution(plan, u)]
    closing = _unresolvable(study, pilot_budget, plan, u)
    out += closing if closing is not None else _recommendation(study, budget, pilot, plan)
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Read the pilot, plan the seeds, print the table and the recommendation; writes nothing."""
    from ablate.errors import AblateError
    from ablate.registry import nearest
    from ablate.report.folder import read_report_pilot
    from ablate.stats.planning import plan_seeds, read_pilot
    from ablate.study import load_study
    from ablate.study.plan import Plan
    from ablate.tracking import missing_local_store, resolve_tracking_uri

    study = load_study(args.file)
    study.check_budget(args.budget)
    pilot_budget = args.pilot or args.budget
    if pilot_budget not in study.budgets:
        guess = nearest(pilot_budget, list(study.budgets))
        raise AblateError(f"{study.path}: --pilot {pilot_budget!r} is not a budget of the study; budgets: "
                          f"{', '.join(study.budgets)}" + (f"; did you mean {guess!r}?" if guess else "")
                          + "; pass the budget the pilot ran at")
    problems = [f"--{name} {value:g}: must lie strictly between 0 and 1"
                for name, value in (("power", args.power), ("alpha", args.alpha)) if not 0 < value < 1]
    if problems:
        raise AblateError("; ".join(problems))
    if args.from_dir:
        pilot = read_report_pilot(study, args.from_dir)
    else:
        uri = resolve_tracking_uri(args.tracking_uri)
        missing = missing_local_store(uri)
        if missing is not None:
            raise AblateError(_no_pilot(study, pilot_budget, f"there is no MLflow store at {missing}"))
        # an adaptive study may have run more seeds than its min: every seed up to its max is looked for
        pilot_study = study.with_seeds(range(study.seed_range.max)) if study.seed_range is not None else study
        pilot = read_pilot(Plan.of(pilot_study, pilot_budget), uri)
        if pilot.finished == 0:
            raise AblateError(_no_pilot(study, pilot_budget, f"MLflow {uri}"))
    verdicts = {c.name: c.verdict for c in pilot.inference.family.claims if c.contrast is not None}
    plan = plan_seeds(pilot.inference.contrasts, min_effect=study.min_effect, alpha=args.alpha, power=args.power,
                      family_size=len(pilot.inference.family.claims), verdicts=verdicts)
    if not plan.contrasts:
        raise AblateError(f"{study.path}: the {pilot.finished} finished trials of budget {pilot_budget!r} give no "
                          f"contrast (no seed has both a level and its baseline, or {study.objective.metric} was never "
                          "logged); run the pilot's missing trials (`ablate status`), then plan again")
    print(render(study, args.budget, pilot_budget, pilot, plan))
    return 0
