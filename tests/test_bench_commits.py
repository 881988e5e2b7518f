"""benchmarks/bench_commits.py: the same-numbers check ignores timings and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from bench_commits import same_numbers  # noqa: E402


def tidy(acc: float, step_s: float) -> pd.DataFrame:
    return pd.DataFrame({"key": ["k"] * 3, "step": [0, 0, 10], "metric": ["eval/accuracy", "perf/step_s", "eval/accuracy"],
                         "value": [0.5, step_s, acc], "arm": ["a"] * 3})


def test_same_numbers_ignores_timings_only():
    assert same_numbers(tidy(0.6, 0.1), tidy(0.6, 0.9))  # only perf/* differs
    assert not same_numbers(tidy(0.6, 0.1), tidy(0.6000001, 0.1))  # any logged value differs
    assert not same_numbers(tidy(0.6, 0.1), tidy(0.6, 0.1).iloc[:2])  # a missing row
    # the rows in another order (two workers finish trials in either order): the same numbers
    assert same_numbers(tidy(0.6, 0.1), tidy(0.6, 0.1).iloc[::-1])
    assert not same_numbers(tidy(0.6, 0.1), tidy(0.7, 0.1).iloc[::-1])
