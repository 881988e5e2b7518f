"""A study's results, read back from MLflow into one tidy pandas table.

:func:`load_results` finds the study's parent run at a budget (:mod:`ablate.tracking`), lists its
trial runs, and reads each finished trial's ``history.csv`` artifact (every step x metric in one
file: one download per trial, never one request per metric) and ``samples.json``. It works on a
partial study: trials that failed, still run or never started are listed in ``Results.trials`` with
their state, not an error. It works on any tracking URI the tracking module accepts (a SQLite file,
an ``http://`` MLflow server).

The tidy table (``Results.table``) has one row per trial x logged step x metric::

    study  budget  key  arm  seed  <factor columns>  step  tokens  metric  value

- ``<factor columns>``: one per factor, named like the factor and holding the trial's level name
  (see :func:`level_column` for the rare factor whose name is one of the other columns);
- ``tokens``: the trial's generated tokens so far at that step (its ``compute/tokens`` metric, the
  compute axis; carried forward over steps that did not log it);
- ``metric``: the MLflow metric name (``eval/pass@8`` is ``eval/pass_at_8``, see
  :func:`ablate.tracking.metric_name`); ``value``: finite values only (a NaN logged, e.g. the mean
  length of correct answers when none was correct, is left out).

The per-problem table (``Results.problems``) has one row per finished trial x evaluation x eval
problem, from each trial's ``eval_problems.csv`` artifact (see :mod:`ablate.tracking`)::

    key  arm  seed  <factor columns>  step  problem  correct  step_accuracy  format_ok  length  truncated  partial

``problem`` is the problem's index in the trial's eval problems, which are fixed by the task settings
(``task.name``, ``difficulty``, ``options``) and ``task.data_seed``, never by the trial seed: the same
index is the same problem in every seed and in every arm that does not change those settings (a smaller
``eval.n_problems`` evaluates a prefix), so arms can be compared problem by problem. Trials logged before the artifact existed contribute no
rows (and the table is empty, with these columns, when none has it).

Downloaded files of finished runs are cached in ``cache_dir`` (when given), keyed by run id and end
time: a report built again downloads only what changed. The cache folder ignores itself in git (a
``.gitignore`` of ``*``), so a report folder can be committed as it is.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ablate.errors import AblateError
from ablate.metrics import EVAL_PROBLEM_GLOSSARY
from ablate.states import DONE, FAILED, PENDING, RUNNING, STATES

if TYPE_CHECKING:
    from ablate.study import Study, TrialSpec
    from ablate.study.plan import Plan
    from ablate.tracking import RunRecord as Run
    from ablate.tracking import Tracker

#: Fixed columns of the tidy table (a factor column never takes one of these names).
TABLE_COLUMNS = ("study", "budget", "key", "arm", "seed", "step", "tokens", "metric", "value")
#: The metric that gives the compute axis.
TOKENS_METRIC = "compute/tokens"
#: Columns of ``Results.problems`` after ``key, arm, seed`` and the factor columns: the artifact's
#: (:data:`ablate.metrics.EVAL_PROBLEM_GLOSSARY` says what each holds).
PROBLEM_COLUMNS: tuple[str, ...] = tuple(EVAL_PROBLEM_GLOSSARY)
#: Integer columns of the per-problem table (the others are floats).
_PROBLEM_INTS = ("step", "problem", "correct", "format_ok", "length", "truncated")


def level_column(factor: str) -> str:
    """The table column of a factor's levels: the factor's name, or ``level.<name>`` when the name is
    one of the tables' own columns (:data:`TABLE_COLUMNS`, :data:`PROBLEM_COLUMNS`, ``state``,
    ``run_id``, ``error``: a factor called ``seed`` or ``length``)."""
    taken = factor in TABLE_COLUMNS or factor in PROBLEM_COLUMNS or factor in ("state", "run_id", "error")
    return f"level.{factor}" if taken else factor


def history_frame(csv_text: str) -> pd.DataFrame:
    """Parse a ``history.csv`` artifact (``step`` then one column per metric, empty = not logged)
    into the long form ``step, tokens, metric, value`` (finite values only, sorted by step).

    Raises:
        ValueError: the text has no ``step`` column.
    """
    wide = pd.read_csv(io.StringIO(csv_text), na_values=["", "nan"], keep_default_na=True)
    if "step" not in wide.columns:
        raise ValueError("history.csv has no 'step' column")
    wide = wide.sort_values("step", kind="stable").reset_index(drop=True)
    tokens = wide[TOKENS_METRIC].astype(float).ffill() if TOKENS_METRIC in wide else pd.Series(np.nan, index=wide.index)
    wide.insert(1, "tokens", tokens)
    long = wide.melt(id_vars=["step", "tokens"], var_name="metric", value_name="value")
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    long = long[np.isfinite(long["value"])]
    long["step"] = long["step"].astype(int)
    return long.sort_values(["step", "metric"], kind="stable").reset_index(drop=True)


def problems_frame(csv_text: str) -> pd.DataFrame:
    """Parse an ``eval_problems.csv`` artifact into the columns :data:`PROBLEM_COLUMNS` (integers for
    ``step, problem, length`` and the 0/1 flags, floats for the rest; a column the file lacks is NaN).

    Raises:
        ValueError: the text has no ``step`` or ``problem`` column, or an integer column has a gap.
    """
    frame = pd.read_csv(io.StringIO(csv_text), na_values=["", "nan"], keep_default_na=True)
    for c in ("step", "problem"):
        if c not in frame.columns:
            raise ValueError(f"eval_problems.csv has no {c!r} column")
    out = pd.DataFrame(index=frame.index)
    for c in PROBLEM_COLUMNS:
        col = pd.to_numeric(frame[c], errors="coerce") if c in frame.columns else pd.Series(np.nan, index=frame.index)
        if c in _PROBLEM_INTS and c in frame.columns:
            if col.isna().any():
                raise ValueError(f"eval_problems.csv: column {c!r} has an empty or non-numeric cell")
            col = col.astype(int)
        else:
            col = col.astype(float)
        out[c] = col
    return out.sort_values(["step", "problem"], kind="stable").reset_index(drop=True)


def empty_problems(level_columns: Sequence[str] = ()) -> pd.DataFrame:
    """A per-problem table with no rows (the right columns and dtypes)."""
    cols = {"key": pd.Series(dtype=object), "arm": pd.Series(dtype=object), "seed": pd.Series(dtype=int)}
    cols.update({c: pd.Series(dtype=object) for c in level_columns})
    cols.update({c: pd.Series(dtype=int if c in _PROBLEM_INTS else float) for c in PROBLEM_COLUMNS})
    return pd.DataFrame(cols)


def _with_trial(frame: pd.DataFrame, key: str, row: pd.Series, level_columns: Sequence[str],
                **leading: str) -> pd.DataFrame:
    """``frame`` with the trial's identity in front: ``<leading>, key, arm, seed, <level columns>``."""
    ids = {**leading, "key": key, "arm": row["arm"], "seed": int(row["seed"]), **{c: row[c] for c in level_columns}}
    for i, (name, value) in enumerate(ids.items()):
        frame.insert(i, name, value)
    return frame


