"""The dashboard's API on a Redis queue (the session's server, the test's namespace)."""

from __future__ import annotations

import pytest

from taskrunner.dashboard import Dashboard, Guard, QueueSet
from taskrunner.queue import Queue
from taskrunner_backends.redis import RedisStreamsQueue
from tests.dashboard.support import TOKEN, client

pytestmark = pytest.mark.redis


def _board(queue: RedisStreamsQueue, *, guard: Guard | None = None) -> Dashboard:
    async def opener(name: str) -> Queue:
        assert name == "q"
        return queue

    return Dashboard(queues=QueueSet(["q"], opener), url="redis://***", guard=guard)


async def test_api_queues_counts_a_redis_queue(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"a", b"b", b"c"])
    [dead] = await redis_queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    await redis_queue.dead_letter([dead], reason="<i>bad</i>")
    await redis_queue.receive("c2", max_messages=1, wait_seconds=0, lease_seconds=30)
    board = _board(redis_queue)
    async with client(board) as http:
        [row] = (await http.get("/api/queues")).json()["queues"]
        queue = (await http.get("/api/queues/q")).json()
        [letter] = (await http.get("/api/queues/q/dead-letters")).json()["dead_letters"]
        page = await http.get(f"/queues/q/dead/{letter['id']}")

    assert (row["name"], row["ready"], row["in_flight"], row["dead"]) == ("q", 1, 1, 1)
    assert {c["name"]: c["pending"] for c in queue["consumers"]}.get("c2") == 1
    assert letter["reason"] == "<i>bad</i>"
    assert letter["task"] is None  # raw bytes, not an envelope
    assert "&lt;i&gt;bad&lt;/i&gt;" in page.text
    assert "<i>bad" not in page.text


async def test_retry_all_through_the_api_on_redis(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"a", b"b"])
    deliveries = await redis_queue.receive("c", max_messages=2, wait_seconds=0, lease_seconds=30)
    await redis_queue.dead_letter(deliveries, reason="bad")
    guard = Guard(TOKEN)
    board = _board(redis_queue, guard=guard)
    async with client(board) as http:
        await http.post("/login", data={"token": TOKEN})
        done = await http.post(
            "/queues/q/dead/action", data={"action": "retry", "id": "all", "csrf": guard.csrf}
        )
        [row] = (await http.get("/api/queues")).json()["queues"]

    assert done.status_code == 303
    assert (row["ready"], row["dead"]) == (2, 0)


async def test_messages_of_a_redis_queue_are_paged_by_entry_id(
    redis_queue: RedisStreamsQueue,
) -> None:
    ids = await redis_queue.add([b"r0", b"r1", b"r2", b"r3", b"r4"])
    held = await redis_queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=30)
    # Released: a new stream entry at the end, listed there under its own id, count 1.
    assert await redis_queue.release(held[:1]) == []
    board = _board(redis_queue)
    async with client(board) as http:
        first = (await http.get("/api/queues/q/messages?state=waiting&limit=2")).json()
        after = first["next_after"]
        second = await http.get(f"/api/queues/q/messages?state=waiting&limit=2&after={after}")
        in_flight = (await http.get("/api/queues/q/messages?state=in_flight")).json()
        page = await http.get("/queues/q")

    assert [m["id"] for m in first["messages"]] == ids[2:4]
    assert after == ids[3]  # a never-released message's cursor is its entry id
    rest = second.json()["messages"]
    assert [(m["id"], m["delivery_count"]) for m in rest] == [(ids[4], 0), (ids[0], 1)]
    assert rest[1]["cursor"] != ids[0]  # the released copy is a newer entry
    assert second.json()["next_after"] is None
    [leased] = in_flight["messages"]
    assert (leased["id"], leased["owner"], leased["delivery_count"]) == (ids[1], "c1", 1)
    assert leased["lease_seconds"] == 30
    assert leased["task"] is None  # raw bytes, not an envelope
    assert page.status_code == 200
    assert f'<th scope="row">{ids[1]}</th>' in page.text
    # Browsing took nothing: the rest comes to the next receive, counts unchanged.
    got = await redis_queue.receive("c2", max_messages=10, wait_seconds=0, lease_seconds=30)
    assert sorted((d.message_id, d.delivery_count) for d in got) == sorted(
        [(ids[0], 2), (ids[2], 1), (ids[3], 1), (ids[4], 1)]
    )
    assert await redis_queue.heartbeat([held[1]]) == []
    await board.queues.aclose()
