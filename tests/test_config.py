"""Tests of ablate.config: defaults, dotted overrides, errors, cross-field rules, trial key, YAML, docs.

Most tests run against small registries holding the built-in names that the issues document (so
that they do not depend on the state of the modules that fill the real ones); tests named
``test_builtin_*`` use the real registries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from pydantic import BaseModel

import ablate.registry as registry_mod
from ablate.config import (
    KEY_EXCLUDED_PATHS,
    KEY_OMITTED_AT_DEFAULT,
    ConfigWarning,
    LossConfig,
    TrialConfig,
    TrialConfigError,
    autocast_dtype,
    describe_path,
    field_paths,
    load_builtin_registries,
    nearest_path,
    resolve_device,
)
from ablate.errors import AblateError, ConfigError
from ablate.registry import ALL_REGISTRIES, Registry

REPO = Path(__file__).resolve().parent.parent


class _Addition:
    """Stands for a registered task class: the config reads only its difficulty range."""

    default_difficulty = 3
    min_difficulty = 1
    max_difficulty = 20


#: The built-in names the issues document, by registry kind.
DOCUMENTED_NAMES: dict[str, dict[str, object]] = {
    "task": {"addition": _Addition, "chain": _Addition, "countdown": _Addition, "jsonl": object},
    "model": {"tiny-llama": 1, "tiny-gpt2": 1, "tiny-qwen2": 1},
    "ratio level": {"token": 1, "sequence": 1, "sequence_token": 1},
    "policy loss surrogate": {"ppo": 1, "cispo": 1, "sapo": 1},
    "loss aggregation": {
        n: 1
        for n in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "prompt-mean")
    },
    "advantage estimator": {n: 1 for n in ("grpo", "dr_grpo", "rloo", "grpo_process", "gae")},
    "kl estimator": {"k1": 1, "k2": 1, "k3": 1},
    "reward component": {
        n: 1 for n in ("final_answer", "prm", "kl", "format", "partial", "missing_eos", "soft_overlong")
    },
}


@pytest.fixture(autouse=True)
def registries(request, monkeypatch):
    """Registries holding exactly DOCUMENTED_NAMES (except for tests named test_builtin_*)."""
    if request.node.name.startswith("test_builtin_"):
        yield None
        return
    monkeypatch.setattr(registry_mod, "_builtins_loaded", True)  # these registries are the whole truth
    for kind, entries in DOCUMENTED_NAMES.items():
        reg = Registry(f"test_config {kind}")
        del ALL_REGISTRIES[reg.kind]
        reg.kind = kind
        for name, obj in entries.items():
            reg.register(name, obj)
        monkeypatch.setitem(ALL_REGISTRIES, kind, reg)
    yield ALL_REGISTRIES


def build(*overrides: str, **kw) -> TrialConfig:
    return TrialConfig.from_overrides(list(overrides), **kw)


def problems_of(*overrides: str) -> TrialConfigError:
    with pytest.raises(TrialConfigError) as info:
        build(*overrides)
    return info.value


# --------------------------------------------------------------------------------------------------
# defaults


def test_defaults_are_valid_and_warn_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = TrialConfig()
    assert cfg == TrialConfig.from_overrides({}) == TrialConfig.from_overrides([])
    assert cfg.task.name == "addition" and cfg.model.name == "tiny-llama"
    assert cfg.rollout.group_size == 8 and cfg.rollout.prompts_per_step == 8
    assert cfg.completions_per_step == 64
    assert cfg.loss.aggregation == "seq-mean-token-mean" and cfg.loss.ratio_level == "token"
    assert (cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.dual_clip) == (0.2, 0.2, None)
    assert cfg.reward.components == ("final_answer",)
    assert cfg.algo.advantage == "grpo" and cfg.kl.placement == "none" and not cfg.critic.enabled
    assert (cfg.warmstart.target_min, cfg.warmstart.target_max) == (0.2, 0.6)
    assert cfg.rollout.temperature == 1.0 and cfg.rollout.top_p == 1.0
    assert cfg.optim.max_grad_norm == 1.0 and cfg.seed == 0 and cfg.device == "auto"


def test_builtin_defaults_are_valid_against_the_real_registries():
    load_builtin_registries()
    cfg = TrialConfig()
    for kind, name in [("task", cfg.task.name), ("model", cfg.model.name), ("advantage estimator", "grpo"),
                       ("loss aggregation", cfg.loss.aggregation), ("ratio level", cfg.loss.ratio_level),
                       ("policy loss surrogate", cfg.loss.surrogate), ("reward component", "final_answer")]:
        reg = ALL_REGISTRIES.get(kind)
        if reg is not None and len(reg):
            assert name in reg, f"default {kind} {name!r} is not registered ({reg.names()})"


def test_builtin_documented_names_validate_against_the_real_registries():
    """Every name the issues document, where its real registry exists, builds a valid configuration."""
    load_builtin_registries()
    for kind, path in [("ratio level", "loss.ratio_level"), ("loss aggregation", "loss.aggregation"),
                       ("policy loss surrogate", "loss.surrogate")]:
        reg = ALL_REGISTRIES.get(kind)
        if reg is None or not len(reg):
            continue
        for name in DOCUMENTED_NAMES[kind]:
            extra = ["loss.clip_low=3e-4", "loss.clip_high=4e-4"] if name.startswith("sequence") else []
            assert getattr(build(f"{path}={name}", *extra).loss, path.split(".")[1]) == name


def test_derived_values():
    cfg = build("rollout.max_new_tokens=40")
    assert cfg.loss_max_len == 40
    assert build("loss.max_len=100").loss_max_len == 100
    assert cfg.kl_estimator == "k3"
    assert build("kl.placement=reward", "reward.components=[final_answer, kl]").kl_estimator == "k1"
    assert build("kl.placement=loss", "kl.estimator=k2").kl_estimator == "k2"
    assert cfg.critic_lr == cfg.optim.lr == 2e-5
    assert build("critic.lr=0.01").critic_lr == 0.01


# --------------------------------------------------------------------------------------------------
# overrides

#: The dotted paths used across the issues, with a non-default value for each.
DOCUMENTED_PATHS = [
    ("task.name", "chain", "chain"),
    ("model.name", "tiny-gpt2", "tiny-gpt2"),
    ("train.steps", "7", 7),
    ("optim.lr", "3e-4", 3e-4),
    ("loss.aggregation", "token-mean", "token-mean"),
    ("loss.ratio_level", "sequence_token", "sequence_token"),
    ("loss.clip_low", "0.1", 0.1),
    ("loss.clip_high", "0.28", 0.28),
    ("reward.components", "[final_answer, prm]", ["final_answer", "prm"]),
    ("algo.advantage", "dr_grpo", "dr_grpo"),
    ("seed", "5", 5),
]


@pytest.mark.parametrize(("path", "text", "value"), DOCUMENTED_PATHS)
def test_documented_paths_are_settable(path, text, value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)  # sequence_token with PPO clip ranges warns
        from_string = build(f"{path}={text}")
        from_mapping = TrialConfig.from_overrides({path: value})
    assert from_string.to_flat_dict()[path] == value
    assert from_string == from_mapping
    assert from_string.changed_from_defaults() == {path: value}


def test_every_path_accepts_its_default_as_a_string():
    """Each field's default, written as path=YAML text, parses back to the same value (every type)."""
    default = TrialConfig()
    flat = default.to_flat_dict()
    assert set(flat) == set(field_paths())
    strings = [f"{p}={json.dumps(v)}" for p, v in flat.items()]
    assert build(*strings) == default