def build_problems(frames: Mapping[str, pd.DataFrame], trials: pd.DataFrame,
                   level_columns: Sequence[str]) -> pd.DataFrame:
    """The per-problem table from the parsed ``eval_problems.csv`` of finished trials.

    Args:
        frames: trial key -> :func:`problems_frame` of its ``eval_problems.csv``.
        trials: one row per trial with ``key, arm, seed`` and the level columns.
        level_columns: the factor columns to copy from ``trials``.
    """
    by_key = trials.set_index("key")
    parts = [_with_trial(frame.copy(), key, by_key.loc[key], level_columns) for key, frame in frames.items()]
    if not parts:
        return empty_problems(level_columns)
    return pd.concat(parts, ignore_index=True)


@dataclass
class Results:
    """A study's results at one budget.

    Attributes:
        study: the study's name; budget: the budget.
        factors: factor names in file order; columns: factor name -> its column in the tables.
        table: the tidy table (see the module docstring).
        trials: one row per trial of the plan: ``key, arm, seed, <factor columns>, state, run_id,
            error``; ``state`` is one of :data:`ablate.states.STATES` (``pending``: not started).
        samples: trial key -> its sample completions (``prompt, completion, correct, reward/<c>``).
        problems: the per-problem table (see the module docstring): ``key, arm, seed, <factor
            columns>,`` then :data:`PROBLEM_COLUMNS`; empty when no finished trial logged
            ``eval_problems.csv``.
        parent: the parent run's tags (code versions, git commit), {} when there is none.
        notes: things the reader should know (runs not in the current design ...).
    """

    study: str
    budget: str
    factors: list[str]
    columns: dict[str, str]
    table: pd.DataFrame
    trials: pd.DataFrame
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: pd.DataFrame = field(default_factory=empty_problems)

    @property
    def level_columns(self) -> list[str]:
        """The factor columns, in factor order."""
        return [self.columns[f] for f in self.factors]

    @property
    def missing(self) -> pd.DataFrame:
        """The trials that are not done (failed, running, pending)."""
        return self.trials[self.trials["state"] != DONE].reset_index(drop=True)

    @property
    def metrics(self) -> list[str]:
        """Every metric name in the table, sorted."""
        return sorted(set(self.table["metric"])) if not self.table.empty else []


