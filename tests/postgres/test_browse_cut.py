"""PostgresBrowser with ``body_bytes``: the server cuts the bodies, a 50 MB one included.

The rows the driver returns are what crossed the connection (the query selects the
cut body and its length, nothing else of size): they are measured, and the whole
listing is read once more without a cut to show the measure would catch a full read.
"""

from __future__ import annotations

from typing import Any

import pytest

from taskrunner.queue import AddRequest
from taskrunner_backends.postgres.browse import PostgresBrowser
from taskrunner_backends.postgres.db import Database
from taskrunner_backends.postgres.scheduling import PostgresScheduling

from .support import Migrated, database

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

QUEUE = "jobs"
LARGE = 50 * 1024 * 1024


class _Measured:
    """A `Database` whose fetched rows are weighed (the bytes values in them)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.received = 0

    async def fetch(self, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        rows = await self._db.fetch(*args, **kwargs)
        self.received += sum(len(v) for row in rows for v in row if isinstance(v, bytes))
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_a_50_mb_body_is_cut_on_the_server(schema: Migrated) -> None:
    # Not repetitive: PostgreSQL would compress a run of one byte to almost nothing.
    large = b"".join(i.to_bytes(4, "little") for i in range(LARGE // 4))
    async with database(schema) as db:
        scheduling = PostgresScheduling(db, QUEUE, check_open=lambda: None)
        added = await scheduling.add_requests(
            [AddRequest(body=b"small"), AddRequest(body=large), AddRequest(body=b"")]
        )
        ids = [a.message_id for a in added]
        await db.fetch(
            "test",
            db.sql(
                "UPDATE {s}.messages SET owner = 'c1~30000', delivery_count = 1,"
                " leased_at = clock_timestamp(), lease_seconds = 30,"
                " expires_at = clock_timestamp() + interval '30 s' WHERE id = %s RETURNING id"
            ),
            (int(ids[1]),),
        )
        measured = _Measured(db)
        part = PostgresBrowser(measured, QUEUE, check_open=lambda: None)  # type: ignore[arg-type]
        waiting = await part.browse("waiting", body_bytes=200)
        in_flight = await part.browse("in_flight", body_bytes=200)
        cut_received = measured.received
        zero = await part.browse("in_flight", body_bytes=0)
        measured.received = 0
        whole = await part.browse("in_flight")
        whole_received = measured.received

    assert [(m.message_id, m.body, m.body_size) for m in waiting] == [
        (ids[0], b"small", None),
        (ids[2], b"", None),
    ]
    [held] = in_flight
    assert (held.message_id, held.body, held.body_size) == (ids[1], large[:200], LARGE)
    assert held.consumer == "c1~30000"
    assert cut_received <= 2 * 200
    assert [(m.body, m.body_size) for m in zero] == [(b"", LARGE)]
    # The same listing uncut: the whole 50 MB comes over, as the measure shows.
    assert whole[0].body == large
    assert whole[0].body_size is None
    assert whole_received >= LARGE


async def test_body_bytes_that_is_no_size_is_refused(schema: Migrated) -> None:
    async with database(schema) as db:
        part = PostgresBrowser(db, QUEUE, check_open=lambda: None)
        for bad in (-1, 1.5, "200", True):
            with pytest.raises(ValueError, match="body_bytes"):
                await part.browse("waiting", body_bytes=bad)  # type: ignore[arg-type]
