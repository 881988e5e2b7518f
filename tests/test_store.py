"""The study store on real Optuna storages: a journal file and a PostgreSQL server on loopback."""

from __future__ import annotations

import math
import multiprocessing
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import pytest
import servers

from ablate.paths import STORE_FILE
from ablate.store import (
    ENV_STORAGE,
    DesignChangedError,
    Heartbeat,
    StoreError,
    StoreNotFoundError,
    StudyStore,
    WorkerInfo,
    design_record,
    diff_designs,
    pid_alive,
    redact,
    resolve_storage,
)
from ablate.store.queue import _node_id


@dataclass(frozen=True)
class Spec:
    """The fields of a TrialSpec that the store reads."""

    key: str
    arm: str
    seed: int
    levels: dict[str, str] = field(default_factory=dict)


def specs(arms: dict[str, str], seeds=(0, 1)) -> list[Spec]:
    """Trials arm x seed with key ``<arm key>-<seed>``."""
    return [Spec(f"{k}-{s}", arm, s, {"f": arm}) for s in seeds for arm, k in arms.items()]


@dataclass(frozen=True)
class SpecPlan:
    """What :meth:`StudyStore.prepare` reads of a :class:`ablate.study.plan.Plan`: its budget, its trials and
    each arm's overrides."""

    specs: list[Spec]
    budget: str = "default"
    overrides: dict[str, dict] = field(default_factory=dict)

    def arm_overrides(self) -> dict[str, dict]:
        return self.overrides


ARMS = {"f=a": "ka", "f=b": "kb"}
OVERRIDES = {"f=a": {"loss.clip_high": 0.2}, "f=b": {"loss.clip_high": 0.28}}


@pytest.fixture(scope="module")
def pg():
    with servers.postgres_server() as server:
        yield server


@pytest.fixture(params=["journal", "postgresql"])
def url(request, tmp_path):
    if request.param == "journal":
        return str(tmp_path / "runs" / "s" / STORE_FILE)
    server = request.getfixturevalue("pg")
    return server.create_database("t" + uuid.uuid4().hex[:10])


def open_store(url: str, name: str = "s", **kw) -> StudyStore:
    kw.setdefault("heartbeat_interval", 0.05)
    kw.setdefault("grace_period", 0.5)
    return StudyStore(url, name, **kw)


ME = WorkerInfo.current()


# ----------------------------------------------------------------------------------------- storage