def test_round_trips():
    cfg = build("loss.aggregation=token-mean", "task.options.path=data.jsonl", "seed=9", "optim.betas=[0.8, 0.9]")
    assert TrialConfig.from_overrides(cfg.to_flat_dict()) == cfg
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg
    assert TrialConfig.model_validate(cfg.to_dict()) == cfg
    assert cfg.task.options == {"path": "data.jsonl"}
    assert cfg.optim.betas == (0.8, 0.9)
    assert cfg.changed_from_defaults() == {
        "loss.aggregation": "token-mean", "task.options": {"path": "data.jsonl"}, "seed": 9,
        "optim.betas": [0.8, 0.9],
    }


def test_nested_and_dotted_mappings_and_base():
    base = {"task.name": "chain", "loss": {"clip_high": 0.28}}
    cfg = TrialConfig.from_overrides({"loss": {"aggregation": "token-mean"}, "reward.prm.weight": 0.5}, base=base)
    assert (cfg.task.name, cfg.loss.clip_high, cfg.loss.aggregation, cfg.reward.prm.weight) == (
        "chain", 0.28, "token-mean", 0.5)
    again = TrialConfig.from_overrides(["seed=2"], base=cfg)
    assert again.seed == 2 and again.loss.clip_high == 0.28
    # a base that is invalid alone is fine when the overrides complete it
    ok = TrialConfig.from_overrides({"critic.enabled": True}, base={"algo.advantage": "gae"})
    assert ok.algo.advantage == "gae"


def test_string_values_are_yaml_but_strings_stay_strings():
    cfg = build("warmstart.cache_dir=123", "task.options.flag=true", "task.options.n=5", "loss.dual_clip=null",
                "reward.components=final_answer", "loss.dual_clip=3", "task.options.mode=on")
    assert cfg.warmstart.cache_dir == "123"  # a string field keeps the text
    # option values are YAML, in the dialect of every file (ablate.yamlio): only true/false are booleans
    assert cfg.task.options == {"flag": True, "n": 5, "mode": "on"}
    assert cfg.loss.dual_clip == 3.0  # the later of two strings wins
    assert cfg.reward.components == ("final_answer",)  # one name is a one-element list
    assert build("warmstart.cache_dir=null").warmstart.cache_dir is None
    # in a mapping, strings are read as YAML only for fields that cannot hold a string
    cfg = TrialConfig.from_overrides({"seed": "3", "optim.lr": "1e-4", "reward.components": "[final_answer, prm]",
                                      "warmstart.cache_dir": "true", "task.options.answer_field": "1"})
    assert (cfg.seed, cfg.optim.lr, cfg.reward.components) == (3, 1e-4, ("final_answer", "prm"))
    assert cfg.warmstart.cache_dir == "true" and cfg.task.options == {"answer_field": "1"}


