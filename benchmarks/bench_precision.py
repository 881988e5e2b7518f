"""What precision costs and how far a bf16 rollout is from an fp32 trainer, per zoo model (issue 13).

For each model, six trials are set up in one process from the quickstart's start policy settings
(``studies/quickstart.yaml``: 2-digit addition, 4 prompts x 8 completions, 32 new tokens; the cached warm
start of the model, built first if missing and not timed) and stepped
interleaved (config 1, 2, ..., 6, then 1 again) over ``--repeats`` rounds after one warm-up step each,
on one torch thread. Each RL step (:func:`ablate.train.train_step`: rollout, scoring, PPO update) is
timed in wall seconds and in process CPU seconds (less inflated by other work on a shared machine):

=============  =================================================================================
config         settings
=============  =================================================================================
fp32           ``model.dtype=float32`` (what ``auto`` is on CPU: the default here)
bf16           ``model.dtype=bfloat16`` (autocast everywhere, weights float32)
bf16+fp32head  ``model.dtype=bfloat16``, ``model.lm_head_dtype=float32`` (ScaleRL's FP32 LM head)
bf16+eager     ``model.dtype=bfloat16``, ``model.attention=eager`` (CPU sdpa is slow in bfloat16)
mm             ``rollout.dtype=bfloat16`` with the trainer in float32: logs ``mismatch/*``
mm+fp32head    the same with ``model.lm_head_dtype=float32`` on both sides
=============  =================================================================================

The table gives, per model, the median over rounds of the per-round ratio of CPU seconds per step
(bf16 / fp32, bf16+fp32head / bf16, bf16+eager / fp32; fp32+fp32head would be fp32 itself: on CPU the FP32 head
changes nothing at the default precision) and the mean over steps of ``mismatch/kl`` (k3, nats per
token) and ``mismatch/max_ratio``. Run from the repository root::

    .venv/bin/python benchmarks/bench_precision.py                         # micro-llama, tiny-llama, 5 rounds
    .venv/bin/python benchmarks/bench_precision.py --models micro-llama --repeats 3 --write-results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.config import TrialConfig  # noqa: E402
from ablate.train import setup_trial, train_step  # noqa: E402
from benchmarks.results_md import write_section  # noqa: E402

#: The settings of every trial (on top of the defaults).
BASE = ["device=cpu", "task.difficulty=2", "rollout.prompts_per_step=4", "rollout.group_size=8",
        "rollout.max_new_tokens=32", "eval.every=0"]
#: name -> the overrides of each configuration.
CONFIGS: dict[str, list[str]] = {
    "fp32": ["model.dtype=float32"],
    "bf16": ["model.dtype=bfloat16"],
    "bf16+fp32head": ["model.dtype=bfloat16", "model.lm_head_dtype=float32"],
    "bf16+eager": ["model.dtype=bfloat16", "model.attention=eager"],
    "mm": ["model.dtype=float32", "rollout.dtype=bfloat16"],
    "mm+fp32head": ["model.dtype=float32", "rollout.dtype=bfloat16", "model.lm_head_dtype=float32"],
}
BEGIN, END = "<!-- BEGIN precision (benchmarks/bench_precision.py) -->", "<!-- END precision -->"


def bench_model(model: str, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Per configuration: CPU and wall seconds of each timed step, and the logged mismatch/* values."""
    states = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, extra in CONFIGS.items():
            states[name] = setup_trial(TrialConfig.from_overrides([*BASE, f"model.name={model}", *extra]))
    out: dict[str, dict[str, list[float]]] = {n: {"cpu": [], "wall": [], "kl": [], "max_ratio": []} for n in CONFIGS}
    for step in range(1, repeats + 2):
        for name, state in states.items():
            c0, w0 = time.process_time(), time.perf_counter()
            metrics, _ = train_step(state, step)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            if step == 1:
                continue  # warm-up
            out[name]["cpu"].append(cpu)
            out[name]["wall"].append(wall)
            if "mismatch/kl" in metrics:
                out[name]["kl"].append(metrics["mismatch/kl"])
                out[name]["max_ratio"].append(metrics["mismatch/max_ratio"])
        print(f"{model}: round {step} done", file=sys.stderr)
    return out


def ratio(r: dict[str, dict[str, list[float]]], a: str, b: str, key: str = "cpu") -> str:
    """Median (min-max) over rounds of the per-round ratio a / b."""
    q = [x / y for x, y in zip(r[a][key], r[b][key])]
    return f"{statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})"


def table(results: dict[str, dict[str, dict[str, list[float]]]], repeats: int) -> str:
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    lines = [
        "## Precision: bf16 autocast, the FP32 LM head and the rollout/trainer mismatch (bench_precision.py)",
        "",
        f"{model_name}, {os.cpu_count()} cores, one torch thread, torch {torch.__version__}, {platform.python_version()}; "
        f"n = {repeats} timed RL steps per configuration (after one warm-up step), interleaved; from each model's "
        f"warm start (quickstart settings: {' '.join(BASE[1:-1])}). Ratios are of process CPU seconds per step: median "
        "(min-max) of the per-round ratios. Mismatch: bf16 rollouts (autocast) against the fp32 trainer, mean over "
        "the n steps of `mismatch/kl` (k3, nats/token) and of `mismatch/max_ratio`. On CPU `model.dtype=auto` is "
        "float32, where `model.lm_head_dtype=float32` computes exactly what the default does (not timed).",
        "",
        "| model | fp32 s/step (CPU, median) | bf16 / fp32 | bf16+fp32head / bf16 | bf16 / fp32 (wall) "
        "| bf16+eager / fp32 | mismatch/kl | with FP32 head | mismatch/max_ratio | with FP32 head |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, r in results.items():
        lines.append(
            f"| {model} | {statistics.median(r['fp32']['cpu']):.2f} | {ratio(r, 'bf16', 'fp32')} "
            f"| {ratio(r, 'bf16+fp32head', 'bf16')} | {ratio(r, 'bf16', 'fp32', 'wall')} "
            f"| {ratio(r, 'bf16+eager', 'fp32')} "
            f"| {statistics.mean(r['mm']['kl']):.2e} | {statistics.mean(r['mm+fp32head']['kl']):.2e} "
            f"| {statistics.mean(r['mm']['max_ratio']):.3f} | {statistics.mean(r['mm+fp32head']['max_ratio']):.3f} |"
        )
    lines += [
        "",
        "The two mismatch columns are two trials (same seed, same prompts) that diverge after their first update, "
        "so their difference is indicative, not a paired measurement on the same batch. The mismatch values are "
        f"deterministic (the same in every run); the times are not (load average {os.getloadavg()[0]:.1f} at the end).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["micro-llama", "tiny-llama"])
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per configuration (n)")
    parser.add_argument("--write-results", type=Path, default=None, help="update this RESULTS.md section")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {m: bench_model(m, args.repeats) for m in args.models}
    text = table(results, args.repeats)
    print(text)
    if args.write_results is not None:
        write_section(args.write_results, text, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
