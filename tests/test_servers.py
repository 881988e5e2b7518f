"""The test servers of :mod:`servers` restart at the same address with the same data (fault injection):
a client works before ``stop()``, fails while the server is down, and works again after ``start()``."""

from __future__ import annotations

import pickle
import urllib.error
import urllib.request

import pytest
import servers


def test_postgresql_restarts_at_the_same_port_with_its_data():
    import psycopg2

    with servers.postgres_server() as pg:
        url = pg.create_database("restart")

        def connect():
            return psycopg2.connect(url, connect_timeout=5)

        with connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
        held = connect()  # a session open across the outage is cut
        port = pg.port
        pg.stop()
        with pytest.raises(psycopg2.OperationalError):
            connect()
        with pytest.raises(psycopg2.Error), held.cursor() as cur:
            cur.execute("SELECT 1")
        pg.start()
        assert pg.port == port
        with connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT x FROM t")
            assert cur.fetchall() == [(7,)]


@pytest.mark.slow  # two server starts: ~30 s on 2 busy cores
def test_mlflow_server_restarts_at_the_same_port_with_its_runs(tmp_path, monkeypatch):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail at once while the server is down
    with servers.mlflow_server(tmp_path / "mlflow", serve_artifacts=True) as server:
        assert server == server.uri and server.uri.startswith("http://127.0.0.1:")  # usable as the URI string
        assert type(pickle.loads(pickle.dumps(server))) is str  # spawned processes get the plain URI
        client = MlflowClient(server)
        run = client.create_run(client.create_experiment("restart"))
        client.log_metric(run.info.run_id, "m", 1.0, step=1)
        client.log_text(run.info.run_id, "kept", "a.txt")  # uploaded through the server
        server.stop()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server + "/health", timeout=2)
        with pytest.raises(MlflowException):
            client.get_run(run.info.run_id)
        server.start()
        assert [m.value for m in client.get_metric_history(run.info.run_id, "m")] == [1.0]
        client.log_metric(run.info.run_id, "m", 2.0, step=2)
        assert client.download_artifacts(run.info.run_id, "a.txt", str(tmp_path)) and \
            (tmp_path / "a.txt").read_text() == "kept"
    assert not server.running