def test_with_overrides_leaves_the_original_unchanged_and_configs_are_frozen():
    cfg = TrialConfig()
    new = cfg.with_overrides({"seed": 4})
    assert (cfg.seed, new.seed) == (0, 4)
    with pytest.raises(Exception, match="frozen"):
        cfg.seed = 3  # type: ignore[misc]
    assert {cfg, TrialConfig(), new} == {cfg, new}  # hashable, equal configs hash equal


def test_model_name_may_be_a_local_directory(tmp_path):
    assert build(f"model.name={tmp_path}").model.name == str(tmp_path)
    err = problems_of(f"model.name={tmp_path / 'missing'}")
    assert "or give the path of an existing local checkpoint directory" in str(err)


def test_max_new_tokens_is_checked_against_a_checkpoint_directory_positions(tmp_path):
    """A checkpoint's config.json gives its positions (read as JSON, no torch); none known: not checked."""
    assert build(f"model.name={tmp_path}", "rollout.max_new_tokens=5000").rollout.max_new_tokens == 5000
    (tmp_path / "config.json").write_text(json.dumps({"n_positions": 128}))
    assert build(f"model.name={tmp_path}", "rollout.max_new_tokens=127").rollout.max_new_tokens == 127
    err = problems_of(f"model.name={tmp_path}", "rollout.max_new_tokens=128")
    assert err.problems[0].path == "rollout.max_new_tokens"
    assert f"128 tokens do not fit in the 128 positions of model {tmp_path}" in err.problems[0].message


# --------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("path", "nearest"),
    [
        ("loss.agregation", "loss.aggregation"),
        ("clip_hihg", "loss.clip_high"),
        ("lossy.clip_low", "loss.clip_low"),
        ("reward.prm.flip", "reward.prm.flip_prob"),
        ("algo.advantages", "algo.advantage"),
        ("train.step", "train.steps"),
    ],
)
def test_unknown_path_names_the_nearest_valid_path(path, nearest):
    assert nearest_path(path) == nearest
    err = problems_of(f"{path}=1")
    assert len(err.problems) == 1 and err.problems[0].path == path
    assert f"unknown key (did you mean {nearest!r}?)" in str(err)


def test_unknown_path_lists_the_keys_of_its_section():
    msg = str(problems_of("kl.betaa=0.1"))
    assert "valid keys of 'kl': placement, beta, estimator, adaptive, target, horizon" in msg
    # a path below a leaf, and a section given a value
    assert "unknown key" in str(problems_of("seed.x=1"))
    assert "is a section, not a value (got 3)" in str(problems_of("loss=3"))
    # extra keys reaching pydantic directly (constructor) are reported the same way
    with pytest.raises(TrialConfigError, match=r"loss.agregation: unknown key \(did you mean 'loss.aggregation'"):
        TrialConfig(loss={"agregation": "token-mean"})


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        ("kl.placement=rewrd", ["Input should be 'none', 'reward' or 'loss'", "got 'rewrd'", "did you mean 'reward'"]),
        ("loss.clip_low=1.5", ["less than 1", "got 1.5", "expected a number, > 0.0 and < 1.0"]),
        ("train.steps=abc", ["valid integer", "expected an integer, >= 1"]),
        ("train.steps=2.5", ["valid integer", "got 2.5"]),
        ("algo.whiten=maybe", ["valid boolean", "expected true or false"]),
        ("device=gpu", ["device must be auto, cpu, mps, cuda or cuda:N"]),
        ("optim.betas=[0.9, 1.5]", ["each beta must be in [0, 1)"]),
        ("loss.aggregation=tokenmean",
         ["unknown loss aggregation 'tokenmean'", "valid names: token-mean, seq-mean-token-mean",
          "did you mean 'token-mean'"]),
        ("reward.components=[final_answer, prn]",
         ["reward.components[1]: unknown reward component 'prn'", "did you mean 'prm'"]),
        ("kl.estimator=k4", ["unknown kl estimator 'k4'", "valid names: k1, k2, k3", "(or 'auto')"]),
        ("task.name=adition", ["unknown task 'adition'", "did you mean 'addition'"]),
        ("seed=-1", ["greater than or equal to 0"]),
        ("optim.lr=nan", ["finite number"]),
    ],
)
def test_bad_value_names_the_path_and_the_allowed_values(override, fragments):
    msg = str(problems_of(override))
    assert msg.splitlines()[1].startswith(f"  - {override.split('=')[0]}")
    for fragment in fragments:
        assert fragment in msg


