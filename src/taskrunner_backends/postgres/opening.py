"""Opening a PostgreSQL database for the backend: the pool, the schema check, migrating.

`open_database` makes one direct connection first, so a refused server is reported
at once with libpq's reason, then opens the pool; `prepare_schema` checks the schema's
version (migrating it under ``migrate=auto``) and whether commits are durable.
`migrate_from_url` is ``taskrunner db migrate``. `queue.open_from_url` builds a
`PostgresQueue` on top of these; this module does not know the queue, so the two
import in one direction only.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg_pool

from taskrunner.errors import BackendError, BackendUnavailableError, ConfigurationError

from .db import Database, probe_connection
from .errors import translate_errors
from .schema import migrate, schema_state
from .url import PostgresUrl, parse_url

__all__ = ["migrate_from_url", "open_database", "prepare_schema"]

_log = logging.getLogger("taskrunner.postgres")

# Longest stretch the pool retries one connection before leaving it to the next call.
_RECONNECT_SECONDS = 5.0
# Longest wait for the one connection attempt that explains a failed open.
_PROBE_SECONDS = 2.0


async def open_database(parsed: PostgresUrl) -> Database:
    """Open the pool `parsed` describes, or raise BackendUnavailableError with the reason."""
    # One direct connection first: a refused or failing one is reported at once in one
    # line, where the pool would retry (logging a warning each time) for pool_timeout.
    refused = await probe_connection(parsed.conninfo, parsed.pool_timeout, parsed.secrets)
    if refused is not None:
        raise BackendUnavailableError(
            f"cannot connect to PostgreSQL at {parsed.display}: {refused}"
        )
    pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
        parsed.conninfo,
        min_size=parsed.pool_min,
        max_size=parsed.pool_max,
        timeout=parsed.pool_timeout,
        open=False,
        kwargs={"autocommit": True},
        name=f"taskrunner:{parsed.schema}",
        # psycopg_pool doubles its reconnect delay without bound until reconnect_timeout
        # (default 5 min): after a minute-long outage its next attempt could be half a
        # minute away. Giving up sooner frees the slot, and the next call starts a
        # fresh attempt at once, so a returning server is found within seconds.
        reconnect_timeout=min(parsed.pool_timeout, _RECONNECT_SECONDS),
    )
    try:
        with translate_errors(f"connect to {parsed.display}", parsed.secrets):
            await pool.open(wait=True, timeout=parsed.pool_timeout)
    except BackendError as exc:
        await pool.close()
        # The pool's own error says only that it timed out (its attempts' reasons go to
        # its log): one attempt of our own gets libpq's reason, e.g. connection refused.
        reason = await probe_connection(
            parsed.conninfo, min(parsed.pool_timeout, _PROBE_SECONDS), parsed.secrets
        )
        raise BackendUnavailableError(
            f"cannot connect to PostgreSQL at {parsed.display} within "
            f"{parsed.pool_timeout:g} s (pool_timeout): {reason or exc.__cause__ or exc}"
        ) from exc
    except BaseException:
        await pool.close()
        raise
    return Database(pool, parsed.schema, secrets=parsed.secrets)


async def prepare_schema(db: Database, parsed: PostgresUrl) -> bool:
    """Check (and, with migrate=auto, apply) the schema; returns whether commits are durable."""
    async with db.connection("open") as conn:
        state = await schema_state(conn, parsed.schema)
        if state.version > state.latest:
            raise ConfigurationError(
                f"schema {parsed.schema!r} at {parsed.display} is at version {state.version}, "
                f"newer than this taskrunner's {state.latest}: upgrade taskrunner",
                setting="url",
            )
        if not state.current:
            if parsed.migrate == "never":
                raise ConfigurationError(
                    f"schema {parsed.schema!r} at {parsed.display} is at version "
                    f"{state.version}, not {state.latest}, and the URL says migrate=never: "
                    f"run `taskrunner db migrate --url ...` first",
                    setting="url",
                )
            applied = await migrate(conn, parsed.schema)
            for step in applied:
                _log.info(
                    "schema %s migrated to version %d: %s",
                    parsed.schema,
                    step.version,
                    step.description,
                )
        cursor = await conn.execute("SHOW synchronous_commit")
        row = await cursor.fetchone()
    return not (row is not None and str(row[0]).lower() == "off")


async def migrate_from_url(url: str) -> list[str]:
    """Bring the schema `url` names to the latest version; returns what was applied.

    Each applied step is described as ``"<version>: <description>"``; an empty list
    means the schema was already up to date.

    Raises:
        ConfigurationError: A bad URL, or a schema newer than this taskrunner.
        BackendUnavailableError: The server could not be reached.
    """
    parsed = parse_url(url)
    db = await open_database(parsed)
    try:
        async with db.connection("migrate") as conn:
            applied = await migrate(conn, parsed.schema)
    finally:
        await db.aclose()
    return [f"{step.version}: {step.description}" for step in applied]
