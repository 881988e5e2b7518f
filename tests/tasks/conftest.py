"""Shared helpers for the task tests: building every registered task, and corrupting solutions."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from ablate.tasks import TASKS, Task, parse_completion


def write_jsonl_data(path: Path, n: int = 80) -> Path:
    """``n`` word problems with two addition steps each, in the default jsonl field layout."""
    rng = random.Random(0)
    with path.open("w") as fh:
        for i in range(n):
            a, b, c = rng.randint(1, 60), rng.randint(1, 60), rng.randint(1, 60)
            record = {
                "question": f"Q{i}: Ann has {a} pens, gets {b} and then {c} more. How many?",
                "steps": [f"{a}+{b}={a + b}", f"{a + b}+{c}={a + b + c}"],
                "answer": a + b + c,
            }
            fh.write(json.dumps(record) + "\n")
    return path


@pytest.fixture(scope="session")
def jsonl_data(tmp_path_factory) -> Path:
    return write_jsonl_data(tmp_path_factory.mktemp("jsonl") / "data.jsonl")


@pytest.fixture(scope="session")
def build(jsonl_data):
    """``build(name, **kw)``: a registered task with the options it needs (jsonl: a written file)."""
    required = {"jsonl": {"path": str(jsonl_data)}, "reasoning_gym": {"dataset": "basic_arithmetic"}}

    def make(name: str, **kw) -> Task:
        return TASKS.get(name)(**{**required.get(name, {}), **kw})

    return make


def bump_last_digit(text: str) -> str | None:
    """``text`` with its last digit replaced by the next one (9 → 0), None when it has no digit."""
    digits = [m.start() for m in re.finditer(r"\d", text)]
    if not digits:
        return None
    i = digits[-1]
    return text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]


def corrupt_step(solution: str, k: int) -> str | None:
    """The solution with the last digit of its k-th step changed."""
    s, e = parse_completion(solution).steps[k][1]
    new = bump_last_digit(solution[s:e])
    return None if new is None else solution[:s] + new + solution[e:]


def corrupt_answer(solution: str) -> str | None:
    """The solution with the last digit of its answer changed."""
    span = parse_completion(solution).answer_span
    assert span is not None
    s, e = span
    new = bump_last_digit(solution[s:e])
    return None if new is None else solution[:s] + new + solution[e:]


#: ways to break the format that leave steps and answer readable: name → solution → broken solution
TAG_CORRUPTIONS = {
    "no <think>": lambda s: s.replace("<think>", "", 1),
    "no </think>": lambda s: s.replace("</think>", "", 1),
    "no <answer>": lambda s: s.replace("<answer>", "", 1),
    "no </answer>": lambda s: s.replace("</answer>", "", 1),
    "<think> twice": lambda s: s.replace("<think>", "<think><think>", 1),
    "</think> twice": lambda s: s.replace("</think>", "</think></think>", 1),
    "<answer> twice": lambda s: s.replace("<answer>", "<answer><answer>", 1),
    "</answer> twice": lambda s: s + "</answer>",
    "space between": lambda s: s.replace("</think><answer>", "</think> <answer>", 1),
    "text before": lambda s: "Sure. " + s,
    "text after": lambda s: s + "\nThe end.",
    "blank line": lambda s: s.replace("<think>", "<think>\n", 1),
    "answer padded": lambda s: s.replace("<answer>", "<answer> ", 1),
}
