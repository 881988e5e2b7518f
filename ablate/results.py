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

Downloaded files of finished runs are cached in ``cache_dir`` (when given), keyed by run id and end
time: a report built again downloads only what changed. The cache folder ignores itself in git (a
``.gitignore`` of ``*``), so a report folder can be committed as it is.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate.errors import AblateError

#: Fixed columns of the tidy table (a factor column never takes one of these names).
TABLE_COLUMNS = ("study", "budget", "key", "arm", "seed", "step", "tokens", "metric", "value")
#: The metric that gives the compute axis.
TOKENS_METRIC = "compute/tokens"
#: Trial states in ``Results.trials``.
STATES = ("done", "failed", "running", "not started")


def level_column(factor: str) -> str:
    """The table column of a factor's levels: the factor's name, or ``level.<name>`` when the name is
    one of :data:`TABLE_COLUMNS` (a factor called ``seed``)."""
    return f"level.{factor}" if factor in TABLE_COLUMNS or factor == "state" else factor


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


@dataclass
class Results:
    """A study's results at one budget.

    Attributes:
        study: the study's name; budget: the budget.
        factors: factor names in file order; columns: factor name -> its column in the tables.
        table: the tidy table (see the module docstring).
        trials: one row per trial of the design: ``key, arm, seed, <factor columns>, state, run_id,
            error``; ``state`` is one of :data:`STATES`.
        samples: trial key -> its sample completions (``prompt, completion, correct, reward/<c>``).
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

    @property
    def level_columns(self) -> list[str]:
        """The factor columns, in factor order."""
        return [self.columns[f] for f in self.factors]

    @property
    def missing(self) -> pd.DataFrame:
        """The trials that are not done (failed, running, not started)."""
        return self.trials[self.trials["state"] != "done"].reset_index(drop=True)

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
    parts = []
    for key, text in histories.items():
        long = history_frame(text)
        row = by_key.loc[key]
        long.insert(0, "study", study)
        long.insert(1, "budget", budget)
        long.insert(2, "key", key)
        long.insert(3, "arm", row["arm"])
        long.insert(4, "seed", int(row["seed"]))
        for i, c in enumerate(level_columns):
            long.insert(5 + i, c, row[c])
        parts.append(long)
    if not parts:
        return empty_table(level_columns)
    return pd.concat(parts, ignore_index=True)


def _pick_run(runs: list[Any]) -> Any:
    """Of several runs of one trial: the last FINISHED one, else the last started."""
    finished = [r for r in runs if r.status == "FINISHED"]
    pool = finished or runs
    return max(pool, key=lambda r: r.start_time or 0)


def _state(status: str) -> str:
    return {"FINISHED": "done", "FAILED": "failed", "KILLED": "failed"}.get(status, "running")


def load_results(study: Any, budget: str = "default", *, tracking_uri: str | None = None,
                 cache_dir: str | Path | None = None) -> Results:
    """Read a study's trials at ``budget`` from MLflow into :class:`Results`.

    Args:
        study: the loaded :class:`ablate.study.Study` (its design says which trials should exist).
        budget: the budget whose runs to read.
        tracking_uri: the MLflow tracking URI (default: as :func:`ablate.tracking.resolve_tracking_uri`).
        cache_dir: a folder for downloaded files of finished runs (None: no cache).

    Returns:
        Every trial of the design with its state; the tidy table of the finished ones.

    Raises:
        AblateError: ``budget`` is not a budget of the study.
    """
    from ablate.tracking import TAG_ERROR, TAG_KEY, Tracker, read_run_file, study_runs

    study.check_budget(budget)
    tracker = Tracker(tracking_uri)
    parent, runs = study_runs(tracker, study.name, budget)
    factors = [f.name for f in study.factors]
    columns = {f: level_column(f) for f in factors}
    specs = study.expand(budget)
    by_key: dict[str, list[Any]] = {}
    for r in runs:
        by_key.setdefault(r.tags.get(TAG_KEY, ""), []).append(r)
    expected = {s.key for s in specs}
    notes = []
    extra = sorted(k for k in by_key if k not in expected)
    if extra:
        notes.append(f"{len(extra)} trial run(s) under the parent run are not in the current design (the study "
                     "file changed?) and are left out")
    cache = Path(cache_dir) if cache_dir is not None else None

    def fetch(run: Any, name: str) -> str | None:
        path = None
        if cache is not None and run.status == "FINISHED":
            path = cache / f"{run.run_id}.{run.end_time or 0}.{name}"
            if path.exists():
                return path.read_text(encoding="utf-8")
        text = read_run_file(tracker, run.run_id, name)
        if text is not None and path is not None:
            if not path.parent.is_dir():
                path.parent.mkdir(parents=True, exist_ok=True)
                (path.parent / ".gitignore").write_text("# ablate's download cache\n*\n", encoding="utf-8")
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        return text

    rows, histories, samples = [], {}, {}
    for spec in specs:
        row = {"key": spec.key, "arm": spec.arm, "seed": spec.seed,
               **{columns[f]: spec.levels[f] for f in factors}, "state": "not started", "run_id": "", "error": ""}
        if spec.key in by_key:
            run = _pick_run(by_key[spec.key])
            row["run_id"] = run.run_id
            row["state"] = _state(run.status)
            err = (run.tags.get(TAG_ERROR) or "").strip().splitlines()
            row["error"] = err[-1] if err else ""
            if row["state"] == "done":
                text = fetch(run, "history.csv")
                if text is None:
                    row["state"], row["error"] = "failed", "finished, but its history.csv artifact is missing"
                else:
                    histories[spec.key] = text
                    sample_text = fetch(run, "samples.json")
                    if sample_text:
                        try:
                            samples[spec.key] = list(json.loads(sample_text))
                        except (ValueError, TypeError):
                            notes.append(f"samples.json of trial {spec.key} is not valid JSON; its samples are left out")
        rows.append(row)
    trials = pd.DataFrame(rows, columns=["key", "arm", "seed", *columns.values(), "state", "run_id", "error"])
    try:
        table = build_table(study.name, budget, histories, trials, list(columns.values()))
    except ValueError as exc:
        raise AblateError(f"cannot read the results of study {study.name!r} from {tracker.uri}: {exc}") from None
    return Results(study=study.name, budget=budget, factors=factors, columns=columns, table=table, trials=trials,
                   samples=samples, parent=dict(parent.tags) if parent is not None else {}, notes=notes)


def count_states(trials: pd.DataFrame) -> dict[str, int]:
    """Trials per state, every state of :data:`STATES` present."""
    counts = trials["state"].value_counts().to_dict() if not trials.empty else {}
    return {s: int(counts.get(s, 0)) for s in STATES}