def empty_table(level_columns: Sequence[str] = ()) -> pd.DataFrame:
    """A tidy table with no rows (the right columns and dtypes)."""
    cols = {c: pd.Series(dtype=object) for c in ("study", "budget", "key", "arm")}
    cols["seed"] = pd.Series(dtype=int)
    cols.update({c: pd.Series(dtype=object) for c in level_columns})
    cols.update({"step": pd.Series(dtype=int), "tokens": pd.Series(dtype=float), "metric": pd.Series(dtype=object),
                 "value": pd.Series(dtype=float)})
    return pd.DataFrame(cols)


def build_table(study: str, budget: str, histories: Mapping[str, str], trials: pd.DataFrame,
                level_columns: Sequence[str]) -> pd.DataFrame:
    """The tidy table from the ``history.csv`` texts of finished trials.

    Args:
        study, budget: written into every row.
        histories: trial key -> its ``history.csv`` text.
        trials: one row per trial with ``key, arm, seed`` and the level columns.
        level_columns: the factor columns to copy from ``trials``.
    """
    by_key = trials.set_index("key")
    parts = [_with_trial(history_frame(text), key, by_key.loc[key], level_columns, study=study, budget=budget)
             for key, text in histories.items()]
    if not parts:
        return empty_table(level_columns)
    return pd.concat(parts, ignore_index=True)


def _pick_run(runs: list[Run]) -> Run:
    """Of several runs of one trial: the last FINISHED one, else the last started."""
    finished = [r for r in runs if r.status == "FINISHED"]
    pool = finished or runs
    return max(pool, key=lambda r: r.start_time or 0)


def _state(status: str) -> str:
    return {"FINISHED": DONE, "FAILED": FAILED, "KILLED": FAILED}.get(status, RUNNING)


class RunFiles:
    """Reads a trial run's files from MLflow, through a cache of finished runs' files.

    Files of finished runs are cached in ``cache_dir`` keyed by run id and end time; a finished run
    without an optional file never gets it (a retry ends at another end time), so its absence is
    cached too, as an empty ``<file>.absent`` marker (``remember_absent``).
    """

    def __init__(self, tracker: Tracker, cache_dir: str | Path | None) -> None:
        self.tracker = tracker
        self.cache = Path(cache_dir) if cache_dir is not None else None

    def read(self, run: Run, name: str, *, remember_absent: bool = False) -> str | None:
        """The text of file ``name`` of ``run``, None when it has none."""
        from ablate.tracking import read_run_file

        path = None
        if self.cache is not None and run.status == "FINISHED":
            path = self.cache / f"{run.run_id}.{run.end_time or 0}.{name}"
            if path.exists():
                return path.read_text(encoding="utf-8")
            if remember_absent and path.with_name(path.name + ".absent").exists():
                return None
        text = read_run_file(self.tracker, run.run_id, name)
        if path is not None and (text is not None or remember_absent):
            self._keep(path, text)
        return text

    @staticmethod
    def _keep(path: Path, text: str | None) -> None:
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / ".gitignore").write_text("# ablate's download cache\n*\n", encoding="utf-8")
        if text is None:
            path.with_name(path.name + ".absent").write_text("", encoding="utf-8")
        else:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)


@dataclass
class _Collected:
    """What :func:`load_results` read from the finished runs."""

    histories: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    machines: list[dict[str, str]] = field(default_factory=list)


#: The tags of a trial run that name the processor it was started on (:func:`ablate.tracking.machine_tags`,
#: and :func:`ablate.tracking.gpu_tags` for a trial on a GPU).
MACHINE_TAGS = ("ablate.machine.cpu", "ablate.machine.cpu_capability", "ablate.machine.gpu")


