"""``ablate run FILE``: run a study to completion (resumable), log it to MLflow, build its report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.running.session import RunSettings
    from ablate.study import Study

HELP = "run a study: every trial, resumable, on N local workers, logged to MLflow"
DESCRIPTION = """\
Run every trial of a study at a budget, with N local worker processes, and log each trial to MLflow
(one experiment per study, one parent run per study and budget, one child run per trial). The file is
validated first: on any problem nothing is created and the exit code is 2.

The study store (which trials exist, run, failed) is an Optuna journal file, runs/<study>/store.journal,
unless --storage (or $ABLATE_STORAGE) names another file or a PostgreSQL URL shared with workers on
other machines (`ablate worker`). Running the same command again resumes: completed trials are skipped,
failed ones and those of killed workers run again, each from its last checkpoint (runs/<study>/trials/
<key>/). The design is frozen when the study first runs; if the file later expands to other trials,
the run is refused with the differences, unless it only adds trials and --extend is given.

A study with `seeds: {min: a, max: b}` (adaptive seeds; it needs `min_effect:`) runs seeds 0..a-1
first, then, in rounds, re-estimates from the finished trials how many seeds its primary contrasts
(every contrast when it declares none) need for 80% power at min_effect (from their SD only, never from
the observed difference: see ablate/stats/planning.py and `ablate plan --help`), adds seeds up to that count
(at most b) and runs them, until the count stops growing. Each round's decision is printed as one line,
kept in the store (a rerun reuses it) and tagged on the MLflow parent run (ablate.adaptive_seeds,
ablate.adaptive_seeds.n).

MLflow: --tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory
(browse with `mlflow ui --backend-store-uri sqlite:///mlflow.db`).

  ablate run studies/quickstart.yaml --budget smoke
  ablate run studies/quickstart.yaml --workers 2
  ablate run studies/x.yaml --storage postgresql://ablate:secret@db:5432/ablate --tracking-uri http://mlflow:5000

Exit code: 0 when every trial is done, 1 when some failed (see `ablate status FILE`) or none of the finished
trials logged the objective's metric (the report says so), 2 on bad input.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="local worker processes (default 1: in this process); CPU threads are split between them")
    parser.add_argument("--extend", action="store_true",
                        help="accept a design that adds arms or seeds to the frozen one (existing results are kept)")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``ablate run`` and ``ablate worker`` share."""
    parser.add_argument("file", metavar="FILE", help="study file (YAML)")
    parser.add_argument("--budget", default="default", help="budget to run (default: default)")
    parser.add_argument("--storage", metavar="URL",
                        help="study store: a journal file path or postgresql://... (default: $ABLATE_STORAGE, "
                             "else runs/<study>/store.journal)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--runs", default="runs", metavar="DIR",
                        help="folder of run folders: checkpoints in DIR/<study>/trials/<key>/ (default: runs)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished trial's checkpoint (DIR/<study>/trials/<key>/trainer.pt); by default it "
                             "is deleted once the trial's result is recorded in the store and in MLflow (or the outbox)")
    parser.add_argument("--tracking-wait", type=float, metavar="S",
                        help="seconds the end of a run waits for an MLflow server that stopped answering, to upload the "
                             "trials kept on disk meanwhile: from the run's end for an outage that began in the run's "
                             "second half after the server took some of its trials, else counted from the first trial "
                             "it kept (default: a tenth of the run's time, at most 60 s, so a server down for the whole "
                             "study is not waited for; `ablate worker`, unattended on a cluster: 60 s; 0: do not wait, "
                             "the next run uploads them)")
    parser.add_argument("--ignore-disk-space", action="store_true",
                        help="start even when a disk the study writes to has less free space than its estimated peak "
                             "use (`ablate show` prints the estimate); a full disk then stops the run with one message")
    parser.add_argument("--pack", default="auto", metavar="K",
                        help="train up to K trials that set train.packed: true (and share a model shape) as one "
                             "population in one process, their forward, backward and decode steps batched "
                             "(default auto: 1 on a CPU, where it measured no faster; on a GPU as many as fit in half its free memory, at most 64)")
    parser.add_argument("--threads", type=int, default=0, metavar="N",
                        help="torch threads per worker (default: the cores split between the local workers)")
    # defaults (None here, so that --help does not import optuna): ablate.store.DEFAULT_*
    parser.add_argument("--max-retries", type=int, metavar="N",
                        help="automatic retries of a trial whose worker died, in a row (default 2)")
    parser.add_argument("--heartbeat", type=float, metavar="S",
                        help="seconds between heartbeats of a running trial (default 15)")
    parser.add_argument("--grace", type=float, metavar="S",
                        help="seconds without heartbeat after which a trial of another machine is retried (default 90)")
    parser.add_argument("--store-wait", type=float, metavar="S",
                        help="seconds a worker waits out a study store that does not answer (a PostgreSQL restart, "
                             "a journal I/O error) before it stops (default 300)")


def prepare_environment() -> None:
    """Settings read once, when torch and transformers load (call it before anything imports them;
    worker processes inherit them), unless the user chose otherwise:

    - ``OMP_WAIT_POLICY=PASSIVE``: OpenMP threads sleep instead of spinning while they wait.
      Measured on 2 shared cores with the tiny zoo models: with spinning threads a busy machine slows
      a trial 10-20x; passive waiting keeps 2 threads as fast as 1.
    - ``HF_HUB_DISABLE_PROGRESS_BARS=1``: no "Loading weights" bar per trial in the progress display.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "transformers" not in sys.modules:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def settings_from_args(args: argparse.Namespace, study: Study) -> RunSettings:
    """Check the shared options and build the run settings (creates nothing; :func:`ablate.running.session.make_settings`)."""
    from ablate.running.session import RunOptions, make_settings

    return make_settings(study, args.budget, RunOptions(
        storage=args.storage, tracking_uri=args.tracking_uri, runs=args.runs, threads=args.threads,
        workers=getattr(args, "workers", 1), max_retries=args.max_retries, heartbeat=args.heartbeat, grace=args.grace,
        store_wait=args.store_wait, keep_checkpoints=args.keep_checkpoints, check_disk=not args.ignore_disk_space,
        tracking_wait=args.tracking_wait, pack=args.pack))


