"""benchmarks/bench_floor.py: GEMM FLOPs by hand, the profiler's calls of a real forward, and a tiny run."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ablate.models import load_policy
from benchmarks import bench_floor as bf

pytestmark = pytest.mark.usefixtures("one_thread")


def test_gemm_flops_by_hand():
    assert bf.gemm_flops("aten::mm", [[3, 4], [4, 5]]) == 2 * 3 * 4 * 5
    assert bf.gemm_flops("aten::addmm", [[5], [3, 4], [4, 5]]) == 120
    assert bf.gemm_flops("aten::bmm", [[2, 3, 4], [2, 4, 5]]) == 240
    assert bf.gemm_flops("aten::baddbmm", [[2, 3, 5], [2, 3, 4], [2, 4, 5]]) == 240
    assert bf.gemm_dims("aten::addmm", [[5], [3, 4], [4, 5]]) == (1, 3, 4, 5)


def test_profiled_calls_of_two_linears_count_their_flops():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(10, 8)
    calls = bf.profile_gemms(lambda: net(x), steps=3)
    assert sum(calls.calls.values()) == 6  # two addmm per run
    assert calls.flops_per_step() == 2 * 10 * 8 * 16 + 2 * 10 * 16 * 4
    assert calls.seconds_per_step() > 0


def test_profiled_calls_of_a_transformer_trunk_are_its_linear_layers():
    """A Llama trunk's forward without gradient: 2 x tokens x (in x out) for each projection, nothing else
    (attention runs in its own kernel, not as a matrix multiply)."""
    model = load_policy("micro-llama").model.eval()
    B, L = 3, 7
    ids = torch.randint(4, model.config.vocab_size, (B, L))
    with torch.no_grad():
        calls = bf.profile_gemms(lambda: model.base_model(input_ids=ids), steps=2)
    weights = [m.in_features * m.out_features for m in model.base_model.modules() if isinstance(m, nn.Linear)]
    assert len(weights) == 7 * model.config.num_hidden_layers
    assert calls.flops_per_step() == 2 * B * L * sum(weights)


def test_isolated_time_is_a_positive_time_for_every_operator():
    for op, shapes in [("aten::mm", ((6, 4), (4, 5))), ("aten::addmm", ((5,), (6, 4), (4, 5))),
                       ("aten::bmm", ((2, 6, 4), (2, 4, 5))), ("aten::baddbmm", ((2, 6, 5), (2, 6, 4), (2, 4, 5)))]:
        t = bf.isolated_seconds(op, shapes, reps=3)
        assert 0 < t < 1 and math.isfinite(t)


def test_tiny_run_writes_its_section(tmp_path, capsys):
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmarks\n\nkept\n")
    argv = ["--set", "model.name=micro-llama", "--set", "warmstart.enabled=false", "--set", "task.train_size=16",
            "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=4",
            "--steps", "1", "--warmup", "0", "--reps", "2", "--write", str(out)]
    assert bf.main(argv) == 0
    text = out.read_text()
    assert "kept" in text and bf.BEGIN in text and bf.END in text
    assert "`micro-llama`" in text and "step / floor" in text and "What 1.5x" in text
    assert "step / floor" in capsys.readouterr().out


def test_section_states_what_the_goal_leaves_by_hand():
    r = {"step_s": 0.18, "step_min_s": 0.17, "gemm_in_situ_s": 0.11, "floor_s": 0.09, "gflop": 9.0, "distinct": 5,
         "calls": 50, "model": "tiny-llama", "key": "abc"}
    text = bf.section(r, [], 10)
    assert "| step / floor: the most any same-keys change could speed the step | **2.00x** |" in text  # 0.18 / 0.09
    assert "(100 GFLOP/s)" in text  # 9 GFLOP / 0.09 s
    # 0.18 / 1.5 = 0.12 s: 10 ms beside the in-situ matrix multiplies (70 ms now), 30 ms beside the floor
    assert "asks of this step: 0.120 s" in text and "leaves 10 ms for everything else, which takes 70 ms now" in text
    assert "with them at the floor, 30 ms." in text
