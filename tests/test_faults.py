"""Fault injection (issue 15): tracking and store outages, liveness, an unreachable tracking server.

Every fault is real and on loopback: an ``mlflow server`` or a PostgreSQL server stopped and started
again at the same port (tests/servers.py), a tracking URI nobody listens on, a process that exists or
not. Each test is bounded in time. Each asserts the outcome a user needs: no trial runs twice, each
MLflow run holds each (metric, step) once, and a failure is one line naming the server and the fix.

(Torn journals, corrupt checkpoints and hostile YAML are injected in test_store.py, test_train.py
and test_yamlio.py; the multi-machine recipe with restarts in test_distributed.py.)
"""

from __future__ import annotations

import collections
import io
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import servers
from mlflow import MlflowClient
from test_runner import TINY, sub_env, write_study

from ablate.cli import main
from ablate.errors import OutageError
from ablate.store import StudyStore, WorkerInfo, process_start
from ablate.store.queue import _node_id
from ablate.tracking import TAG_LOGGED_STEP, Tracker, TrialIdentity, TrialLogger
from ablate.tracking.outbox import UNSENT_FILE, unsent_files, upload_unsent, write_unsent

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _fail_fast_http(monkeypatch):
    """MLflow's client retries a dead server for minutes by default: here a request fails at once."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def metric_rows(client: MlflowClient, run_id: str) -> collections.Counter:
    """(metric, step) -> how many rows the run holds."""
    run = client.get_run(run_id)
    return collections.Counter((m.key, m.step) for key in run.data.metrics
                               for m in client.get_metric_history(run_id, key))


def stop_once_the_parent_is_set_up(server, client: MlflowClient, proc: subprocess.Popen, study: str) -> None:
    """Stop the MLflow ``server`` as soon as ``study``'s parent run is set up there: created, its params
    and its ``design.json`` logged, the last request of the start-up (or ``proc`` ends, or 120 s). An
    outage before that is the start-up's (nothing trains; the run says to start the server), not the
    study's."""
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < 120:
        exp = client.get_experiment_by_name(study)
        parents = client.search_runs([exp.experiment_id], "tags.`ablate.role` = 'study'") if exp is not None else []
        if parents and any(f.path == "design.json" for f in client.list_artifacts(parents[0].info.run_id)):
            break
        time.sleep(0.05)
    server.stop()


def dead_uri() -> str:
    return f"http://127.0.0.1:{servers.free_port()}"


# ------------------------------------------------------------------------------- tracking outages


def test_the_logger_keeps_metrics_through_an_outage_and_sends_each_once(tmp_path):
    uri = servers.fresh_mlflow_db(tmp_path)
    live = MlflowClient(uri)
    run_id = live.create_run(live.create_experiment("x")).info.run_id
    logger = TrialLogger(live, run_id, flush_every=2)
    logger.retry_seconds = 3600
    logger({"a": 1.0, "b": 2.0}, 0)
    logger({"a": 1.5, "b": 2.5}, 1)  # sent
    assert logger.unsent is None and logger.requests == 1
    logger.client = MlflowClient(dead_uri())  # the server goes away
    logger({"a": 2.0, "b": 3.0}, 2)
    logger({"a": 2.5, "b": 3.5}, 3)  # due, not taken: kept, no exception
    assert logger.unsent is not None and "\n" not in logger.unsent
    logger({"a": 3.0, "b": 4.0}, 4)
    logger({"a": 3.5, "b": 4.5}, 5)  # due again, but the next try waits retry_seconds: training goes on
    assert logger.requests == 1
    logger.client = live  # it is back
    assert logger.close() is True and logger.unsent is None
    rows = metric_rows(live, run_id)
    assert set(rows) == {(k, s) for k in "ab" for s in range(6)} and set(rows.values()) == {1}
    assert live.get_run(run_id).data.tags[TAG_LOGGED_STEP] == "5"


def test_a_request_split_in_chunks_tags_only_whole_steps(tmp_path):
    uri = servers.fresh_mlflow_db(tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("x")).info.run_id
    logger = TrialLogger(client, run_id, flush_every=100)
    for step in range(3):  # 3 steps of 700 metrics: requests of 999 cut steps in two
        logger({f"m{i}": float(i + step) for i in range(700)}, step)
    assert logger.close() and logger.requests == 3
    rows = metric_rows(client, run_id)
    assert len(rows) == 2100 and set(rows.values()) == {1}


def test_a_fenced_logger_sends_nothing_more(tmp_path):
    uri = servers.fresh_mlflow_db(tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("x")).info.run_id
    owned = [True]
    logger = TrialLogger(client, run_id, flush_every=1, fence=lambda: owned[0])
    logger({"a": 1.0}, 0)
    owned[0] = False  # another worker took the attempt over
    logger({"a": 2.0}, 1)
    assert logger.close() is True and logger.fenced
    assert metric_rows(client, run_id) == {("a", 0): 1}


