"""The multi-machine recipe of docs/distributed.md, run on loopback: a PostgreSQL study store, one
``mlflow server`` that proxies artifacts, three ``ablate worker`` processes (each in its own folder, as
on its own machine) on ``studies/quickstart.yaml`` at the smoke budget, then ``ablate report``. Every
trial must run exactly once: one attempt per trial in the store, done; one MLflow child run per trial,
each (metric, step) logged once. The second test takes PostgreSQL and then the MLflow server down in
the middle of the study (the quickstart with 4 seeds, 16 trials, so that it is still running through
both outages) and expects the same outcome. Every ``ablate`` and ``mlflow server`` command of the
recipe (docs/distributed.md, examples/distributed/) is parsed by the real command lines."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import servers
import yaml

from ablate.store import StudyStore
from ablate.study import load_study
from ablate.study.plan import Plan

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "studies" / "quickstart.yaml"
BUDGET = "smoke"
WORKERS = 3
#: The most seconds the workers may take (the study takes well under a minute of CPU).
WORKER_TIMEOUT = 300


DOC = ROOT / "docs" / "distributed.md"
EXAMPLES = ROOT / "examples" / "distributed"


def recipe_commands() -> list[str]:
    """Every ``ablate ...`` and ``mlflow server ...`` command of the recipe: the lines of the doc's bash
    blocks (backslash continuations joined), the Compose services' commands, the Slurm script's worker."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("docker compose") and " worker " in line:  # a command run in the worker's image
                line = line.split(" worker ", 1)[1].strip()
            if line.startswith(("ablate ", "mlflow server ")):
                commands.append(line)
            commands += re.findall(r"--wrap \"([^\"]+)\"", line)
    compose = yaml.safe_load((EXAMPLES / "compose.yaml").read_text())
    commands += [compose["services"][s]["command"] for s in ("mlflow", "worker")]
    slurm = (EXAMPLES / "slurm_array.sh").read_text()
    (worker,) = [ln for ln in slurm.splitlines() if ln.startswith("exec ablate worker")]
    commands.append(worker.removeprefix("exec ").replace('"$study"', "studies/quickstart.yaml")
                    .replace('"$budget"', "default").replace('"$threads"', "4"))
    return [c.removeprefix(".venv/bin/") for c in commands]


def test_every_command_of_the_recipe_exists():
    """Each command parses with ablate's and mlflow's own parsers: no option the programs do not have."""
    import shlex

    from mlflow.cli import cli as mlflow_cli

    from ablate.cli import build_parser

    commands = recipe_commands()
    assert {c.split()[1] for c in commands if c.startswith("ablate")} == {"worker", "status", "report", "run"}
    assert sum(c.startswith("mlflow server") for c in commands) == 2
    parser = build_parser()
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "ablate":
            try:
                parser.parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"not a valid ablate command: {command}")
        else:
            ctx = mlflow_cli.commands["server"].make_context("server", argv[2:])
            assert ctx.params["serve_artifacts"] and ctx.params["artifacts_destination"], command
            assert ctx.params["default_artifact_root"] is None, command  # artifacts only through the server
            assert ctx.params["allowed_hosts"], command


@pytest.fixture(scope="module")
def pg():
    with servers.postgres_server() as server:
        yield server


