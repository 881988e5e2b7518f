"""Per-arm tuning (``tune:``) end to end with real tiny trials: one Optuna TPE study per arm on the
study store's storage, main trials at each arm's best values, resumption without retuning."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from ablate.cli import main
from ablate.config import TrialConfig
from ablate.paths import STORE_FILE
from ablate.running.tuner import TUNE_SEED_OFFSET, Tuner, tuning_seeds, tuning_study_name
from ablate.store import StudyStore, open_storage
from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import Tracker, study_runs
from ablate.tracking.results import load_results

TINY = {
    "model.name": "micro-llama", "task.difficulty": 1, "warmstart.enabled": False,
    "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 16,
    "algo.minibatches": 1, "train.steps": 1, "eval.n_problems": 4,
}
LOW, HIGH = 1.0e-5, 1.0e-3


def write_study(folder: Path, name: str = "tuned") -> Path:
    doc = {
        "name": name, "base": TINY,
        "factors": {"loss_norm": {"levels": {"sequence": {"loss.aggregation": "seq-mean-token-mean"},
                                             "token": {"loss.aggregation": "token-mean"}}}},
        "seeds": 1, "budgets": {"smoke": {"train.steps": 1}},
        "objective": {"metric": "eval/accuracy", "mode": "max"},
        "tune": {"params": {"optim.lr": {"low": LOW, "high": HIGH, "log": True}}, "trials": 2, "budget": "smoke",
                 "seeds": 1},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def tuning_trials(storage: str, study: str, arm: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(storage=open_storage(storage), study_name=tuning_study_name(study, arm)).get_trials()


def test_tuned_plan_puts_each_arms_values_into_its_configs_and_keys(tmp_path):
    study = load_study(write_study(tmp_path))
    best = {"loss_norm=sequence": {"optim.lr": 2.0e-4}, "loss_norm=token": {"optim.lr": 3.0e-5}}
    specs = Plan.of(study, "default").with_tuned(best).specs
    plain = {s.arm: s for s in Plan.of(study, "default").specs}
    assert [s.arm for s in specs] == ["loss_norm=sequence", "loss_norm=token"]
    for s in specs:
        assert s.config.optim.lr == best[s.arm]["optim.lr"]
        assert s.config.loss.aggregation == plain[s.arm].config.loss.aggregation and s.seed == 0
        assert s.key == s.config.trial_key() != plain[s.arm].key
    assert tuning_seeds(study.tune) == [TUNE_SEED_OFFSET]


def test_run_tunes_each_arm_then_runs_main_trials_at_its_best_values_and_resumes(workdir, capsys):
    path = write_study(workdir)
    assert main(["run", str(path), "--threads", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    study = load_study(path)
    storage = str(workdir / "runs" / "tuned" / STORE_FILE)
    tuner = Tuner(study, storage)
    best = {}
    for arm in study.arms:
        trials = tuning_trials(storage, "tuned", arm.name)
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
        assert all(t.user_attrs["seeds"] == [1000] and t.user_attrs["budget"] == "smoke" for t in trials)
        top = max(trials, key=lambda t: (t.value, -t.number))  # ties: the first trial
        best[arm.name] = tuner.best_values(arm.name)
        assert best[arm.name] == {"optim.lr": top.params["optim.lr"]}
        assert LOW <= best[arm.name]["optim.lr"] <= HIGH
        assert f"tuned {arm.name}: {best[arm.name]}" in err
    # the main trials ran with the best lr of their arm (their keys include it)
    store = StudyStore(storage, "tuned")
    done = {a.key for a in store.attempts("default", states=["done"])}
    plan = Plan.of(study, "default").with_tuned(best)
    specs = plan.specs
    assert done == {s.key for s in specs} and len(done) == 2
    for s in specs:
        assert s.config.optim.lr == best[s.arm]["optim.lr"] != TrialConfig().optim.lr
    # the report says each arm's tuned values and keeps them (tuned.json), so that a report folder alone
    # rebuilds the plan that ran (ablate report --from, tests/test_committed_reports.py)
    folder = workdir / "reports" / "tuned"
    assert json.loads((folder / "tuned.json").read_text()) == best
    text = (folder / "README.md").read_text()
    assert "each arm ran at its own tuned values (tune:, in tuned.json): sequence: optim.lr=" in text
    from ablate.report.folder import load_report_folder

    again = load_report_folder(study, folder)
    assert Plan.of(study, "default").recorded(again.parent).keys == plan.keys
    # the results (and so the report) read the tuned trials: the plan that ran is rebuilt from the
    # parent run's tags, so no trial shows as pending although every one ran
    res = load_results(Plan.of(study, "default"))
    assert set(res.trials["key"]) == done and set(res.trials["state"]) == {"done"}, res.trials
    # tuning trials are logged like any other: 2 arms x 2 tuning trials x 1 seed under "tuned (tune:smoke)"
    parent, runs = study_runs(Tracker(), "tuned", "tune:smoke")
    assert parent is not None and parent.status == "FINISHED" and len(runs) == 4
    assert all(r.status == "FINISHED" and r.tags["ablate.seed"] == "1000" for r in runs)
    # ablate status knows the tuned keys: every trial done, no design-difference note
    capsys.readouterr()
    assert main(["status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out and re.search(r"total\s+2\s+0\s+0\s+0", out), out
    # a rerun neither tunes again nor reruns the main trials
    assert main(["run", str(path), "--threads", "1", "--no-progress"]) == 0
    for arm in study.arms:
        assert len(tuning_trials(storage, "tuned", arm.name)) == 2
        assert Tuner(study, storage).best_values(arm.name) == best[arm.name]
    assert {a.key for a in store.attempts("default")} == done


def test_best_values_before_tuning_is_an_error_naming_the_fix(tmp_path):
    from ablate.errors import AblateError

    study = load_study(write_study(tmp_path))
    tuner = Tuner(study, str(tmp_path / STORE_FILE))
    with pytest.raises(AblateError, match=r"arm loss_norm=sequence has 0 of 2 tuning trials; run `ablate run`"):
        tuner.best_values("loss_norm=sequence")


def test_a_smoke_run_tunes_once_per_arm_at_smoke_in_studies_of_its_own(workdir):
    """--budget smoke checks the tuning's plumbing: one trial per arm at the smoke budget, stored as
    <study>/tune@smoke/<arm>, never in the study's own tuning (a later real run tunes from scratch)."""
    from ablate.running.tuner import tuning_for_budget

    path = write_study(workdir)
    doc = yaml.safe_load(path.read_text())
    doc["tune"] = {**doc["tune"], "budget": "default", "trials": 3}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    study = load_study(path)
    assert tuning_for_budget(study, "default") is study
    smoke = tuning_for_budget(study, "smoke").tune
    assert (smoke.budget, smoke.trials, smoke.label) == ("smoke", 1, "@smoke")
    assert main(["run", str(path), "--threads", "1", "--no-progress", "--budget", "smoke"]) == 0
    storage = str(workdir / "runs" / "tuned" / STORE_FILE)
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(storage))}
    assert {"tuned/tune@smoke/loss_norm=sequence", "tuned/tune@smoke/loss_norm=token"} <= names
    assert not any(n.startswith("tuned/tune/") for n in names)
    for arm in study.arms:
        (trial,) = optuna.load_study(storage=open_storage(storage),
                                     study_name=f"tuned/tune@smoke/{arm.name}").get_trials()
        assert trial.user_attrs["budget"] == "smoke"
