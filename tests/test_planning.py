"""Seed planning (ablate.stats.planning, ``ablate plan``) and adaptive seeds in the runner: the planner on
hand-made per-trial tables with known SDs (textbook seed counts), the variance-only rule, and, end to
end on a tiny real study, ``ablate run``'s rounds (3 -> 5 seeds), a rerun that does not decide again,
``ablate status`` and ``ablate plan`` on what ran, and bad input (exit code 2, nothing written)."""

from __future__ import annotations

import io
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import servers
import torch
import yaml
from mlflow import MlflowClient

from ablate.cli import main
from ablate.paths import STORE_FILE
from ablate.running.runner import adaptive_rounds, run_study
from ablate.running.session import RunSettings
from ablate.stats import inference, planning
from ablate.store import StudyStore
from ablate.study import StudyError, load_study
from ablate.study.plan import TAG_SEEDS, Plan

# ----------------------------------------------------------------------------------- hand-made data


def per_trial(diffs: dict[str, list[float]], base: list[float] | None = None) -> pd.DataFrame:
    """A one-factor study's per-trial table: level ``a`` (the baseline) at ``base`` and each other level
    at ``base + diff`` seed by seed."""
    n = len(next(iter(diffs.values())))
    base = base if base is not None else [0.5 + 0.01 * s for s in range(n)]
    rows = [{"key": f"a{s}", "arm": "f=a", "seed": s, "f": "a", "objective": base[s]} for s in range(n)]
    for lv, d in diffs.items():
        rows += [{"key": f"{lv}{s}", "arm": f"f={lv}", "seed": s, "f": lv, "objective": base[s] + d[s]}
                 for s in range(n)]
    return pd.DataFrame(rows)


def with_sd(mean: float, sd: float, n: int = 6, seed: int = 0) -> list[float]:
    """``n`` values with exactly this mean and sample SD."""
    x = np.random.default_rng(seed).normal(size=n)
    x = (x - x.mean()) / x.std(ddof=1)
    return list(mean + sd * x)


def contrasts(diffs: dict[str, list[float]], primary: tuple[str, ...] = (), min_effect: float | None = None):
    levels = ["a", *diffs]
    return inference.infer(per_trial(diffs), {"f": "f"}, {"f": levels}, {"f": "a"}, min_effect=min_effect,
                           primary=primary).contrasts


def test_a_known_sd_gives_the_textbook_seed_count():
    # d = effect / sd = 1, two-sided paired t-test at alpha 0.05, power 0.8: 10 seeds
    plan = planning.plan_seeds(contrasts({"b": with_sd(0.2, 0.04)}), min_effect=0.04)
    (c,) = plan.contrasts
    assert c.sd == pytest.approx(0.04) and c.pilot_seeds == 6 and c.effect == 0.04
    assert c.seeds_needed == 10 and plan.seeds == 10 and plan.driver is c
    assert (plan.m, plan.level, plan.effect_from, plan.primary_declared) == (1, 0.05, "min_effect", False)
    # half the SD: d = 2 -> 5 seeds; twice the SD: d = 0.5 -> 34 seeds
    assert planning.plan_seeds(contrasts({"b": with_sd(0.2, 0.02)}), min_effect=0.04).seeds == 5
    assert planning.plan_seeds(contrasts({"b": with_sd(0.2, 0.08)}), min_effect=0.04).seeds == 34
    # more power needs more seeds; a lower alpha too
    assert planning.plan_seeds(contrasts({"b": with_sd(0.2, 0.04)}), min_effect=0.04, power=0.9).seeds > 10
    assert planning.plan_seeds(contrasts({"b": with_sd(0.2, 0.04)}), min_effect=0.04, alpha=0.01).seeds > 10


