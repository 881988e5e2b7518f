"""benchmarks/bench_study.py: trials per hour and the projected zoo trial, by hand values."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from bench_commits import Run  # noqa: E402
from bench_study import zoo_row  # noqa: E402


def test_trials_per_hour():
    run = Run("new", seconds=90.0, tidy=pd.DataFrame(), keys=["a", "b", "c", "d"])
    assert run.trials_per_hour == 4 * 3600 / 90  # 160


def test_zoo_row_measured_trial():
    r = {"seconds": 12.5, "steps": 60, "step_s": [0.1, 0.2, 0.3], "eval_s": [1.0, 3.0], "default_steps": 60,
         "eval_every": 10}
    assert zoo_row("tiny-llama", r) == "| `tiny-llama` | 12.5 | 0.200 | 2.00 | 60 |\n"


def test_zoo_row_projection():
    # 3 steps of 2.0 s (median 2.0), evaluations of 10 s at steps 0 and 3: setup = 40 - 6 - 20 = 14 s.
    # 60 steps with eval every 10: evaluations at 0, 10, ..., 60 = 2 + 59 // 10 = 7; 14 + 7 * 10 + 60 * 2 = 204.
    r = {"seconds": 40.0, "steps": 3, "step_s": [2.0, 2.0, 2.0], "eval_s": [10.0, 10.0], "default_steps": 60,
         "eval_every": 10}
    assert zoo_row("smollm2-135m", r) == "| `smollm2-135m` | 204 (projected from 3 steps) | 2.000 | 10.00 | 3 |\n"


def test_zoo_row_error():
    assert "not run: ModuleNotFoundError" in zoo_row("smollm2-135m", {"error": "ModuleNotFoundError: x"})
