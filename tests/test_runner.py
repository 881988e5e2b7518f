"""``ablate run`` / ``worker`` / ``status`` end to end with real tiny trials: resume after SIGKILL,
concurrent workers on a journal file and on PostgreSQL, logging to a real MLflow server, design
changes, failures, bad input."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import servers
import yaml
from mlflow import MlflowClient

from ablate.cli import main
from ablate.paths import STORE_FILE
from ablate.running.pool import gpu_for_worker, threads_per_worker
from ablate.running.progress import Progress, format_seconds
from ablate.store import StudyStore
from ablate.study import Objective, load_study
from ablate.study.plan import Plan

ROOT = Path(__file__).resolve().parent.parent

#: A trial that takes well under a second: the 0.2M-parameter model, 1-digit sums, no warm start.
TINY = {
    "model.name": "micro-llama", "task.difficulty": 1, "warmstart.enabled": False,
    "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 16,
    "algo.minibatches": 1, "train.steps": 2, "eval.n_problems": 4,
}
LOSS_NORM = {"sequence": {"loss.aggregation": "seq-mean-token-mean"}, "token": {"loss.aggregation": "token-mean"}}


def write_study(folder: Path, name: str, levels: dict | None = None, seeds: int = 2, base: dict | None = None,
                **extra) -> Path:
    doc = {"name": name, "base": {**TINY, **(base or {})},
           "factors": {"loss_norm": {"levels": levels if levels is not None else LOSS_NORM}},
           "seeds": seeds, "objective": {"metric": "eval/accuracy", "mode": "max"}, **extra}
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(*argv: str) -> int:
    """``ablate run ARGV --threads 1`` in this process."""
    return main(["run", *argv, "--threads", "1"])


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    with servers.mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri


@pytest.fixture(scope="module")
def pg():
    with servers.postgres_server() as server:
        yield server


def sub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE")}
    env.update(ABLATE_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env


def attempts_by_key(storage: str, study: str, budget: str = "default") -> dict[str, list]:
    out: dict[str, list] = {}
    for a in StudyStore(storage, study, create=False).attempts(budget):
        out.setdefault(a.key, []).append(a)
    return out


def mlflow_runs(uri: str, study: str) -> tuple[object, list]:
    """(the parent run, the child runs) of a study's experiment; asserts there is one parent."""
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(study)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("ablate.role") == "study"]
    children = [r for r in runs if r.data.tags.get("ablate.role") == "trial"]
    assert len(parents) == 1 and len(runs) == len(parents) + len(children)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children)
    return parents[0], children


def check_complete_once(storage: str, study_file: Path, uri: str) -> None:
    """Every trial of the study has exactly one attempt, complete, and one finished MLflow child with
    its params, tags and metric history."""
    study = load_study(study_file)
    specs = {s.key: s for s in Plan.of(study, "default").specs}
    by_key = attempts_by_key(storage, study.name)
    assert set(by_key) == set(specs)
    assert all([a.state for a in v] == ["done"] for v in by_key.values()), by_key
    parent, children = mlflow_runs(uri, study.name)
    assert parent.info.status == "FINISHED"
    assert sorted(r.data.tags["ablate.trial_key"] for r in children) == sorted(specs)
    c = MlflowClient(uri)
    for r in children:
        spec = specs[r.data.tags["ablate.trial_key"]]
        assert r.info.status == "FINISHED"
        assert r.data.tags["ablate.arm"] == spec.arm and r.data.tags["ablate.seed"] == str(spec.seed)
        assert r.data.params["level.loss_norm"] == spec.levels["loss_norm"]
        assert r.data.params["loss.aggregation"] == spec.config.loss.aggregation
        steps = sorted(m.step for m in c.get_metric_history(r.info.run_id, "eval/accuracy"))
        assert steps == [0, 2]  # the start policy and the last step
        assert sorted(m.step for m in c.get_metric_history(r.info.run_id, "loss/total")) == [1, 2]
        (attempt,) = by_key[spec.key]
        assert attempt.mlflow_run_id == r.info.run_id
        assert float(r.data.tags["ablate.objective"]) == attempt.value == r.data.metrics["eval/accuracy"]


def kill_once_written(proc: subprocess.Popen, files: list[Path], log: Path, before=None) -> None:
    """SIGKILL ``proc``'s process group as soon as every one of ``files`` exists (within 180 s); ``before``, if
    given, must hold at that moment (what the kill is meant to end is running)."""
    deadline = time.monotonic() + 180
    while not all(f.exists() for f in files):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"never written: {[str(f) for f in files if not f.exists()]}"
        time.sleep(0.02)
    assert before is None or before(), "what the kill should end was not running"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------ pure parts


def test_threads_split_and_time_format():
    assert threads_per_worker(2, cores=2) == 1 and threads_per_worker(3, cores=2) == 1
    assert threads_per_worker(2, cores=16) == 8 and threads_per_worker(1, cores=4) == 4
    assert [format_seconds(s) for s in (9, 75, 3725)] == ["9s", "1m15s", "1h02m"]
    assert [gpu_for_worker(i, 4, None) for i in range(5)] == ["0", "1", "2", "3", "0"]
    assert [gpu_for_worker(i, 2, "5,7") for i in range(3)] == ["5", "7", "5"]
    assert gpu_for_worker(0, 1, None) is None and gpu_for_worker(1, 0, None) is None


class _Work:
    """The little of a study store the pool asks: there is always work left."""

    name = "pooltest"

    def has_work(self, budget: str) -> bool:
        return True


#: A stand-in worker subprocess: the payload's sys.path, then it sends two events through its pipe (the way
#: ablate.running.pool.member_main does) and exits with the code $POOL_TEST_EXIT.
_FAKE_MEMBER = """import json, os, sys
payload = json.loads(sys.argv[1]); sys.path[:] = payload["sys_path"]
from multiprocessing.connection import Connection
conn = Connection(payload["events_fd"], readable=False)
conn.send({"kind": "start", "worker": payload["index"]})
conn.send({"kind": "disk_full", "message": f"full in worker {payload['index']}"})
raise SystemExit(int(os.environ["POOL_TEST_EXIT"]))
"""


