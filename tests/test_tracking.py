"""MLflow tracking on a real SQLite tracking store: run hierarchy, params, tags, batched metrics,
artifacts, failures, resumption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import servers
from mlflow import MlflowClient

from ablate.config import TrialConfig
from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import (
    DEFAULT_TRACKING_URI,
    EVAL_PROBLEM_COLUMNS,
    EXPERIMENT_KIND_TAG,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    TAG_LOGGED_STEP,
    TRUNCATED,
    Tracker,
    TrackingError,
    TrialIdentity,
    code_version,
    eval_problems_csv,
    experiment_url,
    history_csv,
    metric_name,
    param_value,
    resolve_tracking_uri,
    trial_params,
)

STUDY = """\
name: trk
description: Tracking test study.
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
seeds: 2
objective: {metric: eval/accuracy, mode: max}
"""


@pytest.fixture
def tracker(tmp_path):
    # code_root: no checkout, so no diff.patch, however dirty the tree the tests run from (tests/test_code_diff.py)
    return Tracker(servers.fresh_mlflow_db(tmp_path), code_root=tmp_path)


@pytest.fixture
def study(tmp_path):
    path = tmp_path / "trk.yaml"
    path.write_text(STUDY)
    return load_study(path)


def start(tracker: Tracker, parent: str, spec, **kw):
    return tracker.start_trial(parent, TrialIdentity(spec.study, spec.key, spec.arm, spec.seed, spec.budget,
                                                     spec.levels, spec.config.to_flat_dict(), "host:1"), **kw)


# ------------------------------------------------------------------------------------ pure helpers


def test_metric_names_params_and_truncation():
    assert metric_name("eval/pass@8") == "eval/pass_at_8"
    assert metric_name("reward/final_answer") == "reward/final_answer"
    assert metric_name("a b:c-d.e/f") == "a b:c-d.e/f"
    assert metric_name("x(y)") == "x_y_"
    assert param_value("token-mean") == "token-mean"
    assert param_value(None) == "null" and param_value(True) == "true" and param_value(1e-4) == "0.0001"
    assert param_value(["final_answer", "prm"]) == '["final_answer", "prm"]'
    assert param_value({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    long = param_value("x" * (MAX_PARAM_VALUE + 10))
    assert len(long) == MAX_PARAM_VALUE and long.endswith(TRUNCATED)
    assert trial_params({"loss.clip_high": 0.28}, {"clip": "0.28"}) == {"loss.clip_high": "0.28", "level.clip": "0.28"}


def test_history_csv_is_one_row_per_step_one_column_per_metric():
    text = history_csv([(0, {"eval/accuracy": 0.25, "eval/pass@4": 0.5}), (1, {"loss/total": float("nan")}),
                        (2, {"eval/accuracy": 0.5, "loss/total": -1.5})])
    assert text == ("step,eval/accuracy,eval/pass_at_4,loss/total\n"
                    "0,0.25,0.5,\n"
                    "1,,,nan\n"
                    "2,0.5,,-1.5\n")


def test_eval_problems_csv_is_one_row_per_evaluation_and_problem():
    assert EVAL_PROBLEM_COLUMNS == ("step", "problem", "correct", "step_accuracy", "format_ok", "length",
                                    "truncated", "partial")
    rows = [
        {"step": 0, "problem": 0, "correct": 1, "step_accuracy": 1.0, "format_ok": 1, "length": 25, "truncated": 0,
         "partial": 1.0},
        {"step": 0, "problem": 1, "correct": False, "step_accuracy": 2 / 3, "format_ok": True, "length": 32,
         "truncated": True, "partial": float("nan")},
        {"step": 10, "problem": 0, "correct": 0, "step_accuracy": 0.5, "format_ok": 0, "length": 7, "truncated": 0},
    ]
    assert eval_problems_csv(rows) == (
        "step,problem,correct,step_accuracy,format_ok,length,truncated,partial\n"
        "0,0,1,1.0,1,25,0,1.0\n"
        "0,1,0,0.6666666666666666,1,32,1,nan\n"
        "10,0,0,0.5,0,7,0,\n"
    )
    assert eval_problems_csv([]) == ",".join(EVAL_PROBLEM_COLUMNS) + "\n"


def test_tracking_uri_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert DEFAULT_TRACKING_URI == "sqlite:///mlflow.db"
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri() == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("sqlite:////abs/x.db") == "sqlite:////abs/x.db"


def test_code_version_names_the_commit_and_packages():
    tags = code_version()
    import torch
    import transformers

    assert tags["ablate.version.torch"] == torch.__version__
    assert tags["ablate.version.transformers"] == transformers.__version__
    assert tags["ablate.version.ablate"]
    assert tags["ablate.machine.cpu"] and tags["ablate.machine.cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if Path("/proc/cpuinfo").exists():
        assert tags["ablate.machine.cpu"] in Path("/proc/cpuinfo").read_text()
    if (Path(__file__).resolve().parent.parent / ".git").exists():
        assert len(tags["mlflow.source.git.commit"]) == 40 and tags["ablate.git_dirty"] in ("true", "false")


# ---------------------------------------------------------------------------------------- runs


def test_one_experiment_one_parent_found_again(tracker, study):
    parent = tracker.parent_run(study, "default", storage="/x/store.journal", design={"hash": "h"})
    assert tracker.parent_run(study, "default") == parent  # found again by its tags
    other = tracker.parent_run(study, "smoke")  # another budget, another parent
    assert other != parent
    c: MlflowClient = tracker.client
    exp = c.get_experiment_by_name("trk")
    runs = c.search_runs([exp.experiment_id])
    assert len(runs) == 2
    run = c.get_run(parent)
    assert run.data.tags["ablate.role"] == "study" and run.data.tags["ablate.budget"] == "default"
    assert run.data.tags["ablate.storage"] == "/x/store.journal"
    assert run.data.tags["mlflow.note.content"] == "Tracking test study."
    assert run.data.params["objective.metric"] == "eval/accuracy" and run.data.params["trials"] == "4"
    assert {a.path for a in c.list_artifacts(parent)} == {"design.json", "study.yaml"}
    assert json.loads(Path(c.download_artifacts(parent, "design.json")).read_text()) == {"hash": "h"}
    tracker.finish_parent(parent, failed=False)
    assert tracker.run_status(parent) == "FINISHED"


def test_study_experiment_is_a_model_training_experiment(tracker, study):
    """MLflow 3 tells model-training experiments from GenAI ones by the tag mlflow.experimentKind: the
    study's experiment is created with it; one that exists without it (an older ablate's, or made by
    hand) gets it when ablate logs into it; a kind set by someone else is kept; reading writes nothing."""
    assert EXPERIMENT_KIND_TAG == "mlflow.experimentKind"
    c: MlflowClient = tracker.client
    tracker.parent_run(study, "default")
    tags = c.get_experiment_by_name("trk").tags
    assert tags[EXPERIMENT_KIND_TAG] == "custom_model_development" and tags["ablate.study"] == "trk"

    old = c.create_experiment("old", tags={"ablate.study": "old"})
    assert tracker.experiment_id("old", create=False) == old  # a read (find_parent, reports): no tag
    assert EXPERIMENT_KIND_TAG not in c.get_experiment(old).tags
    assert tracker.experiment_id("old") == old
    assert c.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"

    mine = c.create_experiment("mine")
    c.set_experiment_tag(mine, EXPERIMENT_KIND_TAG, "genai_development")
    assert tracker.experiment_id("mine") == mine
    assert c.get_experiment(mine).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_experiment_url_opens_the_runs_table():
    assert experiment_url("http://127.0.0.1:5000/", "7") == "http://127.0.0.1:5000/#/experiments/7?workflowType=machine_learning"


def test_child_run_params_tags_batched_metrics_and_artifacts(tracker, study):
    parent = tracker.parent_run(study, "default")
    spec = Plan.of(study, "default").specs[1]  # loss_norm=token, seed 0
    logger = start(tracker, parent, spec, flush_every=10)
    for step in range(25):
        logger({"eval/accuracy": step / 100, "loss/total": -step, "eval/pass@4": 0.5}, step)
    assert logger.requests == 2  # steps 0-9 and 10-19 sent; 20-24 buffered
    logger.close()
    assert logger.requests == 3
    c = tracker.client
    run = c.get_run(logger.run_id)
    tags, params = run.data.tags, run.data.params
    assert tags["mlflow.parentRunId"] == parent and tags["ablate.trial_key"] == spec.key
    assert (tags["ablate.arm"], tags["ablate.seed"], tags["ablate.budget"]) == ("loss_norm=token", "0", "default")
    assert tags["ablate.version.torch"] and tags[TAG_LOGGED_STEP] == "24" and tags["ablate.worker"] == "host:1"
    assert run.info.run_name == "loss_norm=token seed=0"
    flat = spec.config.to_flat_dict()
    assert len(params) == len(flat) + 1
    assert params["level.loss_norm"] == "token" and params["loss.aggregation"] == "token-mean"
    assert params["seed"] == "0" and params["reward.components"] == '["final_answer"]'
    hist = c.get_metric_history(logger.run_id, "eval/accuracy")
    assert [(m.step, m.value) for m in sorted(hist, key=lambda m: m.step)] == [(s, s / 100) for s in range(25)]
    assert len(c.get_metric_history(logger.run_id, "eval/pass_at_4")) == 25

    history = [(0, {"eval/accuracy": 0.0}), (1, {"eval/accuracy": 0.5})]
    samples = [{"prompt": "1+2=", "completion": "<answer>3</answer>", "correct": True, "reward/final_answer": 1.0}]
    tracker.finish_trial(logger.run_id, config_yaml=spec.config.to_yaml(), history=history, samples=samples,
                         result={"key": spec.key, "final": {"eval/accuracy": 0.5, "x": float("nan")}}, objective=0.5)
    run = c.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ablate.objective"] == "0.5"
    files = {a.path for a in c.list_artifacts(logger.run_id)}
    assert files == {"config.yaml", "history.csv", "samples.json", "result.json"}  # no eval_problems given: none
    read = lambda name: Path(c.download_artifacts(logger.run_id, name)).read_text()  # noqa: E731
    assert TrialConfig.from_overrides(__import__("yaml").safe_load(read("config.yaml"))).trial_key() == spec.key
    assert read("history.csv") == "step,eval/accuracy\n0,0.0\n1,0.5\n"
    assert json.loads(read("samples.json")) == samples
    assert json.loads(read("result.json"))["final"] == {"eval/accuracy": 0.5, "x": None}

    # a trial that gives its per-problem records gets eval_problems.csv beside the other files
    other = start(tracker, parent, Plan.of(study, "default").specs[0])
    rows = [{"step": s, "problem": p, "correct": p % 2, "step_accuracy": 0.5, "format_ok": 1, "length": 20,
             "truncated": 0, "partial": 0.5} for s in (0, 1) for p in range(3)]
    tracker.finish_trial(other.run_id, config_yaml="", history=history, samples=[], result={}, objective=None,
                         eval_problems=rows)
    assert {a.path for a in c.list_artifacts(other.run_id)} == {
        "config.yaml", "history.csv", "samples.json", "result.json", "eval_problems.csv"}
    assert Path(c.download_artifacts(other.run_id, "eval_problems.csv")).read_text() == eval_problems_csv(rows)


def test_large_steps_are_split_into_batches_within_mlflow_limits(tracker, study):
    parent = tracker.parent_run(study, "default")
    logger = start(tracker, parent, Plan.of(study, "default").specs[0], flush_every=1)
    logger({f"m/{i}": float(i) for i in range(1500)}, 0)  # 1500 metrics: two requests of <= 1000 entities
    assert logger.requests == 2
    run = tracker.client.get_run(logger.run_id)
    assert len(run.data.metrics) == 1500 and run.data.metrics["m/1499"] == 1499.0


def test_resumed_trial_reuses_its_run_and_logs_every_step_once(tracker, study):
    parent = tracker.parent_run(study, "default")
    spec = Plan.of(study, "default").specs[0]
    first = start(tracker, parent, spec, flush_every=5)
    for step in range(8):  # steps 0-4 are sent; 5-7 are still buffered when the worker is killed
        first({"loss/total": float(step)}, step)
    tracker.fail_trial(first.run_id, "stale: its worker died")
    assert tracker.run_status(first.run_id) == "FAILED"
    # the retry resumes from the checkpoint of step 6: the trainer logs 7-9, its history holds 0-9
    second = start(tracker, parent, spec, flush_every=5, resuming=True)
    assert second.run_id == first.run_id and second.skip_through == 4
    for step in range(7, 10):
        second({"loss/total": float(step)}, step)
    second.backfill([(s, {"loss/total": float(s)}) for s in range(10)])
    c = tracker.client
    assert c.get_run(first.run_id).data.tags[TAG_LOGGED_STEP] == "4"  # held until the backfill is sent
    second.close()
    history = sorted((m.step, m.value) for m in c.get_metric_history(first.run_id, "loss/total"))
    assert history == [(s, float(s)) for s in range(10)]  # every step, none twice
    run = c.get_run(first.run_id)
    assert run.data.tags[TAG_LOGGED_STEP] == "9"
    assert run.info.status == "RUNNING" and "ablate.error" not in run.data.tags
    children = c.search_runs([run.info.experiment_id], filter_string="tags.`ablate.role` = 'trial'")
    assert len(children) == 1


def test_failed_trial_keeps_the_end_of_its_traceback(tracker, study):
    parent = tracker.parent_run(study, "default")
    logger = start(tracker, parent, Plan.of(study, "default").specs[0])
    error = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "RuntimeError: the cause"
    tracker.fail_trial(logger.run_id, error)
    run = tracker.client.get_run(logger.run_id)
    assert run.info.status == "FAILED"
    tag = run.data.tags["ablate.error"]
    assert len(tag) <= MAX_TAG_VALUE and tag.endswith("RuntimeError: the cause") and tag.startswith("...")
    assert Path(tracker.client.download_artifacts(logger.run_id, "errors/attempt-1.txt")).read_text() == error


def test_a_retried_trial_keeps_each_failed_attempt_and_no_error_once_it_finishes(tracker, study):
    """Each failure is its own errors/attempt-<n>.txt; a success removes the error tag and leaves no
    error file that would read as the trial's outcome."""
    parent = tracker.parent_run(study, "default")
    spec = Plan.of(study, "default").specs[0]
    run_id = start(tracker, parent, spec).run_id
    tracker.fail_trial(run_id, "stale: its worker died")
    assert start(tracker, parent, spec).run_id == run_id
    tracker.fail_trial(run_id, "RuntimeError: out of memory", status="KILLED")
    assert start(tracker, parent, spec).run_id == run_id
    tracker.finish_trial(run_id, config_yaml="seed: 0\n", history=[(0, {"eval/accuracy": 0.5})], samples=[],
                         result={"objective": 0.5}, objective=0.5)
    c = tracker.client
    run = c.get_run(run_id)
    assert run.info.status == "FINISHED" and "ablate.error" not in run.data.tags
    top = sorted(f.path for f in c.list_artifacts(run_id))
    assert top == ["config.yaml", "errors", "history.csv", "result.json", "samples.json"]  # no error.txt
    errors = sorted(f.path for f in c.list_artifacts(run_id, "errors"))
    assert errors == ["errors/attempt-1.txt", "errors/attempt-2.txt"]
    texts = [Path(c.download_artifacts(run_id, p)).read_text() for p in errors]
    assert texts == ["stale: its worker died", "RuntimeError: out of memory"]


