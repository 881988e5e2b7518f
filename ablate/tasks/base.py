"""The task interface: verifiable problems whose answer, steps and format can be checked.

A task generates :class:`Problem` objects (a prompt, its reference answer and a reference completion
written as reasoning steps followed by a final answer, in the task's completion format) and grades
any completion string with :meth:`Task.grade`, which never raises on arbitrary model output.

Character spans are used throughout (``[start, end)`` offsets into the completion string); the
rollout code converts them to token spans with :func:`char_spans_to_token_spans`, using the
tokenizer's offset mapping, so that a step reward can be placed on the last token of its step.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ablate.registry import Registry

#: Every task, by name. A task class is registered with ``@TASKS.register("name")``.
TASKS: Registry[type[Task]] = Registry("task")

SPLITS = ("train", "eval")


@dataclass(frozen=True)
class Problem:
    """One problem of a task.

    Attributes:
        prompt: the text the policy is conditioned on.
        answer: the reference final answer, as the answer checker compares it.
        solution: the reference completion (steps, then the final answer, in the task's format),
            without any end-of-sequence token; ``task.grade(p, p.solution)`` is fully correct.
        meta: task-specific data the checkers need (operands, the target, ...).
    """

    prompt: str
    answer: str
    solution: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class StepCheck:
    """One reasoning step of a completion: its character span and whether it is correct."""

    span: tuple[int, int]
    correct: bool


@dataclass(frozen=True)
class Grade:
    """Everything the checkers say about one completion.

    Attributes:
        answer_correct: the final answer equals the reference answer.
        parsed_answer: the final answer as parsed, or None when none could be found.
        format_ok: the completion follows the task's format exactly.
        format_errors: character spans where the format breaks (empty when ``format_ok``); a local
            format penalty is placed on the tokens of these spans.
        steps: each reasoning step found, in order, with its span and correctness (the process
            reward's ground truth). Steps that the reference has but the completion lacks are
            missing, not listed: ``num_reference_steps`` says how many there should be.
        num_reference_steps: how many steps the reference solution has.
        partial: partial credit in [0, 1] (e.g. the fraction of correct answer digits).
    """

    answer_correct: bool
    parsed_answer: str | None
    format_ok: bool
    format_errors: tuple[tuple[int, int], ...]
    steps: tuple[StepCheck, ...]
    num_reference_steps: int
    partial: float

    @property
    def step_accuracy(self) -> float:
        """Correct steps over the reference's step count (missing steps count as wrong)."""
        denom = max(self.num_reference_steps, len(self.steps), 1)
        return sum(s.correct for s in self.steps) / denom


class Task(abc.ABC):
    """A verifiable task. Subclasses are registered in :data:`TASKS`.

    Args:
        difficulty: the task's difficulty knob (digits, chain length, ...); each task documents it.
        seed: the seed of the problem generator; train and eval splits are disjoint for a seed.
        **options: task-specific options (documented by each task).
    """

    #: registry name, set by the subclass
    name: ClassVar[str] = ""
    #: one line for ``ablate tasks``
    description: ClassVar[str] = ""
    #: its problems have verifiable reasoning steps (what process rewards need)
    has_steps: ClassVar[bool] = True

    @abc.abstractmethod
    def sample(self, split: str, n: int, *, seed: int) -> list[Problem]:
        """``n`` problems of ``split`` ("train" or "eval"), deterministic in ``seed``."""

    @abc.abstractmethod
    def grade(self, problem: Problem, completion: str) -> Grade:
        """Grade a completion (text after the prompt, without EOS). Never raises."""

    def example(self) -> Problem:
        """One problem of the train split, for ``ablate tasks`` and documentation."""
        return self.sample("train", 1, seed=0)[0]


def char_spans_to_token_spans(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Map character spans to token spans ``[first, last + 1)`` using a tokenizer's offset mapping.

    Args:
        offsets: per token, its ``(start, end)`` character offsets in the text (as returned by a fast
            tokenizer with ``return_offsets_mapping=True``); tokens with an empty span ``(s, s)``
            (special tokens) never cover a character.
        spans: character spans ``[start, end)``.

    Returns:
        For each span, the tokens that overlap it, as ``(first, last + 1)``; ``(k, k)`` (empty) when
        no token overlaps it. The step reward of a span goes on token ``last``.
    """
    out: list[tuple[int, int]] = []
    for start, end in spans:
        first = last = None
        for i, (a, b) in enumerate(offsets):
            if b > a and a < end and b > start:
                if first is None:
                    first = i
                last = i
        if first is None:
            k = next((i for i, (a, _) in enumerate(offsets) if a >= end), len(offsets))
            out.append((k, k))
        else:
            out.append((first, last + 1))
    return out
