"""The local pool of ``ablate run --workers N``: N spawned worker processes, replaced when one dies.

Workers start with multiprocessing's *spawn* (no forked torch state), each with ``max(1, cores // N)``
torch threads; on a machine with several GPUs they take them round-robin (``CUDA_VISIBLE_DEVICES``), with
one GPU they share it. A worker process that dies while work is left is replaced (its trial is retried,
see :mod:`ablate.store`), at most ``N * (max_retries + 1)`` times; one that stopped because its disk is
full stops them all (every worker would fail the same way), with one message.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ablate.disk import DISK_FULL_EXIT, DiskFullError, disk_full_error
from ablate.paths import run_dir
from ablate.session import RunSettings
from ablate.store import StudyStore
from ablate.worker import process_main

if TYPE_CHECKING:
    from ablate.progress import Progress


def cpu_cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` local workers: ``max(1, cores // workers)``."""
    return max(1, (cores if cores is not None else cpu_cores()) // max(1, workers))


def gpu_for_worker(index: int, gpus: int, visible: str | None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` value of local worker ``index`` when the machine has ``gpus`` > 1
    GPUs: the workers take them round-robin (from the user's ``CUDA_VISIBLE_DEVICES`` list, if set);
    None (leave it) with one GPU or none."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(k) for k in range(gpus)]
    if gpus <= 1 or len(ids) <= 1:
        return None
    return ids[index % len(ids)]


def cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable CUDA: CPU workers
        return 0


def run_pool(settings: RunSettings, workers: int, store: StudyStore, display: Progress | None) -> None:
    """Run ``workers`` spawned worker processes until they exit; replace a process that dies while work is left."""
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    procs: dict[int, multiprocessing.process.BaseProcess] = {}
    gpus = cuda_devices()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")

    def start(i: int) -> None:
        gpu = gpu_for_worker(i, gpus, visible)
        p = ctx.Process(target=process_main, args=(settings, i, events, gpu), name=f"ablate-worker-{i}", daemon=False)
        p.start()
        procs[i] = p

    for i in range(workers):
        start(i)
    restarts_left = workers * (settings.max_retries + 1)
    last_poll = 0.0
    disk_full: list[str] = []  # the message of the first worker that found its disk full

    def handle(event: dict[str, Any]) -> None:
        if event.get("kind") == "disk_full":
            disk_full.append(str(event.get("message")))
        elif display is not None:
            display.handle(event)

    try:
        while procs:
            try:
                handle(events.get(timeout=0.5))
                continue
            except queue_module.Empty:
                pass
            for i, p in list(procs.items()):
                if p.is_alive():
                    continue
                p.join()
                del procs[i]
                if p.exitcode == DISK_FULL_EXIT:  # every worker would fail the same way: stop them all
                    stop_workers(procs)
                    drain(events, handle)
                    if disk_full:
                        raise DiskFullError(disk_full[0])
                    raise disk_full_error(None, run_dir(store.name, settings.runs))
                if p.exitcode != 0 and store.has_work(settings.budget) and restarts_left > 0:
                    restarts_left -= 1
                    if display is not None:
                        display.line(f"worker {i} exited with code {p.exitcode}; starting a new one")
                    start(i)
            if display is not None and time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                try:
                    display.set_counts(store.counts(settings.budget))
                except Exception:  # noqa: BLE001 - the display is best effort
                    pass
                display.refresh()
        drain(events, handle)  # events sent just before the workers exited
    except KeyboardInterrupt:
        deadline = time.monotonic() + 30
        for p in procs.values():
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
        raise
    finally:
        events.close()


def drain(events: Any, handle: Callable[[dict[str, Any]], None]) -> None:
    """Handle the events left in the queue (sent just before their workers exited)."""
    while True:
        try:
            event = events.get_nowait()
        except queue_module.Empty:
            return
        handle(event)


def stop_workers(procs: dict[int, multiprocessing.process.BaseProcess]) -> None:
    """Stop the pool's remaining workers (SIGTERM, no traceback): their trials stay running in the store
    and resume from their checkpoints when the study runs again."""
    for p in procs.values():
        p.terminate()
    for p in procs.values():
        p.join(timeout=30)
    procs.clear()


__all__ = ["cpu_cores", "cuda_devices", "drain", "gpu_for_worker", "run_pool", "stop_workers", "threads_per_worker"]