def run(args: argparse.Namespace) -> int:
    """Validate, run the study, build the report; print where the results are."""
    prepare_environment()
    from ablate.commands.validate import print_warnings
    from ablate.running.runner import record_command, run_study
    from ablate.study import load_study
    from ablate.tracking import Tracker, tracking_location

    study = load_study(args.file)
    print_warnings(study)
    settings = settings_from_args(args, study)
    result = run_study(study, settings, workers=args.workers, extend=args.extend, progress=not args.no_progress)
    record_command(result, getattr(args, "command_line", None) or sys.argv[1:])
    c = result.counts
    print(f"study {study.name} ({args.budget}): {c['done']} done, {c['failed']} failed, {c['running']} running, "
          f"{c['pending']} pending, in {result.seconds:.0f} s")
    experiment = None
    if not result.unsent:  # the server answered: the experiment's id, for the UI page of its runs table
        try:
            experiment = Tracker(result.tracking_uri).experiment_id(study.name, create=False)
        except Exception:  # noqa: BLE001 - the plain location still says where the results are
            experiment = None
    print(f"results: MLflow {tracking_location(result.tracking_uri, experiment)}, experiment {study.name!r}")
    print(f"store: {result.storage}")
    if result.unsent:
        print(f"{len(result.unsent)} finished trial(s) could not reach MLflow at {result.tracking_uri} "
              f"({result.tracking_error}); they are kept in {args.runs}/{study.name}/trials/<key>/unsent.json. When the "
              f"server answers again, run the same command again: it uploads them and builds the report",
              file=sys.stderr)
        return 1
    rc = 0
    from ablate.commands.report import upload_report
    from ablate.errors import UnloggedObjectiveError
    from ablate.report import build_report

    try:
        try:
            path = build_report(result.plan, tracking_uri=result.tracking_uri)  # the plan that ran: tuned, all seeds
        except UnloggedObjectiveError as exc:  # a report that compares nothing: written, said, exit 1
            print(str(exc), file=sys.stderr)
            path, rc = exc.index, 1
        upload_report(study.name, args.budget, result.tracking_uri, path.parent)
        print(f"report: {path}")  # the last line: where to read the study's answer
    except Exception as exc:  # noqa: BLE001 - the trials are safe in MLflow; say what failed
        print(f"the report could not be built: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    if c["failed"]:
        print(f"{c['failed']} trial(s) failed: see `ablate status {args.file} --budget {args.budget}`; run the same "
              "command again to retry them", file=sys.stderr)
        return 1
    if c["pending"] or c["running"]:
        print(f"the workers stopped with {c['pending']} trial(s) pending and {c['running']} running: see `ablate "
              f"status {args.file} --budget {args.budget}`; run the same command again to resume", file=sys.stderr)
        return 1
    return rc
