"""Disk use (issue 29): the estimate ``ablate show`` prints and ``ablate run`` checks, against real runs.

The full disk itself (a tmpfs that fills) is injected in test_faults.py; here the estimate's parts are
compared with what a real trial and a real study write."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest
import servers
from test_runner import TINY, write_study

from ablate.cli import main
from ablate.config import TrialConfig
from ablate.running.footprint import checkpoint_bytes, checkpoint_copies, estimate_disk, parameter_count
from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.train import run_trial


def config(*overrides: str) -> TrialConfig:
    base = [f"{k}={v}" for k, v in TINY.items()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TrialConfig.from_overrides(base + list(overrides))


def test_checkpoints_are_counted_as_the_trial_saves_them():
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=0")) == 0  # never saves
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=5")) == 0  # never reaches a save
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=4")) == 1  # one save: no older one beside it
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=2")) == 2  # the next beside the last
    # TRL keeps its last 2 checkpoint folders and writes the third before removing the oldest (issue 55)
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=1", "engine.name=trl")) == 3
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=2", "engine.name=trl")) == 2
    assert checkpoint_copies(config("train.steps=4", "train.checkpoint_every=1")) == 2
    plain, critic = config(), config("critic.enabled=true", "algo.advantage=gae")
    assert checkpoint_bytes(critic) > 1.9 * checkpoint_bytes(plain) - 1e5  # a critic: a second backbone and its moments
    assert parameter_count("no/such/dir") is None


def test_a_population_counts_each_member_s_checkpoint_and_one_being_written_per_worker(tmp_path):
    """--pack K: a worker holds K checkpoints, and one more while a member writes the next (the members
    write one at a time); the trials still to run cap the running ones."""
    from ablate.study.plan import Plan as _Plan

    study = load_study(write_study(tmp_path, "packed", seeds=8,
                                   base={**TINY, "train.packed": True, "train.steps": 4, "train.checkpoint_every": 2}))
    specs = list(_Plan.of(study, "default").specs)  # 16 trials
    one = checkpoint_bytes(specs[0].config)
    assert estimate_disk(specs).checkpoints == 2 * one  # a solo trial: its last and the next
    assert estimate_disk(specs, pack=4).checkpoints == 5 * one
    assert estimate_disk(specs, workers=2, pack=4).checkpoints == 10 * one
    assert estimate_disk(specs, workers=2, pack=8, to_run=3).checkpoints == (3 + 2) * one
    assert "5 checkpoints of" in estimate_disk(specs, pack=4).text()


def test_a_checkpoint_is_estimated_within_a_few_percent_of_what_is_written(tmp_path):
    cfg = config("train.steps=2", "train.checkpoint_every=2")
    run_trial(cfg, workdir=tmp_path)
    written = (tmp_path / "trainer.pt").stat().st_size
    assert written <= checkpoint_bytes(cfg) <= 1.1 * written, (written, checkpoint_bytes(cfg))


def _tree_bytes(*paths: Path) -> int:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return total


@pytest.mark.slow
def test_the_estimate_is_within_2x_of_a_measured_peak(tmp_path, monkeypatch, capsys):
    """A real study (4 trials, one checkpoint each, one worker) sampled every 20 ms: the disk it used at
    its peak (runs/, the SQLite MLflow store's growth and its artefacts, the report) against the
    estimate `ablate show --json` prints. (A trial that saves twice holds two checkpoints only while the
    second is written, milliseconds a sampler misses; the estimate counts them, see the test above.)"""
    monkeypatch.chdir(tmp_path)
    uri = servers.fresh_mlflow_db(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    study = write_study(tmp_path, "footprint", base={**TINY, "train.steps": 4, "train.checkpoint_every": 4})
    assert main(["show", str(study), "--json"]) == 0
    import json

    shown = json.loads(capsys.readouterr().out)["disk"]
    db = tmp_path / "mlflow.db"
    base = db.stat().st_size
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            used = _tree_bytes(tmp_path / "runs", tmp_path / "mlruns", tmp_path / "reports") + db.stat().st_size - base
            peak[0] = max(peak[0], used)
            stop.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        assert main(["run", str(study), "--threads", "1", "--no-progress"]) == 0
    finally:
        stop.set()
        sampler.join()
    ratio = shown["peak_bytes"] / peak[0]
    assert 0.5 <= ratio <= 2, (shown, peak[0])
    specs = list(Plan.of(load_study(study), "default").specs)  # --keep-checkpoints: every trial's stays
    kept = estimate_disk(specs, keep_checkpoints=True)
    assert kept.total == estimate_disk(specs).total - shown["checkpoint_bytes"] + 5 * shown["checkpoint_bytes"]


def test_show_names_the_worker_processes_and_the_population_size_not_their_product(tmp_path, monkeypatch, capsys):
    """`ablate show --workers 2 --pack 4` (issue 53): the disk line is "with 2 workers, up to 4 packed trials per
    population" (it said "with 8 workers"); the 8 trials running at once are in its checkpoint count."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = str(Path(__file__).resolve().parent.parent / "studies" / "packing.yaml")
    assert main(["show", study, "--workers", "2", "--pack", "4"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("disk at budget"))
    assert line.startswith("disk at budget default with 2 workers, up to 4 packed trials per population: "), line
    assert "while 8 trials run" in line, line
    assert main(["show", study, "--workers", "1"]) == 0
    assert "disk at budget default with 1 worker: " in capsys.readouterr().out
    assert main(["show", study, "--workers", "2", "--pack", "4", "--json"]) == 0
    import json

    disk = json.loads(capsys.readouterr().out)["disk"]
    assert (disk["workers"], disk["population"], disk["running_trials"]) == (2, 4, 8)
    assert list(tmp_path.iterdir()) == []  # show writes nothing
