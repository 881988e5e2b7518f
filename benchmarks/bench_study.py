"""Study throughput, the headline speed figure: quickstart trials per hour at this commit against an
earlier one, back to back on one machine, and the time of one trial of each zoo model.

Part 1 runs ``ablate run STUDY --budget BUDGET --workers N`` from a fresh folder at each commit,
alternating (old new old new ...) so that a machine getting busier or quieter affects both alike, and
reports trials per hour (trials / wall time of the whole command, report included) and the ratio
new / old per pair. It checks that both commits ran the same trials (identical trial keys) and says
whether every logged value except the ``perf/*`` timings is identical (a speed change that alters
what a trial computes must be a recorded option, so the keys would differ). Both commits use this
interpreter and its installed packages; the warm start cache (~/.cache/ablate) is shared, so where
the study's warm starts are not cached yet the first timed run builds them: run the study once
before, or use ``--rounds 3`` and read the later pairs.

Part 2 trains one trial of each zoo model: the study's baseline arm at seed 0 and BUDGET with only
``model.name`` changed, one torch thread, in a subprocess of its own; a first run of one step builds
the model's warm start (untimed), then the trial is timed. ``smollm2-135m`` (135M parameters, needs
the ``smollm2`` extra) runs ``--smollm2-steps`` steps and its 60-step time is the projection
``setup + evaluations + steps x median step time``, labelled as such.

    python benchmarks/bench_study.py --old 0f856a1                    # 2 pairs + the zoo
    python benchmarks/bench_study.py --old 0f856a1 --rounds 3 --write # + benchmarks/RESULTS.md
    python benchmarks/bench_study.py --old 0f856a1 --no-zoo
    python benchmarks/bench_study.py --pack 1,4,16,32 --write         # packed populations vs solo (bench_pack.py)

Measured on the machine it runs on; an absolute time is only comparable within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_commits import add_comparison_args, alternate_runs, same_numbers  # noqa: E402

sys.path.insert(0, str(ROOT))
from ablate.running.pool import threads_per_worker  # noqa: E402
from ablate.tracking import machine_tags  # noqa: E402

BEGIN, END = "<!-- bench_study:begin -->", "<!-- bench_study:end -->"

#: One zoo trial in a subprocess: prints one JSON line (the timed trial's figures).
ZOO_TRIAL = r"""
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
from ablate.config import ConfigWarning
from ablate.study import load_study
from ablate.train import run_trial
study_path, budget, model, steps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
study = load_study(study_path)
base = study.config(study.baseline_levels, budget, seed=0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConfigWarning)
    config = base.with_overrides({"model.name": model, "threads": 1, "train.steps": steps})
    prepare = config.with_overrides({"train.steps": 1, "eval.every": 0})
run_trial(prepare)  # builds (or finds) the warm start: untimed
t0 = time.perf_counter()
result = run_trial(config)
seconds = time.perf_counter() - t0
step_s = [m["perf/step_s"] - m.get("perf/eval_s", 0.0) for s, m in result.history if s > 0 and "perf/step_s" in m]
evals = [m["perf/eval_s"] for s, m in result.history if m.get("perf/eval_s")]
print(json.dumps({"seconds": seconds, "steps": result.steps, "step_s": step_s, "eval_s": evals,
                  "default_steps": base.train.steps, "eval_every": base.eval.every}))
