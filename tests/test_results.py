"""Results read back from a real MLflow SQLite store written through ablate.tracking: the tidy table
from history.csv artifacts, the per-problem table from eval_problems.csv artifacts of real tiny
trials, trial states of a partial study, the download cache, the report logged to the parent run, and
`ablate report` finding a study by file or by name."""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
import servers
import torch
import yaml
from conftest import TINY_TRIAL
from mlflow import MlflowClient

from ablate.cli import main
from ablate.commands.report import resolve_study
from ablate.errors import AblateError
from ablate.report import build_report
from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import (
    EVAL_PROBLEM_COLUMNS,
    Tracker,
    TrialIdentity,
    eval_problems_csv,
    gpu_tags,
    history_csv,
)
from ablate.tracking.results import (
    PROBLEM_COLUMNS,
    count_states,
    history_frame,
    level_column,
    load_results,
    problems_frame,
    processor_name,
    processor_note,
)
from ablate.train import run_trial

STUDY = """\
name: res
description: Results test study.
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
  step: {path: loss.clip_high, values: [0.2, 0.28]}   # a factor named like a column of the table
seeds: 2
objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 1}
"""


def history(offset: float) -> list[tuple[int, dict[str, float]]]:
    """Step 0: the start eval; step 1: a training step (a NaN logged); step 2: training + eval, and a
    step 3 without compute/tokens (carried forward)."""
    return [
        (0, {"eval/accuracy": 0.25 + offset, "compute/tokens": 0.0}),
        (1, {"reward/total": 0.5, "response/length_correct": math.nan, "compute/tokens": 100.0}),
        (2, {"eval/accuracy": 0.5 + offset, "eval/pass@4": 0.75, "compute/tokens": 210.0}),
        (3, {"reward/total": 0.75}),
    ]


def test_history_frame_is_long_finite_and_carries_tokens():
    long = history_frame(history_csv(history(0.0)))
    rows = [tuple(r) for r in long[["step", "tokens", "metric", "value"]].itertuples(index=False)]
    assert rows == [
        (0, 0.0, "compute/tokens", 0.0), (0, 0.0, "eval/accuracy", 0.25),
        (1, 100.0, "compute/tokens", 100.0), (1, 100.0, "reward/total", 0.5),
        (2, 210.0, "compute/tokens", 210.0), (2, 210.0, "eval/accuracy", 0.5), (2, 210.0, "eval/pass_at_4", 0.75),
        (3, 210.0, "reward/total", 0.75),
    ]
    with pytest.raises(ValueError, match="step"):
        history_frame("a,b\n1,2\n")


def test_level_column_avoids_the_table_columns():
    assert level_column("loss_norm") == "loss_norm"
    assert level_column("step") == "level.step" and level_column("seed") == "level.seed"
    assert level_column("length") == "level.length" and level_column("problem") == "level.problem"


