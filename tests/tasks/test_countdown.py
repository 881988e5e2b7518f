"""countdown: the verifier accepts any legal solution and flags dead ends, on hand examples."""

from __future__ import annotations

import pytest

from ablate.errors import AblateError
from ablate.tasks import TASKS
from ablate.tasks.countdown import evaluate_expression, reachable, solve


@pytest.fixture
def task():
    return TASKS.get("countdown")()


@pytest.fixture
def p(task):
    return task.make([3, 7, 5], 26)


def test_reachable():
    assert reachable((3, 5, 7), 26)  # 7*3+5
    assert reachable((2, 3), 6) and reachable((3,), 3)
    assert not reachable((1, 1), 5)
    assert not reachable((5, 10), 15 + 1)
    assert reachable((2, 4, 8), 1)  # (8/4)/2
    assert not reachable((2, 3), 1 + 5 + 6)


def test_evaluate_expression():
    assert evaluate_expression("7*3+5") == (26, [7, 3, 5])
    assert evaluate_expression("(2+3)*4") == (20, [2, 3, 4])
    assert evaluate_expression(" 3 + 4 ") == (7, [3, 4])
    assert evaluate_expression("8-2-3") == (3, [8, 2, 3])  # left to right
    assert evaluate_expression("8/4/2") == (1, [8, 4, 2])
    for bad in ["2-5", "7/2", "8/(4-4)", "-3+5", "3+", "((3)", "03+1", "", "3 4", "3^2", "٣+1", "1" * 201]:
        assert evaluate_expression(bad) is None, bad
    assert evaluate_expression("(" * 60 + "1" + ")" * 60) is None


def test_solve_and_make(task):
    steps, expr = solve([3, 7, 5], 26)
    assert evaluate_expression(expr)[0] == 26 and len(steps) == 2
    assert solve([1, 1], 5) is None
    with pytest.raises(AblateError, match="cannot be reached"):
        task.make([1, 1], 5)


def test_another_legal_solution_is_fully_correct(task, p):
    g = task.grade(p, "<think>7*3=21\n21+5=26</think><answer>(7*3)+5</answer>")
    assert g.answer_correct and g.format_ok and [s.correct for s in g.steps] == [True, True]
    assert p.solution != "<think>7*3=21\n21+5=26</think><answer>(7*3)+5</answer>"


def test_dead_end_steps_are_wrong(task, p):
    g = task.grade(p, "<think>3+7=10\n10+5=15</think><answer>3+7+5</answer>")
    assert [s.correct for s in g.steps] == [False, False]
    assert not g.answer_correct
    assert g.partial == pytest.approx(15 / 26)  # all 3 numbers used, value 15 for target 26


def test_wrong_result_does_not_spoil_the_next_step(task, p):
    g = task.grade(p, "<think>7*3=22\n21+5=26</think><answer>7*3+5</answer>")
    assert [s.correct for s in g.steps] == [False, True] and g.answer_correct


def test_unavailable_operands_and_extra_steps(task, p):
    g = task.grade(p, "<think>4*5=20\n7*3=21\n21+5=26\n26+0=26</think><answer>7*3+5</answer>")
    assert [s.correct for s in g.steps] == [False, True, True, False]
    g = task.grade(p, "<think>7*7=49</think><answer>7*7</answer>")  # 7 given once
    assert [s.correct for s in g.steps] == [False] and g.partial == 0.0


def test_partial_credit(task, p):
    assert task.grade(p, "<think></think><answer>7*3</answer>").partial == pytest.approx(2 / 3 * 21 / 26)
    assert task.grade(p, "<think></think><answer>7*3+7</answer>").partial == 0.0  # 7 twice
    assert task.grade(p, "<think></think><answer>21+5</answer>").partial == 0.0  # 21 not given
    assert task.grade(p, "<think></think><answer>oops</answer>").partial == 0.0


def test_targets_are_in_range_and_not_given():
    task = TASKS.get("countdown")(difficulty=4, max_target=50)
    for q in task.sample("train", 100, seed=0):
        t = q.meta["target"]
        assert 1 <= t <= 50 and t not in q.meta["numbers"] and len(q.meta["numbers"]) == 4
        assert len(q.meta["steps"]) == 3
