"""The on-disk cache of built artefacts (warm starts, learned PRMs): where it is, how an entry is keyed,
and the lock its builders hold.

An entry is keyed by a *cache spec*: a frozen dataclass of everything that determines the artefact
(task, difficulty and options, model, seed, every training setting), hashed with a format version
(:func:`spec_key`). Builders hold :func:`file_lock` around "check, build, rename into place", so
several processes asking for the same entry build it once and a reader never sees a half-written one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Protocol

from filelock import FileLock


class CacheSpec(Protocol):
    """A frozen dataclass naming a cache entry; it has task options (sorted when hashed)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    task_options: Mapping[str, Any]


def default_cache_dir() -> Path:
    """``$ABLATE_CACHE`` or ``~/.cache/ablate``."""
    return Path(os.environ.get("ABLATE_CACHE") or Path.home() / ".cache" / "ablate")


def spec_dict(spec: CacheSpec) -> dict[str, Any]:
    """A cache spec as plain JSON-able data, its ``task_options`` sorted."""
    d = asdict(spec)  # type: ignore[call-overload]
    d["task_options"] = dict(sorted(dict(spec.task_options).items()))
    return d


def spec_key(spec: CacheSpec, version: int) -> str:
    """Stable cache key of a spec: 16 hex digits of SHA-256 of its canonical JSON and ``version``."""
    payload = json.dumps({"v": version, **spec_dict(spec)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive :class:`filelock.FileLock` on ``path`` (created with its folders) for the
    ``with`` block (an OS lock: the kernel releases it when its holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path):
        yield


__all__ = ["CacheSpec", "default_cache_dir", "file_lock", "spec_dict", "spec_key"]