def test_deleted_experiment_is_a_clear_error(tracker, study):
    tracker.parent_run(study, "default")
    exp = tracker.client.get_experiment_by_name("trk")
    tracker.client.delete_experiment(exp.experiment_id)
    with pytest.raises(TrackingError, match="is deleted; restore it"):
        tracker.parent_run(study, "default")


def _open_trackers(uris: list[str], barrier, errors) -> None:
    """In a spawned process: open a Tracker on each fresh SQLite URI in turn, together with the other
    process (the barrier), and do one thing with it; any exception is put on ``errors``."""
    from ablate.tracking import Tracker

    for uri in uris:
        barrier.wait(timeout=300)
        try:
            Tracker(uri).experiment_id("together")
        except Exception as exc:  # reported by the test
            errors.put(f"{uri}: {type(exc).__name__}: {exc}")


def test_two_processes_open_a_fresh_sqlite_store_at_once(tmp_path):
    """MLflow creates a fresh SQLite store's schema when it opens it; two processes doing so at once race
    (e.g. "table experiments already exists"): the Tracker serialises it under a lock beside the db."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    uris = [f"sqlite:///{tmp_path / f'rep{i}' / 'mlflow.db'}" for i in range(3)]
    for uri in uris:
        Path(uri[len("sqlite:///"):]).parent.mkdir()
    barrier, errors = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_trackers, args=(uris, barrier, errors)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    assert [p.exitcode for p in procs] == [0, 0]
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    for uri in uris:
        exps = [e.name for e in MlflowClient(uri).search_experiments()]
        assert sorted(exps) == ["Default", "together"]
