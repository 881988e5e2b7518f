"""The matrix-multiply floor of an RL step: how much faster could a step be without changing its arithmetic?

A change that keeps every trial key must compute exactly what the step computes now, so it performs the
same matrix multiplies (the same shapes, the same number of them: the same FLOPs, in the same order).
Their time alone, each run in isolation at its best memory layout, is a floor under the step's time:
``measured step / floor`` is an upper bound on any same-keys speedup of the step on this machine. It is
a loose (optimistic) bound: everything else the step must also do (elementwise work, softmax,
sampling, the optimizer, Python) counts as free.

Method (one process, ``--threads`` torch threads, default 1 as in a study worker):

1. set up one trial (the quickstart's settings by default: 2-digit addition, 4 prompts x 8 completions,
   32 new tokens, its cached warm start, evaluation off; ``--set`` changes any key), run ``--warmup``
   RL steps, then time ``--steps`` steps (wall medians);
2. profile ``--steps`` more steps with ``torch.profiler`` (``record_shapes``) and collect every
   ``aten::mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` call with its input shapes and self time;
3. time each distinct (operator, shapes) alone: random float32 inputs of those shapes, all four
   transposition layouts of the two matrices, median of ``--reps`` calls after warm-up, the fastest
   layout kept; the floor is the sum over calls of that time, per step.

Run from the repository root::

    .venv/bin/python benchmarks/bench_floor.py                          # quickstart settings, tiny-llama
    .venv/bin/python benchmarks/bench_floor.py --set model.name=small-llama
    .venv/bin/python benchmarks/bench_floor.py --write benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.config import TrialConfig  # noqa: E402
from ablate.running.memory import keep_freed_memory  # noqa: E402
from ablate.tracking import machine_tags  # noqa: E402
from ablate.train import TrialState, setup_trial, train_step  # noqa: E402
from benchmarks.results_md import write_section  # noqa: E402

#: The quickstart's trial settings (studies/quickstart.yaml, default budget) without evaluation.
QUICKSTART = ["task.difficulty=2", "rollout.max_new_tokens=32", "rollout.prompts_per_step=4",
              "rollout.group_size=8", "eval.every=0", "device=cpu"]
#: The matrix-multiply operators torch's CPU kernels end in (``linear`` and ``matmul`` call these).
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
BEGIN, END = "<!-- BEGIN gemm-floor (written by benchmarks/bench_floor.py) -->", "<!-- END gemm-floor -->"

Shapes = tuple[tuple[int, ...], ...]


def gemm_dims(op: str, shapes: Sequence[Sequence[int]]) -> tuple[int, int, int, int]:
    """``(batch, M, K, N)`` of a matrix-multiply call from its profiler input shapes.

    ``mm``: [M, K] x [K, N]; ``addmm``: (bias, [M, K], [K, N]); ``bmm``: [b, M, K] x [b, K, N];
    ``baddbmm``: (bias, [b, M, K], [b, K, N]). Batch is 1 for the 2-D operators.
    """
    a, b = (shapes[0], shapes[1]) if op in ("aten::mm", "aten::bmm") else (shapes[1], shapes[2])
    if op in ("aten::mm", "aten::addmm"):
        return 1, a[0], a[1], b[1]
    return a[0], a[1], a[2], b[2]


def gemm_flops(op: str, shapes: Sequence[Sequence[int]]) -> int:
    """Floating point operations of one call: 2 * batch * M * K * N (a multiply and an add per term)."""
    batch, m, k, n = gemm_dims(op, shapes)
    return 2 * batch * m * k * n


@dataclass
class GemmCalls:
    """Matrix-multiply calls seen by the profiler over ``steps`` steps: per (operator, input shapes),
    the number of calls and their summed self time in seconds."""

    steps: int
    calls: dict[tuple[str, Shapes], int] = field(default_factory=dict)
    seconds: dict[tuple[str, Shapes], float] = field(default_factory=dict)

    def flops_per_step(self) -> float:
        return sum(n * gemm_flops(op, shapes) for (op, shapes), n in self.calls.items()) / self.steps

    def seconds_per_step(self) -> float:
        return sum(self.seconds.values()) / self.steps


def profile_gemms(run: Callable[[], Any], steps: int) -> GemmCalls:
    """Run ``run()`` ``steps`` times under ``torch.profiler`` and collect its matrix-multiply calls."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            run()
    out = GemmCalls(steps=steps)
    for event in prof.events():
        if event.name not in GEMM_OPS:
            continue
        key = (event.name, tuple(tuple(s) for s in event.input_shapes if s))
        out.calls[key] = out.calls.get(key, 0) + 1
        out.seconds[key] = out.seconds.get(key, 0.0) + event.self_cpu_time_total / 1e6
    return out


def profile_steps(state: TrialState, first: int, steps: int) -> GemmCalls:
    """The matrix-multiply calls of RL steps ``first`` .. ``first + steps - 1`` of ``state``."""
    numbers = iter(range(first, first + steps))
    return profile_gemms(lambda: train_step(state, next(numbers)), steps)


