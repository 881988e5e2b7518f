"""Study files: loading, expansion of every design, exclusions, paired seeds, and `ablate validate` /
`ablate show` on valid and malformed files (exit 2, the right message, nothing created)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ablate.cli import main
from ablate.config import TrialConfig
from ablate.errors import AblateError
from ablate.study import (
    LineDict,
    Study,
    StudyError,
    TrialSpec,
    level_name,
    load_study,
    read_yaml,
)
from ablate.study.designs import DESIGNS
from ablate.study.plan import Plan
from ablate.study.timing import estimate_study_seconds

DATA = Path(__file__).parent / "data" / "studies"

QUICKSTART = """\
name: quickstart
description: What question this study answers.
plugins: []
base: {task.name: addition}
factors:
  loss_norm:
    description: How per-token losses are averaged.
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token:    {loss.aggregation: token-mean}
  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
design: full
baseline: {loss_norm: sequence, clip_high: 0.2}
exclude: [{loss_norm: token, clip_high: 0.28}]
seeds: 3
budgets: {smoke: {train.steps: 2}, default: {}, full: {train.steps: 400}}
objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 3}
tune: {params: {optim.lr: {low: 1.0e-5, high: 1.0e-3, log: true}}, trials: 8, budget: smoke, seeds: 1}
"""

TAIL = "seeds: 2\nobjective: {metric: eval/accuracy, mode: max}\n"


def write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """Run ``ablate ARGS`` in an empty working directory; assert it created nothing there or in DATA."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    def run(*args: str) -> tuple[int, str, str]:
        before, data_before = listing(cwd), listing(DATA)
        rc = main(list(args))
        out, err = capsys.readouterr()
        assert listing(cwd) == before == []
        assert listing(DATA) == data_before
        return rc, out, err

    return run


# ------------------------------------------------------------------------------------ expansion


def test_quickstart_loads_with_every_key(tmp_path):
    study = load_study(write(tmp_path, QUICKSTART))
    assert study.name == "quickstart" and study.design_name == "full"
    assert [f.name for f in study.factors] == ["loss_norm", "clip_high"]
    assert study.factor("clip_high").level_names() == ["0.2", "0.28"]
    assert study.factor("clip_high").path == "loss.clip_high"
    assert study.baseline == {"loss_norm": "sequence", "clip_high": "0.2"}
    assert [a.name for a in study.arms] == [
        "loss_norm=sequence,clip_high=0.2",
        "loss_norm=sequence,clip_high=0.28",
        "loss_norm=token,clip_high=0.2",
    ]
    assert [a.baseline for a in study.arms] == [True, False, False]
    assert [a.name for a in study.excluded] == ["loss_norm=token,clip_high=0.28"]
    assert study.seeds == (0, 1, 2)
    assert study.budgets == {"default": {}, "smoke": {"train.steps": 2}, "full": {"train.steps": 400}}
    assert (study.objective.metric, study.objective.mode, study.objective.last_n) == ("eval/accuracy", "max", 3)
    assert study.tune is not None and study.tune.budget == "smoke" and study.tune.seeds == (0,)
    (param,) = study.tune.params
    assert (param.path, param.low, param.high, param.log) == ("optim.lr", 1.0e-5, 1.0e-3, True)
    assert study.aliasing is None and study.n_trials == 9
    assert type(study.raw) is dict and study.raw == yaml.safe_load(QUICKSTART)


def test_expand_pairs_seeds_and_resolves_configs(tmp_path):
    study = load_study(write(tmp_path, QUICKSTART))
    specs = Plan.of(study, "smoke").specs
    assert len(specs) == 3 * 3
    # seed-major order: all arms at seed 0, then at seed 1, ...
    assert [(s.seed, s.arm) for s in specs] == [(seed, a.name) for seed in (0, 1, 2) for a in study.arms]
    by_arm: dict[str, set[int]] = {}
    for s in specs:
        by_arm.setdefault(s.arm, set()).add(s.seed)
        assert s.study == "quickstart" and s.budget == "smoke"
        assert s.key == s.config.trial_key()
        assert s.config.seed == s.seed and s.config.train.steps == 2
        assert s.config.task.name == "addition"
        assert s.config.loss.clip_high == float(s.levels["clip_high"])
        expected = {"sequence": "seq-mean-token-mean", "token": "token-mean"}[s.levels["loss_norm"]]
        assert s.config.loss.aggregation == expected
    assert all(seeds == {0, 1, 2} for seeds in by_arm.values())  # paired: the same seeds for every arm
    assert len({s.key for s in specs}) == 9
    # at one seed, two arms differ only in the paths their factors set
    flat = {(s.arm, s.seed): s.config.to_flat_dict() for s in specs}
    a, b = study.arms[0].name, study.arms[2].name
    diff = {k for k in flat[(a, 0)] if flat[(a, 0)][k] != flat[(b, 0)][k]}
    assert diff == {"loss.aggregation"}
    diff = {k for k in flat[(a, 0)] if flat[(a, 0)][k] != flat[(a, 1)][k]}
    assert diff == {"seed"}
    # the default budget keeps the default number of steps; keys differ from the smoke budget's
    default = Plan.of(study).specs
    assert default[0].config.train.steps != 2
    assert not {s.key for s in default} & {s.key for s in specs}
    # deterministic: a second load gives the same trials
    assert [s.key for s in Plan.of(load_study(study.path), "smoke").specs] == [s.key for s in specs]
    assert len(set(specs)) == 9  # TrialSpec is hashable (by key)


def test_unknown_budget_lists_the_budgets(tmp_path):
    study = load_study(write(tmp_path, QUICKSTART))
    with pytest.raises(AblateError, match=r"unknown budget 'smok'; allowed: default, smoke, full; did you mean 'smoke'"):
        Plan.of(study, "smok")


def test_explicit_seed_list(tmp_path):
    path = write(tmp_path, "name: s\nfactors: {clip_high: {path: loss.clip_high, values: [0.2, 0.28]}}\n"
                 "seeds: [7, 3]\nobjective: {metric: eval/accuracy, mode: min}\n")
    specs = Plan.of(load_study(path)).specs
    assert [(s.seed, s.levels["clip_high"]) for s in specs] == [(7, "0.2"), (7, "0.28"), (3, "0.2"), (3, "0.28")]


