"""The local pool of ``ablate run --workers N``: N worker subprocesses, replaced when one dies.

Each worker is a fresh interpreter, ``python -c "...member_main..." PAYLOAD`` (:data:`MEMBER_CODE`): it
imports only ablate, never the caller's ``__main__``, so ``ablate.run(study, workers=2)`` works at a script's
top level with no ``if __name__ == "__main__":`` guard, in a notebook, and from the command line alike (the
one path of both). The payload (JSON) holds the :class:`~ablate.running.session.RunSettings`, the worker's number,
its GPU and the caller's ``sys.path``; the worker sends its progress events back through a pipe of its own
(:func:`member_main`). A component registered in the caller's ``__main__`` is not seen by such a worker:
:func:`ablate.running.preflight.check_no_component_of_main` refuses it before anything is written.

Each worker runs ``max(1, cores // N)`` torch threads; on a machine with several GPUs they take them
round-robin (``CUDA_VISIBLE_DEVICES``), with one GPU they share it. A worker process that dies while work
is left is replaced (its trial is retried, see :mod:`ablate.store`), at most ``N * (max_retries + 1)``
times; one that stopped because its disk is full stops them all (every worker would fail the same way),
with one message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from ablate.disk import DISK_FULL_EXIT, DiskFullError, disk_full_error
from ablate.paths import run_dir
from ablate.running.session import RunSettings
from ablate.running.worker import process_main
from ablate.store import StudyStore

if TYPE_CHECKING:
    from ablate.running.progress import Progress
    from ablate.running.session import Event


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


#: What a worker subprocess runs: the caller's ``sys.path`` first (as multiprocessing's spawn does), then
#: :func:`member_main` with the payload (``sys.argv[1]``, JSON). Nothing of the caller's ``__main__`` is imported.
MEMBER_CODE = ("import json, sys; payload = json.loads(sys.argv[1]); sys.path[:] = payload['sys_path']; "
               "from ablate.running.pool import member_main; member_main(payload)")


def member_command(settings: RunSettings, index: int, events_fd: int, gpu: str | None) -> list[str]:
    """The command line of local worker ``index``: this interpreter running :data:`MEMBER_CODE`."""
    payload = {"settings": dataclasses.asdict(settings), "index": index, "events_fd": events_fd, "gpu": gpu,
               "sys_path": [str(p) for p in sys.path]}
    return [sys.executable, "-c", MEMBER_CODE, json.dumps(payload)]


def member_main(payload: dict[str, Any]) -> None:
    """Entry point of a local worker subprocess (:data:`MEMBER_CODE`): :func:`ablate.running.worker.process_main` with
    the payload's settings, its events sent (pickled, one lock for the trial threads of a population) through
    the pipe whose write end is ``payload["events_fd"]``."""
    fd = int(payload["events_fd"])
    os.set_inheritable(fd, False)  # a process it starts (torchrun) must not hold the pipe open
    conn, lock = Connection(fd, readable=False), threading.Lock()

    def send(event: Event) -> None:
        with lock:
            conn.send(event)

    process_main(RunSettings(**payload["settings"]), int(payload["index"]), send, payload["gpu"])


@dataclass
class Member:
    """One worker subprocess of the pool and the read end of its events pipe (None once it is at its end)."""

    index: int
    proc: subprocess.Popen[bytes]
    events: Connection | None

    @classmethod
    def start(cls, settings: RunSettings, index: int, gpu: str | None) -> Member:
        read, write = os.pipe()
        try:
            proc = subprocess.Popen(member_command(settings, index, write, gpu), stdin=subprocess.DEVNULL,
                                    pass_fds=(write,))
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return cls(index, proc, Connection(read, writable=False))

    def receive(self, handle: Callable[[Event], None]) -> bool:
        """Handle the next event of this worker's pipe (one is waiting); False at its end (the worker exited)."""
        assert self.events is not None
        try:
            event = self.events.recv()
        except (EOFError, OSError):  # every writer gone (or one killed mid-event): nothing more will come
            self.close()
            return False
        handle(event)
        return True

    def drain(self, handle: Callable[[Event], None]) -> None:
        """Handle every event left in the pipe (the worker has exited: what it sent just before)."""
        while self.events is not None and self.events.poll(0) and self.receive(handle):
            pass
        self.close()

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None


