"""addition and chain: reference steps, step-by-step grading and partial credit on hand examples."""

from __future__ import annotations

import pytest

from ablate.errors import AblateError
from ablate.tasks import TASKS
from ablate.tasks.arithmetic import apply_op
from ablate.tasks.common import digit_partial


@pytest.fixture
def addition():
    return TASKS.get("addition")()


@pytest.fixture
def chain():
    return TASKS.get("chain")()


def test_addition_reference(addition):
    p = addition.make(357, 486)
    assert p.prompt == "357+486="
    assert p.answer == "843"
    assert p.meta["steps"] == ["7+6+0=13", "5+8+1=14", "3+4+1=8"]
    assert p.solution == "<think>7+6+0=13\n5+8+1=14\n3+4+1=8</think><answer>843</answer>"
    q = addition.make(999, 1)
    assert q.prompt == "999+1=" and q.answer == "1000"
    assert q.meta["steps"] == ["9+1+0=10", "9+0+1=10", "9+0+1=10"]
    one = TASKS.get("addition")(difficulty=1).make(7, 5)
    assert one.meta["steps"] == ["7+5+0=12"] and one.answer == "12"


def test_addition_samples_have_exactly_difficulty_digits():
    task = TASKS.get("addition")(difficulty=4)
    for p in task.sample("train", 200, seed=0):
        a, b = p.prompt[:-1].split("+")
        assert len(a) == len(b) == 4 and int(p.answer) == int(a) + int(b)
        assert len(p.meta["steps"]) == 4


def test_addition_reference_is_short(addition):
    # 3 digits: 3 steps of 7-8 characters and 2 newlines, 4 tags as single tokens, a 3-4 digit answer
    for p in addition.sample("train", 100, seed=0):
        tokens = len(p.solution) - sum(len(t) - 1 for t in ("<think>", "</think>", "<answer>", "</answer>"))
        assert 30 <= tokens <= 35


def test_addition_wrong_carry_is_one_wrong_step(addition):
    p = addition.make(357, 486)
    g = addition.grade(p, "<think>7+6+0=13\n5+8+0=13\n3+4+1=8</think><answer>833</answer>")
    assert [s.correct for s in g.steps] == [True, False, True]
    assert g.steps[1].span == (16, 24)
    assert not g.answer_correct and g.parsed_answer == "833" and g.format_ok
    assert g.partial == pytest.approx(2 / 3)
    assert g.step_accuracy == pytest.approx(2 / 3)


def test_addition_missing_and_extra_steps(addition):
    p = addition.make(357, 486)
    g = addition.grade(p, "<think>7+6+0=13\n5+8+1=14</think><answer>843</answer>")
    assert [s.correct for s in g.steps] == [True, True] and g.num_reference_steps == 3
    assert g.step_accuracy == pytest.approx(2 / 3) and g.answer_correct and g.format_ok
    g = addition.grade(p, "<think>7+6+0=13\n5+8+1=14\n3+4+1=8\n0+0+0=0</think><answer>843</answer>")
    assert [s.correct for s in g.steps] == [True, True, True, False]
    assert g.step_accuracy == pytest.approx(3 / 4)


def test_digit_partial_aligns_from_the_right():
    assert digit_partial("843", "843") == 1.0
    assert digit_partial("833", "843") == pytest.approx(2 / 3)
    assert digit_partial("43", "843") == pytest.approx(2 / 3)
    assert digit_partial("1843", "843") == pytest.approx(3 / 4)
    assert digit_partial("348", "843") == pytest.approx(1 / 3)
    assert digit_partial(None, "843") == 0.0 and digit_partial("", "843") == 0.0


def test_addition_difficulty_and_operand_errors():
    with pytest.raises(AblateError, match=r"difficulty must be an integer in \[1, 20\], got 0"):
        TASKS.get("addition")(difficulty=0)
    with pytest.raises(AblateError, match="difficulty"):
        TASKS.get("addition")(difficulty=True)
    with pytest.raises(AblateError, match=r"eval_fraction must be a number in \(0, 1\)"):
        TASKS.get("addition")(eval_fraction=1.0)
    with pytest.raises(AblateError, match=r"operands in \[0, 999\]"):
        TASKS.get("addition")().make(1000, 1)


def test_one_digit_addition_splits_cover_the_hundred_problems():
    task = TASKS.get("addition")(difficulty=1, eval_fraction=0.2)
    train = {p.prompt for p in task.sample("train", 500, seed=0)}
    evals = {p.prompt for p in task.sample("eval", 500, seed=0)}
    assert not train & evals and len(train | evals) == 100  # the split is used up, then repeated


