"""reasoning_gym: reasoning-gym's generators as a task, graded by their own scorers (the real library)."""

from __future__ import annotations

import json

import pytest

from ablate.cli import main
from ablate.errors import AblateError
from ablate.tasks import TASKS

pytest.importorskip("reasoning_gym")


def build(**options):
    return TASKS.get("reasoning_gym")(seed=3, **options)


@pytest.mark.parametrize(("dataset", "config"), [
    ("basic_arithmetic", {"max_terms": 2, "max_digits": 2}), ("leg_counting", {"max_animals": 3}),
    ("spell_backward", {}), ("chain_sum", {}),
])
def test_reference_answers_score_1_and_a_wrong_one_does_not(dataset, config):
    task = build(dataset=dataset, **config)
    problems = task.sample("train", 30, seed=0)
    assert len({p.prompt for p in problems}) == 30
    for p in problems:
        g = task.grade(p, p.solution)
        assert g.answer_correct and g.partial == 1.0 and g.format_ok and g.steps == ()
        assert task.score(p, p.answer) == 1.0 == task.generator.score_answer(p.answer, p.meta["entry"])
        wrong = task.grade(p, "<think></think><answer>no such answer</answer>")
        assert not wrong.answer_correct and wrong.partial < 1.0 and wrong.format_ok


def test_partial_credit_is_the_generators_own_score():
    """spell_backward scores a near miss partially; the grade's partial is that score, not correct."""
    task = build(dataset="spell_backward")
    p = next(p for p in task.sample("train", 50, seed=1) if len(p.answer) >= 5)
    near = p.answer[:-1] + ("a" if p.answer[-1] != "a" else "b")
    g = task.grade(p, f"<think></think><answer>{near}</answer>")
    assert not g.answer_correct and 0.0 < g.partial < 1.0
    assert g.partial == pytest.approx(task.generator.score_answer(near, p.meta["entry"]))
    assert task.grade(p, "no tags at all").partial == 0.0  # no answer: 0, not an error


def test_the_generators_options_are_its_config_and_train_and_eval_are_disjoint():
    two = build(dataset="basic_arithmetic", min_terms=2, max_terms=2, max_digits=1)
    assert all(p.meta["entry"]["metadata"]["num_terms"] == 2 for p in two.sample("train", 40, seed=0))
    train = {p.prompt for p in two.sample("train", 200, seed=0)}
    evals = {p.prompt for p in two.sample("eval", 20, seed=0)}
    assert evals and not train & evals
    again = build(dataset="basic_arithmetic", min_terms=2, max_terms=2, max_digits=1)
    assert [p.prompt for p in again.sample("eval", 20, seed=0)] == [p.prompt for p in two.sample("eval", 20, seed=0)]


@pytest.mark.parametrize(("options", "message"), [
    ({}, "needs task.dataset"),
    ({"dataset": "basic_arithmetc"}, "no generator 'basic_arithmetc' (did you mean 'basic_arithmetic'?)"),
    ({"dataset": "basic_arithmetic", "max_term": 2}, "has no option 'max_term' (did you mean 'max_terms'?)"),
    ({"dataset": "basic_arithmetic", "size": 10}, "option 'size' is set by ablate"),
    ({"dataset": "basic_arithmetic", "min_terms": 5, "max_terms": 2}, "refuses the options"),
])
def test_bad_options_are_one_clear_error(options, message):
    with pytest.raises(AblateError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        build(**options)


def test_task_dataset_reaches_the_task_and_step_rewards_are_refused():
    from ablate.config import TrialConfig, TrialConfigError
    from ablate.train.setup import build_task

    cfg = TrialConfig.from_overrides({"task.name": "reasoning_gym", "task.dataset": "leg_counting",
                                      "task.options": {"max_animals": 3}})
    task = build_task(cfg)
    assert task.dataset == "leg_counting" and task.options == {"max_animals": 3, "dataset": "leg_counting"}
    assert TrialConfig().trial_key() == TrialConfig.from_overrides({"task.dataset": None}).trial_key()
    assert cfg.trial_key() != cfg.with_overrides({"task.dataset": "chain_sum"}).trial_key()
    with pytest.raises(TrialConfigError, match="prm needs verifiable reasoning steps, and task 'reasoning_gym' "
                                               "has none"):
        cfg.with_overrides({"reward.components": ["final_answer", "prm"]})


def test_a_trial_trains_on_a_generator_with_format_and_partial_rewards():
    from ablate.config import TrialConfig
    from ablate.train import run_trial

    cfg = TrialConfig.from_overrides({
        "task.name": "reasoning_gym", "task.dataset": "spell_backward", "model.name": "micro-llama",
        "reward.components": ["final_answer", "format", "partial"], "train.steps": 2, "warmstart.enabled": False,
        "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 12, "eval.n_problems": 4,
        "threads": 1})
    result = run_trial(cfg)
    last = result.history[-1][1]
    assert {"reward/partial", "reward/format", "eval/accuracy", "eval/partial"} <= set(last)


def test_ablate_tasks_shows_an_example_with_and_without_a_generator_named(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("reasoning_gym: "):].split("\n\n")[0]
    example = TASKS.get("reasoning_gym")(dataset="basic_arithmetic").example()
    assert "example with option dataset=basic_arithmetic:" in section
    assert f"prompt:   {example.prompt}" in section and f"answer:   {example.answer}" in section
    assert main(["tasks", "reasoning_gym", "--option", "dataset=leg_counting", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["tasks"]
    assert "example_options" not in entry and "legs" in entry["example"]["prompt"]
    assert entry["example"]["answer"] == TASKS.get("reasoning_gym")(dataset="leg_counting").example().answer
