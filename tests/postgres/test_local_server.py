"""LocalPostgres: start, crash (kill) and restart on the same port with the data kept."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from taskrunner_backends.postgres.local_server import (
    BIN_ENV,
    LocalPostgres,
    LocalPostgresError,
    PostgresNotFoundError,
    find_postgres_bin,
)


def _select_one(url: str) -> object:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT 1").fetchone()
    assert row is not None
    return row[0]


def test_started_server_answers(private_postgres: LocalPostgres) -> None:
    assert (
        private_postgres.url()
        == f"postgresql://postgres@127.0.0.1:{private_postgres.port}/postgres"
    )
    assert _select_one(private_postgres.url()) == 1


def test_kill_refuses_connections_and_start_keeps_port_and_data(
    private_postgres: LocalPostgres,
) -> None:
    url = private_postgres.url()
    port = private_postgres.port
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE survivor (v int)")
        conn.execute("INSERT INTO survivor VALUES (42)")
        old_pid = private_postgres.postmaster_pid()
        assert old_pid is not None

        private_postgres.kill()

        assert private_postgres.postmaster_pid() is None
        # The session open across the crash is dead too.
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError, match="refused"):
        psycopg.connect(url, connect_timeout=5)
    # The crashed cluster's files are all still there.
    assert (private_postgres.data_dir / "postmaster.pid").exists()

    private_postgres.start()

    assert private_postgres.port == port
    assert private_postgres.url() == url
    assert private_postgres.postmaster_pid() not in (None, old_pid)
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        assert conn.execute("SELECT v FROM survivor").fetchall() == [(42,)]


def test_kill_of_a_stopped_server_is_an_error(private_postgres: LocalPostgres) -> None:
    private_postgres.stop()
    with pytest.raises(LocalPostgresError, match="not running"):
        private_postgres.kill()


def test_stop_is_idempotent_and_restart_keeps_data(private_postgres: LocalPostgres) -> None:
    with psycopg.connect(private_postgres.url(), autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE kept (v int)")
    private_postgres.restart()
    with psycopg.connect(private_postgres.url(), autocommit=True, connect_timeout=5) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)
    private_postgres.stop()
    private_postgres.stop()
    assert private_postgres.postmaster_pid() is None
    with pytest.raises(psycopg.OperationalError, match="refused"):
        psycopg.connect(private_postgres.url(), connect_timeout=5)


def test_context_manager_deletes_the_directory() -> None:
    with LocalPostgres() as server:
        assert _select_one(server.url()) == 1
        directory = server.directory
        assert (directory / "data" / "PG_VERSION").exists()
    assert not directory.exists()


def test_bogus_bin_env_raises_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bogus = tmp_path / "no-postgres-here"
    monkeypatch.setenv(BIN_ENV, str(bogus))
    with pytest.raises(PostgresNotFoundError, match=BIN_ENV) as caught:
        find_postgres_bin()
    assert str(bogus) in str(caught.value)
    assert "initdb" in str(caught.value)


def test_bin_env_is_used_when_it_holds_the_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BIN_ENV, raising=False)
    found = find_postgres_bin()
    monkeypatch.setenv(BIN_ENV, str(found))
    assert find_postgres_bin() == found


def test_session_url_answers(postgres_url: str) -> None:
    assert _select_one(postgres_url) == 1


def test_postgres_schema_names_a_schema_that_does_not_exist_yet(
    postgres_url: str, postgres_schema: str
) -> None:
    assert postgres_schema.startswith("tr_t_")
    assert len(postgres_schema) == len("tr_t_") + 8
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (postgres_schema,)
        ).fetchone()
        assert found == (0,)
        # Left behind on purpose: the fixture's teardown drops it (with CASCADE).
        conn.execute(f"CREATE SCHEMA {postgres_schema}")
        conn.execute(f"CREATE TABLE {postgres_schema}.t (v int)")
