"""Leadership on a real server: leases with fencing tokens, fire-once records.

Lease edges are measured on the server's clock (``TIME``), which is what the backend
uses; ``remaining_seconds`` and a competitor's acquire are probed on both sides.
"""

from __future__ import annotations

import asyncio

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import eventually, open_queue, receive_one

pytestmark = pytest.mark.redis

P = 0.05  # the backend's lease_precision_seconds


async def server_ms(queue: RedisStreamsQueue) -> int:
    seconds, micros = await queue._raw.call("time", "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def test_acquire_a_free_election_then_others_wait_and_the_holder_renews(
    redis_queue: RedisStreamsQueue,
) -> None:
    lease = await redis_queue.acquire_leadership("cron", "a", ttl_seconds=30)
    assert lease is not None
    assert (lease.name, lease.holder, lease.token) == ("cron", "a", 1)
    assert 30 - P <= lease.remaining_seconds <= 30

    assert await redis_queue.acquire_leadership("cron", "b", ttl_seconds=30) is None
    again = await redis_queue.acquire_leadership("cron", "a", ttl_seconds=60)
    assert again is not None
    assert again.token == lease.token
    assert again.remaining_seconds > 30
    current = await redis_queue.current_leader("cron")
    assert current is not None
    assert (current.holder, current.token) == ("a", 1)
    assert current.remaining_seconds > 30
    # Elections are independent.
    other = await redis_queue.acquire_leadership("other", "b", ttl_seconds=30)
    assert other is not None
    assert other.token == 1


async def test_a_lease_is_held_until_just_before_its_ttl_and_lapses_right_after(
    redis_queue: RedisStreamsQueue,
) -> None:
    ttl = 0.4
    start = await server_ms(redis_queue)
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=ttl)
    assert lease is not None

    # (taken, server ms before the attempt, server ms after it) per attempt.
    probes: list[tuple[bool, int, int]] = []

    async def probe() -> bool:
        before = await server_ms(redis_queue)
        taken = await redis_queue.acquire_leadership("e", "b", ttl_seconds=ttl)
        probes.append((taken is not None, before, await server_ms(redis_queue)))
        return taken is not None

    await eventually(probe, bool, what="the lease lapses", interval=0.01)

    refused = [before for taken, before, _ in probes if not taken]
    _, taken_before, taken_after = probes[-1]
    assert refused, "no attempt while the lease was live: the edge was not probed"
    # Held below ttl - p: the take ended after that. Lapsed above ttl + p: every
    # refusal started before that, and the take started soon after it.
    assert taken_after - start >= (ttl - P) * 1000
    assert max(refused) - start <= (ttl + P) * 1000
    assert taken_before - start <= (ttl + P) * 1000 + 50  # the polling interval
    current = await redis_queue.current_leader("e")
    assert current is not None
    assert (current.holder, current.token) == ("b", 2)


async def test_current_leader_is_none_once_the_lease_lapsed(
    redis_queue: RedisStreamsQueue,
) -> None:
    assert await redis_queue.current_leader("e") is None
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=0.2)
    assert lease is not None
    assert await redis_queue.current_leader("e") is not None

    await eventually(
        lambda: redis_queue.current_leader("e"), lambda c: c is None, what="lapsed", interval=0.01
    )


async def test_a_lapsed_lease_nobody_took_renews_with_its_token_and_still_fires(
    redis_queue: RedisStreamsQueue,
) -> None:
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=0.1)
    assert lease is not None
    await eventually(
        lambda: redis_queue.current_leader("e"), lambda c: c is None, what="lapsed", interval=0.01
    )

    fired = await redis_queue.fire(
        election="e", token=lease.token, schedule="s", instant=10.0, body=b"tick"
    )
    renewed = await redis_queue.renew_leadership("e", "a", lease.token, ttl_seconds=30)

    assert fired is not None
    assert renewed is not None
    assert renewed.token == lease.token
    assert renewed.remaining_seconds > 29