def test_primary_contrasts_at_the_bonferroni_level_and_the_driver():
    diffs = {"b": with_sd(0.1, 0.04, seed=1), "c": with_sd(0.0, 0.08, seed=2)}
    every = planning.plan_seeds(contrasts(diffs), min_effect=0.04)  # no primary: both, each at 0.05 / 2
    assert [c.name for c in every.contrasts] == ["f: b vs a", "f: c vs a"] and not every.primary_declared
    assert every.m == 2 and every.level == 0.025
    assert [c.seeds_needed for c in every.contrasts] == [
        inference.seeds_for_power(0.04, 0.04, alpha=0.025), inference.seeds_for_power(0.08, 0.04, alpha=0.025)]
    assert every.contrasts[0].seeds_needed == 13  # d = 1 at alpha 0.025
    assert every.driver.name == "f: c vs a" and every.seeds == every.driver.seeds_needed
    only_b = planning.plan_seeds(contrasts(diffs, primary=("f=b",)), min_effect=0.04)
    assert [c.name for c in only_b.contrasts] == ["f: b vs a"] and only_b.primary_declared
    assert only_b.m == 1 and only_b.seeds == 10
    factor = planning.plan_seeds(contrasts(diffs, primary=("f",)), min_effect=0.04)
    assert factor.m == 2 and factor.primary_declared
    # the same contrasts tested in a wider family (the report's) need more seeds
    assert planning.at_level(only_b, 3) == inference.seeds_for_power(0.04, 0.04, alpha=0.05 / 3) > only_b.seeds


def test_without_min_effect_the_observed_difference_is_planned_for():
    plan = planning.plan_seeds(contrasts({"b": with_sd(0.08, 0.04)}))
    (c,) = plan.contrasts
    assert plan.effect_from == "observed" and c.effect == pytest.approx(0.08) and c.estimate == pytest.approx(0.08)
    assert c.seeds_needed == inference.seeds_for_power(0.04, 0.08) == 5
    negative = planning.plan_seeds(contrasts({"b": with_sd(-0.08, 0.04)}))
    assert negative.contrasts[0].effect == pytest.approx(0.08) and negative.seeds == 5
    zero = planning.plan_seeds(contrasts({"b": with_sd(0.0, 0.04)}))
    assert math.isinf(zero.seeds)  # nothing to detect


def test_small_pilots_the_floor_of_three_seeds_and_bad_levels():
    one = planning.plan_seeds(contrasts({"b": [0.1]}), min_effect=0.04)
    assert one.contrasts[0].pilot_seeds == 1 and math.isnan(one.contrasts[0].sd) and math.isnan(one.seeds)
    two = planning.plan_seeds(contrasts({"b": [0.1, 0.2]}), min_effect=0.04)
    assert two.contrasts[0].sd == pytest.approx(np.std([0.1, 0.2], ddof=1))
    no_sd = planning.plan_seeds(contrasts({"b": [0.2] * 6}), min_effect=0.04)  # every seed the same difference
    assert no_sd.contrasts[0].seeds_needed == 2 and no_sd.seeds == inference.MIN_SEEDS
    assert math.isnan(planning.plan_seeds([], min_effect=0.04).seeds)
    with pytest.raises(Exception, match="strictly between 0 and 1"):
        planning.plan_seeds([], power=1.0)


def test_reestimation_depends_on_the_sd_only_and_never_shrinks():
    def decide(mean: float, sd: float, n: int = 4, top: int = 16, round_: int = 1) -> planning.AdaptiveRound:
        plan = planning.plan_seeds(contrasts({"b": with_sd(mean, sd, n=n)}), min_effect=0.04)
        return planning.reestimate(plan, n, top, round_)

    r = decide(0.0, 0.04)
    assert (r.round, r.n, r.needed, r.n_new, r.m, r.level) == (1, 4, 10, 10, 1, 0.05)
    assert r.sd == pytest.approx(0.04) and r.driver == "f: b vs a"
    for mean in (-0.3, 0.02, 0.5):  # the observed difference changes nothing: variance only
        other = decide(mean, 0.04)
        assert other.sd == pytest.approx(r.sd) and replace(other, sd=r.sd) == r
    assert decide(0.0, 0.04, top=8).n_new == 8  # capped at the max
    assert decide(0.0, 0.001).n_new == 4  # needs fewer than it has: n stays
    assert decide(0.0, 0.001, n=2).n_new == 3  # ... but never below the report's minimum of 3
    assert decide(0.0, 0.04, n=20, top=16).n_new == 20  # a max lowered below n: nothing is removed
    one = planning.reestimate(planning.plan_seeds(contrasts({"b": [0.3]}), min_effect=0.04), 1, 16, 1)
    assert math.isnan(one.sd) and one.n_new == inference.MIN_SEEDS  # no SD yet: 3 seeds, no data used
    with pytest.raises(ValueError, match="never for an observed effect"):
        planning.reestimate(planning.plan_seeds(contrasts({"b": with_sd(0.1, 0.04)})), 4, 16, 1)
    assert planning.AdaptiveRound.from_dict(r.to_dict()) == r
    unreachable = decide(0.0, 5.0)
    assert math.isinf(unreachable.needed) and unreachable.n_new == 16
    assert planning.AdaptiveRound.from_dict(unreachable.to_dict()) == unreachable