def test_all_problems_are_collected_in_one_error():
    err = problems_of("loss.agregation=token-mean", "loss.clip_low=1.5", "kl.placement=rewrd", "aggregation=x",
                      "algo.advantage=grpoo")
    assert [p.path for p in err.problems] == [
        "loss.agregation", "aggregation", "algo.advantage", "loss.clip_low", "kl.placement"]  # schema order
    assert str(err).startswith("invalid trial configuration (5 problems):")
    assert isinstance(err, ConfigError) and isinstance(err, AblateError)


def test_all_rule_violations_are_collected_in_one_error():
    err = problems_of("algo.advantage=grpo_process", "critic.enabled=true", "kl.placement=reward",
                      "algo.minibatches=3", "eval.n_problems=1000")
    assert [p.path for p in err.problems] == [
        "critic.enabled", "algo.advantage", "kl.placement", "algo.minibatches", "eval.n_problems"]


def test_constructor_and_model_validate_raise_the_same_error():
    with pytest.raises(TrialConfigError, match="loss.clip_low: Input should be greater than 0"):
        TrialConfig(loss={"clip_low": 0.0})
    with pytest.raises(TrialConfigError, match="critic.enabled"):
        TrialConfig.model_validate({"algo": {"advantage": "gae"}})
    with pytest.raises(TrialConfigError, match="an override must be a string path=value"):
        TrialConfig.from_overrides(["seed"])


# --------------------------------------------------------------------------------------------------
# cross-field rules


@pytest.mark.parametrize(
    ("overrides", "path", "fragment"),
    [
        (["algo.advantage=gae"], "critic.enabled", "set critic.enabled=true"),
        (["critic.enabled=true"], "critic.enabled", "set critic.enabled=false, or algo.advantage=gae"),
        (["algo.advantage=grpo_process"], "algo.advantage", "add prm to reward.components"),
        (["kl.placement=reward"], "kl.placement", "reward.components=[final_answer, kl]"),
        (["reward.components=[final_answer, kl]"], "reward.components", "set kl.placement=reward, or remove kl"),
        (["reward.components=[final_answer, kl]", "kl.placement=loss"], "reward.components", "kl.placement=loss"),
        (["reward.components=[final_answer, final_answer]"], "reward.components", "more than once"),
        (["reward.components=[]"], "reward.components", "is empty"),
        (["rollout.group_size=1"], "rollout.group_size", "needs rollout.group_size >= 2"),
        (["rollout.group_size=1", "algo.advantage=gae", "critic.enabled=true", "algo.dynamic_sampling=true"],
         "algo.dynamic_sampling", "always has zero reward variance"),
        (["algo.minibatches=3"], "algo.minibatches", "does not divide the 64 completions"),
        (["algo.minibatches=4", "algo.grad_accum=3"], "algo.grad_accum", "minibatch of 16 completions"),
        (["loss.dual_clip=3", "loss.surrogate=cispo"], "loss.dual_clip", "ppo surrogate only"),
        (["reward.components=[final_answer, soft_overlong]", "reward.soft_overlong.buffer=65"],
         "reward.soft_overlong.buffer", "rollout.max_new_tokens=64"),
        (["kl.placement=loss", "kl.adaptive=true", "kl.beta=0"], "kl.beta", "stays 0 forever"),
        (["rollout.max_new_tokens=100000"], "rollout.max_new_tokens", "the 256 positions of model tiny-llama"),
        (["rollout.max_new_tokens=256"], "rollout.max_new_tokens", "e.g. rollout.max_new_tokens=64"),
        (["model.name=tiny-gpt2", "rollout.max_new_tokens=300"], "rollout.max_new_tokens", "256 positions of model tiny-gpt2"),
        (["task.difficulty=21"], "task.difficulty", "outside task addition's range 1..20"),
        (["eval.n_problems=501"], "eval.n_problems", "task.eval_size=500"),
        (["warmstart.target_min=0.6"], "warmstart.target_min", "band [0.6, 0.6] is empty"),
        (["algo.advantage=rloo", "algo.adv_std=batch"], "algo.adv_std",
         "not read by algo.advantage=rloo, which keeps its own baseline; only grpo reads it: set algo.adv_std=group"),
        (["algo.advantage=dr_grpo", "algo.adv_std=none"], "algo.adv_std", "dr_grpo is grpo with algo.adv_std=none"),
        (["algo.advantage=grpo_process", "reward.components=[final_answer, prm]", "algo.adv_mean=batch"],
         "algo.adv_mean", "set algo.adv_mean=group, or algo.advantage=grpo"),
        (["algo.advantage=gae", "critic.enabled=true", "algo.adv_std=none"], "algo.adv_std",
         "not read by algo.advantage=gae"),
        (["algo.adv_mean=batch"], "algo.adv_std", "set algo.adv_std=batch (batch z-score) or none"),
    ],
)
def test_cross_field_rules(overrides, path, fragment):
    err = problems_of(*overrides)
    assert len(err.problems) == 1, str(err)
    assert err.problems[0].path == path
    assert fragment in err.problems[0].message


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo.advantage=gae", "critic.enabled=true", "rollout.group_size=1", "algo.minibatches=1"],
        ["algo.advantage=grpo_process", "reward.components=[final_answer, prm]"],
        ["kl.placement=reward", "reward.components=[final_answer, kl]"],
        ["kl.placement=loss", "kl.adaptive=true"],
        ["reward.components=[final_answer, soft_overlong]", "reward.soft_overlong.buffer=64"],
        ["task.name=jsonl", "task.difficulty=50"],  # no difficulty knob: nothing to check
        ["loss.dual_clip=3"],
        ["algo.minibatches=4", "algo.grad_accum=4"],
        ["algo.adv_std=batch"],  # Lite PPO
        ["algo.adv_std=none"],  # Dr. GRPO through grpo
        ["algo.adv_mean=batch", "algo.adv_std=batch"],
        ["algo.adv_mean=batch", "algo.adv_std=none"],
        ["algo.advantage=rloo", "algo.adv_mean=group", "algo.adv_std=group"],  # the defaults, said aloud
        ["loss.ratio_level=sequence", "loss.clip_low=3e-4", "loss.clip_high=4e-4",
         "loss.aggregation=seq-mean-token-mean"],  # GSPO as published
    ],
)
def test_legal_combinations_build(overrides):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(*overrides)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["loss.ratio_level=sequence"], "GSPO (Zheng et al. 2025) uses clip_low=3e-4, clip_high=4e-4"),
        (["loss.ratio_level=sequence"], "reports/ratio_level: the gspo-clip0.2 arm clipped no sequence"),
        (["loss.ratio_level=sequence_token", "loss.clip_low=3e-4"], "clip_high=0.2"),
        (["loss.clip_low=3e-4", "loss.clip_high=4e-4"], "nearly every token would be clipped"),
        (["loss.aggregation=prompt-mean", "rollout.group_size=1", "algo.advantage=gae", "critic.enabled=true"],
         "this is seq-mean-token-mean"),
        (["kl.placement=loss", "kl.estimator=k1"], "expectation under the policy is zero"),
    ],
)
def test_warnings(overrides, fragment):
    with pytest.warns(ConfigWarning) as record:
        build(*overrides)
    assert issubclass(ConfigWarning, UserWarning)
    assert any(fragment in str(w.message) for w in record)
    assert record[0].filename == __file__  # points at the caller, not at pydantic