"""


def zoo_models() -> list[str]:
    """The zoo's model names, in the registry's order."""
    from ablate.models.zoo import MODELS

    return list(MODELS.names())


def zoo_trial(study: str, budget: str, model: str, steps: int) -> dict[str, Any]:
    """One timed trial of ``model`` (see the module docstring); ``{"error": text}`` when it cannot run."""
    proc = subprocess.run([sys.executable, "-c", ZOO_TRIAL, str(ROOT), str(ROOT / study), budget, model, str(steps)],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def zoo_row(model: str, r: dict[str, Any]) -> str:
    """A markdown row of the zoo table."""
    if "error" in r:
        return f"| `{model}` | not run: {r['error'][:160]} | | | |\n"
    step = statistics.median(r["step_s"])
    ev = statistics.median(r["eval_s"]) if r["eval_s"] else 0.0
    if r["steps"] >= r["default_steps"]:
        trial = f"{r['seconds']:.1f}"
    else:  # a projection: the measured setup and evaluations plus the remaining steps at the median step
        n_evals = 2 + max(0, (r["default_steps"] - 1) // r["eval_every"]) if r["eval_every"] else 2
        setup = r["seconds"] - sum(r["step_s"]) - sum(r["eval_s"])
        trial = f"{setup + n_evals * ev + r['default_steps'] * step:.0f} (projected from {r['steps']} steps)"
    return f"| `{model}` | {trial} | {step:.3f} | {ev:.2f} | {r['steps']} |\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    add_comparison_args(parser, old_required=False)
    parser.add_argument("--no-zoo", action="store_true", help="skip the one-trial time of each zoo model")
    parser.add_argument("--smollm2-steps", type=int, default=3, help="steps of smollm2-135m's trial (projected to the budget's)")
    parser.add_argument("--write", action="store_true", help="write the section of benchmarks/RESULTS.md")
    parser.add_argument("--pack", metavar="K,K,...",
                        help="instead: packed populations of these sizes against solo trials (benchmarks/bench_pack.py)")
    parser.add_argument("--pack-seeds", type=int, default=16, help="--pack: seeds of the study (default 16)")
    parser.add_argument("--pack-steps", type=int, default=20, help="--pack: RL steps a trial (default 20)")
    args = parser.parse_args(argv)
    if args.pack:
        from bench_pack import BEGIN as PACK_BEGIN
        from bench_pack import END as PACK_END
        from bench_pack import pack_benchmark

        body = pack_benchmark([int(k) for k in args.pack.split(",")], study=args.study, seeds=args.pack_seeds,
                              steps=args.pack_steps, workers=args.workers)
        print(body, flush=True)
        if args.write:
            from results_md import write_section

            write_section(ROOT / "benchmarks" / "RESULTS.md", body, PACK_BEGIN, PACK_END)
        return 0
    if not args.old:
        parser.error("--old is required (or --pack)")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    new_label = f"{head}{' + uncommitted changes' if dirty else ''}"
    load0 = os.getloadavg()[0]
    runs = alternate_runs(args.old, args.study, args.budget, args.workers, args.rounds)
    old = [x for x in runs if x.label == "old"]
    new = [x for x in runs if x.label == "new"]
    ratios = [n.trials_per_hour / o.trials_per_hour for o, n in zip(old, new)]
    same_keys = all(x.keys == runs[0].keys for x in runs)
    same = all(same_numbers(runs[0].tidy, x.tidy) for x in runs[1:])
    cpu = machine_tags()["ablate.machine.cpu"]
    body = (f"## Study throughput (bench_study.py)\n\n"
            f"Measured {time.strftime('%Y-%m-%d')} with `python benchmarks/bench_study.py --old {args.old} "
            f"--rounds {args.rounds}` on {cpu}, {os.cpu_count()} cores, torch threads per worker: "
            f"{threads_per_worker(args.workers)}; load average (1 min) before: {load0:.2f}.\n\n"
            f"`ablate run {args.study} --budget {args.budget} --workers {args.workers}` from a fresh folder, "
            f"{args.rounds} rounds alternating old ({args.old}) and new ({new_label}); trials per hour = trials / "
            f"wall time of the whole command (start-up, warm start lookup, trials, report).\n\n"
            "| round | old s | new s | old trials/h | new trials/h | new / old |\n|---|---|---|---|---|---|\n"
            + "".join(f"| {i + 1} | {o.seconds:.1f} | {n.seconds:.1f} | {o.trials_per_hour:.0f} | "
                      f"{n.trials_per_hour:.0f} | {n.trials_per_hour / o.trials_per_hour:.2f} |\n"
                      for i, (o, n) in enumerate(zip(old, new)))
            + f"\nTrials per hour, new / old: mean {statistics.mean(ratios):.2f} over n = {len(ratios)} pairs "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}). Same trial keys in every run: "
              f"{'yes' if same_keys else 'NO'}; every logged value except `perf/*` identical: {'yes' if same else 'no'}.\n")
    print(body, flush=True)
    if not args.no_zoo:
        rows = ""
        default_steps = load_default_steps(args.study, args.budget)
        for model in zoo_models():
            steps = args.smollm2_steps if model.startswith("smollm2") else default_steps
            r = zoo_trial(args.study, args.budget, model, steps)
            print(model, {k: v for k, v in r.items() if k not in ("step_s", "eval_s")}, flush=True)
            rows += zoo_row(model, r)
        body += (f"\n### One trial of each zoo model\n\n{Path(args.study).stem}'s baseline arm at seed 0, budget "
                 f"{args.budget}, with `model.name` changed; one torch thread, one process, nothing else of "
                 "ablate's running; the warm start built beforehand (untimed). Trial s = wall time of "
                 "`run_trial` (setup, every step, every evaluation).\n\n"
                 "| model | trial s | median step s (no eval) | median evaluation s | steps run |\n"
                 "|---|---|---|---|---|\n" + rows)
        print(body[body.index("### One trial"):], flush=True)
    if args.write:
        from results_md import write_section

        write_section(ROOT / "benchmarks" / "RESULTS.md", body, BEGIN, END)
    return 0 if same_keys else 1


def load_default_steps(study: str, budget: str) -> int:
    """``train.steps`` of the study's baseline arm at ``budget``."""
    from ablate.study import load_study

    s = load_study(ROOT / study)
    return s.config(s.baseline_levels, budget).train.steps


if __name__ == "__main__":
    sys.exit(main())