async def test_retaking_a_lapsed_lease_issues_a_larger_token_and_stales_the_old_one(
    redis_queue: RedisStreamsQueue,
) -> None:
    first = await redis_queue.acquire_leadership("e", "a", ttl_seconds=0.1)
    assert first is not None
    await eventually(
        lambda: redis_queue.current_leader("e"), lambda c: c is None, what="lapsed", interval=0.01
    )
    # The same holder again, after a lapse: a retake, so a new token.
    second = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert second is not None
    assert second.token > first.token

    assert await redis_queue.renew_leadership("e", "a", first.token, ttl_seconds=30) is None
    assert await redis_queue.resign_leadership("e", "a", first.token) is False
    assert (
        await redis_queue.fire(election="e", token=first.token, schedule="s", instant=1, body=b"x")
        is None
    )
    current = await redis_queue.current_leader("e")
    assert current is not None
    assert current.token == second.token


async def test_renew_and_resign_with_another_holder_change_nothing(
    redis_queue: RedisStreamsQueue,
) -> None:
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert lease is not None

    assert await redis_queue.renew_leadership("e", "b", lease.token, ttl_seconds=60) is None
    assert await redis_queue.resign_leadership("e", "b", lease.token) is False
    assert await redis_queue.renew_leadership("e", "a", lease.token + 1, ttl_seconds=60) is None
    assert await redis_queue.renew_leadership("nobody", "a", 1, ttl_seconds=60) is None

    current = await redis_queue.current_leader("e")
    assert current is not None
    assert (current.holder, current.token) == ("a", lease.token)
    assert current.remaining_seconds <= 30


async def test_resign_ends_the_lease_now_and_the_next_holder_gets_a_larger_token(
    redis_queue: RedisStreamsQueue,
) -> None:
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert lease is not None

    assert await redis_queue.resign_leadership("e", "a", lease.token) is True

    assert await redis_queue.current_leader("e") is None
    assert await redis_queue.resign_leadership("e", "a", lease.token) is False
    assert await redis_queue.renew_leadership("e", "a", lease.token, ttl_seconds=30) is None
    taken = await redis_queue.acquire_leadership("e", "b", ttl_seconds=30)
    assert taken is not None
    assert taken.token == lease.token + 1


async def test_twenty_handles_acquiring_at_once_elect_exactly_one(
    redis_url: str, redis_namespace: str
) -> None:
    handles = [open_queue(redis_url, redis_namespace) for _ in range(20)]
    try:
        await asyncio.gather(*(h.initialize() for h in handles))
        leases = await asyncio.gather(
            *(h.acquire_leadership("e", f"h{i}", ttl_seconds=30) for i, h in enumerate(handles))
        )
    finally:
        for h in handles:
            await h.aclose()

    winners = [lease for lease in leases if lease is not None]
    assert len(winners) == 1
    assert winners[0].token == 1


async def test_an_instant_fires_once_even_from_two_handles_at_once(
    redis_url: str, redis_namespace: str, redis_queue: RedisStreamsQueue
) -> None:
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert lease is not None
    other = open_queue(redis_url, redis_namespace)
    try:
        results = await asyncio.gather(
            *(
                q.fire(election="e", token=lease.token, schedule="s", instant=100.5, body=b"x")
                for q in [redis_queue, other] * 5
            )
        )
    finally:
        await other.aclose()

    fired = [r for r in results if r is not None]
    assert len(fired) == 1
    records = await redis_queue.fire_records(["s", "never"])
    assert list(records) == ["s"]
    assert (records["s"].instant, records["s"].message_id) == (100.5, fired[0])
    # An earlier or equal instant fires nothing; a later one does.
    for instant in (100.5, 100.49999999, 3.0):
        assert (
            await redis_queue.fire(
                election="e", token=lease.token, schedule="s", instant=instant, body=b"x"
            )
            is None
        )
    later = await redis_queue.fire(
        election="e", token=lease.token, schedule="s", instant=100.50000001, body=b"y"
    )
    assert later is not None
    assert (await redis_queue.fire_records(["s"]))["s"].message_id == later
    # The fired messages are plain ready messages.
    delivery = await receive_one(redis_queue, "w")
    assert (delivery.message_id, delivery.body, delivery.delivery_count) == (fired[0], b"x", 1)
    assert await redis_queue.len() == 2


