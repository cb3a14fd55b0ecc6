"""The fenced statements find their rows by primary key, whatever the statistics say.

A queue table's statistics are a snapshot of a moving state: here they are taken while
every row is ready, then 2,000 rows are leased. A fenced statement that let the planner
use ``messages_leased`` (whose predicate a strict ``owner = ...`` implies) would scan
every leased row of the queue for each batch; these tests read the plans, custom and
generic, of each fenced statement in that state.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from taskrunner_backends.postgres import queue as pg_queue

from .support import Migrated

QUEUE = "plans"
IN_FLIGHT = 2_000
READY = 20_000


def _indexes(plan: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in plan:
        yield plan["Index Name"]
    for child in plan.get("Plans", []):
        yield from _indexes(child)


@pytest.fixture
def skewed(schema: Migrated) -> Iterator[tuple[psycopg.Connection[Any], list[tuple[Any, ...]]]]:
    """A connection to ``schema`` whose statistics say no row is leased, and 2,000 are."""
    s = sql.Identifier(schema.name)
    with psycopg.connect(schema.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.messages (queue, body)"
                " SELECT %s, '\\x00' FROM generate_series(1, %s)"
            ).format(s=s),
            (QUEUE, READY + IN_FLIGHT),
        )
        conn.execute(sql.SQL("ANALYZE {s}.messages").format(s=s))
        leased = conn.execute(
            sql.SQL(pg_queue._RECEIVE).format(s=s),
            {"queue": QUEUE, "consumer": "c", "lease": 60.0, "limit": IN_FLIGHT},
        ).fetchall()
        assert len(leased) == IN_FLIGHT
        yield conn, leased


def _fenced(leased: list[tuple[Any, ...]]) -> dict[str, Any]:
    batch = leased[:100]
    return {
        "ids": [row[0] for row in batch],
        "owners": ["c"] * len(batch),
        "counts": [row[2] for row in batch],
        "queue": QUEUE,
        "delay": 0.0,
        "channel": "unused",
        "reason": b"r",
    }


@pytest.mark.parametrize("statement", ["_HEARTBEAT", "_ACK", "_RELEASE", "_DEAD_LETTER"])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_fenced_statements_use_the_primary_key_not_the_leased_index(
    schema: Migrated,
    skewed: tuple[psycopg.Connection[Any], list[tuple[Any, ...]]],
    statement: str,
    mode: str,
) -> None:
    conn, leased = skewed
    text = getattr(pg_queue, statement)
    query = sql.SQL("EXPLAIN (FORMAT JSON) " + text).format(s=sql.Identifier(schema.name))
    conn.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.Identifier(mode)))
    # Six executions: a prepared statement's plan may turn generic from the sixth on.
    rows: list[tuple[Any, ...]] = []
    for _ in range(6):
        rows = conn.execute(query, _fenced(leased), prepare=True).fetchall()
    document = rows[0][0]
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    used = set(_indexes(plan))
    assert "messages_leased" not in used, json.dumps(plan, indent=1)
    assert "messages_pkey" in used, json.dumps(plan, indent=1)