@pytest.mark.parametrize("level", ["sequence", "sequence_token"])
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "prompt-mean"])
def test_sequence_ratio_with_a_length_weighting_aggregation_warns(level, aggregation):
    if (level, aggregation) == ("sequence", "seq-mean-token-sum"):  # LUSPO: length-scaled on purpose
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            build(f"loss.ratio_level={level}", "loss.clip_low=2e-3", "loss.clip_high=2.5e-3",
                  f"loss.aggregation={aggregation}")
        return
    with pytest.warns(ConfigWarning) as record:
        build(f"loss.ratio_level={level}", "loss.clip_low=3e-4", "loss.clip_high=4e-4", f"loss.aggregation={aggregation}")
    [message] = [str(w.message) for w in record]  # the clip ranges are GSPO's: this warning alone
    assert f"loss.ratio_level={level} (GSPO) with loss.aggregation={aggregation}" in message
    assert "huggingface/trl#3823" in message and "loss.aggregation=seq-mean-token-mean" in message


def test_gspo_clip_ranges_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = build("loss.ratio_level=sequence", "loss.clip_low=3e-4", "loss.clip_high=4e-4")
    assert (cfg.loss.clip_low, cfg.loss.clip_high) == (3e-4, 4e-4)


# --------------------------------------------------------------------------------------------------
# trial key

_KEY_SCRIPT = """
import json, sys
import ablate.config as c
for overrides in json.loads(sys.argv[1]):
    print(c.TrialConfig.from_overrides(overrides).trial_key())
"""


def test_trial_key_is_the_same_in_another_process():
    cases = [{}, {"loss.aggregation": "token-mean", "seed": 3}, {"optim.lr": 3e-4, "task.options": {"checks": 1, "eval_fraction": 0.2}}]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", _KEY_SCRIPT, json.dumps(cases)], capture_output=True, text=True,
                         env=env, cwd=REPO, check=True, timeout=60).stdout.split()
    assert out == [TrialConfig.from_overrides(c).trial_key() for c in cases]
    assert len(set(out)) == 3 and all(len(k) == 12 and int(k, 16) >= 0 for k in out)


def test_trial_key_changes_with_what_the_trial_computes():
    base = TrialConfig().trial_key()
    for override in ["seed=1", "loss.clip_high=0.28", "optim.lr=1.1e-4", "task.options.path=x.jsonl",
                     "reward.prm.weight=0.5", "model.dtype=float32", "algo.minibatches=1",
                     "warmstart.seed=null", "warmstart.seed=1"]:
        assert build(override).trial_key() != base, override
    # a warm start per trial seed (warmstart.seed=null) is another experiment than the shared one
    assert build("seed=1", "warmstart.seed=null").trial_key() != build("seed=1").trial_key()
    # the order of the components is a different configuration (placement order is logged)
    a = build("reward.components=[final_answer, prm]").trial_key()
    assert a != build("reward.components=[prm, final_answer]").trial_key()