def processor_name(tags: Mapping[str, str]) -> str:
    """What a trial's numbers were computed on, from its run's tags: the GPU with its host processor when it
    ran on one (``"NVIDIA H200 (GPU; host AMD EPYC)"``), else the processor with the vector instruction set
    torch's kernels used when the run recorded it (``"AMD EPYC (AVX512)"``); ``""`` when the tags do not say.

    The instruction set is part of the name because one model name covers machines that round differently:
    studies/engines.yaml's 176 trials, rerun by the same code on "AMD EPYC" with AVX512, started from a warm
    start at 0.41 step-0 accuracy where the earlier run's (its "AMD EPYC" unqualified) started at 0.22, the
    SFT's stop at the first evaluation >= 0.2 landing on another step."""
    cpu, cap, gpu = (tags.get(k, "") for k in MACHINE_TAGS)
    if gpu:
        return f"{gpu} (GPU; host {cpu})" if cpu else f"{gpu} (GPU)"
    return f"{cpu} ({cap})" if cpu and cap else cpu


def processor_note(tags: Iterable[Mapping[str, str]]) -> str | None:
    """The report's note when finished trials ran on more than one processor model, else None.

    Args:
        tags: the tags of each finished trial's run. Runs without ``ablate.machine.cpu`` (logged before
            the tag existed) are not counted.
    """
    counts = Counter(" / ".join(t[k] for k in MACHINE_TAGS if k in t) for t in tags if MACHINE_TAGS[0] in t)
    if len(counts) < 2:
        return None
    parts = "; ".join(f"{name}: {n} trial{'s' if n != 1 else ''}" for name, n in sorted(counts.items()))
    return (f"the finished trials ran on {len(counts)} processor models ({parts}). Float rounding differs between "
            "processor models, so a trial's result depends on the processor as well as on its key: rerunning it on "
            "another model does not reproduce it, and a paired difference between two arms that ran on different "
            "models includes that difference (README, Findings: the same keys reached other accuracies on an Intel "
            "Xeon and an AMD EPYC)")


def _read_finished(key: str, run: Run, files: RunFiles, out: _Collected) -> str | None:
    """Read a finished trial's history, samples and per-problem records into ``out``; an error text
    when its history is missing (the trial then counts as failed)."""
    from ablate.tracking import EVAL_PROBLEMS_FILE

    text = files.read(run, "history.csv")
    if text is None:
        return "finished, but its history.csv artifact is missing"
    out.histories[key] = text
    sample_text = files.read(run, "samples.json")
    if sample_text:
        try:
            out.samples[key] = list(json.loads(sample_text))
        except (ValueError, TypeError):
            out.notes.append(f"samples.json of trial {key} is not valid JSON; its samples are left out")
    problems_text = files.read(run, EVAL_PROBLEMS_FILE, remember_absent=True)
    if problems_text is not None:
        try:
            out.problems[key] = problems_frame(problems_text)
        except (ValueError, pd.errors.ParserError) as exc:
            out.notes.append(f"{EVAL_PROBLEMS_FILE} of trial {key} cannot be read ({exc}); its problems are left out")
    return None


def _trial_row(spec: TrialSpec, runs: list[Run] | None, columns: Mapping[str, str], files: RunFiles,
               out: _Collected) -> dict[str, Any]:
    """One row of ``Results.trials``: the trial's identity and the state of its latest run."""
    from ablate.tracking import TAG_ERROR

    row = {"key": spec.key, "arm": spec.arm, "seed": spec.seed,
           **{columns[f]: spec.levels[f] for f in columns}, "state": PENDING, "run_id": "", "error": "",
           "cpu": "", "commit": ""}
    if not runs:
        return row
    run = _pick_run(runs)
    row["run_id"] = run.run_id
    # the processor and the code of the trial's run: float rounding, so a result, can depend on either
    row["cpu"] = processor_name(run.tags)
    commit = run.tags.get("ablate.git_commit", "")
    row["commit"] = commit + ("-dirty" if commit and run.tags.get("ablate.git_dirty") == "true" else "")
    row["state"] = _state(run.status)
    err = (run.tags.get(TAG_ERROR) or "").strip().splitlines()
    row["error"] = err[-1] if err else ""
    if row["state"] == DONE:
        missing = _read_finished(spec.key, run, files, out)
        if missing is not None:
            row["state"], row["error"] = FAILED, missing
        else:
            out.machines.append({k: run.tags[k] for k in MACHINE_TAGS if k in run.tags})
    return row


