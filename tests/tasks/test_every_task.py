"""The same checks for every registered task (a new task is covered by being registered)."""

from __future__ import annotations

import random

import pytest

from ablate.errors import AblateError
from ablate.tasks import FORMAT_RE, FORMAT_TAGS, TASKS, Grade

from .conftest import TAG_CORRUPTIONS, corrupt_answer, corrupt_step

NAMES = TASKS.names()


def test_builtin_tasks_registered():
    assert {"addition", "chain", "countdown", "jsonl", "reasoning_gym"} <= set(NAMES)


def steps_right(task, g: Grade) -> bool:
    """Every step found is right (a task without verifiable steps finds none and has none to get right)."""
    if not task.has_steps:
        return g.steps == () and g.num_reference_steps == 0
    return all(s.correct for s in g.steps) and g.step_accuracy == 1.0


def fully_correct(g: Grade) -> bool:
    return (
        g.answer_correct
        and g.format_ok
        and g.format_errors == ()
        and len(g.steps) == g.num_reference_steps
        and all(s.correct for s in g.steps)
        and (g.step_accuracy == 1.0 or g.num_reference_steps == 0)  # a task without steps has none to get right
        and g.partial == 1.0
    )


@pytest.mark.parametrize("name", NAMES)
def test_reference_solutions_pass_every_checker(build, name):
    task = build(name)
    problems = task.sample("train", 400, seed=1) + task.sample("eval", 100, seed=1)
    for p in problems:
        g = task.grade(p, p.solution)
        assert fully_correct(g), (p, g)
        assert g.parsed_answer is not None


@pytest.mark.parametrize("name", NAMES)
def test_one_wrong_step_fails_only_that_step(build, name):
    task = build(name)
    if not task.has_steps:
        pytest.skip(f"{name} has no verifiable steps (step rewards are refused for it)")
    tested = 0
    for p in task.sample("train", 60, seed=2):
        for k in range(len(task.grade(p, p.solution).steps)):
            bad = corrupt_step(p.solution, k)
            if bad is None:
                continue
            tested += 1
            g = task.grade(p, bad)
            assert g.answer_correct and g.format_ok and g.partial == 1.0, (bad, g)
            assert [s.correct for s in g.steps] == [i != k for i in range(len(g.steps))], (bad, g)
            assert g.step_accuracy == pytest.approx(1 - 1 / g.num_reference_steps)
    assert tested >= 60


@pytest.mark.parametrize("name", NAMES)
def test_wrong_answer_fails_only_the_answer(build, name):
    task = build(name)
    for p in task.sample("train", 100, seed=3):
        bad = corrupt_answer(p.solution)
        assert bad is not None
        g = task.grade(p, bad)
        assert not g.answer_correct and g.partial < 1.0, (bad, g)
        assert g.parsed_answer != p.answer
        assert g.format_ok and steps_right(task, g), (bad, g)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("corruption", list(TAG_CORRUPTIONS))
def test_broken_format_fails_only_the_format(build, name, corruption):
    task = build(name)
    for p in task.sample("train", 25, seed=4):
        bad = TAG_CORRUPTIONS[corruption](p.solution)
        g = task.grade(p, bad)
        assert not g.format_ok and g.format_errors, (bad, g)
        assert g.answer_correct and g.partial == 1.0, (bad, g)
        assert steps_right(task, g), (bad, g)
        for s, e in g.format_errors:
            assert 0 <= s < e <= len(bad)


def random_text(rng: random.Random, pieces: list[str]) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))


def mutate(rng: random.Random, text: str, pieces: list[str]) -> str:
    for _ in range(rng.randint(1, 4)):
        i = rng.randint(0, len(text))
        op = rng.random()
        if op < 0.4:
            text = text[:i] + rng.choice(pieces) + text[i:]
        elif op < 0.8:
            text = text[:i] + text[i + rng.randint(1, 8):]
        else:
            j = rng.randint(0, len(text))
            text = text[min(i, j):max(i, j)] + text[:min(i, j)] + text[max(i, j):]
    return text


@pytest.mark.parametrize("name", NAMES)
def test_grade_survives_random_strings(build, name):
    task = build(name)
    rng = random.Random(name)
    pieces = [*FORMAT_TAGS, *"0123456789+-*/=()., \n", "\t", "é", "\x00", "<", ">", "</", "####", "ab", "99999999"]
    problems = task.sample("train", 20, seed=5)
    for i in range(1500):
        p = problems[i % len(problems)]
        text = random_text(rng, pieces) if i % 2 else mutate(rng, p.solution, pieces)
        g = task.grade(p, text)
        assert isinstance(g, Grade)
        assert isinstance(g.answer_correct, bool) and isinstance(g.format_ok, bool)
        assert 0.0 <= g.partial <= 1.0 and 0.0 <= g.step_accuracy <= 1.0
        assert g.format_ok == (not g.format_errors)
        if g.answer_correct:
            assert g.partial == 1.0
        prev_end = 0
        for s in g.steps:
            a, b = s.span
            assert prev_end <= a < b <= len(text)
            prev_end = b
        for a, b in g.format_errors:
            assert 0 <= a <= b <= len(text)
        if getattr(task, "format", "tags") == "tags":
            assert g.format_ok == bool(FORMAT_RE.fullmatch(text)), repr(text)


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_disjoint_and_deterministic(build, name):
    task = build(name)
    train = task.sample("train", 300, seed=0)
    evals = task.sample("eval", 60, seed=0)
    assert len(train) == 300 and len(evals) == 60
    assert not {p.prompt for p in train} & {p.prompt for p in evals}
    again = build(name)
    assert [p.prompt for p in again.sample("train", 300, seed=0)] == [p.prompt for p in train]
    assert [p.solution for p in again.sample("eval", 60, seed=0)] == [p.solution for p in evals]
    assert [p.prompt for p in task.sample("train", 300, seed=1)] != [p.prompt for p in train]
    assert [p.prompt for p in task.sample("train", 50, seed=0)] == [p.prompt for p in train[:50]]
    # a larger sample of the other split never meets the first
    more_train = {p.prompt for p in task.sample("train", 1000, seed=7)}
    assert not more_train & {p.prompt for p in task.sample("eval", 200, seed=8)}


@pytest.mark.parametrize("name", NAMES)
def test_sample_is_distinct_while_the_split_allows(build, name):
    task = build(name)
    ps = task.sample("train", 20, seed=0)
    assert len({p.prompt for p in ps}) == 20
    assert task.sample("eval", 0, seed=0) == []


@pytest.mark.parametrize("name", NAMES)
def test_bad_split_and_unknown_option_are_user_errors(build, name):
    task = build(name)
    with pytest.raises(AblateError, match="valid splits: train, eval"):
        task.sample("test", 3, seed=0)
    expected = (r"generator 'basic_arithmetic' has no option 'no_such_option'; its options: " if name == "reasoning_gym"
                else rf"task '{name}' has no option 'no_such_option'; valid options: ")
    with pytest.raises(AblateError, match=expected):
        build(name, no_such_option=1)


@pytest.mark.parametrize("name", NAMES)
def test_example_is_a_train_problem_with_description(build, name):
    task = build(name)
    p = task.example()
    assert p == task.sample("train", 1, seed=0)[0]
    assert fully_correct(task.grade(p, p.solution))
    assert type(task).description
