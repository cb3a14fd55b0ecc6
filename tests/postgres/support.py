"""Shared helpers for the PostgreSQL tests of the backend's parts (H2 modules)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg_pool

from taskrunner_backends.postgres.db import Database


@dataclass(frozen=True)
class Migrated:
    """A migrated private schema on the session's server (the ``schema`` fixture)."""

    url: str
    name: str


@asynccontextmanager
async def database(schema: Migrated, *, max_size: int = 4) -> AsyncIterator[Database]:
    """A `Database` on its own small pool, bound to ``schema``; closed on exit."""
    pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
        schema.url, min_size=1, max_size=max_size, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    db = Database(pool, schema.name)
    try:
        yield db
    finally:
        await db.aclose()