def _operands(op: str, shapes: Shapes, ta: bool, tb: bool) -> list[torch.Tensor]:
    """Random float32 inputs of ``shapes``; ``ta`` / ``tb`` store a matrix transposed (a strided view)."""
    def matrix(shape: Sequence[int], transposed: bool) -> torch.Tensor:
        if not transposed:
            return torch.randn(*shape)
        return torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)

    mats = list(shapes[-2:]) if op in ("aten::addmm", "aten::baddbmm") else list(shapes[:2])
    a, b = matrix(mats[0], ta), matrix(mats[1], tb)
    if op in ("aten::addmm", "aten::baddbmm"):
        return [torch.randn(*shapes[0]), a, b]
    return [a, b]


def isolated_seconds(op: str, shapes: Shapes, reps: int) -> float:
    """The fastest of the four transposition layouts: median seconds of one call, ``reps`` calls each."""
    fn = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::bmm": torch.bmm,
          "aten::baddbmm": torch.baddbmm}[op]
    best = float("inf")
    for ta in (False, True):
        for tb in (False, True):
            args = _operands(op, shapes, ta, tb)
            for _ in range(3):
                fn(*args)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn(*args)
                times.append(time.perf_counter() - t0)
            best = min(best, statistics.median(times))
    return best


def floor_seconds(calls: GemmCalls, reps: int) -> float:
    """Per step: the sum over the calls of their isolated time (:func:`isolated_seconds`)."""
    total = sum(n * isolated_seconds(op, shapes, reps) for (op, shapes), n in calls.calls.items())
    return total / calls.steps


def measure(overrides: list[str], steps: int, warmup: int, reps: int) -> dict[str, Any]:
    """Set up the trial, time ``steps`` steps after ``warmup``, profile ``steps`` more, time the GEMMs alone."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state: TrialState = setup_trial(TrialConfig.from_overrides([*QUICKSTART, *overrides]))
    wall = []
    for step in range(1, warmup + steps + 1):
        t0 = time.perf_counter()
        train_step(state, step)
        wall.append(time.perf_counter() - t0)
    wall = wall[warmup:]
    calls = profile_steps(state, warmup + steps + 1, steps)
    floor = floor_seconds(calls, reps)
    return {
        "step_s": statistics.median(wall), "step_min_s": min(wall), "gemm_in_situ_s": calls.seconds_per_step(),
        "floor_s": floor, "gflop": calls.flops_per_step() / 1e9, "distinct": len(calls.calls),
        "calls": sum(calls.calls.values()) / calls.steps, "model": state.config.model.name,
        "key": state.config.trial_key(),
    }


def section(r: dict[str, Any], argv: list[str], steps: int) -> str:
    tags = machine_tags()
    cpu = tags.get("ablate.machine.cpu", platform.processor() or "?")
    bound = r["step_s"] / r["floor_s"]
    return "\n".join([
        "## The matrix-multiply floor of an RL step (bench_floor.py)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} with `benchmarks/bench_floor.py {' '.join(argv)}` on {cpu} "
        f"({tags.get('ablate.machine.cpu_capability', '?')}), {os.cpu_count()} cores, one torch thread, torch "
        f"{torch.__version__}, Python {platform.python_version()}. Trial: `{r['model']}` at the quickstart's settings "
        f"(key {r['key']}, evaluation off); n = {steps} timed steps, then {steps} profiled steps.",
        "",
        "| per RL step | value |",
        "|---|---:|",
        f"| wall time (median of {steps}; min) | {r['step_s']:.3f} s ({r['step_min_s']:.3f} s) |",
        f"| matrix multiplies: calls / distinct shapes | {r['calls']:.0f} / {r['distinct']} |",
        f"| matrix-multiply work | {r['gflop']:.2f} GFLOP |",
        f"| their time inside the step (profiler self time) | {r['gemm_in_situ_s']:.3f} s |",
        f"| their time alone, best layout (the floor) | {r['floor_s']:.3f} s ({r['gflop'] / r['floor_s']:.0f} GFLOP/s) |",
        f"| step / floor: the most any same-keys change could speed the step | **{bound:.2f}x** |",
        "",
        "A same-keys change computes exactly what the step computes, so it performs these matrix multiplies; "
        "counting everything else as free makes the bound optimistic. The floor is a time on this machine: on "
        "another processor (another matmul throughput) the bound differs.",
        "",
        f"What 1.5x (issue 14's same-keys goal) asks of this step: {r['step_s'] / 1.5:.3f} s. With the matrix "
        f"multiplies as they run inside the step ({r['gemm_in_situ_s']:.3f} s), that leaves "
        f"{(r['step_s'] / 1.5 - r['gemm_in_situ_s']) * 1e3:.0f} ms for everything else, which takes "
        f"{(r['step_s'] - r['gemm_in_situ_s']) * 1e3:.0f} ms now (sampling, attention, elementwise work, the "
        "optimizer, Python); with them at the floor, "
        f"{(r['step_s'] / 1.5 - r['floor_s']) * 1e3:.0f} ms.",
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="a trial override on top of the quickstart's settings (repeatable)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps, and as many profiled steps (n)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--reps", type=int, default=30, help="calls per layout when a matrix multiply is timed alone")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--write", type=Path, default=None, help="replace this file's gemm-floor section")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as a study worker does
    torch.set_num_threads(args.threads)
    result = measure([*args.set, f"threads={args.threads}"], args.steps, args.warmup, args.reps)
    text = section(result, argv, args.steps)
    print(text)
    if args.write is not None:
        write_section(args.write, text, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