def run_pool(settings: RunSettings, workers: int, store: StudyStore, display: Progress | None) -> None:
    """Run ``workers`` worker subprocesses until they exit; replace one that dies while work is left."""
    procs: dict[int, Member] = {}
    gpus = cuda_devices()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")

    def start(i: int) -> None:
        procs[i] = Member.start(settings, i, gpu_for_worker(i, gpus, visible))

    restarts_left = workers * (settings.max_retries + 1)
    last_poll = 0.0
    disk_full: list[str] = []  # the message of the first worker that found its disk full

    def handle(event: dict[str, Any]) -> None:
        if event.get("kind") == "disk_full":
            disk_full.append(str(event.get("message")))
        elif display is not None:
            display.handle(event)

    try:
        for i in range(workers):
            start(i)
        while procs:
            if receive_events(procs, handle, timeout=0.5):
                continue
            for i, m in list(procs.items()):
                if m.proc.poll() is None:
                    continue
                m.drain(handle)  # events sent just before it exited
                del procs[i]
                code = m.proc.returncode
                if code == DISK_FULL_EXIT:  # every worker would fail the same way: stop them all
                    stop_workers(procs, handle)
                    if disk_full:
                        raise DiskFullError(disk_full[0])
                    raise disk_full_error(None, run_dir(store.name, settings.runs))
                if code != 0 and store.has_work(settings.budget):
                    if restarts_left > 0:
                        restarts_left -= 1
                        if display is not None:
                            display.line(f"worker {i} exited with code {code}; starting a new one")
                        start(i)
                    else:  # every worker keeps dying the same way: say so where the run's last lines are
                        say(display, f"worker {i} exited with code {code} and no restart is left (the "
                                     f"{workers * (settings.max_retries + 1)} allowed were used): the trials it "
                                     "left stay pending; the workers' errors above say why")
            if display is not None and time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                try:
                    display.set_counts(store.counts(settings.budget))
                except Exception:  # noqa: BLE001 - the display is best effort
                    pass
                display.refresh()
    except KeyboardInterrupt:
        deadline = time.monotonic() + 30
        for m in procs.values():
            try:
                m.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.proc.terminate()
        raise
    finally:
        for m in procs.values():
            m.close()


def say(display: Progress | None, line: str) -> None:
    """A line of the pool's: on the progress display, else on stderr."""
    if display is not None:
        display.line(line)
    else:
        print(f"ablate: {line}", file=sys.stderr, flush=True)


def receive_events(procs: dict[int, Member], handle: Callable[[Event], None], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for events from the workers and handle those waiting; whether any came."""
    pipes = {m.events: m for m in procs.values() if m.events is not None}
    if not pipes:
        time.sleep(timeout)
        return False
    got = False
    for conn in wait(list(pipes), timeout=timeout):
        got = pipes[conn].receive(handle) or got
    return got


def stop_workers(procs: dict[int, Member], handle: Callable[[Event], None] | None = None) -> None:
    """Stop the pool's remaining workers (SIGTERM, no traceback): their trials stay running in the store
    and resume from their checkpoints when the study runs again. The events they sent are handled."""
    for m in procs.values():
        m.proc.terminate()
    for m in procs.values():
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
        if handle is not None:
            m.drain(handle)
        m.close()
    procs.clear()


__all__ = ["MEMBER_CODE", "Member", "cpu_cores", "cuda_devices", "gpu_for_worker", "member_command", "member_main",
           "receive_events", "run_pool", "say", "stop_workers", "threads_per_worker"]