def test_round_lines_and_the_summary_tag():
    r = planning.AdaptiveRound(1, 4, 9, 9.0, 0.041, "f: b vs a", 0.03, 0.05, 1, 0.8, 16)
    assert r.line(100, "points") == ("adaptive seeds: round 1: SD per seed 4.1 points (f: b vs a) -> 9 seeds needed for "
                                     "min_effect 3 points (power 0.8, alpha 0.05/1); running seeds 4-8")
    capped = planning.AdaptiveRound(2, 9, 16, math.inf, 0.2, "f: b vs a", 0.03, 0.05, 2, 0.8, 16)
    assert capped.line().endswith("more than 1000 seeds needed for min_effect 0.03 (power 0.8, alpha 0.05/2); "
                                  "running seeds 9-15 (the max is 16)")
    done = planning.AdaptiveRound(2, 9, 9, 7.0, 0.03, "f: b vs a", 0.03, 0.05, 1, 0.8, 16)
    assert done.line().endswith("; 9 seeds suffice: done")
    at_max = planning.AdaptiveRound(1, 5, 5, 40.0, 0.03, "f: b vs a", 0.01, 0.05, 1, 0.8, 5)
    assert at_max.line().endswith("; stays at 5 seeds: the max (5) is reached")
    assert planning.adaptive_summary([r, done], min_seeds=4, max_seeds=16, min_effect=0.03) == (
        "variance-only re-estimation: 4 -> 9 -> 9 (max 16), for 80% power at min_effect 0.03, alpha 0.05/1 per contrast")
    assert planning.adaptive_summary([], min_seeds=4, max_seeds=16, min_effect=0.03).endswith(", not re-estimated yet")
    assert [planning.format_duration(s) for s in (40, 1500, 9000, None)] == ["~40 s", "~25 min", "~2.5 h", "unknown"]


def test_pilot_inference_is_the_reports(tmp_path):
    """planning.pilot_inference computes the report's contrasts (compute_statistics(...).inference)."""
    from ablate.report.statistics import compute_statistics
    from ablate.tracking.results import Results

    study = load_study(write_study(tmp_path, "cross", seeds=4, min_effect=0.05, primary=["a"],
                                   factors={"a": {"path": "rollout.temperature", "values": [1.0, 0.5]},
                                            "b": {"path": "optim.lr", "values": [0.001, 0.01]}}))
    rng = np.random.default_rng(3)
    rows, trials = [], []
    for seed in range(4):
        for arm in study.arms:
            key = f"{arm.name}/{seed}"
            trials.append({"key": key, "arm": arm.name, "seed": seed, **arm.levels, "state": "done", "run_id": "",
                           "error": ""})
            for step in (0, 1, 2):
                rows.append({"study": "cross", "budget": "default", "key": key, "arm": arm.name, "seed": seed,
                             **arm.levels, "step": step, "tokens": math.nan, "metric": "response/length",
                             "value": 10 + rng.normal()})
    columns = {"a": "a", "b": "b"}
    results = Results("cross", "default", ["a", "b"], columns, pd.DataFrame(rows), pd.DataFrame(trials))
    ours = planning.pilot_inference(study, results)
    theirs = compute_statistics(study, results, fit_boot=0).inference
    assert ours.method == theirs.method == inference.PAIRED
    assert ours.contrasts == theirs.contrasts and ours.family.size == theirs.family.size
    assert [c.primary for c in ours.contrasts] == [True, False]


def test_recorded_seeds_and_the_study_file_check(tmp_path):
    study = load_study(write_study(tmp_path, "adaptive", seeds={"min": 3, "max": 6}, min_effect=0.1))
    assert study.seeds == (0, 1, 2) and (study.seed_range.min, study.seed_range.max) == (3, 6)
    assert Plan.of(study).recorded({TAG_SEEDS: "5"}).seeds == (0, 1, 2, 3, 4)
    assert Plan.of(study).recorded({}).seeds == (0, 1, 2)
    fixed = load_study(write_study(tmp_path, "fixed", seeds=3))
    assert Plan.of(fixed).recorded({TAG_SEEDS: "5"}).study is fixed
    assert planning.seeds_in_design(None) == 0
    assert planning.seeds_in_design({"trials": {"k1": ["a", 0], "k2": ["a", 4], "k3": ["b", 2]}}) == 5
    with pytest.raises(StudyError) as exc:
        load_study(write_study(tmp_path, "nomin", seeds={"min": 3, "max": 6}))
    assert "seeds: adaptive seeds {min, max} are re-estimated for the study's min_effect, which is missing; " \
           "add 'min_effect:'" in str(exc.value)