def test_the_outbox_uploads_only_what_the_run_lacks_and_finishes_it(tmp_path):
    uri = servers.fresh_mlflow_db(tmp_path)
    tracker = Tracker(uri)
    client = tracker.client
    exp = client.create_experiment("s")
    parent = client.create_run(exp, tags={"ablate.role": "study"}).info.run_id
    start = {"study": "s", "key": "k1", "arm": "a", "seed": 0, "budget": "smoke", "levels": {"f": "x"},
             "flat_config": {"loss.clip": 0.2}, "worker": "w"}
    history = [(s, {"eval/accuracy": s / 10, "loss": 1.0 - s / 10}) for s in range(5)]
    logger = tracker.start_trial(parent, TrialIdentity(**start), flush_every=100)  # the run got steps 0-2 before the outage
    for step, metrics in history[:3]:
        logger(metrics, step)
    assert logger.close()
    finish = {"config_yaml": "x: 1\n", "samples": [], "eval_problems": None,
              "result": {"objective": 0.4}, "objective": 0.4}
    folder = tmp_path / "runs" / "s" / "trials" / "k1"
    write_unsent(folder, parent=parent, start=start, history=history, finish=finish, why="ConnectionError: down")
    assert unsent_files("s", tmp_path / "runs") == [folder / UNSENT_FILE]

    down = upload_unsent(Tracker(dead_uri()), "s", tmp_path / "runs")  # still down: kept, one line why
    assert down.sent == [] and down.left == ["k1"] and "\n" not in down.error
    assert (folder / UNSENT_FILE).exists()

    up = upload_unsent(tracker, "s", tmp_path / "runs")
    assert up.sent == ["k1"] and up.left == [] and not (folder / UNSENT_FILE).exists()
    run = tracker.find_trial_run(parent, "k1")
    rows = metric_rows(client, run.info.run_id)
    assert set(rows) == {(k, s) for k in ("eval/accuracy", "loss") for s in range(5)} and set(rows.values()) == {1}
    assert run.info.status == "FINISHED" and run.data.tags["ablate.objective"] == "0.4"
    assert upload_unsent(tracker, "s", tmp_path / "runs").sent == []  # nothing twice


def test_the_end_of_a_run_waits_for_a_server_only_what_is_left_of_its_outage(tmp_path):
    """--tracking-wait is the time an outage gets in all, from the first trial it kept on disk: a server down
    longer than that (down for the whole study) is not waited for at the run's end; a fresh outage is
    waited for what is left of it, said once."""
    folder = tmp_path / "runs" / "s" / "trials" / "k1"
    path = write_unsent(folder, parent="p", start={}, history=[], finish={}, why="ConnectionError: down")
    old = time.time() - 120
    os.utime(path, (old, old))  # kept two minutes ago: the server has been down that long
    t0 = time.monotonic()
    down = upload_unsent(Tracker(dead_uri()), "s", tmp_path / "runs", wait=60, stream=sys.stderr)
    assert down.left == ["k1"] and time.monotonic() - t0 < 15  # no 60 s wait on top of a 120 s outage
    os.utime(path, None)  # kept just now: a short outage may still end
    err = io.StringIO()
    t0 = time.monotonic()
    upload_unsent(Tracker(dead_uri()), "s", tmp_path / "runs", wait=3, stream=err)
    assert time.monotonic() - t0 >= 2 and "waiting up to 3 s more" in err.getvalue()


@pytest.mark.slow
def test_an_outage_that_began_near_the_run_s_end_gets_the_whole_end_wait_and_each_metric_is_sent_once(tmp_path):
    """A short outage near the end of a long run, its end covered by the end wait: the run's end waits the
    whole --tracking-wait from now, not what is left of it counted from the first kept trial (nothing once the
    outage is older than the wait: a 20-25 s outage against a 20 s wait then ended in exit 1 and a rerun).
    Here 300 s of run whose 4 finished trials but this one reached the server, a 30 s wait, the trial kept
    35 s ago and the real server restarted meanwhile: the trial is uploaded, each (metric, step) once, its run
    FINISHED."""
    with servers.mlflow_server(tmp_path / "mlflow") as server:
        tracker = Tracker(server.uri)
        parent = tracker.client.create_run(tracker.client.create_experiment("s"), tags={"ablate.role": "study"})
        start = {"study": "s", "key": "k1", "arm": "a", "seed": 0, "budget": "smoke", "levels": {"f": "x"},
                 "flat_config": {"loss.clip": 0.2}, "worker": "w"}
        history = [(s, {"eval/accuracy": s / 10, "loss": 1.0 - s / 10}) for s in range(5)]
        logger = tracker.start_trial(parent.info.run_id, TrialIdentity(**start), flush_every=100)
        for step, metrics in history[:3]:  # steps 0-2 reached the run before the outage
            logger(metrics, step)
        assert logger.close()
        finish = {"config_yaml": "x: 1\n", "samples": [], "eval_problems": None, "result": {"objective": 0.4},
                  "objective": 0.4}
        path = write_unsent(tmp_path / "runs" / "s" / "trials" / "k1", parent=parent.info.run_id, start=start,
                            history=history, finish=finish, why="ConnectionError: down")
        kept = time.time() - 35
        os.utime(path, (kept, kept))
        server.stop()
        restart = threading.Thread(target=server.start)  # back in ~10 s (MLflow's start-up)
        restart.start()
        err = io.StringIO()
        try:
            up = upload_unsent(tracker, "s", tmp_path / "runs", wait=30, ran_for=300, finished=4, stream=err)
        finally:
            restart.join()
        assert up.sent == ["k1"] and up.left == [] and up.error is None, (up, err.getvalue())
        assert "waiting up to 30 s more" in err.getvalue() and "from the run's end" in err.getvalue(), err.getvalue()
        run = tracker.find_trial_run(parent.info.run_id, "k1")
        rows = metric_rows(MlflowClient(server.uri), run.info.run_id)
        assert set(rows) == {(k, s) for k in ("eval/accuracy", "loss") for s in range(5)} and set(rows.values()) == {1}
        assert run.info.status == "FINISHED" and not unsent_files("s", tmp_path / "runs")


