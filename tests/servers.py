"""Real servers on loopback for tests: PostgreSQL and an MLflow tracking server, plus an empty,
already migrated MLflow SQLite database to copy (creating one costs seconds of migrations).

PostgreSQL: ``initdb`` + ``pg_ctl`` from the Debian package (``/usr/lib/postgresql/<version>/bin``,
or on ``PATH``) in a temporary folder, listening on 127.0.0.1 at a free port, trust authentication,
no fsync. PostgreSQL refuses to run as root; when the tests run as root (as CI does), the server runs
as the unprivileged ``postgres`` user that the Debian package creates (``runuser -u postgres``), in a
folder owned by that user. Tests skip, saying why, only when ``initdb`` is not installed (or there is
no user to run it as).

MLflow: ``python -m mlflow server --workers 1`` on 127.0.0.1 at a free port, with a SQLite backend
(a copy of the migrated template) and a local artifact root (or, with ``serve_artifacts=True``,
artifacts proxied by the server as the multi-machine recipe runs it), in its own process group (killed
as a whole at the end), without MLflow's background job runner.

Both can be stopped and started again at the same address, with the same data, for fault-injection
tests: ``PostgresServer.stop()`` / ``.start()`` (``pg_ctl stop -m fast``: clients are disconnected) and
``MlflowServer.stop()`` / ``.start()`` (the server's process group is killed).

Use them through fixtures defined in the test module (they are context managers here so that
several modules can share the code without a conftest).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_pg_binary(name: str) -> str | None:
    """A PostgreSQL server binary: the newest /usr/lib/postgresql/*/bin, else PATH."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                    reverse=True):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return shutil.which(name)


@dataclass
class PostgresServer:
    """A running PostgreSQL server: ``create_database(name)`` returns a URL for a fresh database;
    ``stop()`` and ``start()`` take it down and bring it back at the same port with the same data."""

    port: int
    folder: str
    pg_ctl: str = ""
    as_user: tuple[str, ...] = ()

    @property
    def data(self) -> str:
        return os.path.join(self.folder, "data")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def cmd(self, *argv: str) -> list[str]:
        """``argv`` run as the server's user (``postgres`` when the tests run as root)."""
        if self.as_user and self.as_user[0] == "su":
            return [*self.as_user, " ".join(argv)]
        return [*self.as_user, *argv]

    def start(self) -> None:
        """Start the server (same data folder, port and options); returns once it accepts connections.

        Raises:
            RuntimeError: it did not start (e.g. another process took the port); the log's end says why.
        """
        opts = (f"-p {self.port} -h 127.0.0.1 -k {self.folder} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200")
        proc = subprocess.run(self.cmd(self.pg_ctl, "-D", self.data, "-o", opts, "-l", os.path.join(self.folder, "log"),
                                       "-w", "-t", "60", "start"), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            log = Path(self.folder, "log").read_text() if Path(self.folder, "log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start on port {self.port}: {proc.stderr[-1000:]}{log[-2000:]}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m fast``: open sessions are disconnected); returns once it is down."""
        subprocess.run(self.cmd(self.pg_ctl, "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"),
                       capture_output=True, timeout=120, check=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a throw-away PostgreSQL server (see the module docstring); skip if it cannot exist here."""
    initdb, pg_ctl = find_pg_binary("initdb"), find_pg_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver psycopg2 is not installed (pip install psycopg2-binary)")
    as_user: tuple[str, ...] = ()
    folder = tempfile.mkdtemp(prefix="ablate-pg-")
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder, ignore_errors=True)
            pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as (PostgreSQL refuses root)")
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        os.chmod(folder, 0o700)
        runuser = shutil.which("runuser")
        as_user = (runuser, "-u", "postgres", "--") if runuser else ("su", "postgres", "-s", "/bin/sh", "-c")
    server = PostgresServer(port=0, folder=folder, pg_ctl=pg_ctl, as_user=as_user)
    subprocess.run(server.cmd(initdb, "-D", server.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"),
                   check=True, capture_output=True, timeout=120)
    for attempt in range(5):  # a free port can be taken between choosing and binding it
        server.port = free_port()
        try:
            server.start()
            break
        except RuntimeError:
            if attempt == 4:
                shutil.rmtree(folder, ignore_errors=True)
                raise
    try:
        yield server
    finally:
        subprocess.run(server.cmd(pg_ctl, "-D", server.data, "-m", "immediate", "-w", "stop"), capture_output=True,
                       timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


_TEMPLATE_DB: dict[str, Path] = {}


def mlflow_template_db() -> Path:
    """An empty MLflow SQLite database with every migration applied, made once per process; copy it
    (``shutil.copy``) to get a fresh tracking store without seconds of migrations."""
    if "db" not in _TEMPLATE_DB:
        from mlflow import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="ablate-mlflow-template-"))
        db = folder / "mlflow.db"
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
        _TEMPLATE_DB["db"] = db
    return _TEMPLATE_DB["db"]


def fresh_mlflow_db(folder: Path, name: str = "mlflow.db") -> str:
    """A copy of the template database in ``folder``; returns its ``sqlite:///`` URI."""
    target = Path(folder) / name
    shutil.copy(mlflow_template_db(), target)
    return f"sqlite:///{target.resolve()}"


class MlflowServer(str):
    """A running ``mlflow server``: the string is its URI, ``http://127.0.0.1:PORT`` (so a test can pass it
    wherever a tracking URI goes; it pickles as that plain string); ``stop()`` and ``start()`` take it
    down and bring it back at the same port with the same backend database and artifact root."""

    def __new__(cls, folder: Path, port: int, argv: list[str], env: dict[str, str]) -> MlflowServer:
        self = super().__new__(cls, f"http://127.0.0.1:{port}")
        self.folder, self.port, self.argv, self.env = folder, port, argv, env
        self.proc: subprocess.Popen | None = None
        return self

    def __reduce__(self):
        return (str, (self.uri,))

    @property
    def uri(self) -> str:
        return str.__str__(self)

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 120) -> None:
        """Start the server; returns once ``/health`` answers.

        Raises:
            RuntimeError: it exited or did not answer within ``timeout`` s (the log's end says why).
        """
        with open(self.log, "a") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True, cwd=self.folder)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"mlflow server exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not answer: {self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        """Kill the server's process group (SIGTERM, then SIGKILL after 15 s); returns once it is gone."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):  # the uvicorn child, if it outlived the leader
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while _listening(self.port) and time.monotonic() < deadline:  # the child closes its socket
            time.sleep(0.1)


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def mlflow_server(folder: Path, *, serve_artifacts: bool = False) -> Iterator[MlflowServer]:
    """Start ``mlflow server`` on a loopback port; yields it (a :class:`MlflowServer`: its URI string).

    Args:
        serve_artifacts: the server stores the artifacts that clients upload to it, in
            ``folder/artifacts`` (``--serve-artifacts --artifacts-destination``: clients need no shared
            filesystem); by default clients write them to ``folder/artifacts`` themselves
            (``--default-artifact-root``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    backend = fresh_mlflow_db(folder, "server.db")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    artifacts = (["--serve-artifacts", "--artifacts-destination", str(folder / "artifacts")] if serve_artifacts
                 else ["--default-artifact-root", str(folder / "artifacts")])
    server = None
    for attempt in range(3):  # a free port can be taken between choosing and binding it
        port = free_port()
        argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                "--backend-store-uri", backend, *artifacts]
        server = MlflowServer(folder, port, argv, env)
        try:
            server.start()
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        server.stop()
