"""Shared pytest configuration: async tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest

# Redis server discovery and per-test namespaces live in tests/redis_fixtures.py.
pytest_plugins = ["tests.redis_fixtures"]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests with `asyncio.run` (no plugin needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """PostgreSQL for every test that needs one: ``TASKRUNNER_TEST_POSTGRES_URL`` when set
    (shared: tests work in their own schemas and drop only those), else one throwaway
    `LocalPostgres` for the session. No PostgreSQL found is an error, not a skip: a green
    run must mean these tests ran."""
    given = os.environ.get("TASKRUNNER_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    from taskrunner_backends.postgres.local_server import LocalPostgres

    server = LocalPostgres()
    try:
        server.start()
        yield server.url("postgres")
    finally:
        server.cleanup()