def test_an_outage_of_most_or_all_of_the_run_gets_only_what_is_left_of_the_wait(tmp_path):
    """Not a short outage, so not waited for from the run's end: one older than half the run, or one that kept
    every trial the run finished (the server down for the whole study, however short the run). Both get what is
    left of the wait counted from the first kept trial: nothing here."""
    folder = tmp_path / "runs" / "s" / "trials" / "k1"
    path = write_unsent(folder, parent="p", start={}, history=[], finish={}, why="ConnectionError: down")
    old = time.time() - 120
    os.utime(path, (old, old))  # kept 120 s into a 200 s run: the server was down for most of it
    t0 = time.monotonic()
    down = upload_unsent(Tracker(dead_uri()), "s", tmp_path / "runs", wait=20, ran_for=200, finished=5)
    assert down.left == ["k1"] and time.monotonic() - t0 < 10  # not waited for: the default wait is shorter
    young = time.time() - 30
    os.utime(path, (young, young))  # kept 30 s before a 200 s run's end, but its one finished trial: none reached MLflow
    t0 = time.monotonic()
    down = upload_unsent(Tracker(dead_uri()), "s", tmp_path / "runs", wait=20, ran_for=200, finished=1)
    assert down.left == ["k1"] and time.monotonic() - t0 < 10


def test_a_health_question_that_fails_while_another_finds_the_server_back_leaves_the_link_up(monkeypatch):
    """The link's prober and the end of a run ask /health at once: a stale failure (asked before the server
    came back, answered after the other found it up) does not take the link down again."""
    from ablate.tracking import client as client_module

    link = client_module.Link("http://127.0.0.1:1", probe_seconds=3600)
    asked, back = threading.Event(), threading.Event()

    def health(uri, timeout):
        if threading.current_thread().name == "stale":
            asked.set()
            back.wait(10)
            return "[Errno 111] Connection refused"
        return None

    monkeypatch.setattr(client_module, "health_error", health)
    link.down("Max retries exceeded")
    answers: list[bool] = []
    stale = threading.Thread(target=lambda: answers.append(link.answers()), name="stale")
    stale.start()
    asked.wait(10)
    assert link.answers() and link.up  # the server is back
    back.set()
    stale.join()
    assert answers == [False] and link.up and link.downs == 1


def test_the_default_end_wait_is_a_tenth_of_the_run_at_most_a_minute():
    from ablate.running.session import RunSettings

    auto = RunSettings("s.yaml", "default", "j", "sqlite:///m.db")
    assert [auto.end_wait(s) for s in (0, 30, 300, 6000)] == [0, 3, 30, 60]
    assert RunSettings("s.yaml", "default", "j", "u", tracking_wait=5).end_wait(6000) == 5  # --tracking-wait wins


# --------------------------------------------------------------------------------------- liveness


def test_a_live_process_on_this_machine_is_never_stale_and_a_reused_pid_is(tmp_path):
    store = StudyStore(str(tmp_path / "s.journal"), "s", heartbeat_interval=0.1, grace_period=0.2)
    store._enqueue("k", "a", 0, "b", {}, retry=0)
    me = WorkerInfo.current()
    attempt = store.claim("b", me)
    store.heartbeat(attempt)
    time.sleep(0.4)  # heartbeats late, as when a worker waits out an outage
    assert store.stale_reason(store.attempt(attempt.trial_id)) is None
    assert store.fail_stale("b") == []
    # the same pid, but another process (the pid was reused): its start time differs
    other = WorkerInfo(name="old", host=me.host, node=_node_id(), pid=os.getpid(), started="1")
    assert process_start(os.getpid()) not in (None, "1")
    store._enqueue("k2", "a", 1, "b", {}, retry=0)
    gone = store.claim("b", other)
    assert "died" in store.stale_reason(store.attempt(gone.trial_id))


# ---------------------------------------------------------------------------------- store outages


@pytest.fixture(scope="module")
def pg():
    with servers.postgres_server() as server:
        yield server


