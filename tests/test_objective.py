"""The objective summary: one number per trial from its metric history (hand-computed values)."""

from __future__ import annotations

import pytest

from ablate.objective import direction, summarize_history

HISTORY = [
    (0, {"eval/accuracy": 0.1, "loss": 1.0}),
    (1, {"loss": 0.9}),
    (2, {"eval/accuracy": 0.3}),
    (4, {"eval/accuracy": float("nan")}),
    (6, {"eval/accuracy": 0.5}),
]


def test_summarize_history_hand_values():
    acc = "eval/accuracy"
    assert summarize_history(HISTORY, acc, "last") == 0.5
    assert summarize_history(HISTORY, acc, "last", last_n=2) == pytest.approx((0.3 + 0.5) / 2)
    assert summarize_history(HISTORY, acc, "last", last_n=10) == pytest.approx(0.9 / 3)
    assert summarize_history(HISTORY, acc, "mean") == pytest.approx(0.3)
    assert summarize_history(HISTORY, acc, "max") == 0.5
    assert summarize_history(HISTORY, acc, "min") == 0.1
    # trapezoids over steps 0-2-6: (2 * 0.4/2 + 4 * 0.8/2) / 6 = (0.4 + 1.6) / 6
    assert summarize_history(HISTORY, acc, "auc") == pytest.approx(2.0 / 6)
    assert summarize_history(HISTORY[:1], acc, "auc") == 0.1
    assert summarize_history(HISTORY, "reward/total") is None
    with pytest.raises(ValueError, match="unknown objective summary"):
        summarize_history(HISTORY, acc, "median")


def test_direction_of_each_mode():
    assert direction("max") == "maximize" and direction("min") == "minimize"
    with pytest.raises(KeyError):
        direction("best")
