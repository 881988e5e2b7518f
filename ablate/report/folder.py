"""Read the results a report folder holds back into :class:`ablate.tracking.results.Results`, so a committed
report can be analysed again by today's code without the MLflow store that produced it
(``ablate report STUDY --from reports/<study>``).

A report folder keeps everything the analysis reads: ``results.csv`` (one row per trial with its
key, arm, seed, levels and state), ``tidy.csv.gz`` (every logged step x metric), and, from this
version on, ``problems.csv.gz`` (per-problem evaluation records) and ``samples.json``. The parent
run's tags that a report prints (the command and commit that produced the trials, code versions)
are read back from the folder's ``README.md``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ablate.errors import AblateError
from ablate.states import DONE
from ablate.stats.inference import infer_study
from ablate.stats.planning import Pilot
from ablate.study.plan import TAG_TUNED
from ablate.tracking.results import Results, level_column

if TYPE_CHECKING:
    from ablate.stats.inference import StudyInference
    from ablate.study import Study

PRODUCED = re.compile(r"^produced by: `(?P<command>[^`]+)` · at commit: `(?P<commit>[0-9a-f]{7,40})(?P<dirty>[^`]*)`",
                      re.M)
#: The hash of the logged diff in a dirty commit's suffix (``ablate.report.build.commit_text``).
DIFF_SHA = re.compile(r"diff sha256 (?P<sha>[0-9a-f]+)")
VERSION_LINE = re.compile(r"^- (?P<name>[^:]+): (?P<value>.+)$")


def command_budget(argv: list[str]) -> str:
    """The budget an ``ablate run`` / ``ablate report`` command line names (``--budget B`` or
    ``--budget=B``), ``default`` when it names none."""
    for i, arg in enumerate(argv):
        if arg == "--budget" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--budget="):
            return arg.split("=", 1)[1]
    return "default"


#: The tuned values of a study with ``tune:`` in its report folder (JSON: arm -> {dotted path: value}).
TUNED_FILE = "tuned.json"


def parent_tags(readme: str) -> dict[str, str]:
    """The parent run's tags a report's README.md prints (the command and commit that produced it, its
    code versions and machine), read back as ``ablate.*`` tags."""
    tags: dict[str, str] = {}
    m = PRODUCED.search(readme)
    if m:
        tags["ablate.command"] = m["command"]
        tags["ablate.git_commit"] = m["commit"]
        tags["ablate.git_dirty"] = "true" if m["dirty"].strip() else "false"
        diff = DIFF_SHA.search(m["dirty"])
        if diff:
            tags["ablate.git_diff_sha256"] = diff["sha"]
    if "### Versions" in readme:
        block = readme.split("### Versions", 1)[1].split("###", 1)[0]
        for line in block.splitlines():
            v = VERSION_LINE.match(line.strip())
            if v and v["name"] != "git commit":
                tags[f"ablate.version.{v['name'].replace(chr(92), '')}"] = v["value"].replace("\\", "")
    return tags


def load_report_folder(study: Study, folder: str | Path) -> Results:
    """The :class:`Results` a report folder holds (see the module docstring).

    Raises:
        AblateError: the folder lacks ``results.csv`` or ``tidy.csv.gz``, or holds another study's trials.
    """
    path = Path(folder)
    missing = [n for n in ("results.csv", "tidy.csv.gz") if not (path / n).is_file()]
    if missing:
        raise AblateError(f"{path}: not a report folder with results (missing {', '.join(missing)}); pass a folder "
                          "that `ablate run` or `ablate report` wrote, e.g. reports/<study>. A committed report "
                          "carries results.csv but not tidy.csv.gz (every step of every metric): that file is in "
                          "the study's MLflow parent run (artifacts report/), or `ablate report` rewrites it from MLflow")
    factors = [f.name for f in study.factors]
    columns = {f: level_column(f) for f in factors}
    trials = pd.read_csv(path / "results.csv", dtype={"key": str, "arm": str, "run_id": str})
    for c in columns.values():
        if c not in trials:
            raise AblateError(f"{path}/results.csv has no column {c!r}: it holds another study's trials than "
                              f"{study.name} ({study.path})")
        trials[c] = trials[c].astype(str)
    trials["error"] = ""
    keep = ["key", "arm", "seed", *columns.values(), "state", "run_id", "error", "cpu", "commit"]
    trials = trials[[c for c in keep if c in trials]]
    table = pd.read_csv(path / "tidy.csv.gz", dtype={"key": str, "arm": str})
    for c in columns.values():
        if c in table:
            table[c] = table[c].astype(str)
    readme = (path / "README.md").read_text(encoding="utf-8") if (path / "README.md").is_file() else ""
    budget = str(table["budget"].iloc[0]) if "budget" in table and len(table) else "default"
    samples = {}
    if (path / "samples.json").is_file():
        samples = json.loads((path / "samples.json").read_text(encoding="utf-8"))
    parent = parent_tags(readme)
    if (path / TUNED_FILE).is_file():  # a study with tune: ran each arm at these values
        parent[TAG_TUNED] = (path / TUNED_FILE).read_text(encoding="utf-8")
    results = Results(study=study.name, budget=budget, factors=factors, columns=columns, table=table, trials=trials,
                      samples=samples, parent=parent,
                      notes=[f"analysed again from the results saved in {path.as_posix()} (the trials were not rerun)"])
    if (path / "problems.csv.gz").is_file():
        results.problems = pd.read_csv(path / "problems.csv.gz", dtype={"key": str, "arm": str})
    return results


# ------------------------------------------------------------------------- a report folder as a pilot


def read_report_pilot(study: Study, folder: str | Path) -> Pilot:
    """The finished trials of a report folder's ``results.csv`` (one row per trial, with the objective
    the report computed) as a pilot, with the report's inference on them: plans and checks from a
    committed report without its MLflow store.

    Raises:
        AblateError: no results.csv there, or it holds trials of another study or no finished trial.
    """
    done = report_trials(study, folder)
    return Pilot(None, report_inference(study, folder, done)[1], len(done))


def report_inference(study: Study, folder: str | Path,
                     done: pd.DataFrame | None = None) -> tuple[pd.DataFrame, StudyInference]:
    """The objective per trial (``key, arm, seed, <factor names>, objective``) of a report folder's finished
    trials (``done``: :func:`report_trials`, read when None) and the report's inference on them: its verdicts
    as the report computed them (:func:`ablate.report.statistics.judge`), what :func:`read_report_pilot`
    and a committed report's re-rendered claims (:mod:`ablate.report.verdicts`) read."""
    done = report_trials(study, folder) if done is None else done
    names = [f.name for f in study.factors]
    per_trial = done[["key", "arm", "seed", *names, "objective"]].reset_index(drop=True)
    # the report's own verdicts (issue 54): its positive control from its curves.csv, and a context study's
    # verdicts across contexts, as the report computed them
    from ablate.report.learning import CURVES_FILE
    from ablate.report.statistics import PARAMS_METRIC, judge, ladder_sizes

    factors = {n: n for n in names}
    curves_file = Path(folder) / CURVES_FILE
    curves = pd.read_csv(curves_file, dtype={"key": str, "arm": str}) if curves_file.is_file() else None
    sizes = {}
    if len(study.contexts) == 1 and PARAMS_METRIC in done.columns:
        sizes = ladder_sizes(study, done.groupby(study.contexts[0])[PARAMS_METRIC].first().to_dict())
    return per_trial, judge(study, per_trial, factors, infer_study(study, per_trial, factors), curves, sizes)


def report_trials(study: Study, folder: str | Path) -> pd.DataFrame:
    """The finished trials of a report folder's ``results.csv``, every column (level columns named by the
    study's factors, as text; ``seed`` an int).

    Raises:
        AblateError: no results.csv there, or it holds trials of another study or no finished trial.
    """
    path = Path(folder) / "results.csv"
    if not path.is_file():
        raise AblateError(f"--from {folder}: no results.csv there (a report folder written by `ablate report`)")
    names = [f.name for f in study.factors]
    df = pd.read_csv(path, dtype={"key": str, "arm": str, **{n: str for n in names}})
    lacking = [c for c in ("key", "arm", "seed", "state", "objective", *names) if c not in df.columns]
    if lacking:
        raise AblateError(f"{path}: no column {', '.join(lacking)}: it is not a report of study {study.name!r} "
                          f"(factors {', '.join(names)})")
    done = df[df["state"] == DONE].copy()
    if done.empty:
        raise AblateError(f"{path}: no finished trial to plan from")
    done["seed"] = done["seed"].astype(int)
    return done.reset_index(drop=True)