def test_shorthand_level_names_and_yaml_1_2_scalars(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: names
        factors:
          components: {path: reward.components, values: [[final_answer], [final_answer, format]]}
          sampling: {path: algo.dynamic_sampling, values: [false, true]}
          lr: {path: optim.lr, values: [1e-5, 3.0e-4]}
          switch:
            levels:
              off: {}
              on: {loss.clip_high: 0.28}
        baseline: {components: [final_answer], sampling: false, lr: 1e-5, switch: off}
        """) + TAIL)
    study = load_study(path)
    assert study.factor("components").level_names() == ["final_answer", "final_answer+format"]
    assert study.factor("sampling").level_names() == ["false", "true"]
    assert study.factor("lr").level_names() == ["1e-05", "0.0003"]  # 1e-5 is a float, as in YAML 1.2
    assert study.factor("switch").level_names() == ["off", "on"]  # not booleans, as in YAML 1.1
    assert study.baseline == {"components": "final_answer", "sampling": "false", "lr": "1e-05", "switch": "off"}
    assert len(study.arms) == 16
    arm = next(a for a in study.arms if a.levels["components"] == "final_answer+format")
    cfg = study.config(arm)
    assert tuple(cfg.reward.components) == ("final_answer", "format")
    assert level_name(None) == "null" and level_name(0.2) == "0.2"


def test_one_at_a_time_with_partial_exclusion(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: oaat
        factors:
          clip_high: {path: loss.clip_high, values: [0.2, 0.28, 0.35]}
          clip_low: {path: loss.clip_low, values: [0.2, 0.1]}
          agg:
            levels:
              seq: {loss.aggregation: seq-mean-token-mean}
              tok: {loss.aggregation: token-mean}
        design: one_at_a_time
        baseline: {clip_high: 0.2, clip_low: 0.2, agg: seq}
        exclude: [{clip_high: 0.35}]
        """) + TAIL)
    study = load_study(path)
    assert [a.name for a in study.arms] == [
        "clip_high=0.2,clip_low=0.2,agg=seq",
        "clip_high=0.28,clip_low=0.2,agg=seq",
        "clip_high=0.2,clip_low=0.1,agg=seq",
        "clip_high=0.2,clip_low=0.2,agg=tok",
    ]
    assert [a.name for a in study.excluded] == ["clip_high=0.35,clip_low=0.2,agg=seq"]
    assert len(Plan.of(study).specs) == 4 * 2


def test_exclusion_naming_a_subset_of_factors_drops_every_matching_arm(tmp_path):
    text = QUICKSTART.replace("exclude: [{loss_norm: token, clip_high: 0.28}]", "exclude: [{loss_norm: token}]")
    study = load_study(write(tmp_path, text))
    assert [a.name for a in study.arms] == ["loss_norm=sequence,clip_high=0.2", "loss_norm=sequence,clip_high=0.28"]
    assert len(study.excluded) == 2


def test_exclusions_remove_invalid_combinations(tmp_path):
    text = (DATA / "level_combination.yaml").read_text()
    text += "exclude: [{advantage: grpo, critic: on}, {advantage: gae, critic: off}]\n"
    study = load_study(write(tmp_path, text))
    assert [a.name for a in study.arms] == ["advantage=grpo,critic=off", "advantage=gae,critic=on"]


FRACTIONAL = """\
name: frac
factors:
  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
  clip_low: {path: loss.clip_low, values: [0.2, 0.1]}
  agg:
    levels:
      seq: {loss.aggregation: seq-mean-token-mean}
      tok: {loss.aggregation: token-mean}
  lr: {path: optim.lr, values: [1.0e-4, 3.0e-4]}
design: {name: fractional, resolution: IV}
""" + TAIL


def test_fractional_study(tmp_path):
    study = load_study(write(tmp_path, FRACTIONAL))
    assert len(study.arms) == 8 and study.n_trials == 16
    assert study.aliasing is not None and study.aliasing.resolution == 4
    assert study.aliasing.generators == (("lr", ("clip_high", "clip_low", "agg")),)
    assert study.aliasing.aliases({"clip_high", "clip_low"}) == [frozenset({"agg", "lr"})]
    for f in ("clip_high", "clip_low", "agg", "lr"):
        assert Counter(a.levels[f] for a in study.arms).most_common()[0][1] == 4


def test_random_study_is_balanced(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: rand
        factors:
          clip_high: {path: loss.clip_high, values: [0.2, 0.28, 0.35]}
          clip_low: {path: loss.clip_low, values: [0.2, 0.1, 0.05]}
          agg:
            levels:
              seq: {loss.aggregation: seq-mean-token-mean}
              tok: {loss.aggregation: token-mean}
        design: {name: random, n: 7, seed: 3}
        """) + TAIL)
    study = load_study(path)
    assert len(study.arms) == 7 and len({a.name for a in study.arms}) == 7
    for f in study.factors:
        counts = Counter(a.levels[f.name] for a in study.arms)
        assert sorted(counts.values()) == ([2, 2, 3] if len(f.levels) == 3 else [3, 4])
    assert [a.name for a in load_study(path).arms] == [a.name for a in study.arms]


def test_every_design_expands_through_a_study(tmp_path):
    options = {"full": "full", "one_at_a_time": "one_at_a_time", "fractional": "{name: fractional, resolution: 3}",
               "random": "{name: random, n: 3}"}
    counts = {"full": 8, "one_at_a_time": 4, "fractional": 4, "random": 3}
    for name, design in options.items():
        path = write(tmp_path, textwrap.dedent(f"""\
            name: every-{name.replace('_', '-')}
            factors:
              clip_high: {{path: loss.clip_high, values: [0.2, 0.28]}}
              clip_low: {{path: loss.clip_low, values: [0.2, 0.1]}}
              lr: {{path: optim.lr, values: [1.0e-4, 3.0e-4]}}
            design: {design}
            baseline: {{clip_high: 0.2, clip_low: 0.2, lr: 1.0e-4}}
            """) + TAIL, name=f"{name}.yaml")
        specs = Plan.of(load_study(path)).specs
        assert len(specs) == counts[name] * 2, name
        assert Counter(s.seed for s in specs) == {0: counts[name], 1: counts[name]}


# -------------------------------------------------------------------------------------- YAML


def test_loader_keeps_lines_and_records_duplicates(tmp_path):
    path = write(tmp_path, "name: x\nseeds: 2\nfactors:\n  a: {path: loss.clip_high, values: [1]}\nseeds: 3\n")
    doc = read_yaml(path)
    assert isinstance(doc, LineDict)
    assert doc.key_lines == {"name": 1, "seeds": 2, "factors": 3}
    assert doc.duplicates == [("seeds", 5, 2)]
    assert doc["factors"].key_lines == {"a": 4}
    assert doc["factors"]["a"]["values"].item_lines == [4]
    assert yaml.safe_load(path.read_text())["seeds"] == 3  # what plain safe_load silently does


def test_duplicate_keys_are_errors_at_every_depth(tmp_path):
    path = write(tmp_path, QUICKSTART + "seeds: 4\nobjective: {metric: a, mode: max, mode: min}\n")
    with pytest.raises(StudyError) as info:
        load_study(path)
    msgs = [str(p) for p in info.value.problems]
    assert f"{path}:19: seeds: duplicate key (first at line 15); keep only one of them" in msgs
    assert f"{path}:20: objective: duplicate key (first at line 17); keep only one of them" in msgs
    assert f"{path}:20: objective.mode: duplicate key (first at line 20); keep only one of them" in msgs


def test_merge_keys_are_not_duplicates(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: merge
        budgets:
          smoke: &small {train.steps: 2, eval.every: 1}
          tiny: {<<: *small, train.steps: 1}
        factors: {clip_high: {path: loss.clip_high, values: [0.2, 0.28]}}
        """) + TAIL)
    assert load_study(path).budgets["tiny"] == {"train.steps": 1, "eval.every": 1}


# ------------------------------------------------------------------------------ malformed files

