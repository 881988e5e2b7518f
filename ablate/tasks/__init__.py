"""Verifiable tasks with checkable steps (final answer, each step, format).

Importing this package registers the built-in tasks in :data:`TASKS`:

- ``addition``: multi-digit addition, one step per column (:mod:`ablate.tasks.arithmetic`);
- ``chain``: an arithmetic chain evaluated left to right, one step per operation (same module);
- ``countdown``: reach a target from given numbers, steps checked by a verifier
  (:mod:`ablate.tasks.countdown`);
- ``jsonl``: your own data from a JSON-lines file (:mod:`ablate.tasks.jsonl`);
- ``reasoning_gym``: reasoning-gym's generators and scorers, an optional extra (:mod:`ablate.tasks.reasoning_gym`).

Build one with ``TASKS.get(name)(difficulty=..., seed=..., **options)``; the completion format is
documented in :mod:`ablate.tasks.format`.
"""

from ablate.tasks import arithmetic, countdown, jsonl, reasoning_gym  # noqa: F401  (registers the built-in tasks)
from ablate.tasks.base import SPLITS, TASKS, Grade, Problem, StepCheck, Task, char_spans_to_token_spans
from ablate.tasks.format import FORMAT_RE, FORMAT_TAGS, ParsedCompletion, parse_completion, render_completion

__all__ = [
    "FORMAT_RE",
    "FORMAT_TAGS",
    "SPLITS",
    "TASKS",
    "Grade",
    "ParsedCompletion",
    "Problem",
    "StepCheck",
    "Task",
    "char_spans_to_token_spans",
    "parse_completion",
    "render_completion",
]