def test_the_pool_s_workers_are_fresh_interpreters_whose_events_come_back(tmp_path, monkeypatch, capfd):
    """ablate.running.pool without a real trial: each worker is `python -c CODE PAYLOAD` (never the caller's
    __main__); its events come back through its pipe even when it exits at once; a worker that keeps dying
    is restarted N * (max_retries + 1) times, then the pool says so in one line per worker on stderr; a full
    disk stops the pool with the worker's own message."""
    from ablate.disk import DISK_FULL_EXIT, DiskFullError
    from ablate.running import pool
    from ablate.running.session import RunSettings

    command = pool.member_command(RunSettings("s.yaml", "smoke", "j", "sqlite:///x.db", max_retries=0), 1, 9, "3")
    assert command[:2] == [sys.executable, "-c"] and "from ablate.running.pool import member_main" in command[2]
    payload = json.loads(command[3])
    assert (payload["index"], payload["events_fd"], payload["gpu"], payload["sys_path"]) == (1, 9, "3", sys.path)
    assert RunSettings(**payload["settings"]) == RunSettings("s.yaml", "smoke", "j", "sqlite:///x.db", max_retries=0)

    monkeypatch.setattr(pool, "MEMBER_CODE", _FAKE_MEMBER)
    settings = RunSettings("s.yaml", "smoke", "j", "sqlite:///x.db", runs=str(tmp_path), max_retries=0)
    seen: list[dict] = []

    class Display:
        def handle(self, event: dict) -> None:
            seen.append(event)

        def line(self, text: str) -> None:
            seen.append({"line": text})

        def set_counts(self, counts: dict) -> None:
            pass

        def refresh(self) -> None:
            pass

    monkeypatch.setenv("POOL_TEST_EXIT", "3")
    pool.run_pool(settings, 2, _Work(), None)  # 2 workers, 2 restarts, then none left
    err = capfd.readouterr().err
    assert err.count("exited with code 3 and no restart is left (the 2 allowed were used)") == 2, err
    monkeypatch.setenv("POOL_TEST_EXIT", str(DISK_FULL_EXIT))
    with pytest.raises(DiskFullError, match=r"^full in worker [01]$"):
        pool.run_pool(settings, 2, _Work(), Display())
    assert {"kind": "start", "worker": 0} in seen or {"kind": "start", "worker": 1} in seen, seen


def test_progress_says_when_trials_are_packed(capsys):
    progress = Progress(total=4, steps_per_trial=2, counts={"pending": 4}, live=False, stream=sys.stderr)
    progress.handle({"kind": "population", "size": 4, "worker": "host:123"})
    assert "packed 4 trials into one population on host:123" in capsys.readouterr().err


def test_progress_counts_steps_and_estimates_time_left(capsys):
    p = Progress(4, 10, {"done": 1, "running": 1, "failed": 0, "pending": 2}, live=False, label="q default")
    p.handle({"kind": "start", "key": "k1", "arm": "a=x", "seed": 0, "steps": 10})
    p.handle({"kind": "step", "key": "k1", "step": 0, "arm": "a=x", "seed": 0, "steps": 10})
    assert p.eta() is None  # no step has advanced yet
    p.handle({"kind": "step", "key": "k1", "step": 4, "arm": "a=x", "seed": 0, "steps": 10})
    assert p.steps_done == 4
    p._t_first -= 2.0  # 4 steps took 2 s: 2 steps/s; left: 6 of k1 + 2 pending x 10 = 26 steps
    assert p.eta() == pytest.approx(13.0, rel=0.05)
    line = p.status_line()
    assert line.startswith("[q default] 1/4 done, 1 running, 0 failed, 2 pending | a=x s0 4/10 | ETA 1")
    p.handle({"kind": "end", "key": "k1", "arm": "a=x", "seed": 0, "state": "failed", "seconds": 3.0,
              "error": "RuntimeError: boom"})
    assert capsys.readouterr().err == "FAILED a=x seed=0 after 3s: RuntimeError: boom\n"


# --------------------------------------------------------------------------------------- in process


def test_progress_with_one_worker_counts_trials_as_they_finish(workdir, capsys):
    """One worker in this process (the default): after each finished trial the status line shows the
    store's counts moving (done up, pending down) and an ETA over the trials left, not the finished ones."""
    study = write_study(workdir, "solo")
    assert run(str(study)) == 0
    status = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[solo default] ")]
    counts = [tuple(int(x) for x in re.match(r"\[solo default\] (\d+)/4 done, (\d+) running, (\d+) failed, "
                                           r"(\d+) pending", ln).groups()) for ln in status]
    after_ends = [c for c in counts if c[1] == 0]
    assert [c[0] for c in after_ends][:4] == [1, 2, 3, 4] and [c[3] for c in after_ends][:4] == [3, 2, 1, 0]
    assert status[-1].endswith("ETA 0s") or "ETA 0" in status[-1]  # nothing left: no time left


