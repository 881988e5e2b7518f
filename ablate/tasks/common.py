"""What the built-in tasks share: options, split hashing, seeded sampling, and grading.

A task here is built as ``TASKS.get(name)(difficulty=..., seed=..., **options)``. Its class lists
its options with one line of documentation each in :attr:`OptionsTask.OPTIONS`; an option that is
not listed is an :class:`~ablate.errors.AblateError` naming the valid ones.

Splits: a problem belongs to the eval split when a hash of ``(task name, task seed, prompt)`` falls
below ``eval_fraction``, and to the train split otherwise, so the splits are disjoint for a task
seed, stable across processes and independent of how many problems are sampled. ``sample(split, n,
seed=s)`` then draws ``n`` distinct problems of that split (repeating them only when the split has
fewer than ``n``), deterministically in ``(task seed, difficulty, options, s)``; a smaller ``n`` gives a
prefix of a larger one. Keep the task seed
fixed across the trials of a study so that they share their eval split; vary ``s``.
"""

from __future__ import annotations

import abc
import hashlib
import random
from typing import Any, ClassVar

from ablate.errors import AblateError
from ablate.registry import nearest
from ablate.tasks.base import SPLITS, Grade, Problem, StepCheck, Task
from ablate.tasks.format import ParsedCompletion, parse_completion

EVAL_FRACTION_DOC = "fraction of the problems in the eval split, in (0, 1) (default 0.1)"


def digit_partial(parsed: str | None, reference: str) -> float:
    """Fraction of answer characters that match the reference, aligned from the right.

    ``digit_partial("833", "843") == 2 / 3``; the denominator is the longer of the two, so a missing or
    extra leading digit costs one position (``digit_partial("43", "843") == 2 / 3``). 0 for None.
    """
    if not parsed:
        return 0.0
    width = max(len(parsed), len(reference))
    same = sum(a == b for a, b in zip(reversed(parsed), reversed(reference)))
    return same / width


def int_option(task: str, key: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]``, else an AblateError naming the task and the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise AblateError(f"task {task!r}: option {key} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def fraction_option(task: str, key: str, value: Any) -> float:
    """``value`` as a float in (0, 1), else an AblateError naming the task and the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise AblateError(f"task {task!r}: option {key} must be a number in (0, 1), got {value!r}")
    return float(value)


def stable_unit(*parts: object) -> float:
    """A number in [0, 1) from a hash of ``parts``, the same in every process and Python version."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class OptionsTask(Task):
    """A task with documented keyword options and a difficulty knob.

    Subclasses set :attr:`OPTIONS` (option name → one-line doc with its default),
    :attr:`DIFFICULTY` (what the knob means), :attr:`default_difficulty` and the allowed range, and
    read their options from ``self.options`` (a dict holding only the options the user gave).

    Args:
        difficulty: the difficulty knob; None for the task's default.
        seed: the task seed (the split partition and the generator's stream).
        **options: the task's options, documented in :attr:`OPTIONS`.
    """

    #: option name → one line: what it does, its allowed values and its default
    OPTIONS: ClassVar[dict[str, str]] = {}
    #: what the difficulty knob means, with its range and default
    DIFFICULTY: ClassVar[str] = ""
    default_difficulty: ClassVar[int | None] = None
    min_difficulty: ClassVar[int] = 1
    max_difficulty: ClassVar[int] = 1

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[tuple[str, str]]:
        """What is wrong with ``options`` whatever the machine (no file read, nothing imported), as
        ``(config path, message)``: here, unknown option names. The configuration's rules report these
        before anything runs (exit 2); what depends on the machine (a file, an optional package) is
        checked when the task is built."""
        return cls.unknown_options(options)

    @classmethod
    def unknown_options(cls, options: dict[str, Any]) -> list[tuple[str, str]]:
        """``(config path, message)`` for each option name not in :attr:`OPTIONS`."""
        problems = []
        for key in options:
            if key not in cls.OPTIONS:
                msg = f"task {cls.name!r} has no option {key!r}; valid options: {', '.join(cls.OPTIONS) or '(none)'}"
                guess = nearest(str(key), list(cls.OPTIONS))
                problems.append(("task.options", msg + (f" (did you mean {guess!r}?)" if guess is not None else "")))
        return problems

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        problems = self.unknown_options(options)
        if problems:
            raise AblateError(problems[0][1])
        if difficulty is None:
            difficulty = self.default_difficulty
        elif self.default_difficulty is not None:
            difficulty = int_option(self.name, "difficulty", difficulty, self.min_difficulty, self.max_difficulty)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise AblateError(f"task {self.name!r}: seed must be an integer, got {seed!r}")
        self.difficulty = difficulty
        self.seed = seed
        self.options: dict[str, Any] = dict(options)

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}(difficulty={self.difficulty!r}, seed={self.seed}{opts})"

    @staticmethod
    def check_split(split: str, n: int) -> None:
        """Raise an AblateError for an unknown split or a negative ``n``."""
        if split not in SPLITS:
            raise AblateError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise AblateError(f"the number of problems must be a non-negative integer, got {n!r}")