# ------------------------------------------------------------------------------------ end to end

#: A trial of about a second: the 0.2M-parameter model, 1-digit sums, no warm start. The two
#: temperatures sample different completions from the first step, so their lengths differ seed by seed.
TINY = {
    "model.name": "micro-llama", "task.difficulty": 1, "warmstart.enabled": False,
    "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 16,
    "algo.minibatches": 1, "train.steps": 2, "eval.n_problems": 4,
}
TEMPERATURE = {"temp": {"path": "rollout.temperature", "values": [1.0, 0.5]}}


def write_study(folder: Path, name: str, seeds: object = 3, factors: dict | None = None, **extra: object) -> Path:
    doc = {"name": name, "base": TINY, "factors": factors or TEMPERATURE, "seeds": seeds,
           "budgets": {"short": {"train.steps": 1}},
           "objective": {"metric": "response/length", "mode": "max", "summary": "mean"}, **extra}
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def settings(folder: Path, study: Path) -> RunSettings:
    return RunSettings(study_file=str(study), budget="default", storage=str(folder / "runs" / study.stem / STORE_FILE),
                       tracking_uri=f"sqlite:///{folder / 'mlflow.db'}", runs=str(folder / "runs"), threads=1)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One MLflow database with two tiny studies that ran: ``adaptive`` (seeds {min: 3, max: 5} and a
    min_effect far below its SD: the first round asks for the max) and ``single`` (1 seed)."""
    folder = tmp_path_factory.mktemp("planning")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # MLflow's artifacts (./mlruns) stay in the folder
        for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
            mp.delenv(var, raising=False)
        mp.setenv("ABLATE_CACHE", str(folder / "cache"))
        servers.fresh_mlflow_db(folder)
        adaptive = write_study(folder, "adaptive", seeds={"min": 3, "max": 5}, min_effect=0.01)
        single = write_study(folder, "single", seeds=1, min_effect=0.5)
        logs = {}
        for path in (adaptive, single):
            log = io.StringIO()
            result = run_study(load_study(path), settings(folder, path), progress=False, stream=log)
            logs[path.stem] = (result, log.getvalue())
        yield {"folder": folder, "adaptive": adaptive, "single": single, "logs": logs,
               "uri": f"sqlite:///{folder / 'mlflow.db'}"}
    torch.set_num_threads(threads)


def test_adaptive_seeds_add_a_round_record_it_and_a_rerun_does_not_decide_again(ran, capsys):
    folder, path = ran["folder"], ran["adaptive"]
    result, log = ran["logs"]["adaptive"]
    assert result.complete and result.counts["done"] == 10 and result.seeds == (0, 1, 2, 3, 4)
    assert "study adaptive, budget default: 6 trials; 0 already done, 6 to run" in log
    (line,) = [ln for ln in log.splitlines() if ln.startswith("adaptive seeds: round")]
    assert re.fullmatch(r"adaptive seeds: round 1: SD per seed [0-9.]+ tokens \(temp: 0\.5 vs 1\.0\) -> (\d+|more "
                        r"than 1000) seeds needed for min_effect 0\.01 tokens \(power 0\.8, alpha 0\.05/1\); running "
                        r"seeds 3-4 \(the max is 5\)", line), line
    assert "10 trials; 6 already done, 4 to run (extended by 4 trials)" in log
    assert log.rstrip().endswith("adaptive seeds: 5 seeds, the max: no more rounds")

    store = StudyStore(settings(folder, path).storage, "adaptive", create=False)
    assert sorted({a.seed for a in store.attempts("default")}) == [0, 1, 2, 3, 4]
    assert all(a.state == "done" for a in store.attempts("default")) and len(store.attempts("default")) == 10
    (decision,) = adaptive_rounds(store, "default")
    assert (decision.round, decision.n, decision.n_new, decision.max) == (1, 3, 5, 5) and decision.needed > 5
    client = MlflowClient(ran["uri"])
    exp = client.get_experiment_by_name("adaptive")
    (parent,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("ablate.role") == "study"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[planning.TAG_ADAPTIVE] == (
        "variance-only re-estimation: 3 -> 5 (max 5), for 80% power at min_effect 0.01, alpha 0.05/1 per contrast")
    assert parent.data.tags[TAG_SEEDS] == "5"

    log = io.StringIO()  # the same command again: the seeds in the store count; nothing runs or is decided
    again = run_study(load_study(path), settings(folder, path), progress=False, stream=log)
    assert again.seeds == (0, 1, 2, 3, 4) and again.counts["done"] == 10
    assert "10 trials; 10 already done, 0 to run" in log.getvalue() and "round 2" not in log.getvalue()
    assert log.getvalue().rstrip().endswith("adaptive seeds: 5 seeds, the max: no more rounds")
    assert len(store.attempts("default")) == 10 and adaptive_rounds(store, "default") == [decision]

    assert main(["status", str(path), "--storage", settings(folder, path).storage]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out  # the added seeds are part of the design, not a change of it
    assert [ln.split() for ln in out.splitlines()[2:5]] == [
        ["temp=1.0", "5", "0", "0", "0"], ["temp=0.5", "5", "0", "0", "0"], ["total", "10", "0", "0", "0"]]


def test_a_rerun_reuses_a_decision_kept_in_the_store(ran):
    """A decision taken at n seeds is not taken again at n: a crash between deciding and enqueueing
    resumes with the recorded n_new, whatever the data say now."""
    folder = ran["folder"]
    store = StudyStore(settings(folder, ran["adaptive"]).storage, "adaptive", create=False)
    (decision,) = adaptive_rounds(store, "default")
    from ablate.running.runner import adaptive_round

    study = load_study(ran["adaptive"])  # seeds 0-2: the n of the recorded decision
    log = io.StringIO()
    again = adaptive_round(Plan.of(study), store, settings(folder, ran["adaptive"]), {"done": 6}, stream=log)
    assert again == decision and log.getvalue().rstrip().endswith("running seeds 3-4 (the max is 5) (decided before)")


def test_plan_end_to_end_on_the_finished_trials(ran, capsys):
    path, uri = ran["adaptive"], ran["uri"]
    assert main(["plan", str(path), "--tracking-uri", uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"study adaptive ({path}): seeds for budget 'default', planned from the 10 finished trials of budget 'default'"
    assert lines[2].startswith("planned for: every contrast (1): the study declares no primary: contrasts")
    assert lines[3] == "effect: the study's min_effect, 0.01 tokens"
    assert lines[4].startswith("test: two-sided paired t-test at alpha 0.05 / 1 = 0.05 per contrast")
    assert lines[6].split() == ["contrast", "pilot", "seeds", "SD", "per", "seed", "difference", "effect", "seeds",
                                "needed", "resolves", "at", "n", "verdict", "at", "n"]
    row = lines[7].split()
    assert row[:5] == ["temp:", "0.5", "vs", "1.0", "5"] and row[9:11] == ["0.01", "tokens"]

    # a min_effect about the SD asks for a finite count: the recommendation line
    pilot = planning.read_pilot(Plan.of(load_study(path).with_seeds(range(5)), "default"), uri)
    (c,) = pilot.inference.contrasts
    edited = write_study(ran["folder"], "adaptive-plan", seeds=5, min_effect=float(c.sd_per_seed), primary=["temp"])
    edited.write_text(edited.read_text().replace("name: adaptive-plan", "name: adaptive"))
    assert main(["plan", str(edited), "--tracking-uri", uri, "--alpha", "0.05", "--power", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "planned for: the study's 1 primary contrast (primary: temp)" in out
    assert "driven by: temp: 0.5 vs 1.0 (it needs the most seeds)" in out
    assert "the study file runs 5 seeds: set `seeds: 10` to follow this plan" in out  # d = 1: 10 seeds
    assert re.search(r"at 10 seeds: 2 arms x 10 seeds = 20 trials at budget 'default', ~\d+ s on 1 worker, ~\d+ s with "
                     r"--workers 2", out), out
    assert re.search(r"\nseeds: 10  \(20 trials, ~\d+ s with --workers 2\)$", out.rstrip()), out


def test_plan_with_one_pilot_seed_says_how_many_to_run_first(ran, capsys):
    assert main(["plan", str(ran["single"]), "--tracking-uri", ran["uri"]]) == 0
    out = capsys.readouterr().out
    assert "no SD can be estimated from 1 pilot seed (it needs 2 or more); run at least 3 seeds of every arm first" in out
    assert out.rstrip().endswith("seeds: unknown  (run 3 pilot seeds first)")


def test_plan_bad_input_exits_2_and_writes_nothing(ran, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path, uri = str(ran["adaptive"]), ran["uri"]
    nomin = write_study(tmp_path, "nomin", seeds=3)
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (["plan", path, "--budget", "huge", "--tracking-uri", uri], "unknown budget 'huge'"),
        (["plan", path, "--pilot", "shrot", "--tracking-uri", uri], "--pilot 'shrot' is not a budget of the study; "
                                                                    "budgets: default, short; did you mean 'short'?"),
        (["plan", path, "--power", "1.5", "--tracking-uri", uri], "--power 1.5: must lie strictly between 0 and 1"),
        (["plan", path, "--pilot", "short", "--tracking-uri", uri], "no finished trials of budget 'short'"),
        (["plan", path], f"there is no MLflow store at {tmp_path / 'mlflow.db'}"),  # nothing is created
        (["plan", str(nomin), "--tracking-uri", uri], "the study also declares no min_effect"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("ablate plan: error: ") and message in err, (argv, err)
        assert err.count("\n") == 1  # one message, no traceback
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert "run a pilot first, e.g. `ablate run" in main_err(["plan", str(nomin), "--tracking-uri", uri], capsys)


def main_err(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_plan_from_a_report_folder_states_the_verdict_and_the_effect_its_seeds_resolve(tmp_path, capsys):
    """`ablate plan --from DIR` reads a report's results.csv (no MLflow): per planned contrast the
    report's verdict and the minimum detectable effect at the pilot's seeds, by hand."""
    path = write_study(tmp_path, "fromcsv", seeds=4, min_effect=2.0, primary=["temp"])
    base, diffs = [10.0, 11.0, 12.0, 13.0], [1.0, 1.2, 0.8, 1.0]
    rows = [{"key": f"k{a}{s}", "arm": f"temp={t}", "seed": s, "temp": t, "state": "done", "objective": v}
            for a, (t, values) in enumerate([("1.0", base), ("0.5", [b + d for b, d in zip(base, diffs)])])
            for s, v in enumerate(values)]
    folder = tmp_path / "report"
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    assert main(["plan", str(path), "--from", str(folder)]) == 0
    out = capsys.readouterr().out
    sd = float(np.std(diffs, ddof=1))
    mde = inference.resolvable_effect(sd, 4, alpha=0.05)
    row = next(line for line in out.splitlines() if line.strip().startswith("temp: 0.5 vs 1.0"))
    assert row.split()[4:] == ["4", f"{sd:.3g}", "tokens", "+1", "tokens", "2", "tokens", "2",
                               f"{mde:.3g}", "tokens", "detected"], row
    assert "resolved: every planned contrast (1) is detected or equivalent at the pilot's seeds" in out
    assert "planned from the 8 finished trials" in out
    assert main(["plan", str(path), "--from", str(tmp_path / "nothing")]) == 2
    assert "no results.csv there" in capsys.readouterr().err


def test_plan_counts_trials_and_time_per_context(tmp_path, capsys):
    """A study over contexts (2 tasks x 2 models): `ablate plan --from` a results.csv prints, beside the
    whole study's trials, each context's trials and time (what the timing model of `ablate show` gives)."""
    from test_study import CONTEXTS

    text = CONTEXTS.replace("values: [tiny-llama, tiny-gpt2, tiny-qwen2]", "values: [tiny-llama, tiny-gpt2]")
    path = tmp_path / "travels.yaml"
    path.write_text(text.replace("seeds: 2", "seeds: 4") + "min_effect: 0.05\n")
    study = load_study(path)
    rng = np.random.default_rng(0)
    rows = [{"key": s.key, "arm": s.arm, "seed": s.seed, "state": "done", "objective": 0.5 + rng.normal(0, 0.05),
             **s.levels} for s in Plan.of(study).specs]
    folder = tmp_path / "report"
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    assert main(["plan", str(path), "--from", str(folder)]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("per context (task, model): 4 contexts, each 3 arms x")]
    per = planning.context_seconds(study, "default", 1)
    assert len(per) == 4 and all(f"{ctx} " in line for ctx in per)
