"""Real servers on loopback for tests: PostgreSQL and an MLflow tracking server, plus an empty,
already migrated MLflow SQLite database to copy (creating one costs seconds of migrations).

PostgreSQL: ``initdb`` + ``pg_ctl`` from the Debian package (``/usr/lib/postgresql/<version>/bin``,
or on ``PATH``) in a temporary folder, listening on 127.0.0.1 at a free port, trust authentication,
no fsync. PostgreSQL refuses to run as root; when the tests run as root (as CI does), the server runs
as the unprivileged ``postgres`` user that the Debian package creates (``runuser -u postgres``), in a
folder owned by that user. Tests skip, saying why, only when ``initdb`` is not installed (or there is
no user to run it as).

MLflow: ``python -m mlflow server --workers 1`` on 127.0.0.1 at a free port, with a SQLite backend
(a copy of the migrated template) and a local artifact root, in its own process group (killed as a
whole at the end), without MLflow's background job runner.

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
    """A running PostgreSQL server: ``create_database(name)`` returns a URL for a fresh database."""

    port: int
    folder: str

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


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a throw-away PostgreSQL server (see the module docstring); skip if it cannot exist here."""
    initdb, pg_ctl = find_pg_binary("initdb"), find_pg_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver psycopg2 is not installed (pip install psycopg2-binary)")
    as_user: list[str] = []
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
        as_user = [runuser, "-u", "postgres", "--"] if runuser else ["su", "postgres", "-s", "/bin/sh", "-c"]
    data = os.path.join(folder, "data")

    def cmd(*argv: str) -> list[str]:
        if as_user and as_user[0] == "su":
            return [*as_user, " ".join(argv)]
        return [*as_user, *argv]

    subprocess.run(cmd(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"),
                   check=True, capture_output=True, timeout=120)
    port = None
    for _ in range(5):  # a free port can be taken between choosing and binding it
        port = free_port()
        opts = (f"-p {port} -h 127.0.0.1 -k {folder} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200")
        proc = subprocess.run(cmd(pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(folder, "log"), "-w", "-t", "60",
                                  "start"), capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            break
        port = None
    if port is None:
        log = Path(folder, "log").read_text() if Path(folder, "log").exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {log[-2000:]}")
    try:
        yield PostgresServer(port=port, folder=folder)
    finally:
        subprocess.run(cmd(pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"), capture_output=True, timeout=60)
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


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """Start ``mlflow server`` on a loopback port; yields its ``http://127.0.0.1:PORT`` URI."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    backend = fresh_mlflow_db(folder, "server.db")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(folder / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", backend, "--default-artifact-root", str(folder / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=folder,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(folder / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer: {(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield uri
    finally:
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
        log.close()