#: How many :meth:`GeneratedTask.sample` results a process keeps (oldest dropped first).
SAMPLE_CACHE_SIZE = 16
_SAMPLES: dict[tuple[Any, ...], tuple[Problem, ...]] = {}


class GeneratedTask(OptionsTask):
    """A task whose problems come from a seeded generator, split by hashing the prompt.

    Subclasses implement :meth:`draw` (one random problem) and may override :meth:`check_steps`,
    :meth:`check_answer` and :meth:`partial_credit`; the defaults compare with the reference steps
    in ``problem.meta["steps"]`` position by position and with ``problem.answer`` exactly.
    """

    OPTIONS: ClassVar[dict[str, str]] = {"eval_fraction": EVAL_FRACTION_DOC}

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        super().__init__(difficulty, seed, **options)
        self.eval_fraction = fraction_option(self.name, "eval_fraction", options.get("eval_fraction", 0.1))

    # --- generation -------------------------------------------------------------------------------

    @abc.abstractmethod
    def draw(self, rng: random.Random) -> Problem:
        """One random problem at ``self.difficulty`` (either split)."""

    def split_of(self, prompt: str) -> str:
        """The split ("train" or "eval") a prompt belongs to."""
        return "eval" if stable_unit(self.name, self.seed, prompt) < self.eval_fraction else "train"

    def sample(self, split: str, n: int, *, seed: int) -> list[Problem]:
        """``n`` distinct problems of ``split`` (repeated only if the split has fewer), seeded.

        The draw is a pure function of the task (class, difficulty, seed, options) and the arguments,
        and a worker samples the same train pool and eval problems for every trial of a study: the
        last :data:`SAMPLE_CACHE_SIZE` results are kept per process and returned as new lists of the
        same (frozen) problems. A 10,000-problem train pool at difficulty 2 takes ~0.4 s of Python
        to draw (most draws repeat a problem already drawn), once per worker instead of once per trial.

        Raises:
            AblateError: an unknown split, or a split without any problem at this difficulty.
        """
        self.check_split(split, n)
        key = (type(self), repr(self), split, n, seed)
        hit = _SAMPLES.get(key)
        if hit is None:
            hit = tuple(self._draw_sample(split, n, seed=seed))
            _SAMPLES[key] = hit
            while len(_SAMPLES) > SAMPLE_CACHE_SIZE:
                _SAMPLES.pop(next(iter(_SAMPLES)))
        return list(hit)

    def _draw_sample(self, split: str, n: int, *, seed: int) -> list[Problem]:
        """:meth:`sample` without the cache."""
        rng = random.Random(f"{self.name}|{self.difficulty}|{self.seed}|{split}|{seed}")
        share = self.eval_fraction if split == "eval" else 1.0 - self.eval_fraction
        patience = int(50 / share) + 2000  # draws without a new problem before the split counts as used up
        out: list[Problem] = []
        seen: set[str] = set()
        stale = 0
        while len(out) < n and stale < patience:
            stale += 1
            p = self.draw(rng)
            if p.prompt in seen or self.split_of(p.prompt) != split:
                continue
            seen.add(p.prompt)
            out.append(p)
            stale = 0
        if len(out) < n:
            if not out:
                raise AblateError(
                    f"task {self.name!r} at difficulty {self.difficulty} has no {split} problems; "
                    f"raise the difficulty or set eval_fraction (now {self.eval_fraction}) further from 0 and 1"
                )
            out = [out[i % len(out)] for i in range(n)]
        return out

    # --- grading ----------------------------------------------------------------------------------

    def check_steps(self, problem: Problem, steps: list[str]) -> list[bool]:
        """Per step found, whether it is the correct step at its position (reference comparison)."""
        ref = problem.meta.get("steps", [])
        return [i < len(ref) and s == ref[i] for i, s in enumerate(steps)]

    def check_answer(self, problem: Problem, answer: str | None) -> bool:
        """Whether the parsed answer is the reference answer."""
        return answer is not None and answer == problem.answer

    def partial_credit(self, problem: Problem, answer: str | None) -> float:
        """Partial credit in [0, 1]; by default the fraction of answer digits right, from the right."""
        return digit_partial(answer, problem.answer)

    def grade(self, problem: Problem, completion: str) -> Grade:
        """Grade a completion in the format of :mod:`ablate.tasks.format`. Never raises."""
        parsed: ParsedCompletion = parse_completion(completion)
        texts = [t for t, _ in parsed.steps]
        flags = self.check_steps(problem, texts)
        correct = self.check_answer(problem, parsed.answer)
        return Grade(
            answer_correct=correct,
            parsed_answer=parsed.answer,
            format_ok=parsed.format_ok,
            format_errors=parsed.format_errors,
            steps=tuple(StepCheck(span, ok) for (_, span), ok in zip(parsed.steps, flags)),
            num_reference_steps=len(problem.meta.get("steps", ())),
            partial=1.0 if correct else min(1.0, max(0.0, self.partial_credit(problem, parsed.answer))),
        )