@pytest.fixture
def mlflow(tmp_path):
    """One MLflow server per test: the study's experiment and parent run are found by the study's name."""
    with servers.mlflow_server(tmp_path / "mlflow", serve_artifacts=True) as server:
        yield server


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One warm-start cache for both tests (a machine builds it once; here it is not what is tested)."""
    return tmp_path_factory.mktemp("cache")


def machine_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE")}
    env.update(ABLATE_CACHE=str(cache), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env


def start_workers(tmp_path: Path, study: Path, storage: str, tracking_uri: str,
                  cache: Path) -> list[tuple[subprocess.Popen, Path]]:
    """``ablate worker`` x :data:`WORKERS`, each in its own folder (its ``runs/``) with its output in a file.

    The last one is given the store and the server by environment variables (``ABLATE_STORAGE``,
    ``MLFLOW_TRACKING_URI``), the others by options, as the recipe allows both."""
    out = []
    for i in range(WORKERS):
        folder = tmp_path / f"machine{i}"
        folder.mkdir()
        env = machine_env(cache)
        argv = [sys.executable, "-m", "ablate", "worker", str(study), "--budget", BUDGET, "--threads", "1"]
        if i == WORKERS - 1:
            env.update(ABLATE_STORAGE=storage, MLFLOW_TRACKING_URI=tracking_uri)
        else:
            argv += ["--storage", storage, "--tracking-uri", tracking_uri]
        log = folder / "worker.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        out.append((proc, log))
    return out


def wait_workers(workers: list[tuple[subprocess.Popen, Path]], timeout: float = WORKER_TIMEOUT) -> list[str]:
    """Wait for every worker (killing them all past ``timeout`` s); their outputs, asserting each exited 0."""
    deadline = time.monotonic() + timeout
    try:
        for proc, _ in workers:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_workers(workers)
        outputs = [log.read_text() for _, log in workers]
        pytest.fail(f"the workers did not finish within {timeout:g} s:\n" + "\n---\n".join(o[-2000:] for o in outputs))
    outputs = [log.read_text() for _, log in workers]
    assert [p.returncode for p, _ in workers] == [0] * len(workers), "\n---\n".join(o[-3000:] for o in outputs)
    return outputs


def kill_workers(workers: list[tuple[subprocess.Popen, Path]]) -> None:
    for proc, _ in workers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def check_exactly_once(study_file: Path, storage: str, tracking_uri: servers.MlflowServer, outputs: list[str]) -> None:
    """One attempt per trial, done; one finished MLflow child run per trial; every (metric, step) logged once.
    The runs and artifacts are read through the server; the metric histories (one request per run and
    metric) from the server's own database, which holds what the server accepted."""
    from mlflow import MlflowClient

    study = load_study(study_file)
    plan = Plan.of(study, BUDGET)
    keys = {s.key for s in plan.specs}
    steps = plan.specs[0].config.train.steps
    attempts: dict[str, list[str]] = {}
    for a in StudyStore(storage, study.name, create=False).attempts(BUDGET):
        attempts.setdefault(a.key, []).append(a.state)
    assert attempts == {k: ["done"] for k in keys}
    assert sum(int(o.split("worker done: ")[1].split()[0]) for o in outputs) == len(keys)

    client = MlflowClient(tracking_uri)
    stored = MlflowClient(f"sqlite:///{tracking_uri.folder / 'server.db'}")
    exp = client.get_experiment_by_name(study.name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    roles = Counter(r.data.tags.get("ablate.role") for r in runs)
    assert roles == {"study": 1, "trial": len(keys)}, roles
    children = [r for r in runs if r.data.tags["ablate.role"] == "trial"]
    assert sorted(r.data.tags["ablate.trial_key"] for r in children) == sorted(keys)  # one run per trial
    duplicates = {}
    for r in children:
        assert r.info.status == "FINISHED", r.data.tags["ablate.trial_key"]
        for name in r.data.metrics:
            logged = Counter(m.step for m in stored.get_metric_history(r.info.run_id, name))
            if any(n > 1 for n in logged.values()):
                duplicates[(r.data.tags["ablate.trial_key"], name)] = logged
        assert sorted(m.step for m in stored.get_metric_history(r.info.run_id, "loss/total")) == list(range(1, steps + 1))
        assert sorted(m.step for m in stored.get_metric_history(r.info.run_id, "eval/accuracy")) == [0, steps]
        assert "history.csv" in {f.path for f in client.list_artifacts(r.info.run_id)}  # uploaded via the server
    assert not duplicates, f"metrics logged twice at one step: {duplicates}"


def check_report(tmp_path: Path, study: Path, tracking_uri: str, cache: Path, ablate_cli) -> None:
    """``ablate report`` from another folder (the head machine), through the server: every trial in
    results.csv, done. It runs in this process (the ``ablate_cli`` fixture): a fresh interpreter would
    add seconds of imports and test nothing more."""
    head = tmp_path / "head"
    head.mkdir()
    code, out, err, _ = ablate_cli(["report", str(study), "--budget", BUDGET, "--tracking-uri", tracking_uri,
                                    "--out", str(head / "report")], head, cache)
    assert code == 0, out + err
    assert out.splitlines()[0] == f"report: {head / 'report' / 'index.html'}"
    results = pd.read_csv(head / "report" / "results.csv")
    assert len(results) == load_study(study).n_trials and set(results["state"]) == {"done"}


@pytest.mark.slow  # 1.5-2 minutes on 2 busy cores (the warm start built once, 8 smoke trials, the report)
def test_three_workers_on_postgresql_and_an_mlflow_server_run_each_trial_once(tmp_path, pg, mlflow, cache, ablate_cli):
    storage = pg.create_database("recipe")
    outputs = wait_workers(start_workers(tmp_path, STUDY, storage, mlflow, cache))
    check_exactly_once(STUDY, storage, mlflow, outputs)
    check_report(tmp_path, STUDY, mlflow, cache, ablate_cli)


def study_counts(storage: str) -> dict[str, int]:
    """The study's trial counts in the store (empty until a worker has created it)."""
    try:
        return StudyStore(storage, "quickstart", create=False).counts(BUDGET)
    except Exception:  # noqa: BLE001 - not created yet
        return {}


def outage(server, seconds: float, storage: str, label: str, outages: list[str]) -> None:
    """Stop ``server``, wait ``seconds``, start it again; note the study's counts when it went down
    (failing the test when the study had already ended: the outage would test nothing)."""
    counts = study_counts(storage)
    assert counts and counts["done"] < sum(counts.values()), f"the study ended before the {label} outage: {counts}"
    server.stop()
    try:
        time.sleep(seconds)
    finally:
        server.start()
    outages.append(f"{label} down {seconds:g} s at {counts}")


@pytest.mark.slow  # about a minute when it fails at the first outage; 2 minutes when it passes
def test_workers_survive_a_restart_of_postgresql_and_of_the_mlflow_server(tmp_path, pg, mlflow, cache, ablate_cli):
    """PostgreSQL goes down for 5 s two seconds after the first trial is done, then the MLflow server
    for 5 s (plus the time it takes to start); one after the other, so that each is the only server
    down: the workers' calls to the other one go through (and reach the one that is down)."""
    storage = pg.create_database("recipe_outage")
    study = tmp_path / "quickstart.yaml"  # 4 seeds: the study outlasts both outages
    study.write_text(re.sub(r"^seeds: 2 ", "seeds: 4 ", STUDY.read_text(), count=1, flags=re.M))
    assert load_study(study).n_trials == 16
    workers = start_workers(tmp_path, study, storage, mlflow, cache)
    outages: list[str] = []
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        while study_counts(storage).get("done", 0) < 1:
            assert time.monotonic() < deadline, "no trial finished"
            time.sleep(0.5)
        time.sleep(2)
        outage(pg, 5, storage, "PostgreSQL", outages)
        outage(mlflow, 5, storage, "MLflow", outages)
    except BaseException:
        kill_workers(workers)
        raise
    print("\n".join(outages))
    outputs = wait_workers(workers)
    check_exactly_once(study, storage, mlflow, outputs)
    check_report(tmp_path, study, mlflow, cache, ablate_cli)
