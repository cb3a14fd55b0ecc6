"""The PostgreSQL schema of the backend, and its versioned migrations.

Everything lives in one PostgreSQL schema (``taskrunner`` unless the URL's ``schema``
option names another), shared by every queue of the application: each table has a
``queue`` column that leads its indexes, so a busy queue's receive walks only its own
index range however many rows other queues hold. One table for all queues keeps the
DDL static (no table is created at run time, a queue name needs no quoting rules) and
the catalog small with thousands of queues.

Tables (version 1):

* ``messages``: one row per queued, delayed or leased message. Ready when ``owner`` is
  NULL and ``available_at`` has passed on the server's clock; leased to ``owner`` when
  it is set, with the lease granted ``lease_seconds`` long at ``leased_at`` (grant or
  last heartbeat) and lapsing at ``expires_at``. ``delivery_count`` counts grants.
  ``unique_key`` (with ``unique_until``, NULL = until the final outcome) is held while
  the row exists; a partial unique index makes two holders impossible.
* ``dead_letters``: dead-lettered messages; ``reason`` is UTF-8 in a ``bytea`` because
  PostgreSQL text cannot hold NUL and a reason is kept whole.
* ``workers``: the worker registry, one row per (queue, instance) with its expiry
  (version 2 adds each worker's succeeded and failed attempt counts).
* ``leaders``: one row per election: the current or last holder, its fencing token
  (kept after a resign or lapse, so the next one is larger) and the lease's expiry.
* ``fires``: the last fired instant per periodic schedule.
* ``results``: task results by message id, with their expiry.

Migrations are explicit and idempotent: `migrate` applies, in one transaction under an
advisory lock (so workers starting together cannot race), the steps newer than the
version recorded in ``schema_migrations``, and refuses a schema written by a newer
taskrunner. Nothing else ever issues DDL. Identifiers are checked by `check_schema_name`
and quoted with `psycopg.sql.Identifier`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from taskrunner.errors import ConfigurationError

__all__ = [
    "DEFAULT_SCHEMA",
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "SchemaState",
    "check_schema_name",
    "migrate",
    "notify_channel",
    "schema_state",
]

DEFAULT_SCHEMA = "taskrunner"

# Lower-case unquoted identifiers only: they read the same quoted or not, in psql too.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class Migration(NamedTuple):
    """One step of the schema: its version, what it does, and its DDL (``{s}`` = schema)."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1 = (
    """CREATE TABLE {s}.messages (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        available_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        owner text,
        delivery_count integer NOT NULL DEFAULT 0,
        leased_at timestamptz,
        lease_seconds double precision,
        expires_at timestamptz,
        unique_key text,
        unique_until timestamptz
    )""",
    "CREATE INDEX messages_ready ON {s}.messages (queue, available_at, id) WHERE owner IS NULL",
    "CREATE INDEX messages_leased ON {s}.messages (queue, expires_at) WHERE owner IS NOT NULL",
    "CREATE UNIQUE INDEX messages_unique ON {s}.messages (queue, unique_key)"
    " WHERE unique_key IS NOT NULL",
    """CREATE TABLE {s}.dead_letters (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        original_id bigint NOT NULL,
        body bytea NOT NULL,
        reason bytea NOT NULL,
        delivery_count integer NOT NULL,
        added_at timestamptz,
        dead_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "CREATE INDEX dead_letters_by_queue ON {s}.dead_letters (queue, id)",
    "CREATE INDEX dead_letters_by_original ON {s}.dead_letters (queue, original_id)",
    """CREATE TABLE {s}.workers (
        queue text NOT NULL,
        instance text NOT NULL,
        workers integer NOT NULL,
        busy integer NOT NULL,
        average_seconds double precision,
        seen_at double precision NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (queue, instance)
    )""",
    """CREATE TABLE {s}.leaders (
        queue text NOT NULL,
        name text NOT NULL,
        holder text NOT NULL,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (queue, name)
    )""",
    """CREATE TABLE {s}.fires (
        queue text NOT NULL,
        schedule text NOT NULL,
        instant double precision NOT NULL,
        message_id bigint NOT NULL,
        PRIMARY KEY (queue, schedule)
    )""",
    """CREATE TABLE {s}.results (
        queue text NOT NULL,
        message_id text NOT NULL,
        body bytea NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (queue, message_id)
    )""",
    "CREATE INDEX results_by_expiry ON {s}.results (expires_at)",
)

# Nullable: a row written by a worker of version 1 has no counts, and a NULL reads as
# "not published" (WorkerInfo's None), not as zero.
_V2 = (
    """ALTER TABLE {s}.workers
        ADD COLUMN IF NOT EXISTS succeeded bigint,
        ADD COLUMN IF NOT EXISTS failed bigint""",
)

#: Every step, oldest first. A released step is never edited: a change is a new step.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "messages, dead letters, workers, leaders, fires, results", _V1),
    Migration(2, "workers: succeeded and failed attempt counts", _V2),
)

LATEST_VERSION = MIGRATIONS[-1].version


class SchemaState(NamedTuple):
    """What `schema_state` found.

    Attributes:
        version: The latest applied version, 0 when the schema holds no migration table.
        latest: The version this taskrunner writes (`LATEST_VERSION`).
    """

    version: int
    latest: int

    @property
    def current(self) -> bool:
        """Whether the schema is at exactly the version this taskrunner writes."""
        return self.version == self.latest


def check_schema_name(name: str) -> str:
    """Return `name` if it is a usable schema name, else raise `ConfigurationError`."""
    # A URL option or a caller's argument: not necessarily a str at run time.
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):  # type: ignore[redundant-expr]
        raise ConfigurationError(
            f"schema name {name!r} must be 1-63 lower-case letters, digits or underscores, "
            "not starting with a digit",
            setting="schema",
        )
    return name


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of `schema`: payloads name the queue (see the queue module)."""
    return f"taskrunner.{check_schema_name(schema)}"