#: TrialConfig().trial_key() at 54ba433 (the base of issue 13's options): options added since must keep it.
KEY_BEFORE_ISSUE_13 = "9a23c248bce1"


def test_options_added_later_keep_existing_trial_keys():
    assert TrialConfig().trial_key() == KEY_BEFORE_ISSUE_13
    assert build("algo.adv_mean=group", "algo.adv_std=group").trial_key() == KEY_BEFORE_ISSUE_13
    scoped = [build(*o).trial_key() for o in (["algo.adv_std=batch"], ["algo.adv_std=none"],
                                              ["algo.adv_mean=batch", "algo.adv_std=batch"],
                                              ["algo.adv_mean=batch", "algo.adv_std=none"])]
    assert len(set(scoped)) == 4 and KEY_BEFORE_ISSUE_13 not in scoped
    # grpo with adv_std=none computes what dr_grpo computes, but it is another configuration
    assert build("algo.adv_std=none").trial_key() != build("algo.advantage=dr_grpo").trial_key()
    from ablate.config.schema import KEY_OMITTED_WHEN_INERT

    for path, neutral in KEY_OMITTED_AT_DEFAULT.items():  # the neutral default, or a correction inert by default
        assert TrialConfig().to_flat_dict()[path] == neutral or KEY_OMITTED_WHEN_INERT[path](TrialConfig()), path


def test_trial_key_ignores_excluded_fields_and_how_the_config_was_built(tmp_path):
    base = TrialConfig().trial_key()
    excluded = ["device=cpu", "threads=2", "train.log_every=5", "train.checkpoint_every=0",
                f"warmstart.cache_dir={tmp_path}", "algo.grad_accum=2"]
    assert {o.split("=")[0] for o in excluded} == set(KEY_EXCLUDED_PATHS)
    for override in excluded:
        assert build(override).trial_key() == base, override
    # the same configuration built three ways: strings, mapping, file (1e-4 == 0.0001 == 1.0e-4)
    path = tmp_path / "t.yaml"
    path.write_text("optim:\n  lr: 1.0e-4\nloss.clip_high: 0.28\n")
    keys = {
        build("optim.lr=0.0001", "loss.clip_high=0.28").trial_key(),
        TrialConfig.from_overrides({"loss": {"clip_high": 0.28}, "optim.lr": 1e-4}).trial_key(),
        TrialConfig.from_file(path).trial_key(),
    }
    assert len(keys) == 1 and keys != {base}


# --------------------------------------------------------------------------------------------------
# YAML files


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trial.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_file_with_nested_and_dotted_keys(tmp_path):
    path = write(tmp_path, """\
        # a trial
        loss:
          aggregation: token-mean
          clip_high: 0.28
        reward.components: [final_answer, prm]
        optim.lr: 1e-4
        task:
          options: {path: data.jsonl}
        """)
    cfg = TrialConfig.from_file(path, overrides=["seed=7"])
    assert cfg.loss.aggregation == "token-mean" and cfg.loss.clip_high == 0.28
    assert cfg.reward.components == ("final_answer", "prm")
    assert cfg.optim.lr == 1e-4 and isinstance(cfg.optim.lr, float)
    assert cfg.task.options == {"path": "data.jsonl"} and cfg.seed == 7
    assert TrialConfig.from_file(write(tmp_path, cfg.to_yaml())) == cfg
    assert TrialConfig.from_file(write(tmp_path, "")) == TrialConfig()


