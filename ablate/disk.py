"""Disk space: a full disk recognised as what it is, and the free space of a folder.

A full disk is not an outage: waiting does not cure it, and blaming the store or the tracking server
for it sends a user the wrong way. Every write ablate makes (a checkpoint, a journal record, the
outbox, a local MLflow store, a report) that fails for want of space ends the same way: one
:class:`DiskFullError` naming the folder, its free space and the fix, exit code 1, and nothing
half-written (a journal record is all there or not at all; a checkpoint's temporary file is removed).
Freeing space and running the same command again resumes the study: finished trials are kept, the
interrupted ones resume from their last checkpoint.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ablate.errors import AblateError

#: The errors of a write that found no space: the disk is full, or the user's quota is spent.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

#: How a full disk reads where its errno was lost on the way (SQLite's and PostgreSQL's messages, C++
#: streams that keep only the text).
_FULL_TEXT = ("no space left on device", "database or disk is full", "disk quota exceeded")

#: The exit code of a worker process that stopped because its disk is full: its pool does not replace
#: it (another worker would fail the same way) and stops the others.
DISK_FULL_EXIT = 28


class DiskFullError(AblateError):
    """A write failed because the disk holding ``folder`` is full: one line naming the folder, its free
    space and the fix; exit code 1 (not bad input)."""

    exit_code = 1

    def __init__(self, message: str, folder: str | None = None) -> None:
        super().__init__(message)
        self.folder = folder


class DiskSpaceError(AblateError):
    """``ablate run`` refused to start: a disk it would write to has less free space than the study's
    estimated peak use there (exit code 2, like every refusal made before anything is written)."""


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception in its chain of causes says a write found no space (ENOSPC,
    EDQUOT, or a database's "disk is full")."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFullError):
            return True
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        text = str(exc).lower()
        if any(t in text for t in _FULL_TEXT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def failed_path(exc: BaseException | None) -> str | None:
    """The file named by the first OS error in ``exc``'s chain that names one, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.filename:
            return os.fsdecode(exc.filename)
        exc = exc.__cause__ or exc.__context__
    return None


def nearest_existing(path: str | os.PathLike[str]) -> Path:
    """``path`` or its nearest parent that exists (the folder a new file would be made in)."""
    p = Path(path).absolute()
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes (for an unprivileged user) on the filesystem holding ``path`` (or its nearest
    existing parent); None where the OS cannot say."""
    try:
        return shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return None


def local_tracking_folder(uri: str) -> str | None:
    """The folder of a local MLflow store (a ``sqlite:///`` file's, or a folder URI), None for a server."""
    if uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):].split("?", 1)[0]).parent)
    if uri.startswith("file:") or "://" not in uri:
        return uri[len("file://"):] if uri.startswith("file://") else uri.removeprefix("file:")
    return None


def human_bytes(n: float | None) -> str:
    """``n`` bytes for people: ``512 B``, ``9.7 MB``, ``1.3 GB`` (powers of 1000, as ``df -H``)."""
    if n is None:
        return "unknown"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def disk_full_error(exc: BaseException | None = None, folder: str | os.PathLike[str] | None = None) -> DiskFullError:
    """The one message for a write that found no space.

    Args:
        exc: the failed write's exception: the folder of the file it names is the one reported
            (a :class:`DiskFullError` already made is returned as it is).
        folder: the folder to name when ``exc`` names no file (the runs folder, the MLflow store).
    """
    if isinstance(exc, DiskFullError):
        return exc
    path = failed_path(exc)
    where = Path(path).parent if path else Path(folder) if folder is not None else Path.cwd()
    where = nearest_existing(where)
    return DiskFullError(
        f"a write in {where} found its disk full ({human_bytes(free_bytes(where))} free now): free space there, or use a folder "
        "on a larger disk (--runs DIR for checkpoints and the study store, --tracking-uri for a local MLflow store), then run the same command again: finished "
        "trials are kept and interrupted ones resume from their last checkpoint", folder=str(where))


__all__ = [
    "DISK_FULL_ERRNOS",
    "DISK_FULL_EXIT",
    "DiskFullError",
    "DiskSpaceError",
    "disk_full_error",
    "failed_path",
    "free_bytes",
    "human_bytes",
    "is_disk_full",
    "local_tracking_folder",
    "nearest_existing",
]