def test_run_logs_every_trial_once_and_a_rerun_runs_nothing(workdir, capsys):
    study = write_study(workdir, "quad")
    assert run(str(study), "--no-progress") == 0
    out = capsys.readouterr()
    assert "4 trials; 0 already done, 4 to run" in out.err
    assert f"store: {workdir / 'runs' / 'quad' / STORE_FILE}" in out.out
    assert f"mlflow ui --backend-store-uri sqlite:///{workdir / 'mlflow.db'}" in out.out
    storage = str(workdir / "runs" / "quad" / STORE_FILE)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    check_complete_once(storage, study, uri)
    # a child's files: the resolved config, the whole history in one table, samples with rewards
    _, children = mlflow_runs(uri, "quad")
    c = MlflowClient(uri)
    run_id = children[0].info.run_id
    files = {a.path for a in c.list_artifacts(run_id)}
    assert files - {"diff.patch"} == {"config.yaml", "history.csv", "samples.json", "result.json", "eval_problems.csv"}
    from ablate.tracking import code_diff

    assert ("diff.patch" in files) == (code_diff() is not None)  # the tests' checkout: dirty while edited, clean in CI
    history = Path(c.download_artifacts(run_id, "history.csv")).read_text().splitlines()
    assert history[0].startswith("step,") and [row.split(",")[0] for row in history[1:]] == ["0", "1", "2"]
    samples = json.loads(Path(c.download_artifacts(run_id, "samples.json")).read_text())
    assert samples and {"prompt", "completion", "correct", "reward/final_answer"} <= set(samples[0])

    assert run(str(study), "--no-progress") == 0  # resume of a complete study: nothing runs
    assert "4 trials; 4 already done, 0 to run" in capsys.readouterr().err
    assert sum(len(v) for v in attempts_by_key(storage, "quad").values()) == 4
    assert len(mlflow_runs(uri, "quad")[1]) == 4

    assert main(["status", str(study)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["arm", "done", "running", "failed", "pending"]
    assert lines[2].split() == ["loss_norm=sequence", "2", "0", "0", "0"]
    assert lines[4].split() == ["total", "4", "0", "0", "0"]


def test_finished_trials_drop_their_checkpoints_unless_kept(workdir, capsys):
    """A finished trial's checkpoint (~10 MB for tiny-llama) is deleted once its result is recorded;
    --keep-checkpoints keeps it; a trial still running keeps its own (the SIGKILL test resumes from one)."""
    base = {"train.checkpoint_every": 1}
    dropped = write_study(workdir, "dropped", levels={"token": LOSS_NORM["token"]}, seeds=2, base=base)
    assert run(str(dropped), "--no-progress") == 0
    assert (workdir / "runs" / "dropped" / STORE_FILE).is_file()
    assert not (workdir / "runs" / "dropped" / "trials").exists() or not list(
        (workdir / "runs" / "dropped" / "trials").rglob("*"))
    kept = write_study(workdir, "kept", levels={"token": LOSS_NORM["token"]}, seeds=2, base=base)
    assert run(str(kept), "--no-progress", "--keep-checkpoints") == 0
    keys = [s.key for s in Plan.of(load_study(kept), "default").specs]
    assert sorted(p.parent.name for p in (workdir / "runs" / "kept" / "trials").rglob("trainer.pt")) == sorted(keys)
    capsys.readouterr()


def test_an_emptied_or_deleted_store_is_refused_when_mlflow_holds_finished_trials(workdir, capsys):
    """A store that lost its trials must not train them all again: run and worker exit 2 before enqueueing."""
    study = write_study(workdir, "lost", levels={"token": LOSS_NORM["token"]}, seeds=1)
    assert run(str(study), "--no-progress") == 0
    capsys.readouterr()
    journal, uri = workdir / "runs" / "lost" / STORE_FILE, f"sqlite:///{workdir / 'mlflow.db'}"
    parent, children = mlflow_runs(uri, "lost")
    exp = parent.info.experiment_id
    journal.write_text("")  # : > runs/lost/store.journal
    for argv in (["run", str(study), "--threads", "1"], ["worker", str(study)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"ablate {argv[0]}: error: the study store {journal} holds no "
                                                         "trial of study 'lost' at budget default, but MLflow ")
        assert f"MLflow {uri} holds 1 finished trial run(s) of it (parent run {parent.info.run_id})" in err
        assert ("Restore the store file (or pass the --storage that ran them); or, to train again from scratch, "
                f"delete the MLflow experiment 'lost' for good (mlflow experiments delete --experiment-id {exp}, "
                "then mlflow gc), or use another --tracking-uri or study name") in err
        assert journal.read_text() == ""  # nothing enqueued
    journal.unlink()  # a deleted store: the same
    assert main(["run", str(study), "--threads", "1"]) == 2
    assert "holds 1 finished trial run(s)" in capsys.readouterr().err and not journal.exists()
    after, children_after = mlflow_runs(uri, "lost")  # MLflow untouched: no new run, the parent still finished
    assert after.info.status == "FINISHED" and [r.info.run_id for r in children_after] == [children[0].info.run_id]


def write_jsonl(path: Path, n: int = 100) -> None:
    r = random.Random(0)
    with open(path, "w") as f:
        for _ in range(n):
            a, b = r.randint(0, 9), r.randint(0, 9)
            f.write(json.dumps({"question": f"{a}+{b}=", "steps": [f"{a}+{b}={a + b}"], "answer": str(a + b)}) + "\n")


def test_failed_trial_is_recorded_the_study_goes_on_and_a_rerun_retries_it(workdir, capsys):
    data = workdir / "sums.jsonl"  # not there yet: the 'file' arm fails when its task is built
    levels = {"builtin": {}, "file": {"task.name": "jsonl", "task.options": {"path": str(data)}, "task.difficulty": None}}
    study = write_study(workdir, "flaky", levels=levels, seeds=1)
    assert run(str(study)) == 1  # the display is not live on a captured stream: one line per trial
    out = capsys.readouterr()
    assert "1 trial(s) failed: see `ablate status" in out.err
    assert "FAILED loss_norm=file seed=0" in out.err and "not found" in out.err
    storage = str(workdir / "runs" / "flaky" / STORE_FILE)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    by_arm = {v[0].arm: v for v in attempts_by_key(storage, "flaky").values()}
    assert [a.state for a in by_arm["loss_norm=builtin"]] == ["done"]
    (failed,) = by_arm["loss_norm=file"]
    assert failed.state == "failed" and "Traceback" in failed.error and "sums.jsonl' not found" in failed.error
    parent, children = mlflow_runs(uri, "flaky")
    assert parent.info.status == "FAILED"
    child = {r.data.tags["ablate.arm"]: r for r in children}["loss_norm=file"]
    assert child.info.status == "FAILED" and "sums.jsonl' not found" in child.data.tags["ablate.error"]

    assert main(["status", str(study)]) == 0
    text = capsys.readouterr().out
    assert "failed:\n  loss_norm=file seed=0 (key " in text and "1 attempt(s)): ablate.errors.AblateError: task 'jsonl'" in text

    write_jsonl(data)
    assert run(str(study), "--no-progress") == 0
    assert "2 trials; 1 already done, 1 to run" in capsys.readouterr().err
    by_arm = {v[0].arm: v for v in attempts_by_key(storage, "flaky").values()}
    assert [a.state for a in by_arm["loss_norm=builtin"]] == ["done"]  # not run again
    assert [a.state for a in by_arm["loss_norm=file"]] == ["failed", "done"]
    parent, children = mlflow_runs(uri, "flaky")
    assert parent.info.status == "FINISHED" and len(children) == 2  # the retry reused its child run
    child = {r.data.tags["ablate.arm"]: r for r in children}["loss_norm=file"]
    assert child.info.status == "FINISHED" and "ablate.error" not in child.data.tags


def test_design_change_is_refused_and_extend_adds_the_new_arm(workdir, capsys):
    study = write_study(workdir, "grow", levels={"sequence": LOSS_NORM["sequence"]}, seeds=1)
    assert run(str(study), "--no-progress") == 0
    storage = str(workdir / "runs" / "grow" / STORE_FILE)
    (first,) = [a for v in attempts_by_key(storage, "grow").values() for a in v]
    capsys.readouterr()

    write_study(workdir, "grow", levels=LOSS_NORM, seeds=1)
    assert run(str(study), "--no-progress") == 2
    err = capsys.readouterr().err
    assert "differs from the one frozen in the store" in err
    assert "added arms (1): loss_norm=token" in err and "run again with --extend" in err
    assert sum(len(v) for v in attempts_by_key(storage, "grow").values()) == 1  # nothing enqueued

    assert run(str(study), "--no-progress", "--extend") == 0
    assert "2 trials; 1 already done, 1 to run (extended by 1 trials)" in capsys.readouterr().err
    by_arm = {v[0].arm: v for v in attempts_by_key(storage, "grow").values()}
    assert by_arm["loss_norm=sequence"] == [first]  # kept as it was
    assert [a.state for a in by_arm["loss_norm=token"]] == ["done"]
    assert len(mlflow_runs(f"sqlite:///{workdir / 'mlflow.db'}", "grow")[1]) == 2

    changed = {"sequence": {**LOSS_NORM["sequence"], "loss.clip_high": 0.3}, "token": LOSS_NORM["token"]}
    write_study(workdir, "grow", levels=changed, seeds=1)
    assert run(str(study), "--no-progress", "--extend") == 2
    err = capsys.readouterr().err
    assert "changed arm loss_norm=sequence (seeds 0): loss.clip_high (default) -> 0.3" in err
    assert "--extend only adds trials" in err


BAD_RUNS = {
    "invalid study file": (["{study_bad}"], "unknown top-level key 'factorz'"),
    "unknown budget": (["{study}", "--budget", "huge"], "unknown budget 'huge'"),
    "sqlite store": (["{study}", "--storage", "sqlite:///store.db"], "SQLite cannot claim trials atomically"),
    "unknown scheme": (["{study}", "--storage", "redis://h/0"], "unsupported scheme 'redis'"),
    "no workers": (["{study}", "--workers", "0"], "--workers 0: must be at least 1"),
    "a task option misspelt": (["{study_option}"], "task 'addition' has no option 'eval_fractoin'; valid options: "
                               "eval_fraction, checks (did you mean 'eval_fraction'?)"),
    "a jsonl task without its file": (["{study_jsonl}"], "task 'jsonl' needs option path"),
    "a reasoning_gym task without its generator": (["{study_rg}"], "task.dataset: task 'reasoning_gym' needs "
                                                   "task.dataset"),
    "runs not a folder": (["{study}", "--runs", "{runs_file}"], "the runs folder {runs_file} is not writable (Not a "
                          "directory): fix its permissions (e.g. chmod -R u+w {runs_file}) or pass --runs DIR"),
    "reports not a folder": (["{study_reports}"], "the reports folder {reports_file} is not writable (Not a directory)"),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_input_exits_2_and_creates_nothing(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    files = {
        "study": write_study(tmp_path, "fine"),
        "study_bad": tmp_path / "bad.yaml",
    }
    files["study_bad"].write_text(files["study"].read_text().replace("factors:", "factorz:"))
    files["study_option"] = write_study(tmp_path, "option", base={"task.options": {"eval_fractoin": 0.2}})
    files["study_jsonl"] = write_study(tmp_path, "nojsonl", base={"task.name": "jsonl", "task.difficulty": None})
    files["study_rg"] = write_study(tmp_path, "norg", base={"task.name": "reasoning_gym", "task.difficulty": None})
    files["runs_file"] = tmp_path / "runs.txt"  # a --runs that cannot hold folders, even for root
    files["runs_file"].write_text("")
    if case == "reports not a folder":  # the report comes last: a reports/ it cannot write is refused first
        files["reports_file"] = tmp_path / "reports"
        files["reports_file"].write_text("")
    files["study_reports"] = files["study"]
    before = sorted(p.name for p in tmp_path.iterdir())
    argv, message = BAD_RUNS[case]
    assert main(["run", *(a.format(**files) for a in argv)]) == 2
    assert message.format(**files) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no runs/, no mlflow.db, no mlruns/


def chmod_blocks_writes(folder: Path) -> bool:
    """Whether a folder made read-only with chmod refuses this process's writes (root's do not)."""
    probe = folder / "chmod-probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        (probe / "f").write_text("")
    except PermissionError:
        return True
    finally:
        probe.chmod(0o755)
        (probe / "f").unlink(missing_ok=True)
        probe.rmdir()
    return False


def test_read_only_runs_folder_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    if not chmod_blocks_writes(tmp_path):
        pytest.skip("this process writes into read-only folders (root with CAP_DAC_OVERRIDE): chmod cannot make one "
                    "for it; the 'runs not a folder' case of test_bad_input_exits_2_and_creates_nothing runs for root")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    study = write_study(tmp_path, "locked")
    (tmp_path / "runs" / "locked" / "trials").mkdir(parents=True)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for folder in ("runs/locked/trials", "runs/locked", "runs"):
        (tmp_path / folder).chmod(0o555)  # chmod -R a-w runs
    try:
        for command in ("run", "worker"):
            assert main([command, str(study)]) == 2
            err = capsys.readouterr().err.strip()
            assert err == (f"ablate {command}: error: the runs folder {tmp_path / 'runs'} is not writable (Permission "
                           "denied): fix its permissions (e.g. chmod -R u+w runs) or pass --runs DIR with a writable "
                           "folder")
        (tmp_path / "runs").chmod(0o755)  # only the study's folder is read-only now
        assert main(["run", str(study)]) == 2
        assert f"the study's run folder {tmp_path / 'runs' / 'locked'} is not writable" in capsys.readouterr().err
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before  # no mlflow.db, no store
    finally:
        for folder in ("runs", "runs/locked", "runs/locked/trials"):
            (tmp_path / folder).chmod(0o755)


def test_status_writes_nothing_even_with_a_torn_journal_tail(workdir, capsys):
    """`ablate status` is a read-only command: with a torn last record in the journal (a writer that died)
    it reads the finished trials, and the journal, its lock file and the folder stay byte for byte."""
    study = write_study(workdir, "ro")
    assert run(str(study), "--no-progress") == 0
    journal = workdir / "runs" / "ro" / STORE_FILE
    with open(journal, "ab") as fh:
        fh.write(b'{"op_code": 5, "worker_id": "x", "tri')  # a record cut short
    for lock in journal.parent.glob("*.lock"):
        lock.unlink()
    before = {p: p.read_bytes() for p in (workdir / "runs").rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["status", str(study), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["done"] == 4  # the torn tail is skipped, not read
    after = {p: p.read_bytes() for p in (workdir / "runs").rglob("*") if p.is_file()}
    assert after == before  # no healing, no .torn copy, no lock file


def test_status_of_a_study_never_run_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    study = write_study(tmp_path, "fresh")
    assert main(["status", str(study), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"] == {"done": 0, "running": 0, "failed": 0, "pending": 4} and data["store"] is None
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------- subprocesses


@pytest.mark.slow
def test_resume_after_sigkill_runs_exactly_the_missing_trials(workdir, capsys):
    base = {"train.steps": 6, "train.checkpoint_every": 1, "eval.every": 3}
    study_file = write_study(workdir, "killed", levels={"token": LOSS_NORM["token"]}, seeds=3, base=base)
    keys = [s.key for s in Plan.of(load_study(study_file), "default").specs]  # seeds 0, 1, 2
    storage = str(workdir / "runs" / "killed" / STORE_FILE)
    log = open(workdir / "first.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ablate", "run", str(study_file), "--no-progress"], cwd=workdir,
                            env=sub_env(workdir), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # the second trial has checkpointed at least one step: kill now
    kill_once_written(proc, [workdir / "runs" / "killed" / "trials" / keys[1] / "trainer.pt"], workdir / "first.log")
    log.close()
    before = attempts_by_key(storage, "killed")
    assert [a.state for a in before[keys[0]]] == ["done"]
    assert [a.state for a in before[keys[1]]] == ["running"]  # killed mid-trial
    assert keys[2] not in before or [a.state for a in before[keys[2]]] == ["pending"]
    assert main(["status", str(study_file)]) == 0
    status = capsys.readouterr().out
    assert [line.split() for line in status.splitlines()[2:4]] == [
        ["loss_norm=token", "1", "1", "0", "1"], ["total", "1", "1", "0", "1"]]
    assert f"running:\n  loss_norm=token seed=1 (key {keys[1]}) on " in status
    assert status.rstrip().endswith(f"STALE: its worker {before[keys[1]][0].claim['name']} died (process {proc.pid} is gone)")

    assert run(str(study_file), "--no-progress") == 0  # same command again
    assert "3 trials; 1 already done, 2 to run (1 of them left by dead workers: they resume from their checkpoints)" in \
        capsys.readouterr().err
    after = attempts_by_key(storage, "killed")
    assert after[keys[0]] == before[keys[0]]  # the completed trial did not run again
    stale, resumed = after[keys[1]]
    assert stale.state == "failed" and stale.error.startswith("stale: its worker") and str(proc.pid) in stale.error
    assert resumed.state == "done" and resumed.result["resumed_from"] >= 1  # from its checkpoint
    assert [a.state for a in after[keys[2]]] == ["done"] and after[keys[2]][0].claim["pid"] == os.getpid()
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    parent, children = mlflow_runs(uri, "killed")
    assert len(children) == 3 and all(r.info.status == "FINISHED" for r in children)
    child = {r.data.tags["ablate.trial_key"]: r for r in children}[keys[1]]
    c = MlflowClient(uri)
    assert sorted(m.step for m in c.get_metric_history(child.info.run_id, "loss/total")) == list(range(1, 7))
    assert sorted(m.step for m in c.get_metric_history(child.info.run_id, "eval/accuracy")) == [0, 3, 6]
    assert not list((workdir / "runs" / "killed" / "trials").rglob("trainer.pt"))  # finished: checkpoints dropped


@pytest.mark.slow
def test_three_local_workers_on_a_journal_log_to_an_mlflow_server(workdir, mlflow_uri):
    levels = {**LOSS_NORM, "prompt": {"loss.aggregation": "prompt-mean"}}
    study = write_study(workdir, "pool", levels=levels, seeds=2)
    proc = subprocess.run([sys.executable, "-m", "ablate", "run", str(study), "--workers", "3", "--no-progress",
                           "--tracking-uri", mlflow_uri], cwd=workdir, env=sub_env(workdir), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 trials; 0 already done, 6 to run" in proc.stderr
    storage = str(workdir / "runs" / "pool" / STORE_FILE)
    check_complete_once(storage, study, mlflow_uri)
    workers = {a.claim["name"] for v in attempts_by_key(storage, "pool").values() for a in v}
    assert all(name.rsplit("/", 1)[-1] in ("0", "1", "2") for name in workers)  # pool workers /0 /1 /2


@pytest.mark.slow
def test_three_workers_on_postgresql_log_to_an_mlflow_server(workdir, mlflow_uri, pg):
    storage = pg.create_database("pool_pg")
    levels = {**LOSS_NORM, "prompt": {"loss.aggregation": "prompt-mean"}}
    study = write_study(workdir, "poolpg", levels=levels, seeds=2)
    cmd = [sys.executable, "-m", "ablate", "worker", str(study), "--storage", storage, "--tracking-uri", mlflow_uri]
    procs = [subprocess.Popen(cmd, cwd=workdir, env=sub_env(workdir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    check_complete_once(storage, study, mlflow_uri)  # three workers enqueued once, each trial ran once
    done = sum(int(o.split("worker done: ")[1].split()[0]) for o in outputs)
    assert done == 6


# ----------------------------------------------------------------------------------------- quickstart


def test_quickstart_study_is_valid_and_every_key_is_commented():
    path = ROOT / "studies" / "quickstart.yaml"
    study = load_study(path)
    assert study.n_trials == 8 and len(study.arms) == 4 and study.seeds == (0, 1)
    assert set(study.budgets) == {"smoke", "default", "full"}
    configs = {a.name: study.config(a, "default") for a in study.arms}
    gspo = configs["loss_norm=token,ratio=sequence"]
    assert (gspo.loss.aggregation, gspo.loss.ratio_level, gspo.loss.clip_low, gspo.loss.clip_high) == (
        "token-mean", "sequence", 3e-4, 4e-4)
    assert configs["loss_norm=sequence,ratio=token"].loss.aggregation == "seq-mean-token-mean"
    assert study.config(study.arms[0], "smoke").train.steps == 2
    assert (study.objective.metric, study.objective.mode) == ("eval/accuracy", "max")
    in_block = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if in_block and line.startswith("  ") and ":" not in line.split("#")[0]:
            continue  # a line of the folded description
        in_block = line.rstrip().endswith(">-") or ">-  " in line
        assert "#" in line, f"studies/quickstart.yaml:{number}: key without a comment: {line.strip()}"


def test_another_study_under_a_used_name_is_refused_at_every_budget_and_for_report(workdir, capsys):
    """Two different study files with the same name: the second is refused at the budget the first ran,
    at another budget, and by `ablate report`, with one message naming both files; nothing is written.
    The same study with more seeds is still the same study."""
    first = write_study(workdir, "twin", levels={"token": LOSS_NORM["token"]}, seeds=1,
                        budgets={"smoke": {"train.steps": 1}})
    assert run(str(first), "--no-progress") == 0
    capsys.readouterr()
    other = workdir / "other"
    other.mkdir()
    second = write_study(other, "twin", levels={"token": LOSS_NORM["token"]}, seeds=1, base={"optim.lr": 3e-3},
                         budgets={"smoke": {"train.steps": 1}})
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    journal = workdir / "runs" / "twin" / STORE_FILE
    runs_before, journal_before = len(mlflow_runs(uri, "twin")[1]), journal.read_bytes()
    report_before = (workdir / "reports" / "twin" / "README.md").read_text()
    for argv in (["run", str(second), "--threads", "1", "--no-progress"],
                 ["run", str(second), "--budget", "smoke", "--threads", "1", "--no-progress"],
                 ["report", str(second), "--no-log"],
                 ["run", str(second), "--runs", str(workdir / "elsewhere"), "--threads", "1", "--no-progress"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "belongs to another study of the same name" in err[0], (argv, err)
        assert str(first.resolve()) in err[0] and str(second) in err[0] and "its own 'name:'" in err[0]
    assert len(mlflow_runs(uri, "twin")[1]) == runs_before and journal.read_bytes() == journal_before
    assert (workdir / "reports" / "twin" / "README.md").read_text() == report_before
    assert not (workdir / "elsewhere").exists()
    grown = write_study(workdir, "twin", levels={"token": LOSS_NORM["token"]}, seeds=2,
                        budgets={"smoke": {"train.steps": 1}})
    assert grown == first and run(str(grown), "--no-progress", "--extend") == 0  # more seeds: the same study


def test_a_study_changed_only_in_its_analysis_reuses_its_trials_and_rebuilds_its_report(workdir, capsys):
    """The study's file changes its objective (another metric, mode, summary) and min_effect after it ran: the
    same study (its trials' keys and identity unchanged), so no trial runs again and the report is rebuilt for
    the new objective. A store and experiment bound before the analysis left the identity (the fingerprint
    with the old objective in it) are still this study's, and are bound anew. An objective metric that none of
    the finished trials logged: the report says so, and `ablate run` exits 1 with one message naming the file,
    the line and the fix."""
    from ablate.store.queue import _IDENTITY_ATTR

    path = write_study(workdir, "analysed", seeds=1)
    assert run(str(path), "--no-progress") == 0
    storage, uri = str(workdir / "runs" / "analysed" / STORE_FILE), f"sqlite:///{workdir / 'mlflow.db'}"
    attempts, children = attempts_by_key(storage, "analysed"), mlflow_runs(uri, "analysed")[1]
    assert len(attempts) == 2 and all([a.state for a in v] == ["done"] for v in attempts.values())
    readme = workdir / "reports" / "analysed" / "README.md"
    assert "maximize eval/accuracy" in readme.read_text()
    capsys.readouterr()

    def unchanged() -> None:
        assert attempts_by_key(storage, "analysed") == attempts  # no trial ran again
        assert sorted(r.info.run_id for r in mlflow_runs(uri, "analysed")[1]) == sorted(r.info.run_id for r in children)

    objective = {"metric": "eval/format_rate", "mode": "min", "summary": "mean"}
    write_study(workdir, "analysed", seeds=1, objective=objective, min_effect=0.05)
    assert run(str(path), "--no-progress") == 0, capsys.readouterr().err
    unchanged()
    assert "minimize eval/format\\_rate" in readme.read_text()  # the report, rebuilt for the new objective
    assert main(["report", str(path), "--no-log"]) == 0

    study = load_study(path)  # as if bound by ablate before: the old fingerprint, with the first objective
    first = replace(study, objective=Objective("eval/accuracy", "max"))
    store = StudyStore(storage, "analysed", create=False)
    store.storage.set_study_system_attr(store.study_id, _IDENTITY_ATTR, {"fingerprint": first.legacy_fingerprint(),
                                                                          "file": str(path.resolve())})
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("analysed").experiment_id
    client.set_experiment_tag(experiment, "ablate.fingerprint", first.legacy_fingerprint())
    assert run(str(path), "--no-progress") == 0, capsys.readouterr().err
    unchanged()
    held = StudyStore(storage, "analysed", create=False)
    assert held.storage.get_study_system_attrs(held.study_id)[_IDENTITY_ATTR]["fingerprint"] == study.fingerprint()
    assert client.get_experiment(experiment).tags["ablate.fingerprint"] == study.fingerprint()  # bound anew

    write_study(workdir, "analysed", seeds=1, objective={"metric": "data/pool_size", "mode": "max"})
    capsys.readouterr()
    assert run(str(path), "--no-progress") == 1  # logged only with algo.drop_solved_at: by none of these trials
    unchanged()
    err = [line for line in capsys.readouterr().err.splitlines() if "objective" in line]
    line = path.read_text().splitlines().index("objective:") + 2
    assert err == [f"{path}:{line}: objective.metric: none of the 2 finished trials of study 'analysed' (default) "
                   "logged 'data/pool_size', so the report compares nothing; name a metric they log (docs/metrics.md; "
                   "some are logged only with the option that measures them, e.g. eval/pass_at_{k} with eval.pass_k) "
                   "and run again: the finished trials are reused and the report rebuilt; its report says so: "
                   "reports/analysed/index.html"], err
    text = readme.read_text()
    assert "None of the 2 finished trials logged the objective's metric data/pool\\_size" in text
    assert "No trial has finished yet" not in text


# ------------------------------------------------------------------------------------------- packing


def test_packed_trials_train_as_populations_and_a_diverging_member_fails_alone(workdir, ws_cache, capsys, monkeypatch):
    import ablate.train.population as population

    sizes: list[int] = []
    run_members = population.run_members

    def counted(tasks):
        sizes.append(len(tasks))
        return run_members(tasks)

    monkeypatch.setattr(population, "run_members", counted)
    levels = {**LOSS_NORM, "diverge": {"optim.lr": 1e30}}
    warm = {"warmstart.enabled": True, "warmstart.cache_dir": ws_cache, "warmstart.target_min": 0.15,
            "warmstart.batch_size": 32, "warmstart.lr": 3e-3, "rollout.prompts_per_step": 4, "rollout.group_size": 4,
            "algo.minibatches": 2}  # lr 1e30: the second minibatch of step 1 is non-finite
    study = write_study(workdir, "packed", levels=levels, base={"train.packed": True, **warm})  # rewards vary
    assert main(["show", str(study)]) == 0
    assert "packing: 6 of 6 trials set train.packed and train in populations (`ablate run --pack K`; auto here: 1 " \
           "trial a population) of 1 shape" in capsys.readouterr().out
    assert run(str(study), "--no-progress", "--pack", "8") == 1  # the diverging arm failed
    assert sizes == [6]  # one population: every trial of the study
    parent, _ = mlflow_runs(f"sqlite:///{workdir / 'mlflow.db'}", "packed")
    assert parent.data.tags["ablate.pack"] == "8"
    storage = str(workdir / "runs" / "packed" / STORE_FILE)
    specs = {s.key: s for s in Plan.of(load_study(study), "default").specs}
    by_key = attempts_by_key(storage, "packed")
    for key, attempts in by_key.items():
        (attempt,) = attempts
        if specs[key].arm == "loss_norm=diverge":
            assert attempt.state == "failed" and "NonFiniteError" in attempt.error
        else:
            assert attempt.state == "done" and attempt.claim["pid"] == os.getpid()


def test_bad_pack_is_refused_with_exit_2(workdir, capsys):
    study = write_study(workdir, "badpack")
    assert run(str(study), "--pack", "zero") == 2
    assert "--pack zero: must be a whole number of trials, 1 or more, or auto" in capsys.readouterr().err
    assert not (workdir / "runs" / "badpack").exists()


def test_a_population_killed_mid_training_resumes_every_member_exactly(workdir, capsys):
    base = {"train.steps": 6, "train.checkpoint_every": 1, "eval.every": 3, "train.packed": True}
    levels = {"token": LOSS_NORM["token"]}
    killed = write_study(workdir, "podkill", levels=levels, seeds=3, base=base)
    keys = [s.key for s in Plan.of(load_study(killed), "default").specs]
    log = open(workdir / "first.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ablate", "run", str(killed), "--no-progress", "--pack", "3"],
                            cwd=workdir, env=sub_env(workdir), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    # every member has checkpointed a step: kill now
    kill_once_written(proc, [workdir / "runs" / "podkill" / "trials" / k / "trainer.pt" for k in keys],
                      workdir / "first.log")
    log.close()
    storage = str(workdir / "runs" / "podkill" / STORE_FILE)
    assert all([a.state for a in v] == ["running"] for v in attempts_by_key(storage, "podkill").values())
    assert run(str(killed), "--no-progress", "--pack", "3") == 0
    after = attempts_by_key(storage, "podkill")
    straight = write_study(workdir, "podstraight", levels=levels, seeds=3, base=base)
    assert run(str(straight), "--no-progress", "--pack", "3") == 0
    clean = attempts_by_key(str(workdir / "runs" / "podstraight" / STORE_FILE), "podstraight")
    for key in keys:
        stale, resumed = after[key]
        assert stale.state == "failed" and resumed.state == "done" and resumed.result["resumed_from"] >= 1
        (once,) = clean[key]
        assert resumed.value == once.value  # exactly: the same population, resumed
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    c = MlflowClient(uri)
    runs = {r.data.tags["ablate.trial_key"]: r for r in mlflow_runs(uri, "podkill")[1]}
    clean_runs = {r.data.tags["ablate.trial_key"]: r for r in mlflow_runs(uri, "podstraight")[1]}
    for key in keys:
        a = sorted((m.step, m.value) for m in c.get_metric_history(runs[key].info.run_id, "loss/total"))
        b = sorted((m.step, m.value) for m in c.get_metric_history(clean_runs[key].info.run_id, "loss/total"))
        assert a == b and [s for s, _ in a] == list(range(1, 7))


def test_pack_size_auto_is_one_on_a_cpu_and_a_memory_estimate_on_a_gpu():
    from ablate.config import TrialConfig
    from ablate.running.footprint import gpu_member_bytes, pack_size

    packed = TrialConfig.from_overrides({"train.packed": True, "device": "cpu"})
    assert pack_size("auto", packed) == 1 and pack_size(16, packed) == 16
    assert pack_size(16, TrialConfig.from_overrides({"device": "cpu"})) == 1  # not packed: always solo
    # 32 bytes a parameter and 256 MiB: tiny-llama ~0.28 GB; SmolLM2-135M ~4.6 GB (16 in half an H200's 139 GiB)
    assert gpu_member_bytes(1_000_000) == 32_000_000 + 256 * 2**20
    assert int(0.5 * 139 * 2**30 // gpu_member_bytes(134_515_008)) == 16


def test_report_from_a_folder_it_cannot_write_is_refused_before_anything(tmp_path, capsys):
    """`ablate report --from` writes into the folder it reads (or --out): a folder that cannot be written (here
    --out under a file, which refuses even root) is refused with exit 2, one line naming it and the fix, and
    nothing is written anywhere."""
    root = Path(__file__).resolve().parent.parent
    folder = tmp_path / "behaviour_logp"
    shutil.copytree(root / "reports" / "behaviour_logp", folder)
    (tmp_path / "afile").write_text("")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["report", str(root / "studies" / "behaviour_logp.yaml"), "--from", str(folder),
                 "--out", str(tmp_path / "afile" / "out")]) == 2
    err = capsys.readouterr().err
    assert f"the folder {tmp_path / 'afile'} (where --out {tmp_path / 'afile' / 'out'} would be made) is not " \
           "writable (Not a directory)" in err and "pass --out DIR with a writable folder" in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_two_runs_of_one_study_at_once_both_finish_with_every_trial_done_once(workdir):
    """Two `ablate run` of one study started together in one folder: each trial is trained once (the store
    hands each to one of them; a worker with nothing to claim waits for the other's running trials), both end
    together and both write the report, one after the other. The race this guards (one run's figures deleted
    under it by the other's report: exit 1) depends on timing and need not occur here; the next test checks
    the lock that prevents it."""
    study = write_study(workdir, "twice", seeds=3, base={"train.steps": 15})  # trials of seconds: they overlap
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ABLATE_CACHE": str(workdir / "cache")}
    for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
        env.pop(var, None)
    argv = [sys.executable, "-m", "ablate", "run", str(study), "--threads", "1", "--no-progress", "--heartbeat", "1",
            "--grace", "30"]
    procs = [subprocess.Popen(argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert all(o[0].strip().splitlines()[-1] == "report: reports/twice/index.html" for o in outs)
    assert (workdir / "reports" / ".twice.lock").exists()  # the lock they wrote the report under
    store = StudyStore(str(workdir / "runs" / "twice" / STORE_FILE), "twice", create=False)
    done = [a.key for a in store.attempts("default") if a.state == "done"]
    assert len(done) == 6 and len(set(done)) == 6  # every trial once, none twice


def test_the_report_is_written_under_its_folder_lock(workdir, monkeypatch):
    """build_report writes a study's report holding reports/.<study>.lock, so that a second writer (two runs
    of one study ending together) waits instead of deleting the first one's figures: inside write_report
    another acquirer times out at once."""
    from filelock import FileLock, Timeout

    import ablate.report.build as build

    study = write_study(workdir, "locked_report")
    assert run(str(study), "--no-progress") == 0
    seen = []
    real = build.write_report

    def probe(*args, **kwargs):
        with pytest.raises(Timeout):
            FileLock(str(workdir / "reports" / ".locked_report.lock")).acquire(timeout=0)
        seen.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "write_report", probe)
    assert main(["report", str(study), "--no-log"]) == 0 and seen == [True]


def test_a_report_from_an_edited_study_file_is_refused_unless_asked(workdir, capsys):
    """A study file edited after its run (one level's value changed) no longer defines the trials that ran:
    `ablate report` refuses (exit 2, one message naming the budget, the left-out arm and the fixes) and leaves
    the report as it was; --allow-fewer writes the report of the file's trials, saying it in a note."""
    study = write_study(workdir, "edited")
    assert run(str(study), "--no-progress") == 0
    readme = workdir / "reports" / "edited" / "README.md"
    before = readme.read_text()
    text = study.read_text()
    assert text.count("loss.aggregation: token-mean\n") == 1
    study.write_text(text.replace("loss.aggregation: token-mean\n", "loss.aggregation: seq-mean-token-sum\n"))
    capsys.readouterr()
    assert main(["report", str(study), "--no-log"]) == 2
    err = capsys.readouterr().err
    assert "the study file's design at budget 'default' differs from the one that ran: 2 finished trial(s)" in err
    assert "arms loss_norm=token" in err and "--allow-fewer" in err and "--extend" in err
    assert readme.read_text() == before
    assert main(["report", str(study), "--no-log", "--allow-fewer"]) == 0
    assert "are not in the current design (the study file changed?) and are left out" in readme.read_text()


def test_a_changed_level_is_refused_at_a_budget_the_store_never_ran(workdir, capsys):
    """The store keeps every level that ran: the same file with one level's value changed is refused at
    another budget too (before: accepted there, after which the first file was refused), with the level, both
    values and the fixes; nothing of that budget is frozen."""
    study = write_study(workdir, "lv", budgets={"smoke": {"train.steps": 1}})
    assert run(str(study), "--no-progress") == 0
    text = study.read_text()
    assert text.count("loss.aggregation: token-mean\n") == 1
    study.write_text(text.replace("loss.aggregation: token-mean\n", "loss.aggregation: seq-mean-token-sum\n"))
    capsys.readouterr()
    assert run(str(study), "--budget", "smoke", "--no-progress") == 2
    err = capsys.readouterr().err
    assert "the study file changed a level that ran" in err and "level 'token' of factor 'loss_norm' sets" in err
    assert "seq-mean-token-sum" in err and "give a new study a new `name:`" in err
    store = StudyStore(str(workdir / "runs" / "lv" / STORE_FILE), "lv", create=False)
    assert store.frozen_design("smoke") is None
    study.write_text(text)  # restored: the smoke budget runs
    assert run(str(study), "--budget", "smoke", "--no-progress") == 0