def test_problems_frame_types_and_errors():
    assert PROBLEM_COLUMNS == EVAL_PROBLEM_COLUMNS
    rows = [{"step": 2, "problem": 1, "correct": 1, "step_accuracy": 1.0, "format_ok": 1, "length": 9, "truncated": 0,
             "partial": 1.0},
            {"step": 0, "problem": 0, "correct": 0, "step_accuracy": 0.5, "format_ok": 0, "length": 16, "truncated": 1,
             "partial": float("nan")}]
    frame = problems_frame(eval_problems_csv(rows))
    assert list(frame.columns) == list(PROBLEM_COLUMNS)
    assert frame[["step", "problem", "correct", "length", "truncated"]].values.tolist() == [[0, 0, 0, 16, 1],
                                                                                         [2, 1, 1, 9, 0]]
    assert str(frame["correct"].dtype).startswith("int") and frame["step_accuracy"].tolist() == [0.5, 1.0]
    assert math.isnan(frame["partial"][0])
    # a file of an older layout without a column still parses (the column is NaN); a broken one does not
    assert problems_frame("step,problem,correct\n0,3,1\n")["length"].isna().all()
    with pytest.raises(ValueError, match="'problem'"):
        problems_frame("step,correct\n0,1\n")
    with pytest.raises(ValueError, match="'correct'"):
        problems_frame("step,problem,correct\n0,3,\n")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A study file and an MLflow store holding a partial run of it: 5 trials done, 1 failed, 1 still
    running, 1 never started."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "res.yaml"
    path.write_text(STUDY)
    study = load_study(path)
    uri = servers.fresh_mlflow_db(tmp_path)
    tracker = Tracker(uri)
    parent = tracker.parent_run(study, "default", storage="test", design={"arms": len(study.arms)})
    specs = Plan.of(study, "default").specs
    assert len(specs) == 8
    runs = {}
    for i, spec in enumerate(specs[:7]):
        logger = tracker.start_trial(parent, TrialIdentity(study.name, spec.key, spec.arm, spec.seed, "default",
                                                             spec.levels, spec.config.to_flat_dict()))
        h = history(0.01 * i)
        for step, metrics in h[: 2 if i == 6 else None]:
            logger(metrics, step)
        logger.close()
        runs[spec.key] = logger.run_id
        if i < 5:
            tracker.finish_trial(logger.run_id, config_yaml=spec.config.to_yaml(), history=h,
                                 samples=[{"prompt": "2+2=", "completion": f"<b>{i}</b>", "correct": i % 2 == 0,
                                           "reward/final_answer": float(i % 2 == 0)}],
                                 result={"key": spec.key}, objective=h[2][1]["eval/accuracy"])
        elif i == 5:
            tracker.fail_trial(logger.run_id, "Traceback (most recent call last):\n  ...\nNonFiniteError: NaN loss at step 2")
    return {"study": study, "uri": uri, "specs": specs, "runs": runs, "parent": parent, "tmp": tmp_path}


def test_load_results_of_a_partial_study(store):
    study, specs = store["study"], store["specs"]
    res = load_results(Plan.of(study, "default"), tracking_uri=store["uri"])
    assert res.factors == ["loss_norm", "step"] and res.level_columns == ["loss_norm", "level.step"]
    assert count_states(res.trials) == {"done": 5, "failed": 1, "running": 1, "pending": 1}
    by_key = res.trials.set_index("key")
    assert by_key.loc[specs[5].key, "error"] == "NonFiniteError: NaN loss at step 2"
    assert by_key.loc[specs[7].key, "run_id"] == "" and by_key.loc[specs[0].key, "run_id"] == store["runs"][specs[0].key]
    assert list(res.missing["key"]) == [s.key for s in specs[5:]]
    # the table holds the finished trials only, every logged finite value once, with ids and levels
    assert set(res.table["key"]) == {s.key for s in specs[:5]}
    assert len(res.table) == 5 * 8
    one = res.table[res.table["key"] == specs[3].key].reset_index(drop=True)
    assert set(one["arm"]) == {specs[3].arm} and set(one["seed"]) == {specs[3].seed} and set(one["study"]) == {"res"}
    assert set(one["loss_norm"]) == {specs[3].levels["loss_norm"]} and set(one["level.step"]) == {specs[3].levels["step"]}
    acc = one[one["metric"] == "eval/accuracy"]
    assert acc[["step", "tokens", "value"]].values.tolist() == [[0, 0.0, pytest.approx(0.28)], [2, 210.0, pytest.approx(0.53)]]
    assert res.samples[specs[4].key] == [{"prompt": "2+2=", "completion": "<b>4</b>", "correct": True,
                                          "reward/final_answer": 1.0}]
    assert set(res.samples) == {s.key for s in specs[:5]}
    assert res.parent["ablate.study"] == "res" and "ablate.version.python" in res.parent
    assert res.metrics == ["compute/tokens", "eval/accuracy", "eval/pass_at_4", "reward/total"]
    # runs logged without eval_problems.csv (as before it existed): an empty per-problem table
    assert res.problems.empty
    assert list(res.problems.columns) == ["key", "arm", "seed", "loss_norm", "level.step", *PROBLEM_COLUMNS]


def test_processor_note_counts_the_processor_models_of_finished_trials():
    intel = {"ablate.machine.cpu": "Intel Xeon", "ablate.machine.cpu_capability": "AVX512"}
    amd = {"ablate.machine.cpu": "AMD EPYC", "ablate.machine.cpu_capability": "AVX512"}
    assert processor_note([intel, intel, {}]) is None  # one model (a run without the tag is not counted)
    assert processor_note([]) is None
    note = processor_note([intel, amd, intel, {}])
    assert note.startswith("the finished trials ran on 2 processor models (AMD EPYC / AVX512: 1 trial; "
                           "Intel Xeon / AVX512: 2 trials).")
    assert "does not reproduce it" in note
    # the same model with another instruction set torch uses counts as another processor
    assert "2 processor models" in processor_note([intel, {**intel, "ablate.machine.cpu_capability": "AVX2"}])


