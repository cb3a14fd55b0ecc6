"""Fixtures for the PostgreSQL tests; every test under tests/postgres is marked ``postgres``.

The server is tests/conftest.py's ``postgres_url`` (session): ``TASKRUNNER_TEST_POSTGRES_URL``
or one throwaway `LocalPostgres`.

Fixtures: ``postgres_schema`` (a fresh schema name per test,
dropped afterwards), ``schema`` (that schema, migrated: a `Migrated`), ``private_postgres``
(a started server of the test's own, which it may kill or restart; deleted afterwards).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from taskrunner_backends.postgres.local_server import LocalPostgres
from taskrunner_backends.postgres.schema import migrate

from .support import Migrated

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests under this directory ``postgres`` (the hook sees every item)."""
    for item in items:
        if item.path.resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema name ``tr_t_<8 hex>`` (not created); dropped with CASCADE after."""
    name = f"tr_t_{secrets.token_hex(4)}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(name))
        )


@pytest.fixture
def schema(postgres_url: str, postgres_schema: str) -> Migrated:
    """``postgres_schema`` created and migrated to the current version."""

    async def setup() -> None:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await migrate(conn, postgres_schema)

    asyncio.run(setup())
    return Migrated(postgres_url, postgres_schema)


@pytest.fixture
def private_postgres() -> Iterator[LocalPostgres]:
    """A started server of this test's own (kill or restart it at will); deleted after."""
    server = LocalPostgres()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