@pytest.mark.slow
def test_the_store_waits_out_a_postgres_restart_and_gives_up_with_one_line(pg, capfd):
    url = pg.create_database("outage")
    store = StudyStore(url, "s", store_wait=60)
    store._enqueue("k", "a", 0, "b", {}, retry=0)
    attempt = store.claim("b", WorkerInfo.current())
    pg.stop()
    restart = threading.Timer(3.0, pg.start)
    restart.start()
    t0 = time.monotonic()
    try:
        assert store.complete(attempt, 0.5, {"steps": 1})  # blocks through the restart, then succeeds
    finally:
        restart.join()
    assert time.monotonic() - t0 >= 2.5
    assert [(a.state, a.value) for a in store.attempts("b")] == [("done", 0.5)]
    err = capfd.readouterr().err
    assert "does not answer (connection to server" in err and "answers again" in err and "Traceback" not in err

    impatient = StudyStore(url, "s", store_wait=1.0)
    pg.stop()
    try:
        with pytest.raises(OutageError) as info:
            impatient.attempts("b")
    finally:
        pg.start()
    message = str(info.value)
    assert "\n" not in message and "127.0.0.1" in message and "did not answer for 1 s" in message
    assert "run the study again" in message


# ---------------------------------------------------------------------- an unreachable tracking server


def test_an_unreachable_tracking_server_is_refused_before_anything_is_created(tmp_path, monkeypatch, capsys):
    study = write_study(tmp_path, "unreachable")
    monkeypatch.chdir(tmp_path)
    uri = dead_uri()
    rc = main(["run", str(study), "--tracking-uri", uri, "--threads", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and uri in lines[0] and "--tracking-uri" in lines[0], err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


# ----------------------------------------------------------- a study through a tracking outage


# --------------------------------------------------------------------------------------- a full disk


def _private_mount_prefix(probe_dir: Path) -> list[str] | None:
    """A command prefix that runs its command in a private mount namespace where it may mount a tmpfs
    (the mount vanishes with the command, whatever happens); None where this machine permits none."""
    import shutil

    if shutil.which("unshare") is None:
        return None
    candidates = [["unshare", "--user", "--map-root-user", "--mount"]]
    if os.geteuid() == 0:
        candidates.insert(0, ["unshare", "--mount", "--propagation", "private"])
    for prefix in candidates:
        probe = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe_dir}"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return prefix
    return None


@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_a_larger_one_resumes_it_exactly(tmp_path):
    """--runs on a 2 MB tmpfs: `ablate run` refuses to start (its estimate exceeds the free space); with
    --ignore-disk-space the first checkpoint finds no space. The run exits 1 with one line naming
    the folder and the fix, no traceback from any process, no wait for an "outage"; the journal holds only
    whole records; `ablate status` works on the full disk; a torn journal tail there is cut and said in one
    warning line, and the run's error names the full disk; the same command on a larger filesystem (the
    tmpfs grown to 64 MB) finishes every trial exactly once."""
    (tmp_path / "probe").mkdir()
    prefix = _private_mount_prefix(tmp_path / "probe")
    if prefix is None:
        pytest.skip("this machine permits no tmpfs mount, not even in a user namespace")
    study = write_study(tmp_path, "diskfull", seeds=1, base={**TINY, "train.steps": 3, "train.checkpoint_every": 1})
    uri = servers.fresh_mlflow_db(tmp_path)
    run = (f"{shlex.quote(sys.executable)} -m ablate run {study} --workers 2 --threads 1 --runs runs "
           f"--tracking-uri {uri} --no-progress --store-wait 120")
    script = f"""
        mkdir -p runs saved && mount -t tmpfs -o size=2m tmpfs runs
        {run} > refused.out 2> refused.err; echo $? > refused.rc; ls -A runs > refused.ls
        start=$(date +%s); {run} --ignore-disk-space > run1.out 2> run1.err; echo $? > run1.rc
        echo $(( $(date +%s) - start )) > run1.s
        cp runs/diskfull/store.journal saved/journal1
        printf '{{"op_code": 5, "worker_id": "x", "tri' >> runs/diskfull/store.journal  # a writer died mid-record
        dd if=/dev/zero of=runs/filler bs=1k count=4096 2> /dev/null
        {shlex.quote(sys.executable)} -m ablate status {study} --runs runs > status.out 2> status.err; echo $? > status.rc
        {run} --ignore-disk-space > torn.out 2> torn.err; echo $? > torn.rc
        rm runs/filler && mount -o remount,size=64m runs
        {run} > run2.out 2> run2.err; echo $? > run2.rc
        cp runs/diskfull/store.journal saved/journal2; find runs -name 'trainer.*' > saved/checkpoints
    """
    subprocess.run([*prefix, "bash", "-c", script], cwd=tmp_path, env=sub_env(tmp_path), timeout=600, check=True)
    read = lambda name: (tmp_path / name).read_text()  # noqa: E731

    refused = read("refused.err")  # the estimate (2 workers x 2 checkpoints of 2.6 MB) exceeds 2 MB
    assert read("refused.rc").strip() == "2" and len(refused.strip().splitlines()) == 1, refused
    assert "free, and this run needs about" in refused and "--ignore-disk-space" in refused, refused
    assert read("refused.ls").strip() == ""  # nothing was written

    err = read("run1.err")
    assert read("run1.rc").strip() == "1", err
    assert "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1, err
    assert "found its disk full" in errors[0] and str(tmp_path / "runs") in errors[0], errors[0]
    assert "free now" in errors[0] and "run the same command again" in errors[0], errors[0]
    assert int(read("run1.s")) < 120, "a full disk was waited for like an outage"
    for line in (tmp_path / "saved" / "journal1").read_bytes().splitlines(keepends=True):
        assert line.endswith(b"\n")
        json.loads(line)  # whole records only
    assert read("status.rc").strip() == "0", read("status.err")
    assert "Traceback" not in read("status.err") and "total" in read("status.out")
    torn = read("torn.err").strip().splitlines()  # the torn tail on the full disk: cut, said, and the full disk named
    assert read("torn.rc").strip() == "1" and "Traceback" not in read("torn.err"), torn
    assert any(ln.startswith("ablate run: warning: runs/diskfull/store.journal: its last record was cut short") and
               "could not be kept" in ln for ln in torn), torn
    assert torn[-1].startswith(f"ablate run: error: a write in {tmp_path / 'runs'}"), torn

    assert read("run2.rc").strip() == "0", read("run2.err")
    store = StudyStore(str(tmp_path / "saved" / "journal2"), "diskfull", create=False)
    done = collections.Counter(a.key for a in store.attempts("default") if a.state == "done")
    assert len(done) == 2 and set(done.values()) == {1}, done  # every trial finished exactly once
    assert read("saved/checkpoints").strip() == ""  # finished trials keep no checkpoint
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("diskfull").experiment_id],
                              "tags.`ablate.role` = 'trial'")
    assert sorted(r.data.tags["ablate.trial_key"] for r in runs) == sorted(done)
    for r in runs:
        assert r.info.status == "FINISHED"
        assert set(metric_rows(client, r.info.run_id).values()) == {1}  # each (metric, step) once


