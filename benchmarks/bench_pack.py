"""Packed against solo: trials per hour of one study run with populations of K trials (``train.packed``,
``ablate run --pack K``) and solo, back to back on this machine, with each run's peak memory.

The study is STUDY (default the quickstart design) at SEEDS seeds (16: 64 trials) and STEPS RL steps a
trial, written to a temporary study file twice: solo (``train.packed: false``) and packed
(``train.packed: true``). Each configuration runs ``ablate run FILE --workers W --pack K`` in a fresh
folder (the warm start cache is shared: it is built before the timed runs). Trials per hour = trials /
wall time of the whole command; peak memory = the largest resident set of any process of the run
(``ru_maxrss`` of the waited children: the worker that held the largest population). Packed and solo
trials have different keys (packing is part of a trial's key), so only their time is compared.

    python benchmarks/bench_study.py --pack 1,4,16,32 --pack-seeds 16 --pack-steps 20 --write
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ablate.study import load_study  # noqa: E402
from ablate.study.plan import Plan  # noqa: E402

BEGIN, END = "<!-- bench_pack:begin -->", "<!-- bench_pack:end -->"


@dataclass
class PackRun:
    """One timed ``ablate run``: its label, population size (0: solo), wall seconds, trials, peak RSS."""

    label: str
    pack: int
    workers: int
    seconds: float
    trials: int
    peak_bytes: int

    @property
    def trials_per_hour(self) -> float:
        return self.trials * 3600.0 / self.seconds


def study_file(folder: Path, study: str, seeds: int, steps: int, packed: bool, suffix: str = "") -> Path:
    """``study`` with ``seeds`` seeds, ``train.steps`` = ``steps`` and ``train.packed`` as given, in ``folder``."""
    doc = yaml.safe_load((ROOT / study).read_text())
    doc["name"] = f"{doc['name']}_{'packed' if packed else 'solo'}{suffix}"
    doc["seeds"] = seeds
    doc["base"] = {**doc["base"], "train.packed": packed}
    doc["budgets"] = {"default": {"train.steps": steps}}
    path = folder / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def timed_run(path: Path, *, workers: int, pack: int, label: str) -> PackRun:
    """``ablate run path --workers workers --pack pack`` in a fresh folder, timed, in a child process
    whose own children's peak memory is read back (each run starts from a fresh ``ru_maxrss``)."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "s = time.perf_counter() - t0\n"
        "print(json.dumps({'rc': p.returncode, 'seconds': s, 'err': p.stderr[-2000:],"
        " 'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))\n"
    )
    with tempfile.TemporaryDirectory(prefix=f"bench-pack-{label}-") as tmp:
        cmd = [sys.executable, "-c", code, sys.executable, "-m", "ablate", "run", str(path), "--workers", str(workers),
               "--pack", str(max(pack, 1)), "--no-progress"]
        proc = subprocess.run(cmd, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if out["rc"] != 0:
            raise RuntimeError(f"{label}: ablate run exited {out['rc']}: {out['err']}")
    trials = len(Plan.of(load_study(path), "default").specs)
    return PackRun(label, pack, workers, out["seconds"], trials, out["rss"])


def table(runs: list[PackRun]) -> str:
    """The markdown table: one row per run, ratios of trials per hour to the solo run's."""
    solo = next(r for r in runs if r.pack == 0)
    rows = "".join(
        f"| {r.label} | {r.workers} | {r.seconds:.1f} | {r.trials_per_hour:.0f} | "
        f"{r.trials_per_hour / solo.trials_per_hour:.2f} | {r.peak_bytes / 2**20:.0f} |\n" for r in runs)
    return ("| run | workers | wall s | trials/h | vs solo | peak RSS of one process, MiB |\n"
            "|---|---|---|---|---|---|\n" + rows)


def pack_benchmark(packs: list[int], *, study: str, seeds: int, steps: int, workers: int) -> str:
    """Run solo and every population size in ``packs``; the RESULTS.md section as markdown."""
    from ablate.tracking import machine_tags

    load0 = os.getloadavg()[0]
    runs: list[PackRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as tmp:
        solo = study_file(Path(tmp), study, seeds, steps, packed=False)
        packed = study_file(Path(tmp), study, seeds, steps, packed=True)
        warm = study_file(Path(tmp), study, 1, 1, packed=False, suffix="_warm")
        timed_run(warm, workers=1, pack=1, label="warm start (untimed)")
        runs.append(timed_run(solo, workers=workers, pack=0, label="solo"))
        print(runs[-1], flush=True)
        for k in packs:
            runs.append(timed_run(packed, workers=workers, pack=k, label=f"packed, K = {k}"))
            print(runs[-1], flush=True)
    cpu = machine_tags()["ablate.machine.cpu"]
    best = max((r for r in runs if r.pack), key=lambda r: r.trials_per_hour)
    ratio = best.trials_per_hour / runs[0].trials_per_hour
    return (f"## Packed populations against solo trials (bench_study.py --pack)\n\n"
            f"Measured {time.strftime('%Y-%m-%d')} with `python benchmarks/bench_study.py --pack "
            f"{','.join(map(str, packs))} --pack-seeds {seeds} --pack-steps {steps}` on {cpu}, {os.cpu_count()} "
            f"cores, CPU only; load average (1 min) before: {load0:.2f}. The study: {Path(study).stem}'s design at "
            f"{seeds} seeds ({runs[0].trials} trials), {steps} RL steps a trial, evaluations as in the study; "
            f"`ablate run --workers {workers}` from a fresh folder, one run each, in the order listed.\n\n"
            + table(runs)
            + f"\nBest packed / solo: {ratio:.2f} ({best.label}; n = 1 run each, so differences of a few percent are "
              f"within run-to-run noise on a shared machine).\n")
