"""Shared fixtures. Server fixtures (PostgreSQL, MLflow) live in their own modules."""

from __future__ import annotations

import os

import pytest
import servers
import torch

# One torch thread per process: README's test command runs two pytest-xdist processes on two cores, and
# the subprocesses tests start (ablate run, workers) inherit OMP_NUM_THREADS. More threads than cores
# make OpenMP's spinning threads compete: a module fixture that trains for 13 s alone took 247 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Scheduling under pytest-xdist's ``--dist loadgroup`` (README's test command): every test file is
    one group, as with ``--dist loadfile`` (its module fixtures are built once, in one process), except
    tests that carry an ``xdist_group`` mark of their own (the study smoke runs, split into groups of
    about equal time by tests/test_studies.py so that both processes share them). Those go first, so
    that the longest work starts first."""
    grouped, rest = [], []
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
            rest.append(item)
        else:
            grouped.append(item)
    items[:] = grouped + rest


@pytest.fixture(scope="session")
def ws_cache(tmp_path_factory) -> str:
    """One warm-start cache for the whole session: the micro-llama warm start on 1-digit addition
    that trainer tests use is built once and reused by every test that asks for the same spec."""
    return str(tmp_path_factory.mktemp("warmstart-cache"))


@pytest.fixture(scope="module")
def one_thread():
    """One torch intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``),
    restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with an empty (migrated) mlflow.db, and no storage/tracking overrides.

    In-process runs pass ``--threads 1`` (tiny models run fastest on one thread, and the machine is
    shared); torch's thread count is restored afterwards."""
    threads = torch.get_num_threads()
    monkeypatch.chdir(tmp_path)
    for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    servers.fresh_mlflow_db(tmp_path)
    yield tmp_path
    torch.set_num_threads(threads)


#: The smallest trial that still learns: micro-llama on 1-digit addition, warm-started. Train-loop and
#: learned-PRM tests start from these overrides, so the session's warm start (in ``ws_cache``) is
#: built once for all of them.
TINY_TRIAL: list[str] = [
    "model.name=micro-llama",
    "task.difficulty=1",
    "device=cpu",
    "warmstart.target_min=0.15",
    "warmstart.batch_size=32",
    "warmstart.lr=3e-3",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "eval.n_problems=8",
    "eval.every=0",
    "train.steps=2",
    "optim.lr=1e-3",
    "algo.minibatches=2",
]
