"""What one held-out evaluation costs, by ``eval.n_problems``: the figures behind its default.

One evaluation is :func:`ablate.train.evaluate_trial`'s work: greedy decoding of ``n`` eval-split
problems in batches of 64 (the KV-cache decoder of :func:`ablate.models.rollout.generate_rollouts`)
and grading each completion. The policy is the quickstart's start policy (``studies/quickstart.yaml``:
``tiny-llama`` warm-started on 2-digit addition, ``rollout.max_new_tokens=32``), built or taken from
the warm-start cache first (not timed). Sizes are timed interleaved (100, 200, 500, 100, ...) over
``--repeats`` rounds after one warm-up evaluation, on one torch thread (what one study worker uses
with ``--workers 2`` on 2 cores); wall and process CPU seconds are both reported, since the CPU time
is less inflated by other work on a shared machine. Run from the repository root::

    .venv/bin/python benchmarks/bench_eval_cost.py                       # 100, 200, 500 problems, 5 rounds
    .venv/bin/python benchmarks/bench_eval_cost.py --sizes 100 500 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.config import TrialConfig  # noqa: E402
from ablate.machine import cpu_name  # noqa: E402
from ablate.models.evaluate import evaluate  # noqa: E402
from ablate.train import build_policy, build_task  # noqa: E402

#: The quickstart's model, task and generation budget (studies/quickstart.yaml, base:).
QUICKSTART = {
    "task.name": "addition", "task.difficulty": 2, "model.name": "tiny-llama", "warmstart.enabled": True,
    "rollout.max_new_tokens": 32, "device": "cpu",
}
#: Evaluations of one quickstart trial at its default budget: steps 0, 10, ..., 60.
QUICKSTART_EVALS = 7


def measure(sizes: list[int], repeats: int, threads: int) -> dict:
    """Seconds per evaluation at each size: medians and ranges of wall and CPU time, and accuracy."""
    torch.set_num_threads(threads)
    config = TrialConfig.from_overrides({**QUICKSTART, "eval.n_problems": max(sizes)})
    task = build_task(config)
    policy, report = build_policy(config, torch.device("cpu"))
    problems = task.sample("eval", max(sizes), seed=config.task.data_seed)  # a smaller n is a prefix

    def once(n: int) -> tuple[float, float, dict[str, float]]:
        w, c = time.perf_counter(), time.process_time()
        m = evaluate(policy, task, problems[:n], max_new_tokens=config.rollout.max_new_tokens)
        return time.perf_counter() - w, time.process_time() - c, m

    once(min(sizes))  # warm-up: first-call allocations
    wall: dict[int, list[float]] = {n: [] for n in sizes}
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    metrics: dict[int, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(repeats):
        for n in sizes:
            w, c, metrics[n] = once(n)
            wall[n].append(w)
            cpu[n].append(c)
    load_after = os.getloadavg()[0]
    rows = []
    for n in sizes:
        acc = metrics[n]["accuracy"]
        rows.append({
            "n_problems": n, "repeats": repeats,
            "wall_s_median": statistics.median(wall[n]), "wall_s_min": min(wall[n]), "wall_s_max": max(wall[n]),
            "cpu_s_median": statistics.median(cpu[n]),
            "quickstart_trial_s": QUICKSTART_EVALS * statistics.median(wall[n]),
            "accuracy": acc, "mean_length": metrics[n]["mean_length"],
            "se_at_50pct": 0.5 / math.sqrt(n), "se_at_accuracy": math.sqrt(acc * (1 - acc) / n),
        })
    return {
        "cpu": cpu_name(), "cores": os.cpu_count(), "threads": threads, "torch": torch.__version__,
        "python": platform.python_version(), "load_before": load_before, "load_after": load_after,
        "warmstart_accuracy": report.get("eval_accuracy"), "rows": rows,
    }


def markdown(result: dict) -> str:
    """The measurement as a Markdown table."""
    lines = [
        f"{result['cpu']}, {result['cores']} cores, {result['threads']} torch thread(s), torch {result['torch']}; "
        f"load average (1 min) {result['load_before']:.1f} before, {result['load_after']:.1f} after.",
        "",
        "| eval.n_problems | s / evaluation (median, min-max, n) | CPU s | s / quickstart trial (7 evals) "
        "| standard error at 50% | accuracy of the start policy |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['n_problems']} | {r['wall_s_median']:.2f} ({r['wall_s_min']:.2f}-{r['wall_s_max']:.2f}, "
            f"n={r['repeats']}) | {r['cpu_s_median']:.2f} | {r['quickstart_trial_s']:.1f} "
            f"| {100 * r['se_at_50pct']:.1f} points | {r['accuracy']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 500], help="eval.n_problems to time")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    result = measure(sorted(set(args.sizes)), args.repeats, args.threads)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