def test_file_errors_name_the_file_the_key_and_the_line(tmp_path):
    path = write(tmp_path, """\
        loss:
          agregation: token-mean
          clip_low: 2
        kl.placement: rewrd
        """)
    with pytest.raises(TrialConfigError) as info:
        TrialConfig.from_file(path)
    msg = str(info.value)
    assert msg.startswith(f"config file {str(path)!r}: invalid trial configuration (3 problems):")
    assert "loss.agregation (line 2): unknown key (did you mean 'loss.aggregation'?)" in msg
    assert "loss.clip_low (line 3): Input should be less than 1" in msg
    assert "kl.placement (line 4): Input should be 'none', 'reward' or 'loss'" in msg


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("loss:\n  clip_low: 0.1\n  clip_low: 0.2\n", "loss.clip_low (line 3): is given twice (also on line 2)"),
        ("loss:\n  clip_low: 0.1\nloss.clip_low: 0.2\n", "loss.clip_low (line 3): is given twice (also on line 2)"),
        ("loss: [1, 2\n", "invalid YAML"),
        ("- seed: 1\n", "the top level must be a mapping of keys to values, got a list"),
        ("seed: !!python/object:os.system x\n", "invalid YAML"),
    ],
)
def test_bad_files(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(TrialConfigError) as info:
        TrialConfig.from_file(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(TrialConfigError, match=r"(?s)config file '.*nope.yaml': .*cannot read the file: "):
        TrialConfig.from_file(tmp_path / "nope.yaml")


# --------------------------------------------------------------------------------------------------
# documentation


def _walk(cls: type[BaseModel], prefix: str = ""):
    for name, fi in cls.model_fields.items():
        yield prefix + name, fi
        if isinstance(fi.annotation, type) and issubclass(fi.annotation, BaseModel):
            assert fi.annotation.__doc__ and fi.annotation.__doc__.strip(), fi.annotation
            yield from _walk(fi.annotation, prefix + name + ".")


def test_every_field_has_a_one_line_description():
    paths = []
    for path, fi in _walk(TrialConfig):
        paths.append(path)
        assert fi.description and len(fi.description) >= 20, path
        assert "\n" not in fi.description and "  " not in fi.description, path
    assert len(paths) > 80
    assert describe_path("loss.clip_high").startswith("loss.clip_high (a number, > 0.0; default 0.2): The ratio")
    with pytest.raises(TrialConfigError, match="did you mean 'loss.clip_high'"):
        describe_path("loss.clip_hi")


def test_docs_reference_is_in_sync():
    from ablate.config.docs import DOC_PATH, render_markdown

    text = render_markdown()
    assert DOC_PATH.read_text(encoding="utf-8") == text, "run: .venv/bin/python -m ablate.config.docs"
    for path in field_paths():
        assert f"| `{path}` |" in text


# --------------------------------------------------------------------------------------------------
# registries and devices


def test_builtin_modules_are_skipped_only_when_they_do_not_exist(tmp_path, monkeypatch):
    (tmp_path / "cfgtest_broken.py").write_text("import cfgtest_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_mod, "_builtins_loaded", False)
    monkeypatch.setattr(registry_mod, "BUILTIN_MODULES", ("cfgtest_absent_module",))
    load_builtin_registries()  # absent: skipped
    assert registry_mod._builtins_loaded
    monkeypatch.setattr(registry_mod, "_builtins_loaded", False)
    monkeypatch.setattr(registry_mod, "BUILTIN_MODULES", ("cfgtest_broken",))
    with pytest.raises(ModuleNotFoundError, match="cfgtest_missing_dependency"):
        load_builtin_registries()  # present but broken: the error propagates
    assert not registry_mod._builtins_loaded


def test_absent_or_empty_registry_skips_the_name_check(monkeypatch):
    monkeypatch.delitem(ALL_REGISTRIES, "loss aggregation")
    assert build("loss.aggregation=my-plugin-mode").loss.aggregation == "my-plugin-mode"
    empty = Registry("test_config empty")
    monkeypatch.delitem(ALL_REGISTRIES, empty.kind)
    monkeypatch.setitem(ALL_REGISTRIES, "task", empty)
    assert build("task.name=anything").task.name == "anything"


def test_plugin_names_registered_before_building_are_accepted():
    ALL_REGISTRIES["advantage estimator"].register("my_estimator", object())
    cfg = build("algo.advantage=my_estimator", "critic.enabled=true")  # plugins may read values
    assert cfg.algo.advantage == "my_estimator"


def test_resolve_device_and_autocast():
    import torch

    cpu = resolve_device(build("device=cpu"))
    assert cpu == torch.device("cpu")
    auto = resolve_device(TrialConfig())
    assert auto.type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available here; use device=auto or device=cpu"):
            resolve_device("cuda:0")
    assert autocast_dtype(TrialConfig(), torch.device("cpu")) is None
    assert autocast_dtype(TrialConfig(), torch.device("cuda")) is torch.bfloat16
    assert autocast_dtype(build("model.dtype=float32"), torch.device("cuda")) is None
    assert autocast_dtype(build("model.dtype=bfloat16"), torch.device("cpu")) is torch.bfloat16


def test_sections_alone_validate_with_pydantic():
    assert LossConfig(clip_high=0.28).clip_high == 0.28
    with pytest.raises(ValueError, match="less than 1"):
        LossConfig(clip_low=1.0)


# --------------------------------------------------------------------------------------------------
# precision and the rollout/trainer mismatch (issue 13)

#: TrialConfig().trial_key() at 54ba433, before the precision options existed.
_KEY_BEFORE_PRECISION_OPTIONS = "9a23c248bce1"


def test_new_options_at_their_neutral_defaults_keep_every_trial_key():
    from ablate.config import KEY_OMITTED_AT_DEFAULT

    assert TrialConfig().trial_key() == _KEY_BEFORE_PRECISION_OPTIONS
    flat = TrialConfig().to_flat_dict()
    from ablate.config.schema import KEY_OMITTED_WHEN_INERT

    for path, neutral in KEY_OMITTED_AT_DEFAULT.items():  # the neutral value, or a correction inert by default
        assert flat[path] == neutral or KEY_OMITTED_WHEN_INERT[path](TrialConfig()), path
    base = TrialConfig().trial_key()
    for override in ["model.lm_head_dtype=float32", "rollout.dtype=bfloat16", "rollout.dtype=float32",
                     "loss.rollout_correction=tis", "loss.rollout_correction_cap=3.0",
                     "loss.rollout_correction_floor=0.5", "optim.implementation=for-loop",
                     "optim.implementation=foreach", "optim.implementation=fused",
                     "rollout.behaviour_logp=sampler", "model.attention=eager"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)
            assert build(override).trial_key() != base, override


@pytest.mark.parametrize(("override", "key"), [
    ("loss.rollout_correction_cap=1.0", "loss.rollout_correction_cap"),
    ("loss.rollout_correction_cap=0.5", "loss.rollout_correction_cap"),
    ("loss.rollout_correction_floor=1.0", "loss.rollout_correction_floor"),
    ("loss.rollout_correction_floor=0", "loss.rollout_correction_floor"),
    ("loss.rollout_correction=token_truncate", "loss.rollout_correction"),
    ("rollout.dtype=float16", "rollout.dtype"),
    ("model.lm_head_dtype=bfloat16", "model.lm_head_dtype"),
    ("model.attention=flash", "model.attention"),
])
def test_invalid_precision_settings_name_the_key(override, key):
    with pytest.raises(TrialConfigError) as exc:
        build("rollout.dtype=bfloat16", "loss.rollout_correction=mis", override)
    assert [p.path for p in exc.value.problems] == [key]


@pytest.mark.parametrize(("overrides", "fragment"), [
    (["loss.rollout_correction=tis"], "no mismatch to correct"),
    (["loss.rollout_correction=mis", "device=cpu", "rollout.dtype=float32"], "no mismatch to correct"),
    (["loss.rollout_correction=tis", "model.dtype=bfloat16", "rollout.dtype=bfloat16"], "no mismatch to correct"),
    (["loss.rollout_correction_cap=5.0"], "have no effect"),
    (["model.lm_head_dtype=float32", "model.dtype=float32"], "it changes nothing"),
    (["rollout.behaviour_logp=sampler", "algo.ppo_epochs=1", "algo.minibatches=1", "device=cpu"], "changes nothing"),
])
def test_precision_warnings(overrides, fragment):
    with pytest.warns(ConfigWarning) as record:
        build(*overrides)
    assert any(fragment in str(w.message) for w in record)


@pytest.mark.parametrize("overrides", [
    ["rollout.dtype=bfloat16", "loss.rollout_correction=tis"],
    ["rollout.dtype=bfloat16", "loss.rollout_correction=mis", "loss.rollout_correction_cap=5.0",
     "loss.rollout_correction_floor=0.5"],
    ["model.dtype=bfloat16", "rollout.dtype=float32", "loss.rollout_correction=tis"],
    ["model.lm_head_dtype=float32", "model.dtype=bfloat16"],
    ["model.lm_head_dtype=float32", "rollout.dtype=bfloat16"],
    ["model.lm_head_dtype=float32"],  # model.dtype=auto on device auto: bfloat16 where CUDA is
    ["rollout.behaviour_logp=sampler", "algo.minibatches=2"],
    ["rollout.behaviour_logp=sampler", "algo.ppo_epochs=2", "algo.minibatches=1"],
    ["rollout.behaviour_logp=sampler", "kl.placement=loss"],
])
def test_precision_combinations_that_do_not_warn(overrides):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(*overrides)


def test_rollout_autocast_dtype():
    import torch

    from ablate.config import rollout_autocast_dtype

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert rollout_autocast_dtype(TrialConfig(), cpu) is None  # null: the trainer's
    assert rollout_autocast_dtype(TrialConfig(), cuda) is torch.bfloat16
    assert rollout_autocast_dtype(build("rollout.dtype=bfloat16"), cpu) is torch.bfloat16
    assert rollout_autocast_dtype(build("rollout.dtype=float32"), cuda) is None


def test_every_warning_carries_its_rule_name_and_the_docs_list_them():
    from ablate.config import RULES, WARNING_RULES

    cases = {
        "gspo-ppo-clip": ["loss.ratio_level=sequence", "loss.clip_low=0.2", "loss.clip_high=0.2",
                          "loss.aggregation=seq-mean-token-mean"],
        "gspo-token-sum": ["loss.ratio_level=sequence", "loss.clip_low=3e-4", "loss.clip_high=4e-4",
                           "loss.aggregation=token-mean"],
        "token-gspo-clip": ["loss.clip_low=3e-4", "loss.clip_high=4e-4"],
        "kl-k1-loss": ["kl.placement=loss", "kl.estimator=k1"],
    }
    for rule, overrides in cases.items():
        with pytest.warns(ConfigWarning) as record:
            build(*overrides)
        assert [w.message.rule for w in record] == [rule], rule
    documented = [r.split("`")[1] for r in RULES if r.startswith("warning `")]
    assert sorted(documented) == sorted(WARNING_RULES)  # every warning in docs/config.md, by name
