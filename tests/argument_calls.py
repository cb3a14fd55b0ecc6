"""Bad calls every built-in backend must refuse with the same exception and text.

Shared by the backend siblings of ``test_argument_messages`` (PostgreSQL, Redis), each
comparing its backend with the memory one call by call.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from taskrunner.queue import (
    AddRequest,
    Leadership,
    MessageLookup,
    Queue,
    QueueAdmin,
    ResultStore,
    ResultWrite,
    Scheduling,
    leadership_of,
    lookup_of,
    results_of,
    scheduling_of,
)

Call = Callable[[Queue, Scheduling, Leadership, ResultStore], Awaitable[object]]


def _admin(queue: Queue) -> QueueAdmin:
    part = queue.admin
    assert part is not None
    return part


def _lookup(queue: Queue) -> MessageLookup:
    part = lookup_of(queue)
    assert part is not None
    return part


# label -> the bad call; every one must raise before anything changes.
BAD_CALLS: dict[str, Call] = {
    "cancel([5])": lambda q, s, le, r: s.cancel([5]),  # type: ignore[list-item]
    "cancel('1')": lambda q, s, le, r: s.cancel("1"),
    "add_requests(one)": lambda q, s, le, r: s.add_requests(AddRequest(body=b"x")),  # type: ignore[arg-type]
    "add_requests([b'x'])": lambda q, s, le, r: s.add_requests([b"x"]),  # type: ignore[list-item]
    "due_at='1'": lambda q, s, le, r: s.add_requests([AddRequest(body=b"x", due_at="1")]),  # type: ignore[arg-type]
    "due_at=nan": lambda q, s, le, r: s.add_requests([AddRequest(body=b"x", due_at=math.nan)]),
    "delay_seconds=-1": lambda q, s, le, r: s.add_requests(
        [AddRequest(body=b"x", delay_seconds=-1)]
    ),
    "unique_key=''": lambda q, s, le, r: s.add_requests([AddRequest(body=b"x", unique_key="")]),
    "body str": lambda q, s, le, r: s.add_requests([AddRequest(body="x")]),  # type: ignore[arg-type]
    "add(['x'])": lambda q, s, le, r: q.add(["x"]),  # type: ignore[list-item]
    "add(b'x')": lambda q, s, le, r: q.add(b"x"),  # type: ignore[arg-type]
    "receive(wait_seconds=inf)": lambda q, s, le, r: q.receive(
        "c", max_messages=1, wait_seconds=math.inf, lease_seconds=1
    ),
    "receive(lease_seconds=0)": lambda q, s, le, r: q.receive(
        "c", max_messages=1, wait_seconds=0, lease_seconds=0
    ),
    "release(delay_seconds='1')": lambda q, s, le, r: q.release([], delay_seconds="1"),  # type: ignore[arg-type]
    "acquire(ttl_seconds=0)": lambda q, s, le, r: le.acquire_leadership("e", "h", ttl_seconds=0),
    "acquire(name='')": lambda q, s, le, r: le.acquire_leadership("", "h", ttl_seconds=1),
    "renew(token=True)": lambda q, s, le, r: le.renew_leadership("e", "h", True, ttl_seconds=1),
    "renew(token=-1)": lambda q, s, le, r: le.renew_leadership("e", "h", -1, ttl_seconds=1),
    "resign(token=2**63)": lambda q, s, le, r: le.resign_leadership("e", "h", 2**63),
    "fire(instant=inf)": lambda q, s, le, r: le.fire(
        election="e", token=1, schedule="s", instant=math.inf, body=b"x"
    ),
    "fire(body=str)": lambda q, s, le, r: le.fire(
        election="e",
        token=1,
        schedule="s",
        instant=1.0,
        body="x",  # type: ignore[arg-type]
    ),
    "fire(instant='1')": lambda q, s, le, r: le.fire(
        election="e",
        token=1,
        schedule="s",
        instant="1",  # type: ignore[arg-type]
        body=b"x",
    ),
    "fire_records('s')": lambda q, s, le, r: le.fire_records("s"),
    "fire_records([''])": lambda q, s, le, r: le.fire_records([""]),
    "put_results(one)": lambda q, s, le, r: r.put_results(
        ResultWrite(message_id="1", body=b"x", ttl_seconds=1)  # type: ignore[arg-type]
    ),
    "put_results(ttl=0)": lambda q, s, le, r: r.put_results(
        [ResultWrite(message_id="1", body=b"x", ttl_seconds=0)]
    ),
    "put_results(id=5)": lambda q, s, le, r: r.put_results(
        [ResultWrite(message_id=5, body=b"x", ttl_seconds=1)]  # type: ignore[arg-type]
    ),
    "put_results([b'x'])": lambda q, s, le, r: r.put_results([b"x"]),  # type: ignore[list-item]
    "put_results(body=str)": lambda q, s, le, r: r.put_results(
        [ResultWrite(message_id="1", body="x", ttl_seconds=1)]  # type: ignore[arg-type]
    ),
    "get_results([5])": lambda q, s, le, r: r.get_results([5]),  # type: ignore[list-item]
    "get_results('1')": lambda q, s, le, r: r.get_results("1"),
    "delete_results([5])": lambda q, s, le, r: r.delete_results([5]),  # type: ignore[list-item]
    "delete_results('1')": lambda q, s, le, r: r.delete_results("1"),
    "wait_result('')": lambda q, s, le, r: r.wait_result("", timeout_seconds=0),
    "wait_result(timeout=-1)": lambda q, s, le, r: r.wait_result("1", timeout_seconds=-1),
    "lookup('1')": lambda q, s, le, r: _lookup(q).lookup("1"),
    "retry_dead_letters('1')": lambda q, s, le, r: _admin(q).retry_dead_letters("1"),
    "retry_dead_letters([5])": lambda q, s, le, r: _admin(q).retry_dead_letters([5]),  # type: ignore[list-item]
    "purge_dead_letters('1')": lambda q, s, le, r: _admin(q).purge_dead_letters("1"),
    "purge_dead_letters([5])": lambda q, s, le, r: _admin(q).purge_dead_letters([5]),  # type: ignore[list-item]
}


def parts(queue: Queue) -> tuple[Queue, Scheduling, Leadership, ResultStore]:
    scheduling, leadership, results = scheduling_of(queue), leadership_of(queue), results_of(queue)
    assert scheduling is not None
    assert leadership is not None
    assert results is not None
    return queue, scheduling, leadership, results


async def refusal(call: Call, queue: Queue) -> tuple[str, str]:
    try:
        await call(*parts(queue))
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    return "no error", ""
