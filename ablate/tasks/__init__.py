"""Verifiable tasks with checkable steps (final answer, each step, format)."""

from ablate.tasks.base import SPLITS, TASKS, Grade, Problem, StepCheck, Task, char_spans_to_token_spans

__all__ = ["SPLITS", "TASKS", "Grade", "Problem", "StepCheck", "Task", "char_spans_to_token_spans"]