# fixture -> problems expected (line, key, text of the fix); the file's path comes first in each line.
MALFORMED = {
    "bad_name.yaml": [(2, "name", "must match [a-z0-9_-]+; did you mean 'quick-start'?")],
    "unknown_top_key.yaml": [(5, "seed", "unknown top-level key 'seed'; allowed: name,"), (5, "seed", "did you mean 'seeds'?"),
                             (1, "seeds", "missing; add 'seeds:'")],
    "duplicate_key.yaml": [(8, "factors.loss_norm.levels.token", "duplicate key (first at line 6); keep only one")],
    "empty_levels.yaml": [(6, "factors.loss_norm.levels", "needs at least one level")],
    "bad_level_value.yaml": [(7, "factors.loss_norm.levels.token.loss.aggregation", "unknown loss aggregation 'tokne-mean'"),
                             (7, "factors.loss_norm.levels.token.loss.aggregation", "did you mean 'token-mean'?")],
    "unknown_path.yaml": [(4, "factors.clip_high.path", "loss.clip_hihg: unknown key (did you mean 'loss.clip_high'?)")],
    "unknown_design.yaml": [(5, "design", "unknown design 'ful'; allowed: full, one_at_a_time, fractional, random")],
    "bad_design_option.yaml": [(8, "design.resolutoin", "unknown option 'resolutoin'; allowed: resolution; did you mean")],
    "fractional_three_levels.yaml": [(7, "design", "exactly 2 levels per factor; factor 'clip_high' has 3")],
    "baseline_unknown_level.yaml": [(9, "baseline.loss_norm", "allowed: sequence, token; did you mean 'token'?")],
    "one_at_a_time_without_baseline.yaml": [(6, "baseline", "the design needs a 'baseline:'")],
    "exclude_unknown_factor.yaml": [(11, "exclude[1].loss_nrom", "unknown factor 'loss_nrom'; allowed: loss_norm, clip_high")],
    "excluded_baseline.yaml": [(11, "exclude[0]", "excludes the baseline arm loss_norm=sequence,clip_high=0.2")],
    "repeated_seeds.yaml": [(5, "seeds", "seeds repeat: [1]; allowed: a positive integer n")],
    "bad_evidence.yaml": [(6, "evidence", "must be true or false (false: a demo whose report is never committed")],
    "bad_budget.yaml": [(7, "budgets.smoke.train.step", "unknown key (did you mean 'train.steps'?)")],
    "bad_objective.yaml": [(8, "objective.mode", "allowed: max, min; did you mean 'max'?"),
                           (9, "objective.summary", "allowed: last, mean, max, min, auc"),
                           (10, "objective.last_n", "must be an integer >= 1, got 0")],
    "bad_tune.yaml": [(10, "tune.params.optim.lr", "needs low < high"),
                      (12, "tune.budget", "unknown budget 'smok'; allowed: default, smoke; did you mean 'smoke'?")],
    "missing_plugin.yaml": [(3, "plugins[0]", "cannot import 'ablate_test_no_such_plugin_module': ModuleNotFoundError")],
    "colliding_factors.yaml": [(5, "factors.dapo", "sets 'loss.clip_high', which factor 'clip_high' also sets")],
    "python_tag.yaml": [(5, "yaml", "only plain (safe) YAML is accepted")],
    "yaml_syntax.yaml": [(5, "yaml", "invalid YAML: while parsing a flow mapping")],
    "missing_required.yaml": [(1, "factors", "missing; add 'factors:'"), (1, "seeds", "missing; add 'seeds:'"),
                              (1, "objective", "missing; add 'objective:'")],
    "identical_arms.yaml": [(3, "arm loss_norm=token_again", "the same configuration as arm loss_norm=token")],
    "random_too_many.yaml": [(6, "design.n", "asks for 5 arms but the factors have only 4 combinations")],
    "level_combination.yaml": [(3, "arm advantage=gae,critic=off", "set critic.enabled=true"),
                               (3, "arm advantage=gae,critic=off", "add the combination to 'exclude:'"),
                               (3, "arm advantage=grpo,critic=on", "set critic.enabled=false")],
    "four_mistakes.yaml": [(4, "base.task.name", "unknown task 'additon'"), (4, "base.task.name", "did you mean 'addition'?"),
                           (9, "factors.clip_high.levels.dapo.loss.clip_hihg", "did you mean 'loss.clip_high'?"),
                           (10, "baseline.clip_high", "unknown level of 'clip_high' 'pp0'; allowed: ppo, dapo; "
                                                      "did you mean 'ppo'?"),
                           (12, "objective.metric", "unknown metric 'eval/acuracy'; did you mean 'eval/accuracy'? "
                                                    "(docs/metrics.md lists what a trial logs)")],
    "many_problems.yaml": [(2, "name", "did you mean 'many-problems'?"), (5, "design", "did you mean 'full'?"),
                           (6, "seeds", "must be at least 1, got 0"), (7, "objective.mode", "unknown mode 'up'"),
                           (8, "extra", "unknown top-level key 'extra'")],
}


def test_every_fixture_is_covered():
    assert sorted(p.name for p in DATA.glob("*.yaml")) == sorted(MALFORMED)
    assert len(MALFORMED) >= 15


@pytest.mark.parametrize("fixture", sorted(MALFORMED))
def test_malformed_study_exits_2_with_file_line_key_and_fix(cli, fixture):
    path = DATA / fixture
    rc, out, err = cli("validate", str(path))
    assert rc == 2 and out == ""
    lines = err.splitlines()
    n = len({(line, key) for line, key, _ in MALFORMED[fixture]})
    assert lines[0] == f"invalid study file {path} ({n} problem{'s' if n > 1 else ''}):"
    assert len(lines) == 1 + n
    for line, key, fix in MALFORMED[fixture]:
        prefix = f"  {path}:{line}: {key}: "
        assert any(ln.startswith(prefix) and fix in ln for ln in lines), (prefix, fix, err)


def test_several_problems_are_reported_at_once_in_line_order():
    with pytest.raises(StudyError) as info:
        load_study(DATA / "many_problems.yaml")
    assert [(p.line, p.key) for p in info.value.problems] == [
        (2, "name"), (5, "design"), (6, "seeds"), (7, "objective.mode"), (8, "extra")]


def test_path_problems_are_reported_beside_the_study_s_own_in_one_pass(cli, tmp_path):
    """Every key of base, budgets and the levels that parsed is checked on its own whatever else is wrong
    (a bad factor, baseline, design or metric): one `ablate validate` names every mistake, exit 2, nothing
    written. A combination of keys (a rule between them) needs the arms, and is checked once the study's
    own problems are fixed."""
    path = write(tmp_path, textwrap.dedent("""\
        name: everything
        base: {rollout.group_sise: 4}
        factors:
          clip_high: {path: loss.clip_hihg, values: [0.2, 0.28]}
          kl:
            levels:
              none: {kl.placement: nowhere}
              loss: {kl.placement: loss}
          broken: {levels: []}
        design: one_at_a_time
        seeds: 2
        budgets: {smoke: {train.step: 2}}
        objective: {metric: loss/polcy, mode: min}
        report: {metrics: [reward/acuracy]}
        """))
    rc, out, err = cli("validate", str(path))
    assert rc == 2 and out == ""
    expected = [
        (2, "base.rollout.group_sise", "did you mean 'rollout.group_size'?"),
        (4, "factors.clip_high.path", "invalid: loss.clip_hihg: unknown key (did you mean 'loss.clip_high'?)"),
        (7, "factors.kl.levels.none.kl.placement", "'nowhere'"),
        (9, "factors.broken.levels", "needs at least one level"),
        (12, "budgets.smoke.train.step", "did you mean 'train.steps'?"),
        (13, "objective.metric", "unknown metric 'loss/polcy'; did you mean 'loss/policy'?"),
        (14, "report.metrics[0]", "unknown metric 'reward/acuracy'; did you mean 'reward/accuracy'? (docs/metrics.md "
                                  "lists what a trial logs; reward/<c> for each reward component c: final_answer,"),
    ]
    lines = err.splitlines()
    assert lines[0] == f"invalid study file {path} ({len(expected)} problems):" and len(lines) == 1 + len(expected), err
    for (line, key, fix), got in zip(expected, lines[1:]):
        assert got.startswith(f"  {path}:{line}: {key}: ") and fix in got, (line, key, fix, got)
    fixed = path.read_text().replace("  broken: {levels: []}\n", "").replace("design: one_at_a_time\n", "")
    fixed = fixed.replace("loss/polcy", "loss/policy").replace("reward/acuracy", "reward/accuracy")
    rc, _, err = cli("validate", str(write(tmp_path, fixed)))  # the arms built: each key's problem once, no more
    assert rc == 2 and f"{path} (4 problems):" in err and err.count(f"{path}:") == 4, err
    assert [ln.split(": ")[1] for ln in err.splitlines()[1:]] == [key for _, key, _ in expected[:3] + expected[4:5]]


