"""benchmarks/bench_rl_step.py stays runnable: ablate's side at a tiny shape, TRL skipped when absent."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_rl_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rl_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_trl_counts_as_missing_without_datasets(bench, monkeypatch):
    """bench_rl_step hands TRL its prompts as a datasets.Dataset: without datasets the TRL side cannot run."""
    pytest.importorskip("trl")
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert bench.trl_version() is None


TINY = ["--model", "micro-llama", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "4",
        "--steps", "1", "--warmup", "0", "--train-size", "16"]


def test_ablate_side_runs_one_step_and_trl_is_skipped_when_not_installed(bench, monkeypatch, capsys, tmp_path):
    # a None entry in sys.modules makes `import trl` raise ImportError, as when TRL is not installed
    monkeypatch.setitem(sys.modules, "trl", None)
    assert bench.trl_version() is None
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmarks\n\n<!-- BEGIN other -->\nkeep me\n<!-- END other -->\n")
    assert bench.main([*TINY, "--write", str(results)]) == 0
    out = capsys.readouterr()
    assert "TRL is not installed" in out.err
    assert "| ablate `train_step` |" in out.out and "| TRL `GRPOTrainer` | not run" in out.out
    text = results.read_text()
    assert "<!-- BEGIN other -->\nkeep me\n<!-- END other -->" in text  # the other section is untouched
    assert text.count(bench.BEGIN) == 1 and text.count(bench.END) == 1
    assert "## RL step vs TRL GRPOTrainer" in text and "trl not installed" in text
    assert "| update (forward + backward + AdamW) |" in text


def test_run_times_the_requested_steps_of_the_tiny_shape(bench):
    s = bench.Settings(model="micro-llama", prompts=2, group_size=2, max_new_tokens=4, steps=1, warmup=1,
                       train_size=16)
    threads = torch.get_num_threads()
    result = bench.run(replace(s, threads=threads + 1), use_trl=False)
    assert result["threads"] == threads + 1 and torch.get_num_threads() == threads  # restored afterwards
    ours = result["ablate"]
    assert len(ours["step_s"]) == 2  # warm-up + timed
    # 2 prompts x G = 2 rows of at most 4 tokens, at least 1 each
    assert all(4 <= t <= 16 for t in ours["tokens"])
    m = result["summary"]
    assert m["ablate_step_s"] == ours["step_s"][1]  # the median of the one timed step
    assert 0 < m["ablate_rollout_s"] + m["ablate_update_s"] <= m["ablate_step_s"]
    assert m["trl_step_s"] is None and m["ratio"] is None and result["trl"] is None


def test_write_section_replaces_its_own_section_only(bench, tmp_path):
    path = tmp_path / "RESULTS.md"
    bench.write_section(path, "first")
    assert path.read_text() == f"# Benchmarks\n\n{bench.BEGIN}\nfirst\n{bench.END}\n"
    path.write_text(path.read_text() + "\n## Later section\n")
    bench.write_section(path, "second\n")
    assert path.read_text() == f"# Benchmarks\n\n{bench.BEGIN}\nsecond\n{bench.END}\n\n## Later section\n"


def test_gap_analysis_states_the_floor_bound_only_when_the_goal_is_missed(bench):
    summary = {"ratio": 1.2, "ablate_step_s": 0.35, "ablate_logprob_s": 0.0, "ablate_sample_s": 0.12,
               "ablate_update_s": 0.23, "trl_rollout_s": 0.19, "trl_update_s": 0.24, "trl_step_s": 0.42}
    floor = {"steps": 3, "gflop": 15.0, "in_situ_s": 0.28, "floor_s": 0.15}
    text = bench.gap_analysis({"summary": summary, "floor": floor})
    assert "TRL's step / that floor = **2.80**" in text  # 0.42 / 0.15
    assert "a step of 0.210 s: 60 ms above the floor" in text  # 0.42 / 2, minus 0.15
    assert "inside the step take 130 ms more than alone" in text  # 0.28 - 0.15
    assert "(100 GFLOP/s)" in text  # 15 GFLOP / 0.15 s
    assert "--floor N" in bench.gap_analysis({"summary": summary})
    assert bench.gap_analysis({"summary": {**summary, "ratio": 2.1}, "floor": floor}) == ""


def test_gemm_floor_of_a_tiny_step(bench):
    s = replace(bench.Settings(), model="micro-llama", prompts=2, group_size=2, max_new_tokens=4, train_size=16)
    floor = bench.gemm_floor(s, 1)
    assert floor["steps"] == 1 and floor["gflop"] > 0
    assert 0 < floor["floor_s"] and 0 < floor["in_situ_s"]


def test_breakdown_takes_derived_parts_per_step_before_the_median(bench):
    result = {
        "summary": {"ablate_step_s": 1.0, "ablate_sample_s": 0.3, "ablate_logprob_s": 0.2, "ablate_update_s": 0.4},
        "settings": {"warmup": 1},
        "ablate": {"step_s": [9.0, 1.0, 1.2], "rollout_s": [9.0, 0.55, 0.6], "update_s": [9.0, 0.4, 0.5],
                   "sample_s": [9.0, 0.3, 0.3], "logprob_s": [9.0, 0.2, 0.2]},
    }
    text = bench.breakdown(result)
    # texts etc.: median(0.55 - 0.5, 0.6 - 0.5) = 0.075; the rest: median(1.0 - 0.95, 1.2 - 1.1) = 0.075
    assert "| texts, grading, rewards, advantages | 0.075 | 8% |" in text
    assert "| metrics and the rest | 0.075 | 7% |" in text
    assert "| sampling (prefill + decode loop) | 0.300 | 30% |" in text


def test_update_flop_by_hand(bench):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False))
    # per layer q, k, v, o 8 x 8 and gate, up, down 16 x 8: 640; two layers and the 10 x 8 head: N = 1360
    # 3 rows x 5 positions x (6 N + 12 layers x hidden x width) = 15 x (8160 + 960)
    assert bench.update_flop(model, 3, 5) == 15 * (6 * 1360 + 12 * 2 * 8 * 5)


def test_mfu_is_the_update_rate_over_the_measured_matmul_peak(bench):
    s = bench.Settings(model="micro-llama", prompts=2, group_size=2, max_new_tokens=4, steps=1, warmup=1,
                       train_size=16)
    result = bench.run(s, use_trl=False)
    m, ours = result["summary"], result["ablate"]
    assert ours["rows"] == [4, 4] and all(w > 4 for w in ours["width"])  # prompt + completion positions
    assert m["update_flops"] == pytest.approx(m["update_flop"] / ours["update_s"][1])
    assert m["mfu"] == pytest.approx(m["update_flops"] / m["matmul_peak_flops"]) and 0 < m["mfu"] < 1
    line = bench.mfu_line(result)
    assert f"Update MFU: {m['mfu']:.1%}" in line and "float32 square matmul" in line
    assert bench.mfu_line({"summary": {}, "settings": {}}) == ""
