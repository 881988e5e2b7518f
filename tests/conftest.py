"""Shared fixtures. Server fixtures (PostgreSQL, MLflow) live in their own modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ws_cache(tmp_path_factory) -> str:
    """One warm-start cache for the whole session: the micro-llama warm start on 1-digit addition
    that trainer tests use is built once and reused by every test that asks for the same spec."""
    return str(tmp_path_factory.mktemp("warmstart-cache"))


#: The smallest trial that still learns: micro-llama on 1-digit addition, warm-started. Trainer and
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
