"""Populations on one device: trials per minute of K packed quickstart-sized trials trained in one
process (:func:`ablate.train.population.run_population`), at each K, with peak device memory.

Each member is quickstart's baseline arm (tiny-llama, 2-digit addition, 4 prompts x 8 completions of at
most 32 tokens a step) at its own seed, ``train.packed`` on, without the warm start (so that K warm
starts are not built: the shapes and the work of a step are the same) and with evaluations only at the
start and the end. Trials per minute = K x 60 / (wall seconds of the population's training, set-up
included), and ``projected to 60 steps`` scales the step part to quickstart's default budget. Memory:
``torch.cuda.max_memory_allocated`` on CUDA (the population's peak), compared with 1.2 x K x the peak of
K = 1; on a CPU the process's peak resident set instead (cumulative, so only the first row is a clean
figure there).

    python benchmarks/bench_population.py --device cuda --k 1,8,64,256 --steps 10 --write OUT.md
    python benchmarks/bench_population.py --device cpu --k 1,2 --steps 2                  # a dry run
    python benchmarks/bench_population.py --study studies/smollm2_granularity.yaml --k 1,8,16 --steps 5
                                          # SmolLM2-135M members (issue 27); --set KEY=VALUE overrides any option
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def member_configs(k: int, steps: int, device: str, study: str, overrides: list[str] | None = None) -> list:
    """The K members: the study's baseline arm at seeds 0..K-1, packed, without warm start, then
    ``overrides`` (``KEY=VALUE`` strings, read as ``ablate train --set`` reads them)."""
    from ablate.config import ConfigWarning
    from ablate.study import load_study

    s = load_study(ROOT / study)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return [s.config(s.baseline_levels, "default", seed=i).with_overrides(
            {"train.packed": True, "train.steps": steps, "device": device, "warmstart.enabled": False,
             "eval.every": 0, "threads": 1 if device == "cpu" else 0, "train.checkpoint_every": 0})
            .with_overrides(overrides or [])
            for i in range(k)]


def peak_bytes(device: str) -> int:
    """The device's peak allocated memory (CUDA), else this process's peak resident set."""
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(k: int, steps: int, device: str, study: str, overrides: list[str] | None = None) -> dict:
    """Train one population of K members; its seconds, failures, step time and peak memory."""
    import torch

    from ablate.train.population import run_population

    configs = member_configs(k, steps, device, study, overrides)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    outcomes = run_population(configs, [None] * k, [None] * k)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    ok = [o for o in outcomes if not isinstance(o, BaseException)]
    step_s = sum(m["perf/step_s"] - m.get("perf/eval_s", 0.0) for o in ok for s, m in o.history if s > 0) / max(len(ok), 1)
    return {"k": k, "seconds": seconds, "failed": len(failed), "first_error": repr(failed[0])[:200] if failed else "",
            "step_s": step_s, "peak": peak_bytes(device)}


def row(r: dict, steps: int, base_peak: int | None) -> str:
    """A markdown row: K, wall s, trials/min, projected trials/min at 60 steps, peak memory and its bound."""
    per_min = r["k"] * 60.0 / r["seconds"]
    other = r["seconds"] - r["step_s"]  # set-up and the two evaluations (the steps run in parallel)
    projected = r["k"] * 60.0 / (other + r["step_s"] * 60.0 / steps)
    bound = f"{r['peak'] / (r['k'] * base_peak):.2f}" if base_peak else "-"
    fail = f" ({r['failed']} failed: {r['first_error']})" if r["failed"] else ""
    return (f"| {r['k']} | {r['seconds']:.1f} | {per_min:.1f} | {projected:.1f} | {r['peak'] / 2**20:.0f} | "
            f"{bound} |{fail}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--k", default="1,8,64,256", help="population sizes, in order")
    parser.add_argument("--steps", type=int, default=10, help="RL steps a trial")
    parser.add_argument("--study", default="studies/quickstart.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override an option of every member (a YAML value), e.g. rollout.prompts_per_step=2")
    parser.add_argument("--write", metavar="FILE", help="write the markdown table there")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1 if args.device == "cpu" else max(1, (os.cpu_count() or 2) // 2))
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    rows, base = "", None
    measure(1, 1, args.device, args.study, args.set)  # warm-up: imports, kernels, the tokenizer
    for k in [int(x) for x in args.k.split(",")]:
        r = measure(k, args.steps, args.device, args.study, args.set)
        if k == 1:
            base = r["peak"]
        rows += row(r, args.steps, base)
        print(rows.splitlines()[-1], flush=True)
    body = (f"## Populations on one device (bench_population.py)\n\nMeasured {time.strftime('%Y-%m-%d')} on {name} "
            f"(torch {torch.__version__}): `python benchmarks/bench_population.py --device {args.device} --k {args.k} "
            f"--steps {args.steps} --study {args.study}{''.join(' --set ' + x for x in args.set)}`. One population of K "
            f"packed trials of {Path(args.study).stem}'s baseline arm (no warm start) per row, one run each.\n\n| K | wall s | trials/min | trials/min projected to 60 steps | peak memory MiB | "
            "peak / (K x peak at K = 1) |\n|---|---|---|---|---|---|\n" + rows)
    print(body)
    if args.write:
        Path(args.write).write_text(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