def _statement(template: str, schema: str) -> sql.Composed:
    return sql.SQL(template).format(s=sql.Identifier(schema))


async def schema_state(conn: psycopg.AsyncConnection[Any], schema: str) -> SchemaState:
    """The schema's applied version (0 when it was never migrated); reads, changes nothing."""
    check_schema_name(schema)
    cursor = await conn.execute(
        "SELECT to_regclass(format('%%I.schema_migrations', %s::text)) IS NOT NULL", (schema,)
    )
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return SchemaState(0, LATEST_VERSION)
    cursor = await conn.execute(
        _statement("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations", schema)
    )
    row = await cursor.fetchone()
    return SchemaState(int(row[0]) if row is not None else 0, LATEST_VERSION)


async def migrate(
    conn: psycopg.AsyncConnection[Any],
    schema: str = DEFAULT_SCHEMA,
    *,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> list[Migration]:
    """Bring `schema` to the latest version; returns the steps applied (empty: up to date).

    Runs in one transaction on `conn` (which must not be inside one), holding a
    transaction-level advisory lock named after the schema, so concurrent callers apply
    each step once and a failed step leaves nothing half done.

    Raises:
        ConfigurationError: The schema was written by a newer taskrunner (its version
            is above the latest step known here): nothing is changed.
        psycopg.Error: The server refused a statement (no privilege to create, say).
    """
    check_schema_name(schema)
    latest = migrations[-1].version if migrations else 0
    applied: list[Migration] = []
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"taskrunner:{schema}",)
        )
        await conn.execute(_statement("CREATE SCHEMA IF NOT EXISTS {s}", schema))
        await conn.execute(
            _statement(
                "CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
                " version integer PRIMARY KEY,"
                " description text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
                schema,
            )
        )
        cursor = await conn.execute(
            _statement("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations", schema)
        )
        row = await cursor.fetchone()
        current = int(row[0]) if row is not None else 0
        if current > latest:
            raise ConfigurationError(
                f"schema {schema!r} is at version {current}, newer than this taskrunner's "
                f"latest ({latest}): upgrade taskrunner instead of running an older one on it",
                setting="schema",
            )
        for step in migrations:
            if step.version <= current:
                continue
            for statement in step.statements:
                await conn.execute(_statement(statement, schema))
            await conn.execute(
                _statement(
                    "INSERT INTO {s}.schema_migrations (version, description) VALUES (%s, %s)",
                    schema,
                ),
                (step.version, step.description),
            )
            applied.append(step)
    return applied
