"""ablate from Python: validate, plan, run and load studies.

The command line's ``validate``, ``plan --from``, ``run`` and ``report`` as functions that return objects and
raise one typed error instead of printing and exiting::

    import ablate

    study = ablate.validate("studies/quickstart.yaml")              # a Study, or ablate.StudyError
    res = ablate.run(study, budget="smoke", workers=1)               # trains, logs to MLflow, writes the report
    res.claims                                                       # one row per claim: estimate, interval, verdict
    ablate.load("reports/loss_normalization").trials                 # a committed report's trials

A study is given as a path, a :class:`~ablate.study.Study`, or a mapping with the keys of a study file
(it is written as YAML to a temporary file and read exactly as a file is: every problem with its key).
Every user error is an :class:`AblateError` (a bad study file: :class:`StudyError`, whose ``problems``
list every problem found, each with its file, line and key); nothing is created when one is raised
before a run starts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import AblateError
from ablate.study.checker import StudyError

if TYPE_CHECKING:
    import pandas as pd

    from ablate.stats.planning import SeedPlan
    from ablate.study import Study

__all__ = ["AblateError", "StudyError", "StudyResults", "load", "plan_seeds", "run", "validate"]

@dataclass(frozen=True)
class StudyResults:
    """A study's results at one budget, as its report reads them.

    Attributes:
        name, budget: the study and the budget.
        trials: one row per trial (results.csv): ``key, arm, seed``, one column per factor (its level),
            ``state``, ``objective``, ``fingerprint`` and each trial's last logged value of every metric.
        curves: the objective metric per trial and step (curves.csv): ``key, arm, seed``, one column per factor
            (its level, as in ``trials``), ``step, value``.
        claims: one row per claim of the report's family (:meth:`ablate.stats.inference.Family.table`): ``claim,
            primary, n, estimate, ci_low, ci_high, p, p_holm, verdict, method, seeds_needed`` (estimate and
            interval in the objective's units, e.g. a fraction for eval/accuracy; ``method`` the interval's:
            paired t or the linear model; ``seeds_needed`` for 80% power at ``min_effect``). In a study with
            ``contexts:`` each contrast's claim is its verdict across contexts: the pooled estimate, interval
            and p, ``contexts`` the number pooled (NaN otherwise), ``method`` the random-effects pooling.
        contexts: a study with ``contexts:``: one row per contrast and context, then the contrast's
            ``pooled`` row and its ``new context`` row (the prediction interval): ``claim, row, seeds,
            estimate, ci_low, ci_high, verdict`` (objective units; the verdict on the pooled row). Empty
            otherwise.
        figures: figure name -> its PNG in the report folder.
        folder: the report folder (None when nothing was written).
        study: the loaded study.
    """

    name: str
    budget: str
    trials: pd.DataFrame
    curves: pd.DataFrame
    claims: pd.DataFrame
    figures: dict[str, Path] = field(default_factory=dict)
    folder: Path | None = None
    study: Study | None = None
    contexts: pd.DataFrame = field(default_factory=lambda: _empty_frame())

    def __repr__(self) -> str:
        done = int((self.trials["state"] == "done").sum()) if "state" in self.trials else len(self.trials)
        return (f"StudyResults({self.name!r}, budget={self.budget!r}, trials={done} done of {len(self.trials)}, "
                f"claims={len(self.claims)}, folder={str(self.folder) if self.folder else None!r})")


def validate(study: str | Path | Study | Mapping[str, Any]) -> Study:
    """Read and check a study (every key of every arm at every budget), creating nothing (a mapping is
    checked in a temporary file, removed before this returns: the study's ``path`` is then gone).

    Raises:
        StudyError: every problem found, each with its file, line and key.
    """
    from ablate.study import Study, load_study

    if isinstance(study, Study):
        return study
    if isinstance(study, Mapping):
        return _from_mapping(study)
    return load_study(study)


def _from_mapping(doc: Mapping[str, Any], keep_in: Path | None = None) -> Study:
    """A study given as a mapping, written as YAML and read as a file is, in a temporary folder that is
    removed before this returns; with ``keep_in``, a valid study's file is kept there as ``<name>.yaml``
    (a run's workers read it). A relative ``plugins:`` path is made absolute (from the working directory).

    Raises:
        StudyError: the study is invalid; AblateError: a value YAML cannot write (nothing is left behind).
    """
    import yaml

    from ablate.study import load_study

    data = dict(doc)
    if isinstance(data.get("plugins"), list):
        data["plugins"] = [str(Path(p).resolve()) if isinstance(p, str) and p.endswith(".py") else p
                           for p in data["plugins"]]
    name = str(data.get("name", "study"))
    stem = name if name.replace("_", "").replace("-", "").isalnum() else "study"
    folder = Path(tempfile.mkdtemp(prefix="ablate-study-"))
    try:
        try:
            text = yaml.safe_dump(data, sort_keys=False)
        except yaml.YAMLError as exc:
            raise AblateError(f"the study mapping holds a value YAML cannot write ({exc}); give plain Python "
                              "values (str, int, float, bool, list, dict)") from None
        path = folder / f"{stem}.yaml"
        path.write_text(text, encoding="utf-8")
        study = load_study(path)
        if keep_in is None:
            return study
        keep_in.mkdir(parents=True, exist_ok=True)
        kept = keep_in / f"{stem}.yaml"
        kept.write_text(text, encoding="utf-8")
        return load_study(kept)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def plan_seeds(study: str | Path | Study | Mapping[str, Any], *, budget: str = "default",
               report: str | Path | None = None) -> SeedPlan:
    """The seeds per arm the study's primary contrasts (every contrast when none is primary) need for 80%
    power at its ``min_effect`` at the report's Holm level (``ablate plan --from``), from the finished trials of
    a report folder (``report``, default the budget's report folder, ``reports/<study>/`` by default).

    Raises:
        AblateError: the report folder holds no finished trial of the study.
    """
    from ablate.paths import report_dir_for
    from ablate.report.folder import read_report_pilot
    from ablate.stats import planning

    s = validate(study)
    folder = Path(report) if report is not None else report_dir_for(s.name, budget)
    pilot = read_report_pilot(s, folder)
    verdicts = {c.name: c.verdict for c in pilot.inference.family.claims if c.contrast is not None}
    return planning.plan_seeds(pilot.inference.contrasts, min_effect=s.min_effect,
                      family_size=len(pilot.inference.family.claims), verdicts=verdicts)


def run(study: str | Path | Study | Mapping[str, Any], *, budget: str = "default", workers: int = 1,
        threads: int = 0, tracking_uri: str | None = None, runs: str = "runs", out: str | Path | None = None,
        progress: bool = False, extend: bool = False) -> StudyResults:
    """Run every trial of a study at ``budget`` (resumable: finished trials are skipped), log them to
    MLflow, write the report and return its results: ``ablate run`` from Python.

    Args:
        study: a study file's path, a loaded study, or a mapping with a study file's keys (kept, once valid,
            as ``<runs>/<name>/<name>.yaml``: the workers and the report read it).
        budget, workers, threads, tracking_uri, runs, extend: as ``ablate run``'s options.
        out: the report folder (default ``reports/<study>/``, ``reports/<study>-<budget>/`` at another budget).
        progress: show the progress display on stderr (default off).

    Raises:
        StudyError: the study file is invalid (nothing is created).
        AblateError: a bad option, or a trial failed / is still pending (its message names ``ablate status``).
    """
    from ablate.commands.run import prepare_environment

    prepare_environment()
    from ablate.report import build_report
    from ablate.running.runner import record_command, run_study
    from ablate.running.session import RunOptions, make_settings

    s = _from_mapping(study, Path(runs) / str(study.get("name", "study"))) if isinstance(study, Mapping) else \
        validate(study)
    settings = make_settings(s, budget, RunOptions(tracking_uri=tracking_uri, runs=runs, threads=threads, workers=workers))
    result = run_study(s, settings, workers=workers, extend=extend, progress=progress)
    record_command(result, ["run", str(s.path), "--budget", budget, "--workers", str(workers)])  # the provenance
    c = result.counts
    if result.unsent:
        raise AblateError(f"{len(result.unsent)} finished trial(s) could not reach MLflow at {result.tracking_uri} "
                          f"({result.tracking_error}); run again when it answers")
    if c["failed"] or c["pending"] or c["running"]:
        raise AblateError(f"study {s.name} ({budget}): {c['failed']} failed, {c['pending']} pending, {c['running']} "
                          f"running; see `ablate status {s.path} --budget {budget}` and run again to resume")
    index = build_report(result.plan, tracking_uri=result.tracking_uri, out_dir=out)
    return _read_folder(index.parent, s, budget)


def load(source: str | Path, *, budget: str = "default", tracking_uri: str | None = None,
         study: str | Path | Study | None = None, out: str | Path | None = None) -> StudyResults:
    """The results of a report folder (its results.csv, curves.csv and figures, its claims recomputed by
    today's statistics as ``ablate plan --from`` does; the study from its README's provenance line, or
    ``study``), or of a study that ran here (a study file or name: its trials read from MLflow at
    ``budget``, and its report written first, to ``out`` or the budget's report folder, as ``ablate
    report`` does).

    Raises:
        AblateError: no report folder, study file or MLflow store / study by that name.
    """
    path = Path(source)
    if path.is_dir():
        return _read_folder(path, validate(study) if study is not None else None, budget if study else None)
    from ablate.commands.report import check_store, resolve_study
    from ablate.report import build_report
    from ablate.study.plan import Plan

    check_store(str(source), tracking_uri)  # reading must not create an empty MLflow store
    with tempfile.TemporaryDirectory() as tmp:
        s = resolve_study(str(source), budget, tracking_uri, tmp)
        index = build_report(Plan.of(s, budget), tracking_uri=tracking_uri, out_dir=out)
    return _read_folder(index.parent, s, budget)


def _read_folder(folder: Path, study: Study | None, budget: str | None) -> StudyResults:
    """A report folder's results; the study and budget from its provenance line when not given."""
    import pandas as pd

    from ablate.report.folder import read_report_pilot
    from ablate.report.shared import committed_report

    if not (folder / "results.csv").is_file():
        raise AblateError(f"{folder}: no results.csv there: not a report folder (`ablate report` writes one)")
    if study is None or budget is None:
        rep = committed_report(folder)
        if rep is None:
            raise AblateError(f"{folder}/README.md: no 'produced by: `ablate run FILE ...`' line naming a study file "
                              "that still validates; pass it: ablate.load(folder, study=FILE)")
        study, budget = rep.plan.study, rep.plan.budget
    trials = pd.read_csv(folder / "results.csv", dtype={"key": str, "arm": str})
    curves_file = folder / "curves.csv"
    curves = pd.read_csv(curves_file, dtype={"key": str, "arm": str}) if curves_file.is_file() else pd.DataFrame()
    curves = with_factor_columns(curves, trials, [f.name for f in study.factors])
    inference = read_report_pilot(study, folder).inference
    figures = {p.stem: p for p in sorted(folder.glob("*.png"))}
    return StudyResults(study.name, budget, trials, curves, inference.family.table(), figures, folder, study,
                        context_table(inference.across))


def _empty_frame() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame()


def context_table(across: Sequence[Any]) -> pd.DataFrame:
    """:attr:`StudyResults.contexts` from a study's verdicts across contexts
    (:class:`ablate.report.statistics.AcrossContexts`)."""
    import pandas as pd

    cols = ["claim", "row", "seeds", "estimate", "ci_low", "ci_high", "verdict"]
    rows = []
    for a in across:
        for r in a.contexts.itertuples():
            rows.append({"claim": a.claim, "row": r.context, "seeds": int(r.n), "estimate": r.estimate,
                         "ci_low": r.ci_low, "ci_high": r.ci_high, "verdict": ""})
        p = a.pooled
        nan = float("nan")
        rows.append({"claim": a.claim, "row": "pooled", "seeds": int(a.contexts["n"].sum()),
                     "estimate": p.estimate if p else nan, "ci_low": p.ci_low if p else nan,
                     "ci_high": p.ci_high if p else nan, "verdict": a.verdict})
        rows.append({"claim": a.claim, "row": "new context", "seeds": 0, "estimate": nan,
                     "ci_low": p.pi_low if p else nan, "ci_high": p.pi_high if p else nan, "verdict": ""})
    return pd.DataFrame(rows, columns=cols)


def with_factor_columns(curves: pd.DataFrame, trials: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """``curves`` with each factor's level of its trial (from ``trials``, by key) after ``key, arm, seed``
    (curves.csv keeps the objective's history only; the levels are results.csv's)."""
    columns = [f for f in factors if f in trials.columns and f not in curves.columns]
    if curves.empty or "key" not in curves.columns or not columns:
        return curves
    levels = trials.drop_duplicates("key").set_index("key")[columns]
    out = curves.join(levels, on="key")
    front = [c for c in ("key", "arm", "seed") if c in out.columns]
    return out[front + columns + [c for c in curves.columns if c not in front]]
