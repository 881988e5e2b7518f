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


def test_pack_table_ratios_by_hand():
    from bench_pack import PackRun, table

    runs = [PackRun("solo", 0, 2, seconds=100.0, trials=64, peak_bytes=600 * 2**20),
            PackRun("packed, K = 4", 4, 2, seconds=80.0, trials=64, peak_bytes=700 * 2**20)]
    assert runs[0].trials_per_hour == 64 * 36  # 2304
    rows = table(runs).splitlines()
    assert rows[2] == "| solo | 2 | 100.0 | 2304 | 1.00 | 600 |"
    assert rows[3] == "| packed, K = 4 | 2 | 80.0 | 2880 | 1.25 | 700 |"  # 2880 / 2304


def test_pack_study_file_sets_seeds_steps_and_packing(tmp_path):
    from bench_pack import study_file

    from ablate.study import load_study
    from ablate.study.plan import Plan

    path = study_file(tmp_path, "studies/quickstart.yaml", 3, 5, packed=True)
    specs = Plan.of(load_study(path), "default").specs
    assert len(specs) == 4 * 3 and all(s.config.train.packed and s.config.train.steps == 5 for s in specs)