def _pad_journal_to_page_end(journal: Path, study: str, slack: int) -> int:
    """Append one whole record (another worker's CREATE_STUDY of ``study``, which replay skips) so that the
    journal ends ``slack`` bytes before a 4 kB page boundary; returns the new size."""
    def record(pad: int) -> bytes:
        return (json.dumps({"op_code": 0, "worker_id": "pad" + "x" * pad, "study_name": study, "directions": [1]},
                           separators=(",", ":")) + "\n").encode()

    need = (4096 - slack - journal.stat().st_size) % 4096
    need += 4096 if need < len(record(0)) else 0
    with open(journal, "ab") as fh:
        fh.write(record(need - len(record(0))))
    return journal.stat().st_size


def test_a_journal_append_that_finds_no_space_names_the_journal(tmp_path, monkeypatch):
    """os.write's ENOSPC names no file: the journal's append names its file, so the one message names the
    journal's disk (not the working folder) wherever the append was made from, Optuna's create_study included;
    the failed append is cut back, so the journal holds only whole records."""
    import errno

    from ablate.disk import disk_full_error

    journal = tmp_path / "store" / "store.journal"
    StudyStore(str(journal), "s")
    before = journal.read_bytes()
    real_write = os.write

    def full_write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") == str(journal):
            real_write(fd, bytes(data)[:7])  # part of the record fits, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_write)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError) as info:
        StudyStore(str(journal), "s")  # Optuna's create_study appends a record
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(journal)
    assert disk_full_error(info.value).folder == str(journal.parent)
    assert journal.read_bytes() == before


def test_a_torn_journal_on_a_full_disk_whose_last_page_is_nearly_full_names_that_disk(tmp_path):
    """The journal on a full 1 MB tmpfs, its last page 16 bytes short of full and a torn record after it:
    `ablate run` cuts the torn tail (said in one warning), then Optuna's create_study appends a record that
    does not fit in the last page, and os.write raises ENOSPC naming no file. The run exits 1 with one error
    line naming the journal's folder on the full disk, not the working folder; the journal is left as it was
    before the torn record (whole records only)."""
    (tmp_path / "runs").mkdir()
    prefix = _private_mount_prefix(tmp_path / "runs")
    if prefix is None:
        pytest.skip("this machine permits no tmpfs mount, not even in a user namespace")
    study = write_study(tmp_path, "tornfull", seeds=1)
    seed = tmp_path / "seed" / "store.journal"
    StudyStore(str(seed), "tornfull")
    size = _pad_journal_to_page_end(seed, "tornfull", slack=16)
    uri = servers.fresh_mlflow_db(tmp_path)
    script = f"""
        mount -t tmpfs -o size=1m tmpfs runs && mkdir runs/tornfull && cp seed/store.journal runs/tornfull/
        printf '{{"op_code": 5, "worker_id": "x", "tri' >> runs/tornfull/store.journal  # a writer died mid-record
        dd if=/dev/zero of=runs/filler bs=1k count=2048 2> /dev/null
        {shlex.quote(sys.executable)} -m ablate run {study} --threads 1 --runs runs --tracking-uri {uri} --no-progress \
            --ignore-disk-space > torn.out 2> torn.err; echo $? > torn.rc
        cp runs/tornfull/store.journal after.journal
    """
    subprocess.run([*prefix, "bash", "-c", script], cwd=tmp_path, env=sub_env(tmp_path), timeout=120, check=True)
    err = (tmp_path / "torn.err").read_text()
    lines = err.strip().splitlines()
    assert (tmp_path / "torn.rc").read_text().strip() == "1" and "Traceback" not in err, err
    assert any("its last record was cut short" in ln for ln in lines), err
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    assert lines[-1].startswith(f"ablate run: error: a write in {tmp_path / 'runs' / 'tornfull'} found its disk full"), err
    assert (tmp_path / "after.journal").read_bytes() == seed.read_bytes() and seed.stat().st_size == size


