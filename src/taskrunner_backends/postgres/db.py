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

import asyncio
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from taskrunner.errors import BackendUnavailableError
from taskrunner.redaction import mask_secrets

from .errors import translate_errors
from .schema import check_schema_name

__all__ = ["Database", "Params", "Query", "probe_connection"]

_CONNECTIONS_ERRORS = "connections_errors"


def _connect_errors(pool: psycopg_pool.AsyncConnectionPool[Any]) -> int:
    """Failed connection attempts of `pool` so far (psycopg_pool's cumulative counter)."""
    return int(pool.get_stats().get(_CONNECTIONS_ERRORS, 0))


async def probe_connection(
    conninfo: object, seconds: float, secrets: Sequence[str] = ()
) -> str | None:
    """Open and close one connection outside any pool; returns why it failed, or None.

    For error messages: psycopg_pool logs why its connection attempts failed but keeps
    no record of it. Waits at most `seconds` (at least 0.1); `secrets` are masked.
    """
    if not isinstance(conninfo, str):
        return "(the pool's connection string is computed: not probed)"
    seconds = max(seconds, 0.1)
    try:
        async with asyncio.timeout(seconds):
            conn = await psycopg.AsyncConnection.connect(
                conninfo, connect_timeout=max(2, math.ceil(seconds))
            )
        await conn.close()
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except (psycopg.Error, OSError) as exc:
        # libpq's messages end with a newline and an indented hint line.
        return " ".join(mask_secrets(str(exc), secrets).split())
    return None


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
        # Failed connection attempts already accounted for by an earlier pool timeout.
        self._connect_errors_seen = _connect_errors(pool)

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
        self, action: str, query: Query, params: Params = None, *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (empty for a statement without rows).

        ``binary`` asks for the results in binary format (bytea as is, not in hex).
        """
        with translate_errors(action, self._secrets):
            async with self._lend(action) as conn:
                cursor = await conn.execute(query, params, binary=binary)
                if cursor.description is None:
                    return []
                rows: list[tuple[Any, ...]] = await cursor.fetchall()
                return rows

    async def execute(self, action: str, query: Query, params: Params = None) -> int:
        """Run one statement; returns its row count."""
        with translate_errors(action, self._secrets):
            async with self._lend(action) as conn:
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
            async with self._lend(action) as conn, conn.transaction():
                yield conn

    @asynccontextmanager
    async def connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection, for a caller running several statements itself."""
        with translate_errors(action, self._secrets):
            async with self._lend(action) as conn:
                yield conn

    @asynccontextmanager
    async def _lend(self, action: str) -> AsyncIterator[Any]:
        """``pool.connection()``, a pool timeout explained (see the module docstring).

        Yields what the pool yields (its connection type is the pool's ``Any`` parameter).
        """
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise await self._pool_timeout_error(action, exc) from exc

    async def _pool_timeout_error(
        self, action: str, exc: psycopg_pool.PoolTimeout
    ) -> BackendUnavailableError:
        waited = f"no free connection in the pool within {self._pool.timeout:g} s (pool_timeout)"
        errors = _connect_errors(self._pool)
        failed = errors > self._connect_errors_seen
        self._connect_errors_seen = errors
        if not failed:
            return BackendUnavailableError(
                f"{action}: {waited}: every connection is in use; raise pool_max or "
                f"pool_timeout ({mask_secrets(str(exc), self._secrets)})"
            )
        cause = await probe_connection(self._pool.conninfo, self._pool.timeout, self._secrets)
        if cause is None:
            return BackendUnavailableError(
                f"{action}: {waited}: the pool's connection attempts failed meanwhile, "
                "but a fresh connection succeeds now: the server was unreachable for a "
                "while, or every connection is in use (then raise pool_max or pool_timeout)"
            )
        return BackendUnavailableError(
            f"{action}: {waited}: the server may be unreachable: the pool's connection "
            f"attempts failed, and so does a fresh one: {cause}"
        )

    async def aclose(self) -> None:
        """Close the pool (when owned); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool:
            with translate_errors("close", self._secrets):
                await self._pool.close()
