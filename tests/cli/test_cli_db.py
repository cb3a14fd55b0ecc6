"""``taskrunner db migrate`` applies a PostgreSQL schema's migrations once; ``db status``
reports the version and the counts per queue; errors in one line."""

from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from taskrunner import open_queue
from taskrunner.cli.db import EXIT_NEEDS_MIGRATE, EXIT_NEWER, _size
from taskrunner.errors import ConfigurationError
from taskrunner.queue import AddRequest, scheduling_of
from taskrunner_backends.postgres.local_server import LocalPostgres
from taskrunner_backends.postgres.schema import LATEST_VERSION, MIGRATIONS
from tests.cli.conftest import Cli


@pytest.fixture
def schema_url(postgres_url: str) -> Iterator[str]:
    """`postgres_url` with a fresh schema of this test's own (dropped after)."""
    name = f"tr_cli_{secrets.token_hex(4)}"
    separator = "&" if "?" in postgres_url else "?"
    yield f"{postgres_url}{separator}schema={name}"
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=10) as conn:
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
    assert [step.split(":")[0] for step in applied] == [str(m.version) for m in MIGRATIONS]


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


def _free_port() -> int:
    """A loopback port nothing listens on (bound and released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_migrate_with_nothing_listening_names_the_refusal_on_its_last_line(run: Cli) -> None:
    port = _free_port()
    url = f"postgresql://postgres:hunter2@127.0.0.1:{port}/x?pool_timeout=0.5"
    result = run("db", "migrate", "--url", url)
    assert result.code == 1
    last = result.err.splitlines()[-1]
    assert f"127.0.0.1:{port}" in last
    assert "refused" in last.lower()


# -- db status ------------------------------------------------------------------------------


def _fill(url: str) -> None:
    """Queue ``a``: 3 ready, 1 delayed, 1 in flight, 1 dead; queue ``b``: 1 ready."""

    async def go() -> None:
        async with open_queue(url, "a") as queue:
            await queue.add([b"1", b"2", b"3", b"4"])
            [leased] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=60)
            [dead] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=60)
            assert await queue.dead_letter([dead], reason="test") == []
            assert leased.message_id != dead.message_id
            await queue.add([b"5"])
            scheduling = scheduling_of(queue)
            assert scheduling is not None
            await scheduling.add_requests([AddRequest(body=b"later", delay_seconds=3600)])
        async with open_queue(url, "b") as queue:
            await queue.add([b"x"])

    asyncio.run(go())


@pytest.mark.postgres
def test_status_of_a_fresh_schema_says_never_migrated_and_exits_3(
    run: Cli, schema_url: str
) -> None:
    result = run("db", "status", "--url", schema_url)
    assert (result.code, result.err) == (EXIT_NEEDS_MIGRATE, "")
    name = schema_url.rsplit("schema=", 1)[1]
    assert result.out.splitlines() == [
        f"schema   {name}",
        f"version  none (never migrated); this taskrunner writes {LATEST_VERSION}",
        "state    needs `taskrunner db migrate`",
        *(f"pending  {m.version}: {m.description}" for m in MIGRATIONS),
    ]
    as_json = run("db", "status", "--url", schema_url, "--json")
    assert as_json.code == EXIT_NEEDS_MIGRATE
    assert as_json.json() == {
        "url": schema_url,
        "schema": name,
        "version": 0,
        "latest": LATEST_VERSION,
        "state": "needs-migrate",
        "pending": [{"version": m.version, "description": m.description} for m in MIGRATIONS],
        "tables": [],
        "queues": None,
    }
    # Reading created nothing: the schema still does not exist.
    with psycopg.connect(schema_url.split("?schema=")[0].split("&schema=")[0]) as conn:
        row = conn.execute("SELECT to_regnamespace(%s) IS NULL", (name,)).fetchone()
    assert row == (True,)


@pytest.mark.postgres
def test_status_of_a_migrated_schema_is_up_to_date_with_counts_per_queue(
    run: Cli, schema_url: str
) -> None:
    assert run("db", "migrate", "--url", schema_url).code == 0
    empty = run("db", "status", "--url", schema_url)
    assert (empty.code, empty.err) == (0, "")
    assert empty.out.splitlines()[2:5] == ["state    up to date", "queues   none", ""]
    assert empty.out.splitlines()[5].split() == ["TABLE", "SIZE", "LIVE", "ROWS", "DEAD", "ROWS"]

    _fill(schema_url)
    result = run("db", "status", "--url", schema_url)
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines()[1:7] == [
        f"version  {LATEST_VERSION}; this taskrunner writes {LATEST_VERSION}",
        "state    up to date",
        "",
        "QUEUE  READY  DELAYED  IN FLIGHT  DEAD",
        "a      3      1        1          1",
        "b      1      0        0          0",
    ]
    listed = {line.split()[0] for line in result.out.splitlines()[9:]}
    assert {"messages", "dead_letters", "schema_migrations"} <= listed
    as_json = run("db", "status", "--url", schema_url, "--json")
    assert as_json.code == 0
    assert as_json.json()["state"] == "up-to-date"
    assert as_json.json()["queues"] == [
        {"queue": "a", "ready": 3, "delayed": 1, "in_flight": 1, "dead": 1},
        {"queue": "b", "ready": 1, "delayed": 0, "in_flight": 0, "dead": 0},
    ]
    assert as_json.json()["pending"] == []
    tables = {t["table"]: t for t in as_json.json()["tables"]}
    assert {"messages", "dead_letters", "schema_migrations"} <= set(tables)
    assert all(t["bytes"] > 0 for t in tables.values())
    # The dead letter's DELETE and the receives' UPDATEs left dead rows in messages; the
    # statistics collector reports them within a few seconds.
    deadline = time.monotonic() + 30
    while tables["messages"]["dead_rows"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
        polled = run("db", "status", "--url", schema_url, "--json").json()["tables"]
        tables = {t["table"]: t for t in polled}
    assert tables["messages"]["dead_rows"] >= 1, tables["messages"]
    assert tables["messages"]["live_rows"] >= 1, tables["messages"]


@pytest.mark.postgres
def test_status_of_a_schema_marked_newer_exits_4_without_counts(run: Cli, schema_url: str) -> None:
    assert run("db", "migrate", "--url", schema_url).code == 0
    name = schema_url.rsplit("schema=", 1)[1]
    base = schema_url.split("?schema=")[0].split("&schema=")[0]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_migrations (version, description) VALUES (%s, %s)"
            ).format(sql.Identifier(name)),
            (LATEST_VERSION + 1, "from the future"),
        )
    result = run("db", "status", "--url", schema_url)
    assert (result.code, result.err) == (EXIT_NEWER, "")
    assert result.out.splitlines()[1:4] == [
        f"version  {LATEST_VERSION + 1}; this taskrunner writes {LATEST_VERSION}",
        "state    newer than this taskrunner (upgrade taskrunner)",
        "",
    ]
    as_json = run("db", "status", "--url", schema_url, "--json")
    assert as_json.code == EXIT_NEWER
    assert (as_json.json()["state"], as_json.json()["queues"]) == ("newer", None)


def test_status_with_nothing_listening_exits_1_in_one_line_naming_the_refusal(
    run: Cli,
) -> None:
    port = _free_port()
    url = f"postgresql://postgres:hunter2@127.0.0.1:{port}/x?pool_timeout=2"
    result = run("db", "status", "--url", url)
    assert (result.code, result.out) == (1, "")
    assert result.err.count("\n") == 1
    assert result.err.startswith("taskrunner: backend error: connect to postgresql://")
    assert f'"127.0.0.1", port {port} failed: Connection refused' in result.err
    assert "hunter2" not in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://", "the memory backend has no schema to report"),
        ("redis://127.0.0.1:1/0", "the redis backend has no schema to report"),
        ("postgresql://u:hunter2@127.0.0.1:1/x?schema=Bad-Name", "Bad-Name"),
    ],
)
def test_status_of_bad_urls_and_schemaless_backends_exits_2(
    run: Cli, url: str, message: str
) -> None:
    result = run("db", "status", "--url", url)
    assert (result.code, result.out) == (2, "")
    assert message in result.err
    assert result.err.count("\n") == 1
    assert "hunter2" not in result.err


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 kB"),
        (1024**2 - 1, "1023 kB"),
        (1024**2, "1 MB"),
        (1024**3 * 5 + 1, "5 GB"),
        # GB is the largest unit: a whole number in front, however many.
        (1024**4, "1024 GB"),
    ],
)
def test_table_sizes_are_shown_in_the_largest_unit_with_a_whole_number(
    size: int, shown: str
) -> None:
    assert _size(size) == shown
