"""``ablate validate FILE...``: check study files completely, creating nothing."""

from __future__ import annotations

import argparse
import sys

HELP = "check study files (every key, every arm's configuration) without running anything"
DESCRIPTION = """\
Check study files without running anything: the YAML (safe, no duplicate keys), every key of the
schema (see ablate/study/__init__.py), the design, the baseline and exclusions, the objective's metric
(one a trial logs: docs/metrics.md, or reward/<c> of a reward component, a plugin's included), and the
TrialConfig of every arm at every budget. The study's plugins are imported (and nothing else). Nothing
is written.

For each file, prints "FILE: ok (N arms x S seeds = M trials)", or every problem of the file as
"FILE:LINE: key: problem; allowed ...; did you mean ...?": the study's own problems and each key of
base, the budgets and the levels, in one pass. Exit code 2 if any file has a problem.

  ablate validate studies/*.yaml
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="study files (YAML)")


def print_warnings(study, *, notes_to_stderr: bool = False) -> None:
    """The study's configuration warnings on stderr, one line each (they never fail a study), then, on
    stdout, one note naming what the study file acknowledges (``acknowledge:``), if anything: a choice the
    study made, not a warning (on stderr with ``notes_to_stderr``: when stdout carries JSON)."""
    for w in study.warnings:
        print(f"{study.path}: warning: {w}", file=sys.stderr)
    if study.entry_warning:
        print(f"{study.path}: warning: {study.entry_warning}", file=sys.stderr)
    over = processes_over_cores(study)
    if over:
        print(f"{study.path}: warning: {over}", file=sys.stderr)
    if study.acknowledged_line:
        print(f"{study.path}: note: {study.acknowledged_line}", file=sys.stderr if notes_to_stderr else sys.stdout)


def processes_over_cores(study, cores: int | None = None) -> str | None:
    """One line when an arm asks for more ``engine.processes`` than this machine has CPU cores (``cores``:
    default ``os.cpu_count()``): its ranks would share cores, slower than one process (issue 55). Not an error:
    the study may run on another machine, or on GPUs."""
    import os

    cores = cores or os.cpu_count() or 1
    most = max((c.engine.processes for c in study.configs.values()), default=1)
    if most <= cores:
        return None
    return (f"engine.processes reaches {most} but this machine has {cores} CPU cores: the ranks would share them "
            "(slower than 1 process on CPU); run it where each rank has a core or a GPU, or lower engine.processes")


def run(args: argparse.Namespace) -> int:
    """Validate each file in turn; 0 if all are valid, else 2 (after reporting every file)."""
    from ablate.errors import AblateError
    from ablate.study import StudyError, load_study

    failed = 0
    write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # importing a plugin must not leave __pycache__ behind
    try:
        for file in args.files:
            try:
                study = load_study(file)
            except StudyError as exc:
                failed += 1
                print(str(exc), file=sys.stderr)
                continue
            except AblateError as exc:
                failed += 1
                print(f"{file}: {exc}", file=sys.stderr)
                continue
            n_arms, n_seeds = len(study.arms), len(study.seeds)
            print(f"{file}: ok ({n_arms} arms x {n_seeds} seeds = {study.n_trials} trials)")
            print_warnings(study)
    finally:
        sys.dont_write_bytecode = write_bytecode
    return 2 if failed else 0
