"""evaluate: greedy metrics through the real rollout and grading path; pass@k (Chen et al. 2021);
per-problem records that agree with the means."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.errors import AblateError
from ablate.models import Policy, load_policy
from ablate.models.evaluate import (
    ProblemRecord,
    evaluate,
    evaluate_with_records,
    pass_at_k,
    problem_records,
    summarize_grades,
)
from ablate.models.logprobs import token_logprobs
from ablate.models.rollout import left_pad
from ablate.tasks import TASKS, Problem, Task

#: Tiny tensors: one intra-op thread is as fast and does not stall when the cores are shared.
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def task() -> Task:
    return TASKS.get("addition")(difficulty=2, seed=0)


@pytest.fixture(scope="module")
def problems(task) -> list[Problem]:
    return task.sample("eval", 3, seed=0)


def memorise(policy: Policy, problems: list[Problem], max_steps: int = 200) -> float:
    """Train ``policy`` on the reference solutions (+ EOS) of ``problems`` until it has memorised them.

    A forced-correct policy made of real parts: SFT through token_logprobs, the trainer's function.
    Returns the final mean negative log-likelihood per token.
    """
    tok = policy.tokenizer
    prompt_ids, prompt_mask = left_pad([policy.encode_prompt(p.prompt) for p in problems], policy.pad_token_id)
    completions = [tok.encode(p.solution, add_special_tokens=False) + [policy.eos_token_id] for p in problems]
    comp_ids, comp_mask = left_pad([c[::-1] for c in completions], policy.pad_token_id)
    comp_ids, comp_mask = comp_ids.flip(1), comp_mask.flip(1)  # right-padded
    ids, mask = torch.cat([prompt_ids, comp_ids], 1), torch.cat([prompt_mask, comp_mask], 1)
    model = policy.model
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(max_steps):
        logp = token_logprobs(model, ids, mask, num_prompt_tokens=prompt_ids.shape[1])
        loss = -logp.sum() / comp_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.02:
            break
    model.eval()
    return loss.item()


@pytest.fixture(scope="module")
def memorised(problems) -> Policy:
    policy = load_policy("micro-llama", seed=0)
    assert memorise(policy, problems) < 0.02
    return policy


def test_pass_at_k_by_hand():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2)) == pytest.approx(0.7)
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(3, 3, 2) == 1.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k: every k-subset holds a correct sample
    assert pass_at_k(200, 13, 10) == pytest.approx(1 - math.comb(187, 10) / math.comb(200, 10))
    with pytest.raises(AblateError, match="k=5"):
        pass_at_k(3, 1, 5)


def test_summarize_reference_and_corrupted_solutions_by_hand(task, problems):
    ref = [task.grade(p, p.solution) for p in problems]
    assert summarize_grades(ref, [10, 20, 30], [False, False, True]) == {
        "accuracy": 1.0, "step_accuracy": 1.0, "format_rate": 1.0, "partial": 1.0, "num_problems": 3.0,
        "mean_length": 20.0, "truncated_rate": 1 / 3,
    }
    # problem 0 (35+89): the answer 124 -> 125 is wrong but well formatted, and its steps still right;
    # problem 1: its first step wrong (7+1+0=9) and its answer too; problem 2: no completion at all
    p0, p1, p2 = problems
    wrong_answer = p0.solution.replace("<answer>124</answer>", "<answer>125</answer>")
    wrong_step = p1.solution.replace("7+1+0=8", "7+1+0=9").replace("<answer>68</answer>", "<answer>69</answer>")
    grades = [task.grade(p0, wrong_answer), task.grade(p1, wrong_step), task.grade(p2, "")]
    s = summarize_grades(grades)
    assert s["accuracy"] == 0.0
    assert s["format_rate"] == pytest.approx(2 / 3)
    assert s["step_accuracy"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert "mean_length" not in s


def test_memorised_policy_scores_perfectly_through_rollouts(task, problems, memorised):
    tok = memorised.tokenizer
    expected_length = sum(len(tok.encode(p.solution, add_special_tokens=False)) + 1 for p in problems) / 3
    m = evaluate(memorised, task, problems, max_new_tokens=40, batch_size=2)
    assert m == {
        "accuracy": 1.0, "step_accuracy": 1.0, "format_rate": 1.0, "partial": 1.0, "num_problems": 3.0,
        "mean_length": expected_length, "truncated_rate": 0.0,
    }
    assert expected_length == 23.0  # 24 + 21 + 21 tokens, each + EOS
    # pass@k from sampled completions: at temperature 0.3 every sample is the memorised solution
    m = evaluate(memorised, task, problems, max_new_tokens=40, pass_k=2, num_samples=4, temperature=0.3,
                 generator=torch.Generator().manual_seed(0))
    assert m["pass@2"] == 1.0 and m["accuracy"] == 1.0


def test_records_are_one_per_problem_and_agree_with_the_means(task, problems, memorised):
    # the 3 memorised problems, then 3 the policy never saw: records that differ from problem to problem
    mixed = [*problems, *task.sample("eval", 6, seed=1)[3:]]
    metrics, records = evaluate_with_records(memorised, task, mixed, max_new_tokens=40, batch_size=4)
    assert metrics == evaluate(memorised, task, mixed, max_new_tokens=40, batch_size=4)
    assert [r.problem for r in records] == list(range(6))
    assert records[:3] == [ProblemRecord(problem=i, correct=True, step_accuracy=1.0, format_ok=True, partial=1.0,
                                         length=n, truncated=False) for i, n in enumerate([25, 22, 22])]

    def mean(values) -> float:
        values = [float(v) for v in values]
        return sum(values) / len(values)

    assert metrics["accuracy"] == pytest.approx(mean(r.correct for r in records))
    assert metrics["step_accuracy"] == pytest.approx(mean(r.step_accuracy for r in records))
    assert metrics["format_rate"] == pytest.approx(mean(r.format_ok for r in records))
    assert metrics["partial"] == pytest.approx(mean(r.partial for r in records))
    assert metrics["mean_length"] == pytest.approx(mean(r.length for r in records))
    assert metrics["truncated_rate"] == pytest.approx(mean(r.truncated for r in records))
    assert metrics["num_problems"] == len(records)
    assert len({(r.correct, r.length) for r in records}) > 1, "the unseen problems should score differently"


def test_problem_records_by_hand(task, problems):
    grades = [task.grade(problems[0], problems[0].solution), task.grade(problems[1], "")]
    assert problem_records(grades, [25, 32], [False, True]) == [
        ProblemRecord(0, True, 1.0, True, 1.0, 25, False), ProblemRecord(1, False, 0.0, False, 0.0, 32, True),
    ]
    with pytest.raises(AblateError, match="2 grades, 1 lengths"):
        problem_records(grades, [25], [False, True])


def test_untrained_policy_scores_zero(task, problems):
    policy = load_policy("micro-llama", seed=0)
    policy.model.train()
    m = evaluate(policy, task, problems, max_new_tokens=16, pass_k=2, generator=torch.Generator().manual_seed(0))
    assert m["accuracy"] == 0.0 and m["format_rate"] == 0.0 and m["pass@2"] == 0.0
    assert 1.0 <= m["mean_length"] <= 16.0
    assert policy.model.training  # restored


def test_argument_errors(task, problems, memorised):
    with pytest.raises(AblateError, match="num_samples=2"):
        evaluate(memorised, task, problems, pass_k=3, num_samples=2)
    with pytest.raises(AblateError, match="temperature=0"):
        evaluate(memorised, task, problems, pass_k=2, temperature=0.0)
    with pytest.raises(AblateError, match="no problems"):
        evaluate(memorised, task, [])
    with pytest.raises(AblateError, match="batch_size=0"):
        evaluate(memorised, task, problems, batch_size=0)


def test_sampled_evaluation_when_not_greedy(task, problems):
    """eval.greedy=false grades one sample per problem at the given temperature: reproducible with the
    same generator, different with another; greedy decoding ignores the generator."""
    policy = load_policy("micro-llama", seed=0)
    mixed = [*problems, *task.sample("eval", 8, seed=2)]

    def lengths(greedy: bool, seed: int) -> list[int]:
        _, records = evaluate_with_records(policy, task, mixed, max_new_tokens=16, temperature=1.0, greedy=greedy,
                                           generator=torch.Generator().manual_seed(seed))
        return [r.length for r in records]

    assert lengths(True, 0) == lengths(True, 1)
    assert lengths(False, 0) == lengths(False, 0)
    assert lengths(False, 0) != lengths(False, 1)
    with pytest.raises(AblateError, match="greedy=False"):
        evaluate_with_records(policy, task, problems, temperature=0.0, greedy=False)