def test_processor_name_names_the_gpu_with_its_host():
    intel = {"ablate.machine.cpu": "Intel Xeon", "ablate.machine.cpu_capability": "AVX512"}
    assert processor_name(intel) == "Intel Xeon (AVX512)" and processor_name({}) == ""
    # the instruction set tells two machines of one model name apart; a run without the tag keeps the name
    assert processor_name({**intel, "ablate.machine.cpu_capability": "AVX2"}) == "Intel Xeon (AVX2)"
    assert processor_name({"ablate.machine.cpu": "AMD EPYC"}) == "AMD EPYC"
    h200 = {**intel, "ablate.machine.gpu": "NVIDIA H200"}
    assert processor_name(h200) == "NVIDIA H200 (GPU; host Intel Xeon)"
    assert processor_name({"ablate.machine.gpu": "NVIDIA H200"}) == "NVIDIA H200 (GPU)"
    # a GPU run and a CPU run of the same host are two processors for the note
    assert "2 processor models" in processor_note([intel, h200])
    assert "Intel Xeon / AVX512 / NVIDIA H200: 1 trial" in processor_note([intel, h200])


def test_gpu_tags_name_no_gpu_for_a_cpu_trial():
    assert gpu_tags("cpu") == {} and gpu_tags("") == {} and gpu_tags(None) == {}
    if not torch.cuda.is_available():  # here: auto is the CPU; tests/test_gpu.py checks a CUDA device's name
        assert gpu_tags("auto") == {}
        assert gpu_tags("cuda") == {}  # unavailable: the trial fails with its own message, the tag says nothing


def test_results_note_finished_trials_from_two_processor_models(store):
    """Trial runs carry the processor that started them (code_version tags); the report's notes say when
    the finished trials of a study ran on more than one model."""
    study, specs = store["study"], store["specs"]
    res = load_results(Plan.of(study, "default"), tracking_uri=store["uri"])
    assert not any("processor models" in n for n in res.notes)  # every run was started here
    client = MlflowClient(store["uri"])
    here = client.get_run(store["runs"][specs[0].key]).data.tags["ablate.machine.cpu"]
    assert here
    for spec in specs[:2]:
        client.set_tag(store["runs"][spec.key], "ablate.machine.cpu", "Another CPU")
    client.set_tag(store["runs"][specs[5].key], "ablate.machine.cpu", "A third CPU")  # failed: not counted
    res = load_results(Plan.of(study, "default"), tracking_uri=store["uri"])
    [note] = [n for n in res.notes if "processor models" in n]
    assert "ran on 2 processor models" in note and "Another CPU / " in note and ": 2 trials" in note
    assert f"{here} / " in note and ": 3 trials" in note
    by_key = res.trials.set_index("key")  # each trial's processor and commit, as results.csv carries them
    cap = client.get_run(store["runs"][specs[0].key]).data.tags["ablate.machine.cpu_capability"]  # e.g. AVX512
    assert by_key.loc[specs[0].key, "cpu"] == f"Another CPU ({cap})" and by_key.loc[specs[3].key, "cpu"] == f"{here} ({cap})"
    sha = client.get_run(store["runs"][specs[3].key]).data.tags.get("ablate.git_commit", "")
    assert by_key.loc[specs[3].key, "commit"].removesuffix("-dirty") == sha
    assert by_key.loc[specs[7].key, "cpu"] == "" == by_key.loc[specs[7].key, "commit"]  # never ran