def load_results(plan: Plan, *, tracking_uri: str | None = None, cache_dir: str | Path | None = None,
                 allow_fewer: bool = False) -> Results:
    """Read a study's trials at the plan's budget from MLflow into :class:`Results`.

    Args:
        plan: the study's plan (:class:`ablate.study.plan.Plan`): which trials should exist. The plan that
            ran is rebuilt from the parent run's tags (:meth:`~ablate.study.plan.Plan.recorded`: an adaptive
            study's added seeds, a tuned study's tuned values, which are part of its trial keys).
        tracking_uri: the MLflow tracking URI (default: as :func:`ablate.tracking.resolve_tracking_uri`).
        cache_dir: a folder for downloaded files of finished runs (None: no cache).
        allow_fewer: read the plan's trials even when finished trial runs under the parent run are not
            trials of the plan (the study file was edited after its run: a changed level or budget value);
            they are left out, with a note. Without it that is refused.

    Returns:
        Every trial of the plan with its state; the tidy table of the finished ones.

    Raises:
        EditedStudyError: finished trial runs of the parent are not in the plan (without ``allow_fewer``);
            the message names their arms and the fixes.
    """
    from ablate.tracking import EVAL_PROBLEMS_FILE, TAG_KEY, Tracker, study_runs

    study, budget = plan.study, plan.budget
    tracker = Tracker(tracking_uri)
    parent, runs = study_runs(tracker, study.name, budget)
    if parent is not None:
        plan = plan.recorded(parent.tags)
    columns = {f.name: level_column(f.name) for f in study.factors}
    by_key: dict[str, list[Run]] = {}
    for r in runs:
        by_key.setdefault(r.tags.get(TAG_KEY, ""), []).append(r)
    out = _Collected()
    extra = sorted(k for k in by_key if k not in plan.by_key)
    finished_extra = [k for k in extra if any(r.status == "FINISHED" for r in by_key[k])]
    if finished_extra and not allow_fewer:
        raise _design_changed(study, budget, plan, finished_extra, by_key, len(runs))
    if extra:
        out.notes.append(f"{len(extra)} trial run(s) under the parent run are not in the current design (the study "
                         "file changed?) and are left out")
    files = RunFiles(tracker, cache_dir)
    rows = [_trial_row(spec, by_key.get(spec.key), columns, files, out) for spec in plan.specs]
    trials = pd.DataFrame(rows, columns=["key", "arm", "seed", *columns.values(), "state", "run_id", "error", "cpu", "commit"])
    try:
        table = build_table(study.name, budget, out.histories, trials, list(columns.values()))
    except ValueError as exc:
        raise AblateError(f"cannot read the results of study {study.name!r} from {tracker.uri}: {exc}") from None
    if out.problems and len(out.problems) < len(out.histories):
        out.notes.append(f"{len(out.histories) - len(out.problems)} of {len(out.histories)} finished trials have no "
                         f"readable {EVAL_PROBLEMS_FILE} (logged before it existed?): Results.problems holds the "
                         "others only")
    problems = build_problems(out.problems, trials, list(columns.values()))
    note = processor_note(out.machines)
    if note:
        out.notes.append(note)
    return Results(study=study.name, budget=budget, factors=list(columns), columns=columns, table=table,
                   trials=trials, samples=out.samples, parent=dict(parent.tags) if parent is not None else {},
                   notes=out.notes, problems=problems)


class EditedStudyError(AblateError):
    """A study file no longer defines trials its MLflow parent run finished (edited after its run)."""


def _design_changed(study: Study, budget: str, plan: Plan, extra: list[str], by_key: Mapping[str, list[Run]],
                    n_runs: int) -> AblateError:
    """The refusal of a report from a study file whose design differs from the one that ran."""
    from ablate.tracking import TAG_ARM

    arms = sorted({r.tags.get(TAG_ARM, "?") for k in extra for r in by_key[k]})
    shown = ", ".join(arms[:4]) + (f" and {len(arms) - 4} more" if len(arms) > 4 else "")
    kept = sum(1 for k in by_key if k in plan.by_key)
    return EditedStudyError(
        f"{study.path}: the study file's design at budget {budget!r} differs from the one that ran: {len(extra)} "
        f"finished trial(s) under its MLflow parent run (arms {shown}) are not trials of this file (a level or a "
        f"budget value changed since), and a report now would hold {kept} of the {n_runs} trial runs. Restore the "
        "file as it ran (its parent run keeps it as study.yaml); add levels or seeds with `ablate run --extend`; "
        "give a new study a new `name:`; or pass --allow-fewer to report this file's trials alone")


def count_states(trials: pd.DataFrame) -> dict[str, int]:
    """Trials per state, every state of :data:`STATES` present."""
    counts = trials["state"].value_counts().to_dict() if not trials.empty else {}
    return {s: int(counts.get(s, 0)) for s in STATES}