def test_resolve_storage_default_env_and_refusals(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    assert resolve_storage(None, "quick") == os.path.join("runs", "quick", STORE_FILE)
    assert resolve_storage(None, "quick", tmp_path) == str(tmp_path / "quick" / STORE_FILE)
    monkeypatch.setenv(ENV_STORAGE, "postgresql://u:pw@h:5432/db")
    assert resolve_storage(None, "quick") == "postgresql://u:pw@h:5432/db"
    assert resolve_storage("other.journal", "quick") == "other.journal"
    with pytest.raises(StoreError, match="SQLite cannot claim trials atomically"):
        resolve_storage("sqlite:///x.db", "quick")
    with pytest.raises(StoreError, match="unsupported scheme 'mysql'"):
        resolve_storage("mysql://u:secret@h/db", "quick")
    with pytest.raises(StoreError, match="is a folder"):
        resolve_storage(str(tmp_path) + "/", "quick")
    assert redact("postgresql://ablate:secret@db:5432/x") == "postgresql://ablate:***@db:5432/x"
    assert redact("postgresql://db:5432/x") == "postgresql://db:5432/x"


def test_missing_store_is_not_created(tmp_path):
    path = tmp_path / "runs" / "s" / STORE_FILE
    with pytest.raises(StoreNotFoundError, match="has not been run"):
        StudyStore(str(path), "s", create=False)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------ design


def test_design_diff_names_added_removed_and_changed_trials():
    old = design_record(specs(ARMS), OVERRIDES)
    assert diff_designs(old, design_record(specs(ARMS), OVERRIDES)).empty
    grown = design_record(specs({**ARMS, "f=c": "kc"}, seeds=(0, 1, 2)), {**OVERRIDES, "f=c": {}})
    d = diff_designs(old, grown)
    assert d.added_arms == ("f=c",) and d.added_seeds == (2,) and not d.removed and d.additions_only
    assert set(d.added) == {"kc-0", "kc-1", "ka-2", "kb-2", "kc-2"}
    changed = design_record(specs({"f=a": "ka", "f=b": "kB"}), {**OVERRIDES, "f=b": {"loss.clip_high": 0.3}})
    d = diff_designs(old, changed)
    assert d.changed == (("f=b", 0, "loss.clip_high 0.28 -> 0.3"), ("f=b", 1, "loss.clip_high 0.28 -> 0.3"))
    assert not d.additions_only and d.lines() == ["changed arm f=b (seeds 0, 1): loss.clip_high 0.28 -> 0.3"]
    shrunk = diff_designs(old, design_record(specs({"f=a": "ka"}), OVERRIDES))
    assert shrunk.removed_arms == ("f=b",) and shrunk.lines() == ["removed arms (1): f=b"]
    same_overrides = diff_designs(old, design_record(specs({"f=a": "ka", "f=b": "kX"}), OVERRIDES))
    assert "TrialConfig defaults changed" in same_overrides.changed[0][2]


def test_prepare_freezes_enqueues_once_and_resumes(url):
    store = open_store(url)
    first = store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    assert (first.total, first.enqueued, first.complete, first.pending, first.created) == (4, 4, 0, 0, True)
    again = store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    assert (again.enqueued, again.pending, again.created) == (0, 4, False)
    assert store.counts("default") == {"done": 0, "running": 0, "failed": 0, "pending": 4}

    a = store.claim("default", ME)
    b = store.claim("default", ME)
    assert (a.key, b.key) == ("ka-0", "kb-0")  # enqueue order: seed-major, arms in design order
    assert store.complete(a, 0.75, {"steps": 2})
    assert store.fail(b, "Traceback ...\nRuntimeError: boom")
    st = {s.key: s for s in store.status("default")}
    assert (st["ka-0"].state, st["kb-0"].state, st["ka-1"].state) == ("done", "failed", "pending")
    assert st["kb-0"].error.endswith("RuntimeError: boom")
    done = store.attempt(a.trial_id)
    assert done.value == 0.75 and done.result == {"steps": 2, "objective": 0.75} and done.claim["pid"] == os.getpid()

    resumed = store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))  # a rerun: the failed trial again
    assert (resumed.complete, resumed.pending, resumed.enqueued) == (1, 2, 1)
    retry = [x for x in store.attempts("default") if x.key == "kb-0"]
    assert [(x.state, x.retry) for x in retry] == [("failed", 0), ("pending", 0)]
    assert store.counts("default") == {"done": 1, "running": 0, "failed": 0, "pending": 3}


def test_changed_design_is_refused_and_extend_adds_only(url):
    store = open_store(url)
    store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    grown = specs({**ARMS, "f=c": "kc"})
    with pytest.raises(DesignChangedError) as exc:
        store.prepare(SpecPlan(grown, "default", {**OVERRIDES, "f=c": {}}))
    msg = str(exc.value)
    assert "added arms (1): f=c" in msg and "run again with --extend" in msg
    assert len(store.attempts("default")) == 4  # nothing enqueued

    ext = store.prepare(SpecPlan(grown, "default", {**OVERRIDES, "f=c": {}}), extend=True)
    assert ext.enqueued == 2 and set(ext.extended.added) == {"kc-0", "kc-1"} and ext.pending == 4
    assert set(store.frozen_design("default")["trials"]) == {s.key for s in grown}

    changed = specs({"f=a": "ka", "f=b": "kB", "f=c": "kc"})
    with pytest.raises(DesignChangedError, match="--extend only adds trials") as exc:
        store.prepare(SpecPlan(changed, "default", {**OVERRIDES, "f=b": {"loss.clip_high": 0.3}, "f=c": {}}),
                      extend=True)
    assert "changed arm f=b (seeds 0, 1): loss.clip_high 0.28 -> 0.3" in str(exc.value)
    # another budget is another frozen design in the same store
    assert store.prepare(SpecPlan(specs({"f=a": "sa"}), "smoke", OVERRIDES)).enqueued == 2
    assert store.budgets() == ["default", "smoke"]


