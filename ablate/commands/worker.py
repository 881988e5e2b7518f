"""``ablate worker FILE``: one worker of a study, e.g. on another machine sharing the store."""

from __future__ import annotations

import argparse

HELP = "run trials of a study from a shared store (one worker, e.g. on another machine)"
DESCRIPTION = """\
Claim and run trials of a study until none is waiting or running: the same worker loop as
`ablate run`, alone, for a second terminal or another machine. Point every worker at the same study
store and tracking server:

  ablate worker studies/x.yaml --storage postgresql://ablate:secret@db:5432/ablate \\
                               --tracking-uri http://mlflow-host:5000

The worker checks its study file against the design frozen in the store (and freezes it if it is the
first), enqueues what must run, and never runs a trial that another worker has claimed. Checkpoints go
to --runs (default runs/)/<study>/trials/<key>/ on this machine.

Exit code: 0 when the study has nothing left to run, 1 if a trial this worker ran failed, 2 on bad input.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ablate.commands.run import add_common_arguments

    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the worker loop until the study has nothing left to run."""
    import sys

    from ablate.commands.run import prepare_environment, settings_from_args

    prepare_environment()
    from ablate.running.runner import run_one_worker
    from ablate.running.session import DEFAULT_TRACKING_WAIT
    from ablate.study import load_study

    study = load_study(args.file)
    if args.tracking_wait is None:  # an unattended worker of a cluster waits out a server's restart (60 s)
        args.tracking_wait = DEFAULT_TRACKING_WAIT
    stats = run_one_worker(study, settings_from_args(args, study), stream=sys.stderr)
    print(f"worker done: {len(stats.done)} trial(s) completed, {len(stats.failed)} failed, {len(stats.lost)} lost")
    if stats.unsent:
        print(f"{len(stats.unsent)} finished trial(s) could not reach MLflow; they are kept in "
              f"{args.runs}/{study.name}/trials/<key>/unsent.json: when the server answers again, run the same "
              "command again (or `ablate run` of the study) to upload them", file=sys.stderr)
    return 1 if stats.failed or stats.unsent else 0
