"""`PostgresTransactionalAdd`: messages written in the caller's own open transaction.

The application hands its connection to ``dispatch(..., connection=conn)``; the
message rows are inserted on that connection, inside the transaction the application
has open there, so the message exists if and only if that transaction commits. Workers
read with ``FOR UPDATE SKIP LOCKED`` under MVCC: an uncommitted row is invisible to
them, and a rolled-back one never existed. The NOTIFY that wakes a blocked receive is
sent in the same transaction, and PostgreSQL delivers it at COMMIT (never on rollback).

The statements are those of `scheduling` (one plain insert for requests without a
unique key; advisory locks, key clean-up and one insert per keyed request otherwise),
run one after another: they are written once, as a generator of ``(sql, params)``
steps (`_steps`), and driven either by a blocking connection (`add_sync`) or by an
asyncio one (`add`), so the sync and async paths cannot drift.

Before writing, one statement checks that the connection reaches the queue's database
and that the queue's schema is there; the connection must be inside a transaction
(an autocommit connection outside ``transaction()``/``atomic()`` would commit each
statement on its own, which is not what the caller asked for). Connections taken:

* psycopg 3 ``Connection`` and ``AsyncConnection``;
* SQLAlchemy 2 ``Connection``, ``Session``, ``AsyncConnection``, ``AsyncSession``
  on the ``psycopg`` driver (statements go through SQLAlchemy, so its own
  transaction state stays right);
* Django's database connection (``django.db.connection`` or ``connections[alias]``)
  on PostgreSQL, inside ``transaction.atomic()``.

Anything else is refused with a `TypeError` naming what is taken; nothing is written.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

from psycopg import AsyncConnection, Connection, pq
from psycopg.conninfo import conninfo_to_dict

from taskrunner.errors import BackendError, ConfigurationError
from taskrunner.queue import Added, AddRequest
from taskrunner_backends.checks import check_requests

from .db import Database
from .errors import translate_errors
from .scheduling import (
    _FREE_KEY,
    _KEYED_INSERT,
    _LOCK_KEYS,
    _PLAIN_INSERT,
    _UNIQUE_RETRIES,
    _columns,
    _ids,
    _keyed_params,
    _Request,
    _request,
)

__all__ = [
    "AsyncRun",
    "PostgresTransactionalAdd",
    "SyncRun",
    "TransactionError",
    "async_runner",
    "drive_async",
    "drive_sync",
    "sync_runner",
]

# A statement and its parameters, as a step of `_steps` yields them.
_Step = tuple[str, Any]
_Rows = list[tuple[Any, ...]]
#: Runs one statement on the caller's connection and returns its rows.
SyncRun = Callable[[str, Any], _Rows]
AsyncRun = Callable[[str, Any], Awaitable[_Rows]]

_CHECK = "SELECT current_database(), to_regclass(%s)::text, current_setting('search_path')"

_TAKEN = (
    "a psycopg 3 Connection or AsyncConnection, a SQLAlchemy Connection, Session, "
    "AsyncConnection or AsyncSession on the psycopg driver, or a Django PostgreSQL connection"
)


class TransactionError(ConfigurationError):
    """The connection given to a transactional dispatch cannot take part in one.

    Closed, outside a transaction (autocommit), in a failed transaction, on another
    database, or without the queue's schema. Nothing was written.
    """


class PostgresTransactionalAdd:
    """Adds of one queue, written in the caller's transaction (`taskrunner.queue.TransactionalAdd`).

    Guarantees:

    * The messages are committed with the caller's transaction and rolled back with
      it; no worker sees them before the commit.
    * Delayed and unique requests behave as in `Scheduling.add_requests`; a unique key
      held by a message another open transaction added waits for that transaction
      (PostgreSQL's unique index), so two transactions never both hold one key.
    * Before anything is written the connection is checked (open, inside a
      transaction, the queue's database, the schema present); a failed check raises
      `TransactionError` and leaves the caller's transaction as it was.

    Args:
        db: The queue's `Database` (its schema names the tables).
        queue: The queue's name.
        conninfo: The queue's libpq connection string (its database name is compared
            with the connection's).
    """

    def __init__(self, db: Database, queue: str, *, conninfo: str, channel: str) -> None:
        self._queue = queue
        self._schema = db.schema
        self._secrets = db.secrets
        self._channel = channel
        self._database = conninfo_to_dict(conninfo).get("dbname")

        def render(template: str) -> str:
            return db.sql(template).as_string(None)

        self._table = render("{s}.messages")
        self._plain = render(_PLAIN_INSERT)
        self._free = render(_FREE_KEY)
        self._keyed = render(_KEYED_INSERT)
        self._lock = render(_LOCK_KEYS)

    def add_sync(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """Add `requests` in `connection`'s open transaction, blocking; one `Added` each.

        Raises:
            TypeError: `connection` is no connection this backend takes, or a request
                is not an `AddRequest`.
            ValueError: A request's field is out of range; nothing is written.
            TransactionError: The connection cannot take part (see the class).
            BackendUnavailableError: The server could not be reached.
        """
        items = _checked(requests)
        run = sync_runner(connection)
        with translate_errors("add in transaction", self._secrets):
            return drive_sync(self._steps(items), run)

    async def add(self, connection: object, requests: Sequence[AddRequest]) -> list[Added]:
        """`add_sync` for asyncio connections (and blocking ones, run on the loop).

        A blocking connection given here is used as it is, on the event loop's thread:
        the statements are short, and the connection belongs to the caller.
        """
        items = _checked(requests)
        arun = async_runner(connection)
        if arun is None:
            return self.add_sync(connection, requests)
        with translate_errors("add in transaction", self._secrets):
            return await drive_async(self._steps(items), arun)

    def _steps(self, items: list[_Request]) -> Generator[_Step, _Rows, list[Added]]:
        """The statements of one transactional add; each step receives its rows."""
        checked = yield (_CHECK, (self._table,))
        self._check_target(checked)
        if not items:
            return []
        if all(item.key is None for item in items):
            rows = yield (self._plain, (self._queue, *_columns(items), self._channel, self._queue))
            return [Added(message_id=i) for i in _ids(rows[0][0] if rows else None, len(items))]
        keys = sorted({item.key for item in items if item.key is not None})
        yield (self._lock, (self._queue, keys))
        results: list[Added | None] = [None] * len(items)
        for index, item in enumerate(items):
            if item.key is None:
                rows = yield (
                    self._plain,
                    (self._queue, *_columns([item]), self._channel, self._queue),
                )
                results[index] = Added(message_id=_ids(rows[0][0], 1)[0])
                continue
            for _ in range(_UNIQUE_RETRIES):
                yield (self._free, (self._queue, item.key))
                rows = yield (self._keyed, _keyed_params(self._queue, item))
                if rows:
                    results[index] = Added(message_id=str(rows[0][0]), added=bool(rows[0][1]))
                    break
            else:
                raise BackendError(
                    "add in transaction: a unique key's holder kept vanishing between the "
                    f"conflict and the read of its id ({_UNIQUE_RETRIES} tries)"
                )
        yield ("SELECT pg_notify(%s, %s)", (self._channel, self._queue))
        return [r for r in results if r is not None]

    def _check_target(self, rows: _Rows) -> None:
        database, table, search_path = rows[0]
        if self._database is not None and database != self._database:
            raise TransactionError(
                f"the connection is to database {database!r}, the queue's is "
                f"{self._database!r}: a transactional dispatch must write in the queue's "
                "database; nothing was written"
            )
        if table is None:
            raise TransactionError(
                f"database {database!r} has no table {self._table} (search_path "
                f"{search_path!r}): the queue's schema is {self._schema!r}; migrate it "
                "(taskrunner db migrate) or open the queue with the right ?schema=; "
                "nothing was written"
            )


def _checked(requests: Sequence[AddRequest]) -> list[_Request]:
    return [_request(request) for request in check_requests(requests, nul=False)]


def drive_sync(steps: Generator[_Step, _Rows, list[Added]], run: SyncRun) -> list[Added]:
    """Run each statement `steps` yields with `run`, sending back its rows; the result."""
    try:
        step = next(steps)
        while True:
            step = steps.send(run(*step))
    except StopIteration as done:
        result: list[Added] = done.value
        return result


async def drive_async(steps: Generator[_Step, _Rows, list[Added]], run: AsyncRun) -> list[Added]:
    """`drive_sync` with an asyncio `run`."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await run(*step))
    except StopIteration as done:
        result: list[Added] = done.value
        return result


def _fetch(cursor: Any) -> _Rows:
    return list(cursor.fetchall()) if cursor.description is not None else []


def _check_psycopg(conn: Connection[Any] | AsyncConnection[Any]) -> None:
    if conn.closed:
        raise TransactionError("the connection is closed; nothing was written")
    status = conn.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise TransactionError(
            "the connection's transaction has failed (roll it back first); nothing was written"
        )
    if status == pq.TransactionStatus.IDLE and conn.autocommit:
        raise TransactionError(
            "the connection is in autocommit mode outside a transaction, so the message "
            "would be committed on its own: open one (with conn.transaction(): ...) or "
            "dispatch without connection=; nothing was written"
        )


def sync_runner(connection: object) -> SyncRun:
    """A blocking ``run(sql, params) -> rows`` on `connection`, after checking it."""
    if isinstance(connection, Connection):
        _check_psycopg(connection)

        def run_psycopg(query: str, params: Any) -> _Rows:
            return _fetch(connection.execute(query, params))

        return run_psycopg
    sqlalchemy = _sqlalchemy_connection(connection)
    if sqlalchemy is not None:
        return sqlalchemy
    django = _django_runner(connection)
    if django is not None:
        return django
    if isinstance(connection, AsyncConnection) or _is_async_sqlalchemy(connection):
        raise TypeError(
            "an asyncio connection was given to a blocking dispatch: use the async "
            "Producer with it, or a blocking connection here"
        )
    raise TypeError(f"connection= takes {_TAKEN}; got {type(connection).__qualname__}")


def async_runner(connection: object) -> AsyncRun | None:
    """An async ``run(sql, params) -> rows``, or None for a blocking connection."""
    if isinstance(connection, AsyncConnection):
        _check_psycopg(connection)

        async def run_psycopg(query: str, params: Any) -> _Rows:
            cursor = await connection.execute(query, params)
            return list(await cursor.fetchall()) if cursor.description is not None else []

        return run_psycopg
    if not _is_async_sqlalchemy(connection):
        return None
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection, AsyncSession

    given: SAAsyncConnection | AsyncSession = connection  # type: ignore[assignment]

    async def run_sqlalchemy(query: str, params: Any) -> _Rows:
        conn = await given.connection() if isinstance(given, AsyncSession) else given
        raw = await conn.get_raw_connection()
        _check_sqlalchemy(conn.sync_connection, raw.driver_connection)
        result = await conn.exec_driver_sql(query, _sqlalchemy_params(params))
        return list(result.fetchall()) if result.returns_rows else []

    return run_sqlalchemy


def _is_async_sqlalchemy(connection: object) -> bool:
    if "sqlalchemy.ext.asyncio" not in sys.modules:
        return False
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection, AsyncSession

    return isinstance(connection, SAAsyncConnection | AsyncSession)


def _sqlalchemy_connection(connection: object) -> SyncRun | None:
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        conn = connection.connection()
    elif isinstance(connection, SAConnection):
        conn = connection
    else:
        return None
    _check_sqlalchemy(conn, conn.connection.driver_connection)

    def run_sqlalchemy(query: str, params: Any) -> _Rows:
        result = conn.exec_driver_sql(query, _sqlalchemy_params(params))
        return list(result.fetchall()) if result.returns_rows else []

    return run_sqlalchemy


def _sqlalchemy_params(params: Any) -> Any:
    # exec_driver_sql takes a tuple or a dict for one row; a list would mean many rows.
    return params if isinstance(params, dict) else tuple(params)


def _check_sqlalchemy(conn: Any, raw: Any) -> None:
    """Refuse a SQLAlchemy connection that cannot take part; `raw` is its driver connection."""
    if conn.closed or conn.invalidated:
        raise TransactionError("the SQLAlchemy connection is closed; nothing was written")
    if conn.dialect.name != "postgresql" or conn.dialect.driver != "psycopg":
        raise TypeError(
            f"connection= takes SQLAlchemy connections on postgresql+psycopg; this one is "
            f"{conn.dialect.name}+{conn.dialect.driver}"
        )
    if raw.autocommit and raw.info.transaction_status == pq.TransactionStatus.IDLE:
        raise TransactionError(
            "the SQLAlchemy connection is in AUTOCOMMIT isolation, so the message would be "
            "committed on its own; nothing was written"
        )
    _check_psycopg(raw)


def _django_runner(connection: object) -> SyncRun | None:
    if "django.db" not in sys.modules:
        return None
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.utils.connection import ConnectionProxy

    if isinstance(connection, ConnectionProxy):
        # django.db.connection: the proxy forwards attributes to the thread's connection.
        connection = connections[connection.alias]
    if not isinstance(connection, BaseDatabaseWrapper):
        return None
    if connection.vendor != "postgresql":
        raise TypeError(
            f"connection= takes Django connections to PostgreSQL; {connection.alias!r} "
            f"is {connection.vendor}"
        )
    if not connection.in_atomic_block:
        raise TransactionError(
            "the Django connection is not inside transaction.atomic(), so the message "
            "would be committed on its own: dispatch inside an atomic block, or use "
            "transaction.on_commit; nothing was written"
        )
    if connection.needs_rollback:
        raise TransactionError("the Django transaction is marked for rollback; nothing was written")
    wrapper = connection

    def run_django(query: str, params: Any) -> _Rows:
        with wrapper.cursor() as cursor:
            cursor.execute(query, params)
            return list(cursor.fetchall()) if cursor.description is not None else []

    return run_django