def test_queued_trials_carry_their_levels_and_seed_as_optuna_parameters(url):
    """Read through Optuna's own API (what optuna-dashboard does): every queued attempt has the arm's level
    of each factor (categorical over the factor's levels) and its seed as parameters; the keys ablate reads
    are unchanged. An extension widens the seed range; a level it adds is outside the categorical space Optuna
    fixed (PostgreSQL refuses a changed one), so its trials carry the seed only for that factor."""
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution

    store = open_store(url)
    store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    name = store.storage.get_study_name_from_id(store.study_id)
    trials = optuna.load_study(study_name=name, storage=store.storage).get_trials(deepcopy=False)
    assert sorted((t.params["f"], t.params["seed"], t.user_attrs["key"]) for t in trials) == [
        ("f=a", 0, "ka-0"), ("f=a", 1, "ka-1"), ("f=b", 0, "kb-0"), ("f=b", 1, "kb-1")]
    assert trials[0].distributions == {"f": CategoricalDistribution(("f=a", "f=b")), "seed": IntDistribution(0, 1)}
    store.prepare(SpecPlan(specs({**ARMS, "f=c": "kc"}, seeds=(0, 1, 2)), "default", {**OVERRIDES, "f=c": {}}),
                  extend=True)
    added = [t for t in optuna.load_study(study_name=name, storage=store.storage).get_trials(deepcopy=False)
             if t.user_attrs["key"] == "kc-2"]
    assert added[0].params == {"seed": 2} and added[0].distributions == {"seed": IntDistribution(0, 2)}
    wider = [t for t in optuna.load_study(study_name=name, storage=store.storage).get_trials(deepcopy=False)
             if t.user_attrs["key"] == "ka-2"]
    assert wider[0].params == {"f": "f=a", "seed": 2}
    assert [a.key for a in store.attempts("default")][:4] == ["ka-0", "kb-0", "ka-1", "kb-1"]


# ----------------------------------------------------------------------------------- claim races


def _claim_all(url: str, out, n: int, barrier) -> None:
    store = StudyStore(url, "race")
    me = WorkerInfo.current(n)
    got = []
    barrier.wait(timeout=120)  # all three start claiming at the same moment
    while (a := store.claim("default", me)) is not None:
        got.append(a.key)
        time.sleep(0.01)
        store.complete(a, float(n), {"worker": n})
    out.put(got)


@pytest.mark.slow
def test_three_processes_claim_every_trial_exactly_once(url):
    many = [Spec(f"k{i:02d}", f"f={i}", 0) for i in range(24)]
    StudyStore(url, "race").prepare(SpecPlan(many))
    ctx = multiprocessing.get_context("spawn")
    out, barrier = ctx.Queue(), ctx.Barrier(3)
    procs = [ctx.Process(target=_claim_all, args=(url, out, n, barrier)) for n in range(3)]
    for p in procs:
        p.start()
    claimed = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    flat = [k for got in claimed for k in got]
    assert sorted(flat) == [s.key for s in many]  # every trial once, none twice
    assert sum(1 for got in claimed if got) >= 2  # they did compete
    store = StudyStore(url, "race")
    attempts = store.attempts("default")
    assert len(attempts) == 24 and {a.state for a in attempts} == {"done"}
    assert store.counts("default")["done"] == 24


# ---------------------------------------------------------------------------------------- liveness


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())


def test_dead_worker_is_retried_a_bounded_number_of_times(url):
    store = open_store(url, max_retries=2)
    store.prepare(SpecPlan(specs({"f=a": "ka"}, seeds=(0,)), "default", OVERRIDES))
    dead = WorkerInfo(name="gone:1", host="here", node=_node_id(), pid=dead_pid())
    for retry in range(3):
        a = store.claim("default", dead)
        assert a.retry == retry
        assert store.stale_reason(a) == f"its worker gone:1 died (process {dead.pid} is gone)"
        (stale,) = store.fail_stale("default")
        assert stale.attempt.state == "failed" and stale.retried == (retry < 2)
        assert stale.attempt.error.startswith("stale: its worker gone:1 died")
    assert store.claim("default", dead) is None  # retries exhausted: the trial stays failed
    assert store.counts("default") == {"done": 0, "running": 0, "failed": 1, "pending": 0}
    assert store.prepare(SpecPlan(specs({"f=a": "ka"}, seeds=(0,)), "default", OVERRIDES)).enqueued == 1


def test_heartbeat_keeps_a_remote_attempt_alive_and_its_absence_makes_it_stale(url):
    store = open_store(url)  # heartbeat every 0.05 s, grace 0.5 s
    store.prepare(SpecPlan(specs({"f=a": "ka", "f=b": "kb"}, seeds=(0,)), "default", OVERRIDES))
    remote = WorkerInfo(name="far:7", host="far", node="another-machine", pid=7)
    quiet = store.claim("default", remote)
    beating = store.claim("default", remote)
    with Heartbeat(store, beating, steps=10) as hb:
        hb.step = 3
        time.sleep(0.8)
        assert store.stale_reason(store.attempt(beating.trial_id)) is None
        reason = store.stale_reason(store.attempt(quiet.trial_id))
        assert re.fullmatch(r"no heartbeat from worker far:7 for \d+\.\d s \(grace period 0\.5 s\)", reason)
        (stale,) = store.fail_stale("default")
        assert stale.attempt.key == quiet.key and stale.retried
    live = store.attempt(beating.trial_id)
    assert live.state == "running" and live.heartbeat["step"] == 3 and live.heartbeat["steps"] == 10
    retry = store.claim("default", ME)
    assert (retry.key, retry.retry) == (quiet.key, 1)
    # the first worker comes back after being declared stale: its result is refused (the retry runs)
    assert store.complete(quiet, 1.0, {}) is False
    assert store.complete(live, 0.5, {}) is True


