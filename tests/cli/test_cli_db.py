"""``taskrunner db migrate``: applies a PostgreSQL schema's migrations once, errors in one line."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from taskrunner import open_queue
from taskrunner.errors import ConfigurationError
from taskrunner_backends.postgres.local_server import LocalPostgres
from tests.cli.conftest import Cli


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """``TASKRUNNER_TEST_POSTGRES_URL``, or a throwaway server for this module."""
    given = os.environ.get("TASKRUNNER_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    with LocalPostgres() as server:
        yield server.url()


@pytest.fixture
def schema_url(server_url: str) -> Iterator[str]:
    """`server_url` with a fresh schema of this test's own (dropped after)."""
    name = f"tr_cli_{secrets.token_hex(4)}"
    separator = "&" if "?" in server_url else "?"
    yield f"{server_url}{separator}schema={name}"
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _open_never(url: str) -> None:
    async def go() -> None:
        async with open_queue(f"{url}&migrate=never", "q"):
            pass

    asyncio.run(go())


@pytest.mark.postgres
def test_migrate_applies_once_then_says_up_to_date(run: Cli, schema_url: str) -> None:
    # Before: a worker that may not migrate is told to run this very command.
    with pytest.raises(ConfigurationError, match="taskrunner db migrate --url"):
        _open_never(schema_url)

    first = run("db", "migrate", "--url", schema_url)
    assert (first.code, first.err) == (0, "")
    assert first.out.startswith("applied 1: ")
    assert "messages" in first.out

    second = run("db", "migrate", "--url", schema_url)
    assert (second.code, second.err) == (0, "")
    assert second.out == f"the schema at {schema_url} is up to date: nothing to apply\n"

    again = run("db", "migrate", "--url", schema_url, "--json")
    assert again.code == 0
    assert again.json() == {"url": schema_url, "applied": []}

    # After: the schema is at the latest version, so migrate=never opens it.
    _open_never(schema_url)


@pytest.mark.postgres
def test_migrate_json_lists_the_steps(run: Cli, schema_url: str) -> None:
    result = run("db", "migrate", "--url", schema_url, "--json")
    assert result.code == 0
    applied = result.json()["applied"]
    assert len(applied) == 1
    assert applied[0].startswith("1: ")


def test_migrate_takes_the_url_from_the_environment(
    run: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKRUNNER_URL", "memory://")
    result = run("db", "migrate")
    assert result.code == 2
    assert (
        result.err
        == "taskrunner: configuration error: the memory backend has no schema to migrate\n"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://", "the memory backend has no schema to migrate"),
        ("redis://127.0.0.1:1/0", "the redis backend has no schema to migrate"),
        ("postgresq://127.0.0.1/x", "did you mean postgresql://?"),
        ("postgresql://u:hunter2@127.0.0.1:1/x?bogus=1", "bogus"),
        ("postgresql://u:hunter2@127.0.0.1:1/x?pool_max=zero", "pool_max"),
        ("postgresql://u:hunter2@127.0.0.1:1/x?schema=Bad-Name", "Bad-Name"),
    ],
)
def test_bad_urls_and_schemaless_backends_exit_2_in_one_line(
    run: Cli, url: str, message: str
) -> None:
    result = run("db", "migrate", "--url", url)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("taskrunner: configuration error: ")
    assert message in result.err
    assert result.err.count("\n") == 1
    assert "hunter2" not in result.err


def test_an_unreachable_server_exits_1_without_the_password(run: Cli) -> None:
    # Port 1 on loopback refuses at once; pool_timeout bounds the pool's retries.
    url = "postgresql://postgres:hunter2@127.0.0.1:1/x?pool_timeout=0.5&connect_timeout=1"
    result = run("db", "migrate", "--url", url)
    assert result.code == 1
    assert result.out == ""
    # Before it, the pool logs its failed attempts (WARNING, on stderr); the error is last.
    last = result.err.splitlines()[-1]
    assert last.startswith("taskrunner: backend error: cannot connect to PostgreSQL at ")
    assert "127.0.0.1:1" in last
    assert "hunter2" not in result.err
    assert "Traceback" not in result.err


@pytest.mark.postgres
def test_a_stopped_server_exits_1_and_a_started_one_migrates() -> None:
    # In a subprocess, as a user runs it: the exit code is the process's.
    with LocalPostgres() as server:
        url = server.url() + "?pool_timeout=1"
        server.stop()
        argv = [sys.executable, "-m", "taskrunner", "db", "migrate", "--url", url]
        down = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert down.returncode == 1, down.stderr
        assert "backend error: cannot connect to PostgreSQL" in down.stderr
        assert "Traceback" not in down.stderr

        server.start()
        up = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("applied 1: ")