REWARD_PLUGIN = '''
"""A test plugin: registers the reward component {name!r} (logged as reward/{name})."""
from ablate.rewards import REWARDS, place_on_last_token


@REWARDS.register({name!r})
def terse(ctx):
    return place_on_last_token(-0.01 * ctx.mask.sum(dim=1).float(), ctx.mask)
'''


def test_the_objective_metric_is_one_a_trial_logs_a_plugin_s_components_included(cli, tmp_path, monkeypatch):
    """objective.metric is checked against the metric glossary (ablate/metrics.py, docs/metrics.md): its names,
    eval/pass_at_<k>, trl/<name>, and reward/<c> for each reward component registered, a study's plugins' too;
    a name that is none of them is a problem with the nearest name."""
    from ablate.rewards import REWARDS

    module, component = f"ablate_test_reward_{os.getpid()}", f"terse{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(REWARD_PLUGIN.format(name=component))
    monkeypatch.syspath_prepend(str(tmp_path))
    head = "name: metric\nfactors: {clip_high: {path: loss.clip_high, values: [0.2, 0.28]}}\nseeds: 2\n"
    try:
        for metric in ("eval/accuracy", "eval/pass_at_4", "trl/clip_ratio/region_mean", "reward/format",
                       "policy/kl_ref"):
            path = write(tmp_path, head + f"objective: {{metric: {metric}, mode: max}}\n")
            assert cli("validate", str(path))[0] == 0, metric
        unlisted = write(tmp_path, head + f"objective: {{metric: reward/{component}, mode: min}}\n")
        rc, _, err = cli("validate", str(unlisted))  # its plugin not listed: no such component, no such metric
        assert rc == 2 and f"{unlisted}:4: objective.metric: unknown metric 'reward/{component}'" in err, err
        listed = write(tmp_path, f"plugins: [{module}]\n" + head + f"objective: {{metric: reward/{component}, "
                       "mode: min}\n")
        assert cli("validate", str(listed))[0] == 0
        typo = write(tmp_path, listed.read_text().replace(f"reward/{component}", f"reward/{component[:-1]}x"))
        rc, _, err = cli("validate", str(typo))
        assert rc == 2 and f"{typo}:5: objective.metric: unknown metric 'reward/{component[:-1]}x'; did you mean " \
            f"'reward/{component}'?" in err and "each reward component c: final_answer" in err, err
    finally:
        REWARDS.unregister(component)
        sys.modules.pop(module, None)


def test_validate_ok_and_bad_files_together(cli, tmp_path):
    good = write(tmp_path, QUICKSTART)
    rc, out, err = cli("validate", str(good), str(DATA / "bad_name.yaml"), str(tmp_path / "missing.yaml"))
    assert rc == 2
    assert out == f"{good}: ok (3 arms x 3 seeds = 9 trials)\n"
    assert "bad_name.yaml:2: name:" in err
    assert f"{tmp_path / 'missing.yaml'}: file: no such file; check the path" in err
    rc, out, _ = cli("validate", str(good))
    assert rc == 0 and out == f"{good}: ok (3 arms x 3 seeds = 9 trials)\n"


def test_completions_longer_than_the_model_are_refused_by_validate_run_and_train_alike(cli, tmp_path):
    """One rule for all three: rollout.max_new_tokens beyond the model's positions, exit 2, nothing created."""
    path = write(tmp_path, QUICKSTART.replace("base: {task.name: addition}",
                                              "base: {task.name: addition, rollout.max_new_tokens: 100000}"))
    fragment = "rollout.max_new_tokens: 100000 tokens do not fit in the 256 positions of model tiny-llama"
    for args in (["validate", str(path)], ["run", str(path), "--budget", "smoke"]):
        rc, out, err = cli(*args)
        assert rc == 2 and out == "", args
        assert f"{path}:4: base: " in err and fragment in err, err
    rc, out, err = cli("train", "--set", "rollout.max_new_tokens=100000")
    assert rc == 2 and fragment in err and "Traceback" not in err


def test_validate_subprocess_on_a_syntax_error(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "ablate", "validate", str(DATA / "yaml_syntax.yaml")],
                          cwd=cwd, capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{DATA / 'yaml_syntax.yaml'}:5: yaml: invalid YAML" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------------------------ plugins

