"""Listing every queue of a backend (`QueueNames`) and the dashboard that uses it.

The backends' parts on memory, Redis (the session's server, the test's namespace) and
PostgreSQL (a schema of the test's own); then the dashboard told no queue names.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from taskrunner.backends import connect
from taskrunner.dashboard import Dashboard, QueueSet
from taskrunner.dashboard.data import NAMES_EVERY_SECONDS
from taskrunner.queue import QUEUE_NAMES_LIMIT, Queue, QueueNames, names_of
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue, open_from_url
from tests.dashboard.support import client, memory_url


def _part(queue: Queue) -> QueueNames:
    part = names_of(queue)
    assert part is not None
    return part


async def _three_queues(url: str, prefix: str) -> list[Queue]:
    """Queues PREFIX-b (a message), PREFIX-a (a dead letter) and PREFIX-c (opened only)."""
    b, a, c = [await connect(url, f"{prefix}-{n}") for n in "bac"]
    await b.add([b"x"])
    await a.add([b"y"])
    [held] = await a.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30)
    await a.dead_letter([held], reason="bad")
    return [b, a, c]


async def _check_listing(queues: list[Queue], prefix: str, *, opened_count: bool) -> None:
    part = _part(queues[0])
    listing = await part.queue_names(limit=QUEUE_NAMES_LIMIT)
    mine = [n for n in listing.names if n.startswith(prefix)]
    expected = [f"{prefix}-a", f"{prefix}-b"] + ([f"{prefix}-c"] if opened_count else [])
    assert mine == expected
    assert listing.complete
    assert list(listing.names) == sorted(set(listing.names))
    # Paged by keyset: after a name, the next ones; a short limit says it is not complete.
    one = await part.queue_names(after=f"{prefix}-a", limit=1)
    assert one.names == (f"{prefix}-b",)
    assert one.complete is (len([n for n in listing.names if n > f"{prefix}-a"]) <= 1)
    for limit in (0, QUEUE_NAMES_LIMIT + 1):
        with pytest.raises(ValueError, match="limit must be"):
            await part.queue_names(limit=limit)
    # Reading names changed nothing.
    assert (await queues[0].stats()).ready == 1
    assert (await queues[1].stats()).dead == 1
    for queue in queues:
        await queue.aclose()


async def test_memory_lists_the_queues_opened_through_its_url() -> None:
    url = memory_url()
    await _check_listing(await _three_queues(url, "q"), "q", opened_count=True)
    # Another memory:// NAME is another set of stores; a queue built directly has none.
    other = await open_from_url(memory_url(), queue_name="elsewhere")
    assert (await _part(other).queue_names()).names == ("elsewhere",)
    assert names_of(InMemoryQueue()) is None


@pytest.mark.redis
async def test_redis_lists_the_namespace_queues_with_a_stream_or_dead_letters(
    redis_url: str, redis_namespace: str
) -> None:
    # The fixture deletes the namespace's keys after the test.
    url = f"{redis_url}?namespace={redis_namespace}"
    await _check_listing(await _three_queues(url, "q"), "q", opened_count=False)


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    import psycopg

    name = f"tr_t_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(name))
        )


@pytest.mark.postgres
async def test_postgres_lists_the_schema_queues_with_rows(
    postgres_url: str, pg_schema: str
) -> None:
    separator = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{separator}schema={pg_schema}"
    await _check_listing(await _three_queues(url, "q"), "q", opened_count=False)


# The dashboard ------------------------------------------------------------------------


def _discovering(url: str, clock: FakeClock, *, wrap: Any = None) -> Dashboard:
    async def opener(name: str) -> Queue:
        queue: Queue = await open_from_url(url, queue_name=name)
        return queue if wrap is None else wrap(queue)

    return Dashboard(
        queues=QueueSet(["default"], opener), url="memory://", clock=clock, discover_probe="default"
    )


async def test_told_no_queue_the_dashboard_shows_the_backends_and_rereads_them() -> None:
    url = memory_url()
    for name in ("emails", "images"):
        await (await open_from_url(url, queue_name=name)).add([b"m"])
    clock = FakeClock()
    board = _discovering(url, clock)
    async with client(board) as http:
        first = (await http.get("/api/queues")).json()
        await open_from_url(url, queue_name="later")
        await clock.advance(NAMES_EVERY_SECONDS - 1)
        cached = (await http.get("/api/queues")).json()
        await clock.advance(1)
        again = (await http.get("/api/queues")).json()
        page = await http.get("/")
    await board.queues.aclose()

    # "default" is the handle the dashboard asked through (on memory: a store opened).
    assert [q["name"] for q in first["queues"]] == ["default", "emails", "images"]
    assert [q["ready"] for q in first["queues"]] == [0, 1, 1]
    assert first["discovered"] == {"state": "listed", "complete": True, "cap": 10_000}
    assert [q["name"] for q in cached["queues"]] == ["default", "emails", "images"]
    assert [q["name"] for q in again["queues"]] == ["default", "emails", "images", "later"]
    assert "The queues the backend holds, as it lists them" in page.text


class _NoNames:
    """A memory queue without the queue_names part (as a backend that cannot list)."""

    def __init__(self, inner: Queue) -> None:
        self._inner = inner

    queue_names = None

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


async def test_a_backend_that_cannot_list_keeps_the_default_queue_and_says_so() -> None:
    board = _discovering(memory_url(), FakeClock(), wrap=_NoNames)
    async with client(board) as http:
        body = (await http.get("/api/queues")).json()
        page = await http.get("/")
    await board.queues.aclose()

    assert [q["name"] for q in body["queues"]] == ["default"]
    assert body["discovered"] == {"state": "cannot", "probe": "default"}
    assert "This backend cannot list its queues" in page.text


async def test_a_dashboard_told_its_queues_does_not_list_the_backends() -> None:
    url = memory_url()
    await open_from_url(url, queue_name="other")
    board = Dashboard(
        queues=QueueSet(["mine"], lambda name: open_from_url(url, queue_name=name)),
        url="memory://",
    )
    async with client(board) as http:
        body = (await http.get("/api/queues")).json()
    await board.queues.aclose()

    assert [q["name"] for q in body["queues"]] == ["mine"]
    assert body["discovered"] is None


async def test_a_queue_page_of_a_discovered_queue_answers_before_the_overview() -> None:
    # A bookmarked /queues/NAME is the first request: it must not 404 until / is seen.
    url = memory_url()
    await (await open_from_url(url, queue_name="emails")).add([b"m"])
    board = _discovering(url, FakeClock())
    async with client(board) as http:
        page = await http.get("/queues/emails")
        api = await http.get("/api/queues/emails")
        dead = await http.get("/api/queues/emails/dead-letters")
        missing = await http.get("/queues/nowhere")
    await board.queues.aclose()

    assert page.status_code == 200, page.text
    assert api.status_code == 200
    assert api.json()["queue"]["ready"] == 1
    assert dead.status_code == 200
    assert missing.status_code == 404