def test_apply_op():
    assert apply_op(7, "+", 5) == 12 and apply_op(7, "-", 5) == 2 and apply_op(5, "-", 7) is None
    assert apply_op(7, "*", 5) == 35 and apply_op(8, "/", 4) == 2
    assert apply_op(7, "/", 2) is None and apply_op(7, "/", 0) is None and apply_op(1, "^", 2) is None


def test_chain_reference_left_to_right(chain):
    p = chain.make(3, [("+", 4), ("*", 2), ("-", 5)])
    assert p.prompt == "3+4*2-5="
    assert p.answer == "9"  # ((3+4)*2)-5, not 3+8-5
    assert p.solution == "<think>3+4=7\n7*2=14\n14-5=9</think><answer>9</answer>"
    g = chain.grade(p, "<think>3+4=7\n4*2=8\n14-5=9</think><answer>9</answer>")
    assert [s.correct for s in g.steps] == [True, False, True] and g.answer_correct


def test_chain_samples_respect_the_options():
    task = TASKS.get("chain")(difficulty=5, ops="+*", max_operand=5, max_value=50)
    for p in task.sample("train", 200, seed=0):
        assert len(p.meta["steps"]) == 5
        assert set(p.prompt[:-1]) <= set("0123456789+*")
        for step in p.meta["steps"]:
            assert 0 <= int(step.split("=")[1]) <= 50
        for _op, y in p.meta["terms"]:
            assert 1 <= y <= 5
    with pytest.raises(AblateError, match="option ops must be a non-empty subset of"):
        TASKS.get("chain")(ops="+^")
    with pytest.raises(AblateError, match=r"max_value must be an integer in \[9, 9999\]"):
        TASKS.get("chain")(max_value=5)


def test_addition_checks_make_length_a_free_choice():
    """checks=2: references carry 0, 1 or 2 verification lines (about a third each, fixed per prompt);
    the checks are steps judged against the allowed lines, the answer does not depend on them, and
    checks=0 is the task as before."""
    from collections import Counter

    from ablate.tasks import TASKS

    task = TASKS.get("addition")(difficulty=2, seed=0, checks=2)
    plain = TASKS.get("addition")(difficulty=2, seed=0)
    p = task.make(73, 77)
    assert p.meta["checks"] == ["150-77=73", "150-73=77"]
    assert plain.make(73, 77).solution == "<think>3+7+0=10\n7+7+1=15</think><answer>150</answer>"
    counts = Counter(q.solution.count("\n") - 1 for q in task.sample("train", 600, seed=0))
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 150
    assert task.sample("train", 5, seed=3) == task.sample("train", 5, seed=3)
    base = "<think>3+7+0=10\n7+7+1=15{}</think><answer>150</answer>"
    for extra, steps_ok in [("", [True, True]), ("\n150-77=73", [True, True, True]),
                            ("\n150-77=73\n150-73=77", [True] * 4), ("\n150-73=77", [True, True, False]),
                            ("\n150-77=73\n150-73=77\n73+77=150", [True] * 4 + [False])]:
        g = task.grade(p, base.format(extra))
        assert g.answer_correct and g.format_ok and g.num_reference_steps == 2
        assert [s.correct for s in g.steps] == steps_ok, extra
    assert not task.grade(p, base.format("\n150-77=73").replace("<answer>150", "<answer>151")).answer_correct
    for bad in (-1, 4, "2", True):
        with pytest.raises(AblateError, match="checks"):
            TASKS.get("addition")(difficulty=2, checks=bad)


def test_sample_is_drawn_once_per_process_and_equals_a_fresh_draw():
    from ablate.tasks import common

    common._SAMPLES.clear()
    task = TASKS.get("addition")(difficulty=2, seed=3, checks=1)
    first = task.sample("train", 500, seed=7)
    assert len(common._SAMPLES) == 1
    second = task.sample("train", 500, seed=7)
    assert second == first and second is not first  # the same problems, a new list
    second.pop()  # changing the returned list does not change the cached one
    assert task.sample("train", 500, seed=7) == first
    assert first == task._draw_sample("train", 500, seed=7)  # the cache returns what a fresh draw gives
    # any other task option, split, size or seed is another draw
    other = TASKS.get("addition")(difficulty=2, seed=3, checks=2).sample("train", 500, seed=7)
    assert other != first and len(common._SAMPLES) == 2
    assert task.sample("train", 500, seed=8) != first and task.sample("eval", 500, seed=7) != first
    for i in range(common.SAMPLE_CACHE_SIZE + 3):  # the cache stays bounded
        task.sample("eval", 5, seed=100 + i)
    assert len(common._SAMPLES) == common.SAMPLE_CACHE_SIZE
