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


#: Test files whose module fixtures take seconds to build (a trained study, a server, a learned PRM):
#: under pytest-xdist each runs whole in one process, which builds them once (see :class:`_Scheduler`).
TOGETHER = frozenset({
    "tests/test_distributed.py", "tests/test_runner.py", "tests/test_report.py", "tests/test_planning.py",
    "tests/test_mlflow_ui.py", "tests/test_results.py", "tests/rewards/test_learned_prm.py",
})


def pytest_xdist_make_scheduler(config, log):
    """README's test command (``-n 2 --dist loadgroup``) schedules with :class:`_Scheduler`: each test on
    its own, handed to whichever process is free, in collection order; but a file of :data:`TOGETHER`
    (or an ``xdist_group``) as one unit. pytest-xdist 3.8 marks a group by renaming each test's nodeid,
    which pytest 9.2 no longer allows, so its own scheduler now sends every test on its own, and two
    processes that share a module both build its fixtures (~30 s of the suite measured)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class _Scheduler(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return path if path in TOGETHER else super()._split_scope(nodeid)

    config.option.loadscopereorder = False  # keep the collection order (by default: most tests first)
    return _Scheduler(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` first, in their order, then the others: under pytest-xdist each process takes
    the next test (or file of :data:`TOGETHER`) when it is free, so the long ones start early and many
    short ones fill the end; neither process waits long for the other (in a 686-second run that sent
    every test alone, before :data:`TOGETHER`, the two processes were busy 662 and 660 s)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: each part keeps its order


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


@pytest.fixture
def ablate_cli(monkeypatch, capfd):
    """Run ``ablate ARGV`` through :func:`ablate.cli.main` in this process: ``ablate_cli(argv, cwd, cache)``
    runs it in ``cwd`` with ``cache`` as $ABLATE_CACHE and no $MLFLOW_TRACKING_URI or $ABLATE_STORAGE (all
    restored afterwards, as are torch's threads) and returns the exit code, stdout, stderr (file
    descriptors 1 and 2: what a terminal shows) and the Python warnings raised, under the filters a fresh
    interpreter starts with (Deprecation, PendingDeprecation, Import and Resource warnings ignored): what
    `python -m ablate` would print, without a second import of torch, transformers and mlflow."""
    import warnings

    from ablate.cli import main

    def run(argv: list[str], cwd, cache) -> tuple[int, str, str, list[str]]:
        threads = torch.get_num_threads()
        with monkeypatch.context() as m:
            m.chdir(cwd)
            m.setenv("ABLATE_CACHE", str(cache))
            for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
                m.delenv(var, raising=False)
            capfd.readouterr()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.resetwarnings()
                    warnings.simplefilter("always")
                    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                        warnings.simplefilter("ignore", category)
                    code = main(argv)
            finally:
                torch.set_num_threads(threads)
        out, err = capfd.readouterr()
        return code, out, err, [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]

    return run


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