PLUGIN = '''
"""A test plugin: registers the design {name!r}."""
from dataclasses import dataclass

from ablate.study.designs import DESIGNS, Design
from ablate.study.plan import Plan


@DESIGNS.register({name!r})
@dataclass(frozen=True)
class Corners(Design):
    """The all-first-levels arm and the all-last-levels arm."""

    def arms(self, factors, baseline, *, allowed=None):
        return [{{f: lv[0] for f, lv in factors.items()}}, {{f: lv[-1] for f, lv in factors.items()}}]
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A plugin module on sys.path registering a new design; both removed afterwards."""
    name = f"ablate_test_plugin_{os.getpid()}_{id(tmp_path)}"
    design = f"corners_{id(tmp_path)}"
    pdir = tmp_path / "plugins"
    pdir.mkdir()
    (pdir / f"{name}.py").write_text(PLUGIN.format(name=design))
    monkeypatch.syspath_prepend(str(pdir))
    yield name, design, pdir
    DESIGNS.unregister(design)
    sys.modules.pop(name, None)


def test_plugin_registers_a_design(cli, tmp_path, plugin):
    module, design, pdir = plugin
    base = "name: plug\nfactors:\n  clip_high: {path: loss.clip_high, values: [0.2, 0.25, 0.28]}\n"
    unlisted = write(tmp_path, base + f"design: {design}\n" + TAIL, "unlisted.yaml")
    rc, _, err = cli("validate", str(unlisted))  # the module is not imported unless listed
    assert rc == 2 and f"{unlisted}:4: design: unknown design '{design}'" in err
    assert module not in sys.modules
    listed = write(tmp_path, base + f"plugins: [{module}]\ndesign: {design}\n" + TAIL, "listed.yaml")
    rc, out, _ = cli("validate", str(listed))
    assert rc == 0 and out == f"{listed}: ok (2 arms x 2 seeds = 4 trials)\n"
    assert module in sys.modules
    assert [a.name for a in load_study(listed).arms] == ["clip_high=0.2", "clip_high=0.28"]
    assert listing(pdir) == [f"{module}.py"]  # validate wrote no __pycache__


def test_plugin_that_fails_to_import_is_a_problem(cli, tmp_path, monkeypatch):
    pdir = tmp_path / "plugins"
    pdir.mkdir()
    name = f"ablate_test_broken_{os.getpid()}"
    (pdir / f"{name}.py").write_text("raise RuntimeError('needs a GPU driver')\n")
    monkeypatch.syspath_prepend(str(pdir))
    path = write(tmp_path, f"name: broken\nplugins: [{name}]\n"
                 "factors: {clip_high: {path: loss.clip_high, values: [0.2, 0.28]}}\n" + TAIL)
    rc, _, err = cli("validate", str(path))
    assert rc == 2
    assert f"{path}:2: plugins[0]: cannot import '{name}': RuntimeError: needs a GPU driver" in err


# --------------------------------------------------------------------------------------- show


def test_show_prints_the_arm_table(cli, tmp_path):
    path = write(tmp_path, QUICKSTART)
    rc, out, _ = cli("show", str(path), "--budget", "smoke")
    assert rc == 0
    lines = out.splitlines()
    assert "budget smoke: train.steps=2 (budgets: default, smoke, full)" in lines
    assert "3 arms x 3 seeds = 9 trials" in lines
    assert lines[lines.index("3 arms x 3 seeds = 9 trials") + 1].startswith("budgets (trials, estimated CPU time on 1 worker")
    budgets = [ln for ln in lines if re.match(r" [ *](default|smoke|full) ", ln)]
    assert [b.split()[0].lstrip("*") for b in budgets] == ["default", "smoke", "full"]
    assert budgets[1].startswith(" *smoke") and "9 trials, " in budgets[1] and "[train.steps=2]" in budgets[1]
    assert all(re.search(r"9 trials, \d+m\d\ds / \d+m\d\ds  \[", b) for b in budgets)  # tiny-llama has constants
    assert "  #  loss_norm  clip_high" in lines
    assert "  1  sequence   0.2        baseline" in lines
    assert "  3  token      0.2" in lines
    assert "excluded (1): loss_norm=token,clip_high=0.28" in lines
    assert "    token     loss.aggregation=token-mean" in lines


def test_show_fractional_prints_aliasing_and_json(cli, tmp_path):
    path = write(tmp_path, FRACTIONAL)
    rc, out, _ = cli("show", str(path))
    assert rc == 0
    assert "  2^(4-1) fractional factorial, resolution IV: 8 of 16 runs" in out
    assert "    clip_high:clip_low = agg:lr" in out
    assert "    clip_high = clip_low:agg:lr" in out
    rc, out, _ = cli("show", str(path), "--json")
    data = json.loads(out)
    assert (data["n_arms"], data["n_trials"]) == (8, 16)
    from ablate.study.timing import estimate_trial_seconds

    specs = Plan.of(load_study(path), "default").specs
    assert data["estimated_seconds"] == pytest.approx(sum(estimate_trial_seconds(s) for s in specs))
    assert data["budgets"]["default"]["estimated_seconds"] == data["estimated_seconds"]
    assert data["aliasing"]["defining_relation"] == ["clip_high:clip_low:agg:lr"]
    assert ["clip_high:clip_low", "agg:lr"] in data["aliasing"]["aliases"]
    assert len(data["arms"]) == 8 and data["seeds"] == [0, 1]


def test_show_unknown_budget_exits_2(cli, tmp_path):
    rc, _, err = cli("show", str(write(tmp_path, QUICKSTART)), "--budget", "ful")
    assert rc == 2 and "unknown budget 'ful'; allowed: default, smoke, full; did you mean 'full'?" in err


def test_time_estimate_sums_the_trials_and_is_unknown_without_constants(tmp_path, monkeypatch):
    from ablate.study import timing

    study = load_study(write(tmp_path, QUICKSTART))
    specs = Plan.of(study, "smoke").specs
    assert estimate_study_seconds(specs) == pytest.approx(sum(timing.estimate_config_seconds(s.config) for s in specs))
    monkeypatch.setattr(timing, "TIMING_FILE", tmp_path / "missing.json")
    timing.load_timing.cache_clear()
    try:
        assert estimate_study_seconds(specs) is None
    finally:
        timing.load_timing.cache_clear()
    assert isinstance(study, Study) and all(isinstance(s, TrialSpec) for s in Plan.of(study, "smoke").specs)



def test_plugin_design_returning_a_bad_arm_is_a_problem(cli, tmp_path, monkeypatch):
    pdir = tmp_path / "plugins"
    pdir.mkdir()
    name, design = f"ablate_test_bad_design_{os.getpid()}", f"bad_{id(tmp_path)}"
    (pdir / f"{name}.py").write_text(
        PLUGIN.format(name=design).replace("lv[-1] for f", "'nope' for f")
    )
    monkeypatch.syspath_prepend(str(pdir))
    path = write(tmp_path, f"name: bad\nplugins: [{name}]\ndesign: {design}\n"
                 "factors: {clip_high: {path: loss.clip_high, values: [0.2, 0.28]}}\n" + TAIL)
    try:
        rc, _, err = cli("validate", str(path))
    finally:
        DESIGNS.unregister(design)
        sys.modules.pop(name, None)
    assert rc == 2
    assert f"{path}:3: design: the design returned an arm that is not one level of every factor" in err


def test_random_study_draws_around_exclusions(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: rand-ex
        factors:
          clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
          clip_low: {path: loss.clip_low, values: [0.2, 0.1]}
          lr: {path: optim.lr, values: [1.0e-4, 3.0e-4]}
        design: {name: random, n: 4, seed: 0}
        exclude: [{clip_high: 0.28, clip_low: 0.1}]
        """) + TAIL)
    study = load_study(path)
    assert len(study.arms) == 4 and study.excluded == ()  # excluded arms are never drawn
    assert not any(a.levels["clip_high"] == "0.28" and a.levels["clip_low"] == "0.1" for a in study.arms)
    for f in study.factors:
        assert sorted(Counter(a.levels[f.name] for a in study.arms).values()) == [2, 2]


def test_a_file_of_many_mistakes_prints_the_first_50_and_counts_the_rest(tmp_path):
    keys = "".join(f"unknown_{i}: 1\n" for i in range(2000))
    path = write(tmp_path, QUICKSTART + keys)
    with pytest.raises(StudyError) as exc:
        load_study(path)
    text = str(exc.value)
    assert len(exc.value.problems) == 2000 and text.count("\n  ") == 51
    assert text.rstrip().endswith("... and 1,950 more (fix these first)")


# ------------------------------------------------------------------------------- acknowledge

GSPO_CROSS = """\
name: cross
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
  ratio:
    levels:
      token: {}
      sequence: {loss.ratio_level: sequence, loss.clip_low: 3.0e-4, loss.clip_high: 4.0e-4}
""" + TAIL


def test_an_unacknowledged_cross_warns_per_arm_with_its_name(tmp_path):
    study = load_study(write(tmp_path, GSPO_CROSS))
    (warning,) = study.warnings
    assert warning.startswith("arm loss_norm=token,ratio=sequence: loss.ratio_level=sequence (GSPO)")
    assert warning.endswith("[gspo-token-sum]")
    assert study.acknowledged == () and study.acknowledged_line is None


def test_an_acknowledged_cross_is_said_once_and_not_warned(tmp_path, cli):
    path = write(tmp_path, GSPO_CROSS + "acknowledge: [gspo-token-sum]\n")
    study = load_study(path)
    assert study.warnings == ()
    assert study.acknowledged == (("gspo-token-sum", ("loss_norm=token,ratio=sequence",)),)
    rc, out, err = cli("validate", str(path))
    assert rc == 0 and "warning" not in (out + err).lower()
    assert err == ""  # a choice the study made is a note on stdout, not a warning
    (line,) = [ln for ln in out.splitlines() if "acknowledges" in ln]
    assert line == (f"{path}: note: run on purpose, as the study file acknowledges: gspo-token-sum (a sequence ratio "
                    "(GSPO) under a length-weighted loss aggregation; arm loss_norm=token,ratio=sequence)")


@pytest.mark.parametrize(("value", "fragment"), [
    ("[gspo-token-summ]", "acknowledge[0]: unknown warning name 'gspo-token-summ'; allowed: "),
    ("[gspo-ppo-clip]", "acknowledge: gspo-ppo-clip is acknowledged but no arm of this study triggers it"),
    ("gspo-token-sum", "acknowledge: must be a list of warning names"),
    ("[gspo-token-sum, gspo-token-sum]", "acknowledge[1]: gspo-token-sum is listed twice"),
])
def test_a_bad_acknowledgment_is_one_clear_problem(tmp_path, cli, value, fragment):
    path = write(tmp_path, GSPO_CROSS + f"acknowledge: {value}\n")
    rc, out, err = cli("validate", str(path))
    assert rc == 2 and out == ""
    assert f"{path}:{GSPO_CROSS.count(chr(10)) + 1}: {fragment}" in err, err


#: Context studies run before the entry rule existed (issue 54): their files commit no learning threshold, and
#: adding one now would be a rule chosen after their results were read; they warn until they are rerun
#: (generalization_scale was, under its rule, at seeds 20-25).
NO_ENTRY_RULE_YET: tuple[str, ...] = ()


def test_the_predefined_studies_print_no_warning(cli):
    files = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "studies").glob("*.yaml"))
    rc, out, err = cli("validate", *files)
    lines = [line for line in err.splitlines() if line.strip()]
    entry = [line for line in lines if "contexts: but no entry: rule" in line]
    assert sorted(Path(line.split(":")[0]).name for line in entry) == sorted(NO_ENTRY_RULE_YET), err
    assert rc == 0 and not [line for line in lines if line not in entry and "warning" in line.lower()], err
    assert "gspo-token-sum" not in err
    assert "note: run on purpose" in out and "gspo-token-sum" in out  # quickstart's deliberate cross, as a note


ENTRY_STUDY = """\
name: ctx
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
  task: {path: task.name, values: [addition, chain]}
contexts: [task]
objective: {metric: eval/accuracy, mode: max}
seeds: 3
"""


def test_a_context_study_without_an_entry_rule_gets_one_warning_line_and_a_bad_rule_one_message(tmp_path, cli):
    """Issue 54: contexts without 'entry:' validate with one warning line naming the fix; a malformed rule is an
    error naming the file, the key and the fix (exit 2); a rule without contexts is refused."""
    path = tmp_path / "ctx.yaml"
    path.write_text(ENTRY_STUDY)
    rc, out, err = cli("validate", str(path))
    assert rc == 0 and err.count("warning:") == 1 and "contexts: but no entry: rule" in err and "entry: {learns:" in err
    path.write_text(ENTRY_STUDY + "entry: {learns: 0.05, band: [0.1, 0.9], pilot: benchmarks/pilot_learning.md}\n")
    rc, out, err = cli("validate", str(path))
    assert rc == 0 and "warning" not in err, err
    assert load_study(path).entry.band == (0.1, 0.9)
    path.write_text(ENTRY_STUDY + "entry: {learns: -1, band: [0.9, 0.1], typo: 1}\n")
    rc, out, err = cli("validate", str(path))
    assert rc == 2 and "entry.learns: must be a number > 0" in err and "entry.band: must be [low, high]" in err
    assert "entry.typo" in err and str(path) in err
    path.write_text(ENTRY_STUDY.replace("contexts: [task]\n", "") + "entry: {learns: 0.05, band: [0.1, 0.9]}\n")
    rc, out, err = cli("validate", str(path))
    assert rc == 2 and "entry: is the rule by which a context enters: it needs 'contexts:'" in err


# ------------------------------------------------------------------------------- budget seeds

SEEDED = """\
name: seeded
factors:
  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
objective: {metric: eval/accuracy, mode: max}
seeds: 4
budgets:
  smoke:
    seeds: 1
    train.steps: 2
"""


def test_a_budget_runs_the_first_n_seeds(tmp_path, cli):
    from ablate.study.plan import Plan

    path = write(tmp_path, SEEDED)
    study = load_study(path)
    assert study.budget_seeds == {"smoke": 1} and study.budgets["smoke"] == {"train.steps": 2}
    smoke, default = Plan.of(study, "smoke"), Plan.of(study, "default")
    assert smoke.seeds == (0,) and len(smoke) == 2 and default.seeds == (0, 1, 2, 3) and len(default) == 8
    assert {s.key for s in smoke.specs} <= {s.key for s in Plan.of(study.with_seeds([0]), "smoke").specs}
    rc, out, _ = cli("show", str(path), "--budget", "smoke")
    assert rc == 0 and "this budget runs the first 1 of the study's 4" in out and "2 arms x 1 seed = 2 trials" in out
    assert "first 1 seed; train.steps=2" in out


@pytest.mark.parametrize(("seeds", "budget_seeds", "fragment"), [
    ("4", "5", "budgets.smoke.seeds: 5 is more than the study's 4 seeds"),
    ("4", "0", "budgets.smoke.seeds: must be an integer >= 1"),
    ("4", "two", "budgets.smoke.seeds: must be an integer >= 1 (the budget runs the study's first n seeds), got 'two'"),
    ("{min: 2, max: 8}\nmin_effect: 0.05", "1", "budgets.smoke.seeds: a budget cannot set seeds in a study with adaptive"),
])
def test_bad_budget_seeds_are_one_clear_problem(tmp_path, cli, seeds, budget_seeds, fragment):
    text = SEEDED.replace("seeds: 4", f"seeds: {seeds}").replace("    seeds: 1", f"    seeds: {budget_seeds}")
    path = write(tmp_path, text)
    rc, out, err = cli("validate", str(path))
    line = text.splitlines().index(f"    seeds: {budget_seeds}") + 1
    assert rc == 2 and f"{path}:{line}: {fragment}" in err, err


def test_extended_after_records_the_reports_read_before_an_extension(tmp_path):
    study = load_study(write(tmp_path, SEEDED.replace("seeds: 4", "seeds: 4\nextended_after: [2, 3]")))
    assert study.extended_after == (2, 3)
    assert study.fingerprint() == load_study(write(tmp_path, SEEDED)).fingerprint()  # not the study's identity
    assert {s.key for s in Plan.of(study, "default").specs} == {s.key for s in Plan.of(load_study(
        write(tmp_path, SEEDED)), "default").specs}  # nor its trials


def test_the_analysis_is_not_the_study_s_identity(tmp_path):
    """A file that changes only its analysis (objective, min_effect, primary, report metrics) is the same study:
    the same fingerprint, which binds its store and MLflow experiment, and the same trial keys. Its base, factors
    or design make another study; so does the objective of a study with tune:, whose tuning picks its trials by
    the objective. A store or experiment bound before the analysis left the identity holds the old fingerprint
    (the objective in it): the same study still owns it, with this objective or with another whose metric is a
    logged one (the file may have changed since), and another study does not."""
    import hashlib
    from dataclasses import replace

    from ablate.study import Objective

    def study(text: str) -> Study:
        return load_study(write(tmp_path, text))

    def keys(s: Study) -> set[str]:
        return {sp.key for sp in Plan.of(s, "default").specs}

    first = study(SEEDED)
    for edit in (("eval/accuracy, mode: max", "eval/format_rate, mode: min, summary: mean, last_n: 2"),
                 ("seeds: 4", "seeds: 4\nmin_effect: 0.05\nprimary: [clip_high]"),
                 ("seeds: 4", "seeds: 4\nreport: {metrics: [response/length]}")):
        edited = study(SEEDED.replace(*edit))
        assert edited.fingerprint() == first.fingerprint() and keys(edited) == keys(first), edit
    for edit in (("factors:", "base: {optim.lr: 0.003}\nfactors:"), ("clip_high:", "clip:"),
                 ("seeds: 4", "seeds: 4\ndesign: {name: random, n: 1, seed: 0}")):
        assert study(SEEDED.replace(*edit)).fingerprint() != first.fingerprint(), edit
    tuned = SEEDED + "tune: {params: {optim.lr: {low: 1.0e-5, high: 1.0e-3, log: true}}, trials: 2, budget: smoke}\n"
    assert study(tuned).fingerprint() != study(tuned.replace("mode: max", "mode: min")).fingerprint()
    assert study(tuned).fingerprint() == study(tuned).legacy_fingerprint()  # a tuned study's did not change
    # the old form, as ablate computed it before: base, factor names, design and objective, hashed
    obj = {"metric": "eval/accuracy", "mode": "max", "summary": "last", "last_n": 1}
    old = json.dumps({"base": {}, "factors": ["clip_high"], "design": {"name": "full"}, "objective": obj},
                     sort_keys=True, separators=(",", ":"))
    assert first.legacy_fingerprint() == hashlib.sha256(old.encode()).hexdigest()[:16] != first.fingerprint()
    changed = replace(first, objective=Objective("eval/format_rate", "min", "mean", 3))
    assert first.owns(first.fingerprint()) and first.owns(first.legacy_fingerprint())
    assert first.owns(changed.legacy_fingerprint()) and changed.owns(first.legacy_fingerprint())
    typo = replace(first, objective=Objective("eval/acuracy", "max"))  # a metric validation refuses now
    assert not first.owns(typo.legacy_fingerprint()) and not first.owns(None)
    other = study(SEEDED.replace("factors:", "base: {optim.lr: 0.003}\nfactors:"))
    assert not first.owns(other.fingerprint()) and not first.owns(other.legacy_fingerprint())


@pytest.mark.parametrize(("value", "fragment"), [
    ("[4]", "extended_after: must be a list of the seed counts whose report was read before the seeds were "
            "extended, increasing, each from 2 to below the study's seed count, e.g. [20] for a 20-seed report "
            "extended to 47 seeds (the study has 4 seeds); got [4]"),
    ("[3, 2]", "extended_after: must be a list of the seed counts"),
    ("[1]", "extended_after: must be a list of the seed counts"),
    ("twenty", "extended_after: must be a list of the seed counts whose report was read before the seeds were "
               "extended, increasing, each from 2 to below the study's seed count, e.g. [20] for a 20-seed report "
               "extended to 47 seeds; got 'twenty'"),
])
def test_bad_extended_after_is_one_clear_problem(tmp_path, cli, value, fragment):
    text = SEEDED.replace("seeds: 4", f"seeds: 4\nextended_after: {value}")
    path = write(tmp_path, text)
    rc, _, err = cli("validate", str(path))
    line = text.splitlines().index(f"extended_after: {value}") + 1
    assert rc == 2 and f"{path}:{line}: {fragment}" in err, err


CONTEXTS = """\
name: travels
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
  ratio:
    levels:
      token: {loss.ratio_level: token}
      gspo: {loss.ratio_level: sequence, loss.clip_low: 0.0003, loss.clip_high: 0.0004}
  task: {path: task.name, values: [addition, chain]}
  model: {path: model.name, values: [tiny-llama, tiny-gpt2, tiny-qwen2]}
design: one_at_a_time
baseline: {loss_norm: sequence, ratio: token, task: addition, model: tiny-llama}
contexts: [task, model]
primary: [loss_norm, ratio]
objective: {metric: eval/accuracy, mode: max}
seeds: 2
"""


def test_contexts_cross_every_compared_arm_with_every_context(tmp_path):
    """The design runs over the compared factors (one at a time: 3 arms), and each of its arms runs in every
    context (2 tasks x 3 models = 6): 18 arms, one baseline; a context study's trial keys are those of the
    same arms without 'contexts:' (a context is a factor whose role is replication)."""
    study = load_study(write(tmp_path, CONTEXTS))
    assert study.contexts == ("task", "model") and [f.name for f in study.compared] == ["loss_norm", "ratio"]
    assert len(study.arms) == 18 and sum(a.baseline for a in study.arms) == 1
    contexts = {study.context_of(a.levels) for a in study.arms}
    assert len(contexts) == 6 and "task=chain,model=tiny-gpt2" in contexts
    compared = {(a.levels["loss_norm"], a.levels["ratio"]) for a in study.arms}
    assert compared == {("sequence", "token"), ("token", "token"), ("sequence", "gspo")}
    for ctx in contexts:  # every compared arm in every context
        assert sum(study.context_of(a.levels) == ctx for a in study.arms) == 3
    base = next(a for a in study.arms if a.baseline)
    assert base.levels == {"loss_norm": "sequence", "ratio": "token", "task": "addition", "model": "tiny-llama"}


def test_only_a_size_ladder_gets_a_trend_in_model_size(tmp_path):
    """A context factor whose levels set model.name and nothing else is a size ladder (its contrasts get a trend
    in log parameters); contexts that also set the task confound task with size and get none."""
    from ablate.report.statistics import ladder_sizes

    params = {"tiny-llama": 8e5, "tiny-gpt2": 9e5, "tiny-qwen2": 7e5}
    ladder = load_study(write(tmp_path, CONTEXTS.replace("contexts: [task, model]", "contexts: [model]")
                              .replace("primary: [loss_norm, ratio]", "primary: [loss_norm, ratio]\nexclude: [{task: chain}]")))
    assert ladder_sizes(ladder, params) == {f"model={m}": v for m, v in params.items()}
    mixed = CONTEXTS.replace("  task: {path: task.name, values: [addition, chain]}\n", "").replace(
        "  model: {path: model.name, values: [tiny-llama, tiny-gpt2, tiny-qwen2]}",
        "  model:\n    levels:\n" + "".join(f"      {m}: {{model.name: {m}, task.name: chain}}\n" for m in params))
    mixed = mixed.replace("contexts: [task, model]", "contexts: [model]").replace(", task: addition", "")
    assert ladder_sizes(load_study(write(tmp_path, mixed, "mixed.yaml")), params) == {}


def test_layer_overrides_puts_context_levels_below_the_budget():
    """base < context levels < budget < compared levels, by hand: the budget beats a context's steps, a
    compared level beats the budget, and a context level beats base."""
    from ablate.study.model import layer_overrides

    base = {"train.steps": 60, "task.name": "addition", "optim.lr": 2e-5}
    budget = {"train.steps": 2, "optim.lr": 1e-4}
    levels = [("task", {"task.name": "countdown", "train.steps": 120}), ("lr", {"optim.lr": 5e-5})]
    assert layer_overrides(base, budget, levels, ("task",)) == {
        "train.steps": 2, "task.name": "countdown", "optim.lr": 5e-5}
    assert layer_overrides(base, {}, levels, ("task",))["train.steps"] == 120
    # without contexts every level sits above the budget, as before
    assert layer_overrides(base, budget, levels)["train.steps"] == 120


def test_a_context_level_sets_its_own_steps_and_a_budget_resizes_every_context(tmp_path):
    """A context may train for its own number of RL steps (the pilot's per-context budget); the smoke budget's
    2 steps still apply in it, and a compared level that sets the same key still wins over the budget."""
    text = CONTEXTS.replace("  task: {path: task.name, values: [addition, chain]}",
                            "  task:\n    levels:\n      addition: {task.name: addition}\n"
                            "      chain: {task.name: chain, train.steps: 120}")
    text += "budgets:\n  smoke: {train.steps: 2, loss.aggregation: token-mean}\n"
    study = load_study(write(tmp_path, text))
    chain = next(a for a in study.arms if a.levels == {"loss_norm": "sequence", "ratio": "token", "task": "chain",
                                                       "model": "tiny-llama"})
    assert study.config(chain).train.steps == 120 and study.arm_config(chain).train.steps == 120
    assert study.config(chain, "smoke").train.steps == 2 and study.arm_config(chain, "smoke").train.steps == 2
    addition = next(a for a in study.arms if a.baseline)
    assert study.config(addition).train.steps == TrialConfig().train.steps != 120
    # the budget's loss.aggregation is beaten by the compared factor's level, as before
    assert study.config(chain, "smoke").loss.aggregation == "seq-mean-token-mean"


@pytest.mark.parametrize(("edit", "fragment"), [
    (("primary: [loss_norm, ratio]", "primary: [loss_norm, task]"),
     "contexts[0]: 'task' is also in 'primary:': a context is replicated over, not compared; remove it from one of them"),
    (("  model: {path: model.name, values: [tiny-llama, tiny-gpt2, tiny-qwen2]}",
      "  model: {path: model.name, values: [tiny-llama]}"), None),
    (("  task: {path: task.name, values: [addition, chain]}",
      "  task:\n    levels:\n      addition: {task.name: addition, loss.aggregation: token-mean}\n"
      "      chain: {task.name: chain}"),
     "factors.task: sets 'loss.aggregation', which factor 'loss_norm' also sets ('loss.aggregation'); one path "
     "can be varied by one factor only"),
    (("contexts: [task, model]", "contexts: [task, modle]"), "contexts[1]: unknown factor 'modle'"),
    (("contexts: [task, model]", "contexts: [task, model, loss_norm, ratio]"), None),
])
def test_bad_contexts_are_one_clear_problem(tmp_path, cli, edit, fragment):
    text = CONTEXTS.replace(*edit)
    if fragment is None and "values: [tiny-llama]}" in text:  # one context level: task alone has 2, so make both 1
        text = text.replace("values: [addition, chain]", "values: [addition]")
        fragment = "contexts: task, model give one context: a verdict across contexts needs at least two"
    if fragment is None:
        text = text.replace("primary: [loss_norm, ratio]\n", "")
        fragment = "contexts: names every factor: keep at least one factor to compare"
    path = write(tmp_path, text)
    rc, _, err = cli("validate", str(path))
    assert rc == 2 and fragment in err, err
    assert err.count("\n") == 1 or "contexts" in err.splitlines()[0], err  # one message


def test_show_counts_trials_and_time_per_context(tmp_path, cli):
    path = write(tmp_path, CONTEXTS)
    rc, out, _ = cli("show", str(path))
    assert rc == 0 and "contexts (task, model): 6, each 3 compared arms x 2 seeds" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  task=")]
    assert len(lines) == 6 and all(" 6 trials, " in ln for ln in lines)
    rc, out, _ = cli("show", str(path), "--json")
    per = json.loads(out)["contexts"]["per_context"]
    assert sum(c["n_trials"] for c in per.values()) == 36


def test_three_mistakes_get_three_messages_each_at_its_key_in_one_pass(tmp_path, cli):
    """A bad value in base:, an unknown key in a level and an unknown key in a budget: one `ablate validate`
    names all three, each at the line of the offending key (not the enclosing block), and exits 2 once."""
    text = (Path(__file__).resolve().parent.parent / "studies" / "quickstart.yaml").read_text()
    text = text.replace("  rollout.group_size: 8 ", "  rollout.group_size: -8 ", 1)
    text = text.replace("token: {loss.aggregation: token-mean}", "token: {loss.agregation: token-mean}", 1)
    text = text.replace("    train.steps: 60 ", "    train.stepz: 60 ", 1)
    path = write(tmp_path, text)
    rc, out, err = cli("validate", str(path))
    lines = text.splitlines()
    at = {k: next(i for i, ln in enumerate(lines, 1) if k in ln) for k in ("group_size: -8", "agregation", "stepz")}
    assert rc == 2 and out == "" and "(3 problems)" in err, err
    assert f"{path}:{at['group_size: -8']}: base.rollout.group_size: Input should be greater than or equal to 1" in err
    assert f"{path}:{at['agregation']}: factors.loss_norm.levels.token.loss.agregation: unknown key (did you mean " \
           "'loss.aggregation'?)" in err
    assert f"{path}:{at['stepz']}: budgets.default.train.stepz: unknown key (did you mean 'train.steps'?)" in err


def test_a_key_valid_only_beside_others_is_not_reported_on_its_own(tmp_path, cli):
    """rollout.group_size: 1 breaks GRPO's group rule, a rule between keys: the level that sets it is valid
    beside gae and excluded beside grpo, so the study validates (the key check reads field errors only)."""
    path = write(tmp_path, """\
name: fp
factors:
  est:
    levels:
      grpo: {algo.advantage: grpo}
      gae: {algo.advantage: gae, critic.enabled: true}
  g:
    levels:
      eight: {rollout.group_size: 8}
      one: {rollout.group_size: 1}
exclude: [{est: grpo, g: one}]
seeds: 2
objective: {metric: eval/accuracy, mode: max}
""")
    rc, out, err = cli("validate", str(path))
    assert rc == 0 and "3 arms x 2 seeds" in out and err == "", err


def test_show_json_of_a_study_with_an_acknowledged_cross_is_one_json_document(cli):
    """The acknowledgment note goes to stderr under --json, so stdout parses as JSON."""
    path = Path(__file__).resolve().parent.parent / "studies" / "quickstart.yaml"
    rc, out, err = cli("show", str(path), "--json")
    assert rc == 0 and json.loads(out)["study"] == "quickstart" and "note: run on purpose" in err
