"""Calls to the Scheduling part, checked, shared by the scheduling case modules.

Each helper fails with a message naming what the contract says when the backend
answers otherwise (a request with a free key that adds nothing, a held key that adds).
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner.queue import Added, AddRequest, Delivery, Queue, Scheduling

__all__ = [
    "BATCH",
    "add_one",
    "add_requests",
    "added_id",
    "describe_request",
    "held_by",
    "ids_of",
    "receive_all",
    "reclaim_all",
    "take_freed_key",
]

# Messages per receive or reclaim call of a probe: more than any probe has subjects.
BATCH = 50


async def add_requests(part: Scheduling, requests: Sequence[AddRequest]) -> list[Added]:
    """`part.add_requests(requests)`, checked to return one `Added` per request."""
    added = await part.add_requests(list(requests))
    assert len(added) == len(requests), (
        f"add_requests of {len(requests)} request(s) returned {len(added)} result(s)"
    )
    for result in added:
        assert isinstance(result, Added), f"add_requests returned {result!r}, not an Added"
    return added


async def add_one(part: Scheduling, request: AddRequest) -> Added:
    """`add_requests` of the one `request`; its `Added`."""
    (added,) = await add_requests(part, [request])
    return added


async def added_id(part: Scheduling, request: AddRequest) -> str:
    """Add `request`, which must add a message; return its id."""
    added = await add_one(part, request)
    assert added.added, f"{describe_request(request)} added nothing (returned {added!r})"
    return added.message_id


def describe_request(request: AddRequest) -> str:
    """`request`'s options, for failure messages ("a request with delay_seconds=1.0")."""
    options = [
        f"{name}={getattr(request, name)!r}"
        for name in ("delay_seconds", "due_at", "unique_key", "unique_seconds")
        if getattr(request, name) not in (0.0, None)
    ]
    return f"a request with {', '.join(options)}" if options else "a plain request"


def ids_of(deliveries: Sequence[Delivery]) -> list[str]:
    """The message ids of `deliveries`, in order."""
    return [d.message_id for d in deliveries]


async def reclaim_all(queue: Queue, consumer: str, lease: float) -> list[Delivery]:
    """Reclaim until two calls in a row return nothing (at most 20 calls)."""
    got: list[Delivery] = []
    empty = 0
    for _ in range(20):
        more = await queue.reclaim(consumer, lease_seconds=lease, max_messages=BATCH)
        got.extend(more)
        empty = 0 if more else empty + 1
        if empty >= 2:
            break
    return got


async def receive_all(queue: Queue, consumer: str, lease: float) -> list[Delivery]:
    """Receive (without waiting) until a call returns nothing."""
    got: list[Delivery] = []
    for _ in range(100):
        more = await queue.receive(
            consumer, max_messages=BATCH, wait_seconds=0, lease_seconds=lease
        )
        if not more:
            break
        got.extend(more)
    return got


async def held_by(part: Scheduling, key: str, holder: str, when: str) -> None:
    """A request with `key` must add nothing and name `holder`."""
    added = await add_one(part, AddRequest(body=b"must not be added", unique_key=key))
    assert added == Added(message_id=holder, added=False), (
        f"with the key {key!r} held by message {holder} {when}, a request with it "
        f"returned {added!r}, not Added(message_id={holder!r}, added=False)"
    )


async def take_freed_key(part: Scheduling, key: str, old: str, when: str) -> str:
    """A request with `key` must add a new message; return its id."""
    added = await add_one(part, AddRequest(body=b"takes the freed key", unique_key=key))
    assert added.added, (
        f"the key {key!r} was not freed {when}: a request with it returned {added!r}"
    )
    assert added.message_id != old, f"the new message got the old id {old}"
    return added.message_id