def test_cached_histories_survive_a_lost_artifact_store(store):
    study, tmp = store["study"], store["tmp"]
    first = load_results(Plan.of(study), tracking_uri=store["uri"], cache_dir=tmp / "cache")
    assert len(list((tmp / "cache").glob("*.history.csv"))) == 5
    assert len(list((tmp / "cache").glob("*.eval_problems.csv.absent"))) == 5  # known absent: not asked again
    assert (tmp / "cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    shutil.rmtree(tmp / "mlruns")  # the artifacts of every run are gone; the cache still has them
    cached = load_results(Plan.of(study), tracking_uri=store["uri"], cache_dir=tmp / "cache")
    pd.testing.assert_frame_equal(first.table, cached.table)
    fresh = load_results(Plan.of(study), tracking_uri=store["uri"])
    assert count_states(fresh.trials)["done"] == 0
    assert set(fresh.trials["error"]) >= {"finished, but its history.csv artifact is missing"}


def test_results_of_a_study_that_never_ran(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "res.yaml").write_text(STUDY)
    study = load_study(tmp_path / "res.yaml")
    uri = servers.fresh_mlflow_db(tmp_path)
    res = load_results(Plan.of(study), tracking_uri=uri)
    assert count_states(res.trials)["pending"] == 8 and res.table.empty and res.parent == {}
    with pytest.raises(AblateError, match="no runs at budget 'default'.*ablate run"):
        build_report(Plan.of(study), tracking_uri=uri, out_dir=tmp_path / "r")
    with pytest.raises(AblateError, match="budget"):
        load_results(Plan.of(study, "nope"), tracking_uri=uri)


@pytest.fixture
def tiny_study(tmp_path, monkeypatch, ws_cache):
    """A study of two real tiny trials (tests/conftest.py TINY_TRIAL: 8 eval problems, evaluated at
    steps 0 and 2), run and logged to a real MLflow SQLite store with their eval_problems.csv."""
    monkeypatch.chdir(tmp_path)
    base = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in TINY_TRIAL)}
    base["warmstart.cache_dir"] = ws_cache
    path = tmp_path / "prob.yaml"
    path.write_text(yaml.safe_dump({
        "name": "prob", "description": "Per-problem records of real tiny trials.", "base": base,
        "factors": {"loss_norm": {"levels": {"sequence": {"loss.aggregation": "seq-mean-token-mean"},
                                             "token": {"loss.aggregation": "token-mean"}}}},
        "seeds": 1, "objective": {"metric": "eval/accuracy", "mode": "max"},
    }))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = load_study(path)
    uri = servers.fresh_mlflow_db(tmp_path)
    tracker = Tracker(uri)
    parent = tracker.parent_run(study, "default")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results = {}
    try:
        for spec in Plan.of(study, "default").specs:
            logger = tracker.start_trial(parent, TrialIdentity(study.name, spec.key, spec.arm, spec.seed, "default",
                                                                 spec.levels, spec.config.to_flat_dict()))
            result = run_trial(spec.config, logger)
            logger.close()
            tracker.finish_trial(logger.run_id, config_yaml=spec.config.to_yaml(), history=result.history,
                                 samples=result.samples, result={"key": spec.key},
                                 objective=result.final["eval/accuracy"], eval_problems=result.eval_problems)
            results[spec.key] = result
    finally:
        torch.set_num_threads(threads)
    return {"study": study, "uri": uri, "results": results, "tmp": tmp_path}


def test_problems_of_real_trials(tiny_study):
    study, tmp = tiny_study["study"], tiny_study["tmp"]
    res = load_results(Plan.of(study), tracking_uri=tiny_study["uri"], cache_dir=tmp / "cache")
    assert count_states(res.trials)["done"] == 2 and res.notes == []
    p = res.problems
    assert list(p.columns) == ["key", "arm", "seed", "loss_norm", *PROBLEM_COLUMNS]
    n_problems, evaluations = 8, 2  # TINY_TRIAL: eval.n_problems=8, eval.every=0 and 2 steps: steps 0 and 2
    assert len(p) == len(res.trials) * n_problems * evaluations
    for key, one in p.groupby("key"):
        assert sorted(set(one["step"])) == [0, 2]
        assert one.groupby("step")["problem"].apply(list).tolist() == [list(range(n_problems))] * evaluations
        assert set(one["arm"]) == {res.trials.set_index("key").loc[key, "arm"]}
        # the records' means are the logged eval metrics of their step
        table = res.table[res.table["key"] == key].set_index(["step", "metric"])["value"]
        means = one.groupby("step")[["correct", "format_ok", "length", "truncated"]].mean()
        for step in (0, 2):
            assert means.loc[step, "correct"] == pytest.approx(table[(step, "eval/accuracy")])
            assert means.loc[step, "format_ok"] == pytest.approx(table[(step, "eval/format_rate")])
            assert means.loc[step, "length"] == pytest.approx(table[(step, "eval/length")])
            assert means.loc[step, "truncated"] == pytest.approx(table[(step, "eval/truncated_frac")])
    # both arms start from the same warm start and are evaluated on the same problems: step 0 is identical
    start = p[p["step"] == 0].pivot(index="problem", columns="arm", values="length")
    assert (start.iloc[:, 0] == start.iloc[:, 1]).all()
    assert len(list((tmp / "cache").glob("*.eval_problems.csv"))) == 2
    again = load_results(Plan.of(study), tracking_uri=tiny_study["uri"], cache_dir=tmp / "cache")
    pd.testing.assert_frame_equal(again.problems, p)


