"""The timing model behind `ablate show`'s estimates: the formula on a hand example, the measured
constants cover every zoo model, and estimates follow the configuration the way they should."""

from __future__ import annotations

import json

import pytest

from ablate.config import TrialConfig
from ablate.models import MODELS
from ablate.study.timing import ModelCosts, estimate_config_seconds, load_timing, parallel_seconds

COSTS = ModelCosts(decode_a=0.001, decode_b=0.0001, update_a=0.01, update_b=0.0002, reward_b=0.001, setup=2.0,
                   prompt_tokens=8.0, critic_factor=2.0)


def cfg(**overrides):
    base = {"model.name": "tiny-llama", "rollout.prompts_per_step": 4, "rollout.group_size": 8, "rollout.max_new_tokens": 32,
            "train.steps": 20, "eval.every": 10, "eval.n_problems": 50}
    return TrialConfig.from_overrides({**base, **overrides})


def test_hand_example():
    # N = 32 completions, L = 32, T = 40; evals at steps 0, 10, 20
    rollout = 32 * (0.001 + 0.0001 * 32)          # 0.1344 s
    update = 1 * (0.01 + 0.0002 * 32 * 40)        # 0.266 s (ppo_epochs 1)
    reward = 0.001 * 32                           # 0.032 s
    evals = 3 * 32 * (0.001 + 0.0001 * 50)        # 0.576 s
    expected = 2.0 + 20 * (rollout + update + reward) + evals
    assert estimate_config_seconds(cfg(), {"tiny-llama": COSTS}) == pytest.approx(expected)
    assert expected == pytest.approx(11.224)  # 2 + 20 x 0.4324 + 0.576


def test_each_setting_moves_the_estimate_the_way_it_costs():
    costs = {"tiny-llama": COSTS}
    base = estimate_config_seconds(cfg(), costs)
    update = 0.01 + 0.0002 * 32 * 40
    assert estimate_config_seconds(cfg(**{"algo.ppo_epochs": 2}), costs) == pytest.approx(base + 20 * update)
    critic = cfg(**{"algo.advantage": "gae", "critic.enabled": True})
    assert estimate_config_seconds(critic, costs) == pytest.approx(base + 20 * update)  # factor 2
    rollout = 32 * (0.001 + 0.0001 * 32)
    assert estimate_config_seconds(cfg(**{"algo.dynamic_sampling": True}), costs) == pytest.approx(
        base + 20 * 0.5 * rollout)
    assert estimate_config_seconds(cfg(**{"eval.every": 0}), costs) == pytest.approx(
        base - 32 * (0.001 + 0.0001 * 50))  # evaluations at the start and the end only
    assert estimate_config_seconds(cfg(**{"train.steps": 40}), costs) > 1.9 * base - 2 * 2.0
    assert estimate_config_seconds(cfg(**{"model.name": "micro-llama"}), costs) is None  # no constants


def test_measured_constants_cover_every_zoo_model():
    models, meta = load_timing()
    assert set(MODELS.names()) <= set(models), "run python benchmarks/calibrate_timing.py"
    assert {"machine", "date", "how"} <= set(meta)
    for name, c in models.items():
        assert c.decode_b > 0 and c.update_b > 0 and c.critic_factor >= 1, name
    # bigger models cost more per token
    assert models["micro-llama"].update_b < models["tiny-llama"].update_b < models["smollm2-135m"].update_b


def test_a_missing_or_broken_file_gives_no_estimates(tmp_path):
    assert load_timing(str(tmp_path / "none.json")) == ({}, {})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": {"m": {"decode_a": 1}}}))
    assert load_timing(str(bad)) == ({}, {})


def test_two_workers_share_two_cores():
    assert parallel_seconds(100.0, 1) == 100.0
    assert 50.0 < parallel_seconds(100.0, 2) < 60.0
