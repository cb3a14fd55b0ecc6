"""`Database`: a psycopg connection pool bound to one schema, errors translated (internal).

Every part of the backend (queue, scheduling, leadership, results, lookup) talks to
PostgreSQL through one `Database`: `fetch` and `execute` run one statement on a pooled
connection in autocommit mode (one round trip, its own transaction), `transaction`
lends a connection inside ``BEGIN ... COMMIT`` for the few steps that need several
statements. SQL templates name the schema as ``{s}`` (`Database.sql`), quoted as an
identifier. psycopg prepares a statement on the server after it ran a few times
(``prepare_threshold``), so the hot statements are parsed and planned once per
connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from .errors import translate_errors
from .schema import check_schema_name

__all__ = ["Database", "Params", "Query"]

Query = str | sql.Composable
Params = Sequence[Any] | Mapping[str, Any] | None


class Database:
    """A pool of autocommit connections and the schema the backend's tables live in.

    Args:
        pool: An opened (or opening) ``psycopg_pool.AsyncConnectionPool`` whose
            connections are in autocommit mode. Closed by `aclose` when `owns_pool`.
        schema: The schema name (checked by `check_schema_name`).
        secrets: Strings masked in every error message (the URL's password).
        owns_pool: Close the pool in `aclose`.
    """

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool[Any],
        schema: str,
        *,
        secrets: Sequence[str] = (),
        owns_pool: bool = True,
    ) -> None:
        self._pool = pool
        self._schema = check_schema_name(schema)
        self._secrets = tuple(secrets)
        self._owns_pool = owns_pool
        self._closed = False

    @property
    def schema(self) -> str:
        """The schema holding the tables."""
        return self._schema

    @property
    def pool(self) -> psycopg_pool.AsyncConnectionPool[Any]:
        """The connection pool (for tests and the listener's connection parameters)."""
        return self._pool

    @property
    def secrets(self) -> tuple[str, ...]:
        """Strings to mask in messages (pass to `translate_errors`)."""
        return self._secrets

    def sql(self, template: str) -> sql.Composed:
        """`template` with ``{s}`` replaced by the quoted schema name.

        Literal braces in the template must be doubled, as in `str.format`.
        """
        return sql.SQL(template).format(s=sql.Identifier(self._schema))

    async def fetch(
        self, action: str, query: Query, params: Params = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (empty for a statement without rows)."""
        with translate_errors(action, self._secrets):
            async with self._pool.connection() as conn:
                cursor = await conn.execute(query, params)
                if cursor.description is None:
                    return []
                rows: list[tuple[Any, ...]] = await cursor.fetchall()
                return rows

    async def execute(self, action: str, query: Query, params: Params = None) -> int:
        """Run one statement; returns its row count."""
        with translate_errors(action, self._secrets):
            async with self._pool.connection() as conn:
                cursor = await conn.execute(query, params)
                count: int = cursor.rowcount
                return count

    @asynccontextmanager
    async def transaction(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction: committed on exit, rolled back on error.

        Errors inside the block (psycopg's, or any other) roll back and propagate,
        psycopg's translated.
        """
        with translate_errors(action, self._secrets):
            async with self._pool.connection() as conn, conn.transaction():
                yield conn

    @asynccontextmanager
    async def connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection, for a caller running several statements itself."""
        with translate_errors(action, self._secrets):
            async with self._pool.connection() as conn:
                yield conn

    async def aclose(self) -> None:
        """Close the pool (when owned); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool:
            with translate_errors("close", self._secrets):
                await self._pool.close()
