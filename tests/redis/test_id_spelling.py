"""Another spelling of a stream id (leading zeros) names no message.

The server parses ``01-1`` as ``1-1``; the backend accepts only the canonical
spelling, so such a text can never cancel, purge, retry or look up another id's
message.
"""

from __future__ import annotations

import pytest

from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import receive_one

pytestmark = pytest.mark.redis


def aliases(stream_id: str) -> list[str]:
    ms, seq = stream_id.split("-")
    return [f"0{ms}-{seq}", f"{ms}-0{seq}", f"00{ms}-00{seq}"]


async def test_cancel_of_another_spelling_removes_nothing(redis_queue: RedisStreamsQueue) -> None:
    [message_id] = await redis_queue.add([b"x"])

    assert await redis_queue.cancel(aliases(message_id)) == [False, False, False]
    assert await redis_queue.len() == 1
    assert await redis_queue.cancel([message_id]) == [True]


async def test_dead_letter_admin_ignores_other_spellings(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.add([b"x"])
    delivery = await receive_one(redis_queue, "a")
    assert await redis_queue.dead_letter([delivery], reason="r") == []
    [letter] = await redis_queue.list_dead_letters()

    assert await redis_queue.purge_dead_letters(aliases(letter.message_id)) == 0
    assert await redis_queue.retry_dead_letters(aliases(letter.message_id)) == []
    assert len(await redis_queue.list_dead_letters()) == 1
    [state] = await redis_queue.lookup.lookup([delivery.message_id])
    assert state is not None
    assert state.state == "dead"
    assert await redis_queue.purge_dead_letters([letter.message_id]) == 1