FAST = {"fit_boot": 10, "formats": ("png",)}


def test_build_report_then_upload_it_to_the_parent_run(store):
    from ablate.commands.report import upload_report

    out = store["tmp"] / "report"
    index = build_report(Plan.of(store["study"]), tracking_uri=store["uri"], out_dir=out, **FAST)
    client = MlflowClient(tracking_uri=store["uri"])
    assert not client.list_artifacts(store["parent"], "report")  # building does not upload: the caller does
    assert upload_report(store["study"].name, "default", store["uri"], out)
    assert index == out / "index.html" and index.exists() and (out / "README.md").exists()
    assert (out / ".cache").is_dir()
    text = index.read_text()
    assert "Missing trials" in text and "NonFiniteError: NaN loss at step 2" in text
    assert "&lt;b&gt;0&lt;/b&gt;" in text and "<b>0</b>" not in text  # a sample completion, escaped
    files = {a.path for a in client.list_artifacts(store["parent"], "report")}
    assert {"report/index.html", "report/README.md", "report/results.csv", "report/learning_curves.png"} <= files
    assert not any(".cache" in f for f in files)
    summary = pd.read_csv(out / "results.csv")
    assert len(summary) == 8 and summary["state"].value_counts()["done"] == 5
    done = summary[summary["state"] == "done"]
    assert done["objective"].tolist() == pytest.approx([0.5 + 0.01 * i for i in range(5)])


def test_report_command(store, capsys):
    tmp, uri = store["tmp"], store["uri"]
    assert main(["report", str(tmp / "res.yaml"), "--tracking-uri", uri, "--out", str(tmp / "a"), "--no-log"]) == 0
    assert f"report: {tmp / 'a' / 'index.html'}" in capsys.readouterr().out
    assert (tmp / "a" / "index.html").exists() and (tmp / "a" / "learning_curves.png").exists()
    assert not (tmp / "a" / "learning_curves.svg").exists()  # PNG only, unless --svg
    assert main(["report", str(tmp / "res.yaml"), "--tracking-uri", uri, "--out", str(tmp / "b"), "--no-log",
                 "--svg"]) == 0
    assert (tmp / "b" / "learning_curves.svg").read_text().lstrip().startswith("<?xml")
    capsys.readouterr()
    assert main(["report", "nosuch", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "cannot find the study 'nosuch'" in err and "no study 'nosuch' with budget 'default' in MLflow" in err


def test_report_without_a_tracking_store_creates_none(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["report", "nosuch"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ablate report: error: there is no MLflow store at {tmp_path / 'mlflow.db'}, so study 'nosuch' has no "
        "results here; run it first (`ablate run FILE`) or pass the --tracking-uri it ran with")
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_study_is_found_by_name(store, tmp_path):
    tmp, uri = store["tmp"], store["uri"]
    work = tmp_path / "work"
    work.mkdir()
    # the study file recorded with the parent run (ablate.study_file)
    assert resolve_study("res", "default", uri, str(work)).path == tmp / "res.yaml"
    # studies/<name>.yaml in the working directory
    (tmp / "studies").mkdir()
    shutil.copy(tmp / "res.yaml", tmp / "studies" / "res.yaml")
    assert resolve_study("res", "default", uri, str(work)).path == Path("studies/res.yaml")
    # neither: the copy of the study file stored in MLflow
    (tmp / "res.yaml").unlink()
    shutil.rmtree(tmp / "studies")
    study = resolve_study("res", "default", uri, str(work))
    assert study.path == work / "res.yaml" and study.name == "res" and len(study.arms) == 4
    with pytest.raises(AblateError, match="no study 'res' with budget 'full'"):
        resolve_study("res", "full", uri, str(work))
