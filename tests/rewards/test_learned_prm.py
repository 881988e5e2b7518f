"""The learned PRM: it learns (beats the base-rate baselines on held-out steps), is cached, scores one
probability per step, and a trial with ``reward.prm.source=learned`` trains."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRIAL

from ablate.config import TrialConfig
from ablate.errors import AblateError
from ablate.models import load_policy
from ablate.models.rollout import generate_rollouts
from ablate.rewards.learned_prm import (
    LearnedPRMSpec,
    _Example,
    _predict,
    fit_linear_probe,
    learned_prm_for_trial,
    log_loss,
    roc_auc,
    train_learned_prm,
)
from ablate.tasks import Grade, StepCheck
from ablate.train import build_policy, build_task, run_trial, setup_trial, train_step

#: The shared tiny trial (tests/conftest.py, so the session's
#: warm start in ``ws_cache`` is built once); the last ones make the PRM small enough for a test.
TINY = [
    *TINY_TRIAL,
    "reward.components=[final_answer, prm]",
    "reward.prm.source=learned",
    "reward.prm.learned_samples=1024",
    "reward.prm.learned_steps=100",
    "reward.prm.learned_batch_size=32",
]


def config(ws_cache: str) -> TrialConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TrialConfig.from_overrides([*TINY, f"warmstart.cache_dir={ws_cache}"])


@pytest.fixture(scope="module")
def built(ws_cache):
    """The warm start and its learned PRM, built (not read from a cache) once for this module."""
    cfg = config(ws_cache)
    policy, ws_report = build_policy(cfg, torch.device("cpu"))
    task = build_task(cfg)
    start = time.perf_counter()
    prm, report = learned_prm_for_trial(cfg, policy, task, ws_report)
    return cfg, policy, task, ws_report, prm, report, time.perf_counter() - start


# --------------------------------------------------------------------------------------------------
# pure helpers


def test_roc_auc_hand_computed():
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 0.35 beats 0.1 only, 0.8 beats both -> 3/4
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half
    assert roc_auc([0.5, 0.5, 0.9], [True, False, True]) == pytest.approx(0.75)
    assert roc_auc([0.9, 0.1], [False, True]) == 0.0
    assert math.isnan(roc_auc([0.2, 0.3], [True, True]))


def test_log_loss_hand_computed():
    # -(ln 0.8 + ln(1 - 0.4)) / 2
    assert log_loss([0.8, 0.4], [True, False]) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)
    assert log_loss([0.0], [True]) == pytest.approx(-math.log(1e-7))  # clipped, not infinite
    assert math.isnan(log_loss([], []))


def test_linear_probe_separates_and_folds_the_standardisation():
    gen = torch.Generator().manual_seed(0)
    y = (torch.rand(200, generator=gen) < 0.3).float()
    x = torch.randn(200, 3, generator=gen) * torch.tensor([5.0, 0.02, 1.0]) + torch.tensor([10.0, -3.0, 0.0])
    x[:, 1] += 0.1 * (2 * y - 1)  # only the second (small, offset) feature tells the classes apart
    weight, bias = fit_linear_probe(x, y)
    logits = x @ weight + bias
    assert ((logits > 0).float() == y).float().mean() == 1.0
    assert abs(float(weight[1])) > 10 * max(abs(float(weight[0])), abs(float(weight[2])))


# --------------------------------------------------------------------------------------------------
# building, caching, scoring


def test_classifier_beats_the_baselines_on_held_out_steps(built):
    *_, report, seconds = built
    assert not report["cached"]
    assert report["completions"] == 1024
    assert report["heldout_steps_labelled"] > 100 and report["train_steps_labelled"] > 4 * 100
    # both classes occur at temperature 1 (correct steps are rare for this weak warm start: ~6%)
    assert 0.0 < report["heldout_positive_rate"] < 0.5
    # the majority baseline is a constant score (AUC 0.5) and the base-rate prior's log loss
    assert report["heldout_auc"] >= 0.7, report
    assert report["heldout_log_loss"] < report["prior_log_loss"] - 0.01, report
    assert report["heldout_accuracy"] >= report["majority_accuracy"], report
    assert report["train_auc"] > 0.7
    assert len(report["history"]) == 10 and report["final_loss"] < report["history"][0]["loss"] + 0.05
    assert report["seconds"] <= seconds


def test_cache_is_reused(built, ws_cache):
    cfg, policy, task, ws_report, prm, report, _ = built
    start = time.perf_counter()
    again, report2 = learned_prm_for_trial(cfg, policy, task, ws_report)
    assert time.perf_counter() - start < 5
    assert report2["cached"] and report2["key"] == report["key"]
    assert report2["heldout_auc"] == report["heldout_auc"]
    for (name, a), (_, b) in zip(prm.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    assert not any(p.requires_grad for p in again.parameters())
    # a different setting is a different entry
    spec = LearnedPRMSpec(policy="warmstart:" + ws_report["key"], task="addition", difficulty=1, samples=1024,
                          max_new_tokens=16, steps=100, batch_size=32, seed=0)
    assert spec.key() != LearnedPRMSpec(**{**spec.to_dict(), "lr": 1e-3}).key()
    entry = Path(report["path"])
    assert entry.name == report["key"] and entry.parent == Path(ws_cache) / "prm"
    assert sorted(f.name for f in entry.iterdir()) == ["prm.pt", "report.json", "spec.json"]


def test_scores_one_probability_per_step_in_rollout_layout(built):
    _, policy, task, _, prm, _, _ = built
    problems = task.sample("train", 6, seed=5)
    r = generate_rollouts(policy, [p.prompt for p in problems], group_size=3, max_new_tokens=16,
                          temperature=1.0, generator=torch.Generator().manual_seed(1))
    grades = [task.grade(problems[g], t) for g, t in zip(r.group_ids.tolist(), r.texts)]
    scores = prm.score(r.input_ids, r.attention_mask, r.num_prompt_tokens, grades, r.offsets, r.mask)
    assert len(scores) == len(grades)
    assert [len(s) for s in scores] == [len(g.steps) for g in grades]
    assert sum(len(s) for s in scores) > 0
    assert all(0.0 <= p <= 1.0 for s in scores for p in s)
    # the score in the rollout layout (left-padded prompts, full completions) equals the score of the
    # same completion in the training layout (right-padded, cut after the last step)
    b = next(i for i, g in enumerate(grades) if g.steps)
    prompt = r.prompt_ids[b][r.prompt_mask[b] > 0].tolist()
    from ablate.rewards import step_end_tokens

    n = int(r.lengths[b])
    ends = step_end_tokens(grades[b], r.offsets[b], n)
    ids = prompt + r.completion_ids[b, :n].tolist()
    example = _Example(ids[: len(prompt) + ends[-1] + 1], [len(prompt) + t for t in ends],
                       [s.correct for s in grades[b].steps], 0)
    assert _predict(prm, [example], policy.pad_token_id, torch.device("cpu")) == pytest.approx(scores[b], abs=1e-5)
    # a step that no sampled token covers gets the uninformative 0.5
    lost = Grade(True, "1", True, (), (StepCheck((500, 501), True),), 1, 1.0)
    assert prm.score(r.input_ids[:1], r.attention_mask[:1], r.num_prompt_tokens, [lost], r.offsets[:1],
                     r.mask[:1]) == [[0.5]]


def test_errors_name_the_setting_and_the_fix(built):
    _, policy, task, *_ = built
    with pytest.raises(AblateError, match="learned_steps must be >= 0"):
        LearnedPRMSpec(policy="x", task="addition", steps=-1)
    with pytest.raises(AblateError, match="spec names 'countdown'"):
        train_learned_prm(policy, task, LearnedPRMSpec(policy="x", task="countdown"))


def test_one_class_of_steps_is_a_clear_error(tmp_path):
    policy = load_policy("micro-llama", seed=0)
    task = build_task(config(str(tmp_path)))
    spec = LearnedPRMSpec(policy="weights:untrained", task="addition", difficulty=1, samples=8, max_new_tokens=8)
    # an untrained policy writes noise: every "step" it writes is wrong
    with pytest.raises(AblateError, match=r"are incorrect.*warmstart.enabled=true.*learned_samples"):
        train_learned_prm(policy, task, spec, cache_dir=tmp_path)
    assert not (tmp_path / "prm" / spec.key()).exists()


# --------------------------------------------------------------------------------------------------
# the trainer


def test_trial_with_learned_prm_trains(built, ws_cache):
    cfg, *_, report, _ = built
    state = setup_trial(cfg)
    assert state.prm is not None and state.prm_report["cached"], "the trial must reuse the module's PRM"
    assert state.prm_report["key"] == report["key"]
    before = [p.detach().clone() for p in state.model.parameters()]
    prm_before = [p.detach().clone() for p in state.prm.parameters()]
    saw_prm_reward = False
    for step in (1, 2):
        metrics, batch = train_step(state, step)
        assert "reward/prm" in metrics and "reward/final_answer" in metrics
        prm_part = batch.parts["prm"]
        assert torch.all(prm_part[batch.mask == 0] == 0)
        # learned scores in [0, 1], divided by the reference's 1 step: every reward lies in [0, 1]
        assert torch.all((prm_part >= 0) & (prm_part <= 1))
        saw_prm_reward |= bool((prm_part > 0).any())
    assert saw_prm_reward
    assert any(not torch.equal(a, b) for a, b in zip(before, state.model.parameters())), "policy unchanged"
    assert all(torch.equal(a, b) for a, b in zip(prm_before, state.prm.parameters())), "the PRM must stay frozen"


def test_trial_result_carries_the_learned_prm_report(built):
    cfg, *_, report, _ = built
    result = run_trial(cfg.with_overrides({"train.steps": 1, "eval.n_problems": 2}))
    assert result.learned_prm["key"] == report["key"] and result.learned_prm["cached"]
    assert result.learned_prm["heldout_auc"] == report["heldout_auc"]  # what the study's result.json records


def test_other_sources_build_no_learned_prm(ws_cache):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = TrialConfig.from_overrides([*TINY, f"warmstart.cache_dir={ws_cache}", "reward.prm.source=oracle"])
    state = setup_trial(cfg)
    assert state.prm is None and state.prm_report == {}
