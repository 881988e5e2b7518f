"""The suite's float comparisons under every ATen CPU kernel set and thread count (issue 53).

Runs the tests that compare floats through ``tests/tolerance.py`` once per ``ATEN_CPU_CAPABILITY``
(``default``, ``avx2``, and ``avx512`` where the processor has it) and per thread count (1 and 2), each with
``ABLATE_TOLERANCE_LOG`` set, and prints per level (EXACT, OPS, MODEL) the largest error measured in ulps of
the comparison's scale, the bound, and the headroom (bound / largest error), with the test that set it:

    python benchmarks/tolerance_kernels.py            # every test that calls assert_close
    python benchmarks/tolerance_kernels.py -k logprobs

A level whose headroom falls below 2 on some processor is the one to re-justify. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The test files whose comparisons go through tests/tolerance.py (test_gpu.py needs CUDA and skips here).
FILES = ["tests/rl", "tests/models/test_logprobs.py", "tests/models/test_rollout.py",
         "tests/models/test_precision.py", "tests/models/test_checkpoint.py", "tests/models/test_decode_graph.py",
         "tests/models/test_smollm2.py", "tests/rewards/test_rewards.py", "tests/test_population.py",
         "tests/test_train.py", "tests/test_trl_engine.py", "tests/test_inference.py", "tests/test_analysis.py",
         "tests/test_studies.py", "tests/test_ledger.py", "tests/test_tolerance.py"]
sys.path.insert(0, str(ROOT / "tests"))
import tolerance  # noqa: E402  (the suite's helper: its levels' bounds)

LEVELS = {"EXACT": tolerance.EXACT, "OPS": tolerance.OPS, "MODEL": tolerance.MODEL}


def capabilities() -> list[str]:
    """The ATen kernel sets this processor can run."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    caps = ["default"]
    if " avx2" in flags:
        caps.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags and " avx512dq" in flags:
        caps.append("avx512")
    return caps


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run(cap: str, threads: int, log: Path, select: list[str]) -> tuple[int, float]:
    env = dict(os.environ, ATEN_CPU_CAPABILITY=cap, ABLATE_TOLERANCE_LOG=str(log), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *select, *FILES],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    print(f"  ATEN_CPU_CAPABILITY={cap} threads={threads}: {' '.join(tail)}", flush=True)
    return proc.returncode, time.perf_counter() - start


def summary(rows: list[dict]) -> list[str]:
    lines = ["| level | bound (ulps) | largest error (ulps) | headroom | comparisons | set by |", "|---|---|---|---|---|---|"]
    for name, bound in LEVELS.items():
        mine = [r for r in rows if r["bound"] == bound]
        if not mine:
            continue
        worst = max(mine, key=lambda r: r["error_ulps"])
        head = bound / worst["error_ulps"] if worst["error_ulps"] > 0 else float("inf")
        lines.append(f"| {name} | {bound} | {worst['error_ulps']:.1f} | {head:.0f}x | {len(mine)} | "
                     f"`{worst['test']}` ({worst['cap']}, {worst['threads']} thread{'s' if worst['threads'] > 1 else ''}) |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default=None, help="pytest -k expression, to run a subset")
    args = ap.parse_args(argv)
    select = ["-k", args.k] if args.k else []
    rows: list[dict] = []
    failed = 0
    print(f"processor: {cpu_name()}; kernel sets: {', '.join(capabilities())}")
    with tempfile.TemporaryDirectory() as tmp:
        for cap in capabilities():
            for threads in (1, 2):
                log = Path(tmp) / f"{cap}-{threads}.jsonl"
                rc, _ = run(cap, threads, log, select)
                failed += rc != 0
                for line in log.read_text().splitlines() if log.exists() else []:
                    rows.append({**json.loads(line), "cap": cap, "threads": threads})
    print("\n".join(summary(rows)))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