@pytest.mark.slow
def test_the_mlflow_store_s_disk_filling_mid_run_ends_in_one_line_and_the_same_command_resumes(tmp_path):
    """The local MLflow store (sqlite) on a tmpfs with ~150 kB left, the rest on a large disk: its disk fills
    while the trials log. The run exits 1 with one line naming that disk (no traceback from MLflow's
    logger or any worker: MLflow logs a 40-line SQL traceback for each failed write); with the tmpfs grown,
    the same command finishes every trial, each MLflow run FINISHED with each (metric, step) once."""
    (tmp_path / "mf").mkdir()
    prefix = _private_mount_prefix(tmp_path / "mf")
    if prefix is None:
        pytest.skip("this machine permits no tmpfs mount, not even in a user namespace")
    study = write_study(tmp_path, "mlfull", seeds=3, base={**TINY, "train.steps": 4, "eval.every": 1})
    template = Path(servers.fresh_mlflow_db(tmp_path, "template.db")[len("sqlite:///"):])
    size_k = template.stat().st_size // 1024 + 150
    run = (f"{shlex.quote(sys.executable)} -m ablate run {study} --workers 2 --threads 1 --no-progress "
           f"--tracking-uri sqlite:///{tmp_path / 'mf' / 'mlflow.db'}")
    script = f"""
        mount -t tmpfs -o size={size_k}k tmpfs mf && cp template.db mf/mlflow.db
        {run} --ignore-disk-space > run1.out 2> run1.err; echo $? > run1.rc
        mount -o remount,size=64m mf
        {run} > run2.out 2> run2.err; echo $? > run2.rc
        cp mf/mlflow.db after.db
    """
    subprocess.run([*prefix, "bash", "-c", script], cwd=tmp_path, env=sub_env(tmp_path), timeout=600, check=True)
    read = lambda name: (tmp_path / name).read_text()  # noqa: E731

    err = read("run1.err")
    assert read("run1.rc").strip() == "1", err
    assert "Traceback" not in err and "SQL" not in err, err
    assert len(err.strip().splitlines()) <= 4, err  # the run's three opening lines, then the one error
    assert err.strip().splitlines()[-1].startswith(f"ablate run: error: a write in {tmp_path / 'mf'} found its disk full")
    assert "--tracking-uri" in err.splitlines()[-1]
    assert read("run2.rc").strip() == "0", read("run2.err")
    client = MlflowClient(f"sqlite:///{tmp_path / 'after.db'}")
    runs = client.search_runs([client.get_experiment_by_name("mlfull").experiment_id], "tags.`ablate.role` = 'trial'")
    store = StudyStore(str(tmp_path / "runs" / "mlfull" / "store.journal"), "mlfull", create=False)
    done = collections.Counter(a.key for a in store.attempts("default") if a.state == "done")
    assert len(done) == 6 and set(done.values()) == {1}
    assert sorted(r.data.tags["ablate.trial_key"] for r in runs) == sorted(done)
    for r in runs:
        assert r.info.status == "FINISHED"
        rows = metric_rows(client, r.info.run_id)
        assert set(rows.values()) == {1} and {s for _, s in rows} == set(range(5))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_read_only_study_folder_is_read_and_every_writer_refused_in_one_line(tmp_path):
    """A finished study's folder (study file, runs/, the MLflow store, reports/) bind-mounted read-only, as an
    archived study or a shared read-only mount is: `status`, `show`, `plan --from`, `report --from --out`
    and `report --no-log --out` work; `report` into the read-only reports/, `report --out` elsewhere (its
    MLflow artifact folder is read-only) and `run` exit 2 with one line naming the folder and the fix,
    before anything is read or drawn. With only reports/ read-only, `run` of a new study refuses before
    any trial (no store, no MLflow run). Not one byte of the folder changes."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    prefix = _private_mount_prefix(out)
    if prefix is None:
        pytest.skip("this machine permits no private mount, not even in a user namespace")
    study = write_study(work, "archived", seeds=1)
    other = write_study(work, "other", seeds=1)
    env = sub_env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "ablate", "run", study.name, "--threads", "1", "--no-progress"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    before = _tree(work)
    ablate = f"{shlex.quote(sys.executable)} -m ablate"
    commands = {
        "status": f"status {study.name}", "show": f"show {study.name}",
        "plan": "plan archived.yaml --from reports/archived",
        "rerender": f"report {study.name} --from reports/archived --out {out / 'rerendered'}",
        "nolog": f"report {study.name} --no-log --out {out / 'nolog'}",
        "report": f"report {study.name}", "logged": f"report {study.name} --out {out / 'logged'}",
        "run": f"run {study.name} --threads 1 --no-progress",
    }
    script = "mount --bind . . && mount -o remount,ro,bind . && cd \"$PWD\"\n" + "".join(
        f"{ablate} {argv} > {out / name}.out 2> {out / name}.err; echo $? > {out / name}.rc\n"
        for name, argv in commands.items())
    script += (f"cd /; mount -o remount,rw,bind {work}; mount --bind {work / 'reports'} {work / 'reports'} && "
               f"mount -o remount,ro,bind {work / 'reports'} && cd {work} && {ablate} run {other.name} --threads 1 "
               f"--no-progress > {out}/new.out 2> {out}/new.err; echo $? > {out}/new.rc\n")
    subprocess.run([*prefix, "bash", "-c", script], cwd=work, env=env, timeout=600, check=True)
    read = lambda name: (out / name).read_text()  # noqa: E731

    for name in ("status", "show", "plan", "rerender", "nolog"):
        assert read(f"{name}.rc").strip() == "0", (name, read(f"{name}.err"))
        assert "Traceback" not in read(f"{name}.err"), name
    assert "total" in read("status.out") and "loss_norm" in read("show.out")
    assert (out / "rerendered" / "index.html").exists() and (out / "nolog" / "index.html").exists()
    refusals = {"report": f"the report folder {work / 'reports' / 'archived'} is not writable",
                "logged": "the MLflow artifact folder of the study's parent run",
                "run": f"the runs folder {work / 'runs'} is not writable",
                "new": f"the reports folder {work / 'reports'} is not writable"}
    for name, message in refusals.items():
        err = read(f"{name}.err")
        assert read(f"{name}.rc").strip() == "2", (name, err)
        assert len(err.strip().splitlines()) == 1 and message in err and "Read-only file system" in err, (name, err)
    assert "--no-log" in read("logged.err")
    assert not (out / "logged").exists()  # refused before anything was drawn
    assert _tree(work) == before  # not one byte changed, no file made
    assert not (work / "runs" / "other").exists()


def test_a_full_disk_is_recognised_through_its_causes_and_said_in_one_line(tmp_path):
    import errno

    from ablate.disk import DiskFullError, disk_full_error, human_bytes, is_disk_full

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "trials" / "k" / "trainer.tmp"))
        except OSError as inner:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534") from inner
    except RuntimeError as exc:
        chained = exc
    assert is_disk_full(chained)
    assert is_disk_full(RuntimeError("(sqlite3.OperationalError) database or disk is full"))
    assert not is_disk_full(OSError(errno.ECONNREFUSED, "Connection refused"))
    assert not is_disk_full(RuntimeError("basic_ios::clear: iostream error"))  # said nothing of space
    err = disk_full_error(chained, folder="/elsewhere")
    assert isinstance(err, DiskFullError) and err.exit_code == 1
    assert err.folder == str(tmp_path)  # the nearest existing folder of the file it names
    assert "\n" not in str(err) and f"a write in {tmp_path} found its disk full (" in str(err)
    assert disk_full_error(err) is err
    assert disk_full_error(None, folder=tmp_path / "not" / "yet").folder == str(tmp_path)
    assert [human_bytes(n) for n in (512, 9_700_000, 1.3e9, None)] == ["512 B", "9.7 MB", "1.3 GB", "unknown"]


@pytest.mark.slow
def test_a_server_down_for_the_whole_study_costs_it_under_10_percent_of_wall_time(tmp_path, ablate_cli):
    """Two studies of the same shape against one server, in one test: one with the server up, one with it
    stopped as soon as its parent run exists. Every setting is the default (MLflow's client's and ablate's,
    --tracking-wait included: the end of a run waits for a stopped server at most a tenth of the run's time,
    counted from the first trial it kept, so an outage as old as the study is not waited for). The outage is
    found once per process and costs each later request nothing: the second study's wall time is at most
    1.1x the first's; the run goes on, exits 1 and says in one line what is kept and how to upload it (no
    traceback); every trial that could not reach the server is in the outbox (`ablate status` lists them),
    and the same command once the server is back uploads each exactly once: one attempt per trial, each
    (metric, step) once."""
    base = {**TINY, "train.steps": 6}
    steady = write_study(tmp_path, "steady", seeds=3, base=base)
    dark = write_study(tmp_path, "dark", seeds=3, base=base)
    env = {k: v for k, v in sub_env(tmp_path).items() if not k.startswith("MLFLOW_HTTP_REQUEST")}
    with servers.mlflow_server(tmp_path / "mlflow") as server:
        def command(study: Path) -> list[str]:
            return [sys.executable, "-m", "ablate", "run", str(study), "--tracking-uri", server.uri, "--threads", "1",
                    "--no-progress"]

        t0 = time.monotonic()
        first = subprocess.run(command(steady), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        steady_s = time.monotonic() - t0
        assert first.returncode == 0, first.stderr

        client = MlflowClient(server.uri)
        t0 = time.monotonic()
        proc = subprocess.Popen(command(dark), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        stop_once_the_parent_is_set_up(server, client, proc, "dark")
        out, err = proc.communicate(timeout=300)
        dark_s = time.monotonic() - t0
        assert dark_s <= 1.1 * steady_s, (dark_s, steady_s)
        assert proc.returncode == 1 and "Traceback" not in err, err  # the trials went on; the run says what is kept
        kept = unsent_files("dark", tmp_path / "runs")
        assert len(kept) >= 5, err  # all 6 trials, but one whose run was opened before the server stopped
        assert "could not reach MLflow" in err and "run the same command again" in err
        assert all(len(line) < 400 for line in err.splitlines()), err  # no pages of MLflow's text
        code, status, _, _ = ablate_cli(["status", str(dark), "--json"], tmp_path, tmp_path / "cache")  # in this process
        assert code == 0
        assert sorted(json.loads(status)["unsent"]) == sorted(p.parent.name for p in kept)

        server.start()  # the same command again uploads them
        again = subprocess.run(command(dark), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "uploaded" in again.stderr and "report:" in again.stdout, again.stderr
    store, runs = each_trial_uploaded_once(tmp_path, "dark", trials=6, steps=6)
    for r in runs:
        done = next(a for a in store.attempts("default") if a.key == r.data.tags["ablate.trial_key"])
        assert float(r.data.tags["ablate.objective"]) == pytest.approx(done.value)


def each_trial_uploaded_once(tmp_path: Path, study: str, *, trials: int, steps: int) -> tuple[StudyStore, list]:
    """After an outage: one attempt per trial, one FINISHED run each holding each (metric, step) of
    steps 0..``steps`` once, nothing left in the outbox. Returns the store and the trial runs."""
    store = StudyStore(str(tmp_path / "runs" / study / "store.journal"), study, create=False)
    attempts = collections.Counter(a.key for a in store.attempts("default"))
    assert len(attempts) == trials and set(attempts.values()) == {1}  # nothing trained twice
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'server.db'}")
    runs = client.search_runs([client.get_experiment_by_name(study).experiment_id], "tags.`ablate.role` = 'trial'")
    assert sorted(r.data.tags["ablate.trial_key"] for r in runs) == sorted(attempts)
    for r in runs:
        assert r.info.status == "FINISHED"
        rows = metric_rows(client, r.info.run_id)
        assert set(rows.values()) == {1} and {s for _, s in rows} == set(range(steps + 1))  # each step once
    assert not unsent_files(study, tmp_path / "runs")
    return store, runs


@pytest.mark.slow
def test_the_link_goes_down_once_refuses_at_once_and_comes_back_with_the_server(tmp_path, monkeypatch):
    from ablate.tracking import TRACKING_ERRORS, TrackingOffline, link_for

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")  # ablate's defaults, not this file's fail-fast ones
    with servers.mlflow_server(tmp_path / "mlflow") as server:
        tracker = Tracker(server.uri)
        assert tracker.link is link_for(tracker.uri) and tracker.link.up
        tracker.link.probe_seconds = 0.2
        exp = tracker.client.create_experiment("x")
        server.stop()
        with pytest.raises(TRACKING_ERRORS):  # the first request finds the server gone (after one quick retry)
            tracker.client.get_experiment(exp)
        assert not tracker.link.up and tracker.link.downs == 1
        t0 = time.monotonic()
        for _ in range(20):  # later requests are not tried: no network, no retries
            with pytest.raises(TrackingOffline, match=f"MLflow {server.uri} did not answer"):
                Tracker(server.uri).client.get_experiment(exp)  # a new Tracker shares the process's link
        assert time.monotonic() - t0 < 1.0
        server.start()
        deadline = time.monotonic() + 10
        while not tracker.link.up and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tracker.link.up and tracker.client.get_experiment(exp).name == "x" and tracker.link.downs == 1


@pytest.mark.slow
def test_a_packed_population_through_a_tracking_outage_keeps_and_uploads_every_member_once(tmp_path):
    """The outage path with packing on: a population of 4 members whose MLflow server stops once the
    parent run exists. Every member finishes into the outbox (exit 1, one line), and the same command
    with the server back uploads each exactly once: one attempt per trial, each (metric, step) once."""
    study = write_study(tmp_path, "packdark", seeds=2, base={**TINY, "train.steps": 4, "train.packed": True})
    env = {k: v for k, v in sub_env(tmp_path).items() if not k.startswith("MLFLOW_HTTP_REQUEST")}
    with servers.mlflow_server(tmp_path / "mlflow") as server:
        command = [sys.executable, "-m", "ablate", "run", str(study), "--tracking-uri", server.uri, "--threads", "1",
                   "--no-progress", "--tracking-wait", "0", "--pack", "4"]
        client = MlflowClient(server.uri)
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        stop_once_the_parent_is_set_up(server, client, proc, "packdark")
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1 and "Traceback" not in err, err
        assert "could not reach MLflow" in err and len(unsent_files("packdark", tmp_path / "runs")) >= 3, err
        server.start()
        again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "uploaded" in again.stderr, again.stderr
    each_trial_uploaded_once(tmp_path, "packdark", trials=4, steps=4)
