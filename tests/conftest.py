"""Shared fixtures. Server fixtures (PostgreSQL, MLflow) live in their own modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ws_cache(tmp_path_factory) -> str:
    """One warm-start cache for the whole session: the micro-llama warm start on 1-digit addition
    that trainer tests use is built once and reused by every test that asks for the same spec."""
    return str(tmp_path_factory.mktemp("warmstart-cache"))