async def test_a_deposed_leader_fires_nothing_and_schedules_are_independent(
    redis_queue: RedisStreamsQueue,
) -> None:
    old = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert old is not None
    await redis_queue.resign_leadership("e", "a", old.token)
    new = await redis_queue.acquire_leadership("e", "b", ttl_seconds=30)
    assert new is not None

    assert (
        await redis_queue.fire(election="e", token=old.token, schedule="s", instant=1, body=b"x")
        is None
    )
    assert await redis_queue.fire(election="e", token=new.token, schedule="s", instant=1, body=b"x")
    assert await redis_queue.fire(election="e", token=new.token, schedule="t", instant=1, body=b"x")
    assert (
        await redis_queue.fire(election="x", token=new.token, schedule="u", instant=1, body=b"x")
        is None
    )
    assert sorted(await redis_queue.fire_records(["s", "t", "u"])) == ["s", "t"]


async def test_invalid_leadership_arguments_raise_and_change_nothing(
    redis_queue: RedisStreamsQueue,
) -> None:
    q = redis_queue
    with pytest.raises(ValueError, match="name must be a non-empty"):
        await q.acquire_leadership("", "a", ttl_seconds=1)
    with pytest.raises(ValueError, match="holder must be a non-empty"):
        await q.acquire_leadership("e", "", ttl_seconds=1)
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl_seconds must be a finite number > 0"):
            await q.acquire_leadership("e", "a", ttl_seconds=ttl)
    with pytest.raises(TypeError):
        await q.acquire_leadership(1, "a", ttl_seconds=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await q.renew_leadership("e", "a", "1", ttl_seconds=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await q.resign_leadership("e", "a", True)
    with pytest.raises(TypeError):
        await q.fire(election="e", token=1, schedule="s", instant=1, body="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="instant must be finite"):
        await q.fire(election="e", token=1, schedule="s", instant=float("nan"), body=b"x")
    with pytest.raises(ValueError, match="schedule must be a non-empty"):
        await q.fire(election="e", token=1, schedule="", instant=1, body=b"x")
    with pytest.raises(ValueError, match="election must be a non-empty"):
        await q.fire(election="", token=1, schedule="s", instant=1, body=b"x")
    with pytest.raises(TypeError):
        await q.fire_records("s")

    assert await q.current_leader("e") is None
    assert await q.fire_records(["s"]) == {}
    assert await q.len() == 0


async def test_a_closed_queue_refuses_the_leadership_methods(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.aclose()
    with pytest.raises(QueueClosedError):
        await redis_queue.acquire_leadership("e", "a", ttl_seconds=1)
    with pytest.raises(QueueClosedError):
        await redis_queue.current_leader("e")
    with pytest.raises(QueueClosedError):
        await redis_queue.fire_records([])


async def test_delete_queue_forgets_leases_tokens_and_fire_records(
    redis_queue: RedisStreamsQueue,
) -> None:
    lease = await redis_queue.acquire_leadership("e", "a", ttl_seconds=30)
    assert lease is not None
    await redis_queue.fire(election="e", token=lease.token, schedule="s", instant=5, body=b"x")

    await redis_queue.delete_queue()

    assert await redis_queue.current_leader("e") is None
    assert await redis_queue.fire_records(["s"]) == {}
    for key in (redis_queue.keys.leaders, redis_queue.keys.fired):
        assert await redis_queue._raw.call("exists", "EXISTS", key) == 0
