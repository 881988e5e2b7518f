"""``ablate report FILE|NAME``: write a study's report (statistics, figures, HTML and Markdown)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.study import Study
    from ablate.tracking import Tracker

HELP = "write a study's report: findings with CIs, seaborn figures, index.html and README.md"
DESCRIPTION = """\
Read a study's trials from MLflow and write its report into reports/<study>/ (or --out DIR):
index.html (one self-contained page that opens offline), README.md (the same findings in Markdown),
results.csv (one row per trial), curves.csv (the objective metric's history per trial), tidy.csv.gz
(every trial x step x metric) and every figure as PNG (--svg adds SVG copies). The report is also logged
as artifacts (report/) of the study's parent MLflow run. A committed report (reports/ in git) keeps only
index.html, README.md, results.csv, curves.csv and the PNGs (.gitignore): the rest lives in MLflow. The
report lists the trials it shares with the other reports in its folder's parent (reports/): the same
trial key, or the same computation on a CPU.

The study is a study file, or a study's name: studies/NAME.yaml, else the study file stored with the
study's parent run in MLflow. A study that is still running or partly failed gives a report of what has
finished, with the missing trials listed. `ablate run` writes the report itself when the study ends.

  ablate report studies/quickstart.yaml
  ablate report quickstart --budget smoke --out /tmp/quickstart-report
  ablate report quickstart --tracking-uri http://mlflow:5000
"""


def _formats(args: argparse.Namespace) -> tuple[str, ...]:
    return ("png", "svg") if getattr(args, "svg", False) else ("png",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", metavar="FILE|NAME", help="study file (YAML) or study name")
    parser.add_argument("--budget", default="default", help="budget whose trials to report (default: default)")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/<study>/)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to the study's MLflow run")
    parser.add_argument("--svg", action="store_true", help="also write every figure as SVG")
    parser.add_argument("--allow-fewer", action="store_true",
                        help="report the study file's trials even when its MLflow parent run holds finished trials "
                             "the file no longer defines (a level or budget value edited since the run); without it "
                             "that is refused, so that a report is never replaced by one of fewer trials unasked")
    parser.add_argument("--from", dest="from_folder", metavar="DIR",
                        help="analyse again the results saved in a report folder (results.csv, tidy.csv.gz) "
                             "instead of reading MLflow: today's statistics on trials that are not rerun; the report "
                             "is written to --out (default: the same folder)")


def resolve_study(arg: str, budget: str, tracking_uri: str | None, workdir: str) -> Study:
    """The Study that ``arg`` names: a file, ``studies/<arg>.yaml``, or the study file stored with the
    parent run of the MLflow experiment ``arg`` (copied into ``workdir``).

    Raises:
        AblateError: none of them exists (the message lists where it looked).
    """
    from ablate.errors import AblateError
    from ablate.study import load_study

    path = Path(arg)
    if path.is_file():
        return load_study(path)
    local = Path("studies") / f"{arg}.yaml"
    if local.is_file():
        return load_study(local)
    from ablate.tracking import Tracker, read_run_file, study_runs

    tracker = Tracker(tracking_uri)
    looked = [f"no file {arg!r}", f"no {local}"]
    if "/" not in arg and not arg.endswith((".yaml", ".yml")):
        parent, _ = study_runs(tracker, arg, budget)
        if parent is not None:
            stored = parent.tags.get("ablate.study_file")
            if stored and Path(stored).is_file():
                return load_study(stored)
            text = read_run_file(tracker, parent.run_id, "study.yaml")
            if text is not None:
                copy = Path(workdir) / f"{arg}.yaml"
                copy.write_text(text, encoding="utf-8")
                return load_study(copy)
            looked.append(f"the parent run of {arg!r} at budget {budget!r} has no study.yaml")
        else:
            looked.append(f"no study {arg!r} with budget {budget!r} in MLflow {tracker.uri}")
    raise AblateError(f"cannot find the study {arg!r}: " + "; ".join(looked)
                      + "; pass the study file's path (and --tracking-uri / --budget where it ran)")


def check_store(arg: str, tracking_uri: str | None) -> None:
    """Refuse to read a local MLflow store that does not exist (opening it would create an empty one).

    Raises:
        AblateError: naming where the store should be and the fix.
    """
    from ablate.errors import AblateError
    from ablate.tracking import missing_local_store, resolve_tracking_uri

    missing = missing_local_store(resolve_tracking_uri(tracking_uri))
    if missing is not None:
        raise AblateError(f"there is no MLflow store at {missing}, so study {arg!r} has no results here; run it "
                          "first (`ablate run FILE`) or pass the --tracking-uri it ran with")


def check_out_writable(folder: Path) -> None:
    """Refuse a report folder that cannot be written (an archived study, a read-only mount) before anything
    is read or drawn, with the fix: ``--out DIR``.

    Raises:
        AblateError: one line naming the folder and the OS error.
    """
    from ablate.running.preflight import check_writable

    check_writable(folder, "the report folder", "--out", {}, "or pass --out DIR with a writable folder")


def report_parent(study_name: str, budget: str, tracking_uri: str | None) -> tuple[Tracker, str] | None:
    """The tracker and the study's parent MLflow run at ``budget`` that the report will be logged to, None
    when there is no such run; checked before the report is built, so that a read-only local MLflow store
    (an archived study, a read-only mount) is refused up front, not after the report is written.

    Raises:
        AblateError: the parent run's local artifact folder is not writable, naming it and ``--no-log``.
    """
    from urllib.parse import urlparse

    from ablate.running.preflight import check_writable
    from ablate.tracking import Tracker

    tracker = Tracker(tracking_uri)
    parent = tracker.find_parent(study_name, budget)
    if parent is None:
        return None
    uri = tracker.client.get_run(parent).info.artifact_uri
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        check_writable(Path(parsed.path or uri), "the MLflow artifact folder of the study's parent run", "MLflow's", {},
                       "or pass --no-log to write the report without logging it to MLflow")
    return tracker, parent


def upload_report(study_name: str, budget: str, tracking_uri: str | None, folder: Path) -> bool:
    """Log the report folder as artifacts (under ``report/``) of the study's parent MLflow run at
    ``budget``; False when there is no such run."""
    from ablate.tracking import log_report

    found = report_parent(study_name, budget, tracking_uri)
    if found is None:
        return False
    log_report(*found, folder)
    return True


def run(args: argparse.Namespace) -> int:
    """Load the study, build the report, upload it to the study's parent run, print where it is."""
    from ablate.report import build_report
    from ablate.tracking import log_report

    if args.from_folder:
        return rerender(args)
    with tempfile.TemporaryDirectory(prefix="ablate-report-study-") as tmp:
        from ablate.report import default_out_dir
        from ablate.study.plan import Plan

        check_store(args.study, args.tracking_uri)
        study = resolve_study(args.study, args.budget, args.tracking_uri, tmp)
        check_out_writable(Path(args.out) if args.out else default_out_dir(study.name, args.budget))
        parent = None if args.no_log else report_parent(study.name, args.budget, args.tracking_uri)
        index = build_report(Plan.of(study, args.budget), tracking_uri=args.tracking_uri, out_dir=args.out,
                             allow_fewer=args.allow_fewer, formats=_formats(args))
        if parent is not None:
            log_report(*parent, index.parent)
    print(f"report: {index}")
    print(f"markdown: {index.parent / 'README.md'}")
    return 0


def rerender(args: argparse.Namespace) -> int:
    """``--from DIR``: the report of the results a report folder holds, by today's analysis."""
    import shlex
    import sys

    from ablate.report import write_report
    from ablate.report.build import commit_text
    from ablate.report.folder import load_report_folder
    from ablate.study import load_study
    from ablate.study.plan import Plan
    from ablate.tracking import code_version

    study = load_study(args.study)
    check_out_writable(Path(args.out or args.from_folder))  # a read-only (archived) folder: --out elsewhere
    results = load_report_folder(study, args.from_folder)
    commit = commit_text(code_version())
    command = "ablate report " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 else f"ablate report {args.study}"
    results.parent["ablate.rendered_by"] = command + (f" · at commit: {commit}" if commit else "")
    index = write_report(Plan.of(study, results.budget), results, args.out or args.from_folder, formats=_formats(args))
    print(f"report: {index}")
    print(f"markdown: {index.parent / 'README.md'}")
    return 0