def test_a_non_finite_objective_is_stored_as_the_worst_value(url):
    store = open_store(url, direction="maximize")
    store.prepare(SpecPlan(specs({"f=a": "ka"}, seeds=(0,)), "default", OVERRIDES))
    a = store.claim("default", ME)
    assert store.complete(a, float("nan"), {"steps": 1})
    done = store.attempt(a.trial_id)
    assert done.value == -math.inf and done.result["objective"] is None


def test_store_on_a_path_creates_its_folder(tmp_path):
    path = tmp_path / "deep" / "er" / STORE_FILE
    StudyStore(str(path), "s")
    assert path.exists()


# --------------------------------------------------------------------------------------- objective


def test_postgresql_errors_name_the_cause(pg):
    with pytest.raises(StoreNotFoundError, match="its tables do not exist"):
        StudyStore(pg.create_database("empty_store"), "s", create=False)
    with pytest.raises(StoreError, match='database "no_such_db" does not exist'):
        StudyStore(pg.url("no_such_db"), "s")
    url = pg.create_database("other_study")
    StudyStore(url, "s")
    with pytest.raises(StoreNotFoundError, match="study 'x' is not in the store"):
        StudyStore(url, "x", create=False)


def test_a_torn_last_journal_record_is_cut_off_and_a_damaged_line_is_refused(tmp_path):
    from ablate.store import TornJournalWarning

    path = tmp_path / "runs" / "s" / STORE_FILE
    store = open_store(str(path))
    store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 5, "worker_id": "x", "trial_i')  # a writer died mid-record
    with pytest.warns(TornJournalWarning, match=r"store\.journal: its last record was cut short \(41 bytes"):
        again = open_store(str(path))
    repaired = path.read_bytes()  # opening may append records, after the cut
    assert repaired.startswith(whole) and b'"trial_i\n' not in repaired and b'"trial_i{' not in repaired
    assert (path.parent / "store.journal.torn").read_bytes() == b'{"op_code": 5, "worker_id": "x", "trial_i'
    assert again.counts("default") == {"done": 0, "running": 0, "failed": 0, "pending": 4}
    again.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))  # appending works again
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"\x00garbled"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(StoreError, match=r"store\.journal: line 3 of the study store is damaged \(not a JSON record\); "
                                         r"restore the file from a backup, or move it away"):
        open_store(str(path))


def test_a_torn_record_is_healed_where_it_cannot_be_kept_aside(tmp_path):
    """Healing cuts the torn record before it tries to keep it: where its copy cannot be written (on a
    full disk; here the copy's name is taken by a folder) the journal is still healed, and says so."""
    from ablate.store import TornJournalWarning

    path = tmp_path / "runs" / "s" / STORE_FILE
    open_store(str(path)).prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 5, "zzz')
    (path.parent / "store.journal.torn").mkdir()
    with pytest.warns(TornJournalWarning, match=r"cut short \(19 bytes.*was removed \(it could not be kept in "):
        again = open_store(str(path))
    assert path.read_bytes().startswith(whole) and b'"zzz' not in path.read_bytes()
    assert again.counts("default")["pending"] == 4


def test_a_journal_append_that_fails_part_way_leaves_no_partial_record(tmp_path, monkeypatch):
    """A write that stops part way (the disk filled up after a few bytes: the second os.write raises
    ENOSPC) is cut back to where it began, so the journal holds whole records only; the error is a
    full disk, said at once (not an outage waited for)."""
    import errno

    from ablate.disk import DiskFullError

    path = tmp_path / "runs" / "s" / STORE_FILE
    store = open_store(str(path))
    before = path.read_bytes()
    real_write, calls = os.write, []

    def write_then_fill(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:7]))  # a short write: 7 bytes reach the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write_then_fill)
    with pytest.raises(DiskFullError, match=r"found its disk full .* free now\): free space there"):
        store.prepare(SpecPlan(specs(ARMS), "default", OVERRIDES))
    monkeypatch.undo()
    assert len(calls) == 2 and path.read_bytes() == before
    assert open_store(str(path)).counts("default") == {"done": 0, "running": 0, "failed": 0, "pending": 0}
