"""A study's wall time at two commits, back to back on one machine: did a change make ablate slower?

Runs ``ablate run STUDY --workers N`` from a fresh folder at each commit, alternating (A B A B ...)
so that a machine getting busier or quieter affects both alike, and reports each run's time, the
ratio new / old, and whether both commits produced the same numbers (every logged value of the
report's tidy table except the ``perf/*`` timings). The old commit is checked out in a temporary git
worktree; both use this interpreter and its installed packages. The warm start cache is shared, so
build it once first (any run of the study does).

    python benchmarks/bench_commits.py --old fad68b5                       # HEAD's tree vs fad68b5
    python benchmarks/bench_commits.py --old fad68b5 --rounds 3 --write    # + benchmarks/RESULTS.md

Measured on the machine it runs on; an absolute time is only comparable within one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench_commits:begin -->", "<!-- bench_commits:end -->"


@dataclass
class Run:
    """One run of the study: which code, its wall time, its report's tidy table and its trial keys."""

    label: str
    seconds: float
    tidy: pd.DataFrame
    keys: list[str] = field(default_factory=list)

    @property
    def trials_per_hour(self) -> float:
        return len(self.keys) * 3600.0 / self.seconds


def run_study(code: Path, study: str, budget: str, workers: int, label: str) -> Run:
    """``ablate run`` of ``study`` with the ablate package found at ``code``, in a fresh folder."""
    with tempfile.TemporaryDirectory(prefix=f"bench-commits-{label}-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(code)}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "ablate", "run", str(code / study), "--budget", budget,
                               "--workers", str(workers), "--no-progress"], cwd=tmp, env=env,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{label}: ablate run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        folder = Path(tmp) / "reports" / Path(study).stem
        tidy = pd.read_csv(folder / "tidy.csv.gz")
        keys = sorted(pd.read_csv(folder / "results.csv")["key"].astype(str))
    return Run(label, seconds, tidy, keys)


def same_numbers(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Every logged value but the ``perf/*`` timings identical, trial by trial and step by step."""
    keep = ["key", "step", "metric", "value"]

    def logged(t: pd.DataFrame) -> pd.DataFrame:  # in a fixed order: workers finish trials in any order
        t = t[~t["metric"].str.startswith("perf/")][keep]
        return t.sort_values(["key", "step", "metric"], kind="stable").reset_index(drop=True)

    return logged(a).equals(logged(b))


def add_comparison_args(parser: argparse.ArgumentParser, *, old_required: bool = True) -> None:
    """The options of a two-commit comparison: --old, --study, --budget, --workers, --rounds."""
    parser.add_argument("--old", required=old_required, help="the earlier commit to compare against")
    parser.add_argument("--study", default="studies/quickstart.yaml", help="study file, relative to the repo")
    parser.add_argument("--budget", default="default")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="old/new pairs, alternating (default 2)")


def alternate_runs(old: str, study: str, budget: str, workers: int, rounds: int) -> list[Run]:
    """``rounds`` pairs of runs, old commit (in a temporary git worktree) then this tree, alternating."""
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-commits-old-") as wt:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", wt, old], check=True,
                       capture_output=True)
        try:
            for r in range(rounds):
                for label, code in (("old", Path(wt)), ("new", ROOT)):
                    runs.append(run_study(code, study, budget, workers, label))
                    print(f"round {r + 1} {label}: {runs[-1].seconds:.1f} s, {len(runs[-1].keys)} trials, "
                          f"{runs[-1].trials_per_hour:.0f} trials/h", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", wt], capture_output=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_comparison_args(parser)
    parser.add_argument("--write", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    runs = alternate_runs(args.old, args.study, args.budget, args.workers, args.rounds)
    old = [x.seconds for x in runs if x.label == "old"]
    new = [x.seconds for x in runs if x.label == "new"]
    ratios = [n / o for o, n in zip(old, new)]
    same = all(same_numbers(runs[0].tidy, x.tidy) for x in runs[1:])
    body = (f"## A study at two commits (bench_commits.py)\n\n"
            f"`ablate run {args.study} --budget {args.budget} --workers {args.workers}`, {args.rounds} rounds "
            f"alternating old ({args.old}) and new ({head}, working tree), {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores.\n\n| round | old (s) | new (s) | new / old |\n|---|---|---|---|\n"
            + "".join(f"| {i + 1} | {o:.1f} | {n:.1f} | {n / o:.2f} |\n" for i, (o, n) in enumerate(zip(old, new)))
            + f"\nMean ratio new / old: {sum(ratios) / len(ratios):.2f} (n = {len(ratios)} pairs; each run includes "
              f"the report). Every logged value except `perf/*` identical across all {len(runs)} runs: "
              f"{'yes' if same else 'NO'}.\n")
    print(body)
    if args.write:
        from results_md import write_section

        write_section(ROOT / "benchmarks" / "RESULTS.md", body, BEGIN, END)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
