"""Hooks for tests and the conformance harness: reach under the contract on purpose.

None of these are for production code. They manipulate the server state behind a
queue so tests can produce, without sleeping, situations that otherwise take time or
a misbehaving client:

* `age_lease` makes a lease look expired (XCLAIM to the current owner with
  ``IDLE``, ``JUSTID``): owner and delivery count stay, only the idle time moves.
* `remove_payload` deletes the stream entry under a pending message (as trimming or a
  stray XDEL would).
* `inject_raw` adds an entry with arbitrary fields, bypassing `RedisStreamsQueue.add`.

Age a lease *before* removing its payload: XCLAIM (which `age_lease` uses) drops a
pending entry whose payload is gone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from taskrunner.queue import Delivery

from .queue import RedisStreamsQueue, _locate
from .scripts import SCRIPTS

__all__ = ["age_lease", "entry_id", "inject_raw", "remove_payload"]


def entry_id(delivery_or_id: Delivery | str) -> str:
    """The stream entry currently holding a delivery's message (or the id itself)."""
    if isinstance(delivery_or_id, str):
        return delivery_or_id
    located = _locate(delivery_or_id)
    if located is None:
        raise ValueError(f"not a receipt issued by RedisStreamsQueue: {delivery_or_id.receipt!r}")
    return located.entry_id


async def age_lease(queue: RedisStreamsQueue, delivery: Delivery | str, seconds: float) -> bool:
    """Make the message's current lease look idle for `seconds`, whoever holds it.

    Returns:
        True when the message was pending (and is now aged), False otherwise.
    """
    await queue.initialize()
    reply = await queue._raw.run_script(
        "age lease",
        SCRIPTS["age_lease"],
        (queue.keys.stream,),
        (queue.keys.group, entry_id(delivery), max(0, math.ceil(seconds * 1000))),
    )
    return bool(reply)


async def remove_payload(queue: RedisStreamsQueue, delivery_or_id: Delivery | str) -> bool:
    """XDEL the stream entry under a (pending) message; returns whether it existed."""
    await queue.initialize()
    deleted = await queue._raw.call(
        "remove payload", "XDEL", queue.keys.stream, entry_id(delivery_or_id)
    )
    return bool(deleted)


async def inject_raw(queue: RedisStreamsQueue, fields: Mapping[str, bytes | str]) -> str:
    """XADD an entry with exactly `fields` (bypassing the encoder); returns its id."""
    await queue.initialize()
    flat: list[str | bytes] = []
    for name, value in fields.items():
        flat.extend((name, value))
    reply = await queue._raw.call("inject raw", "XADD", queue.keys.stream, "*", *flat)
    return reply.decode() if isinstance(reply, bytes) else str(reply)
