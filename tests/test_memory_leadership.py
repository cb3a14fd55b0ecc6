"""The in-memory backend's Leadership part, on the fake clock, edge by edge."""

from __future__ import annotations

import math

import pytest

from taskrunner.errors import QueueClosedError
from taskrunner.queue import FireRecord, leadership_of
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

TTL = 10.0


def make() -> tuple[InMemoryQueue, FakeClock]:
    clock = FakeClock()
    return InMemoryQueue(clock=clock), clock


def test_part_is_the_queue() -> None:
    queue = InMemoryQueue()
    assert leadership_of(queue) is queue


async def test_acquire_free_election_issues_token_and_lease() -> None:
    queue, _ = make()
    lease = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert lease is not None
    assert (lease.name, lease.holder, lease.remaining_seconds) == ("e", "a", TTL)
    assert lease.token >= 1
    assert await queue.current_leader("e") == lease


async def test_other_holder_refused_while_live_until_just_before_expiry() -> None:
    queue, clock = make()
    first = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert first is not None
    await clock.advance(TTL - 1e-6)
    assert await queue.acquire_leadership("e", "b", ttl_seconds=TTL) is None
    current = await queue.current_leader("e")
    assert current is not None
    assert current.holder == "a"
    assert current.remaining_seconds == pytest.approx(1e-6)


async def test_lease_lapses_at_ttl_and_takeover_gets_larger_token() -> None:
    queue, clock = make()
    first = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert first is not None
    await clock.advance(TTL)
    assert await queue.current_leader("e") is None
    second = await queue.acquire_leadership("e", "b", ttl_seconds=TTL)
    assert second is not None
    assert second.holder == "b"
    assert second.token > first.token


async def test_acquire_by_live_holder_renews_with_same_token() -> None:
    queue, clock = make()
    first = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert first is not None
    await clock.advance(TTL - 1)
    again = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert again is not None
    assert again.token == first.token
    assert again.remaining_seconds == TTL
    await clock.advance(TTL - 1e-6)
    assert await queue.acquire_leadership("e", "b", ttl_seconds=TTL) is None


async def test_retake_after_lapse_by_same_holder_gets_larger_token() -> None:
    queue, clock = make()
    first = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert first is not None
    await clock.advance(TTL)
    again = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert again is not None
    assert again.token > first.token


async def test_tokens_strictly_increase_across_resigns_and_lapses() -> None:
    queue, clock = make()
    tokens = []
    for round_ in range(6):
        holder = f"h{round_ % 2}"
        lease = await queue.acquire_leadership("e", holder, ttl_seconds=TTL)
        assert lease is not None
        tokens.append(lease.token)
        if round_ % 2:
            assert await queue.resign_leadership("e", holder, lease.token)
        else:
            await clock.advance(TTL)
    assert tokens == sorted(set(tokens))


async def test_elections_are_independent() -> None:
    queue, _ = make()
    a = await queue.acquire_leadership("one", "a", ttl_seconds=TTL)
    b = await queue.acquire_leadership("two", "b", ttl_seconds=TTL)
    assert a is not None
    assert b is not None
    assert (await queue.current_leader("one"), await queue.current_leader("two")) == (a, b)


async def test_renew_extends_from_now_and_keeps_token() -> None:
    queue, clock = make()
    lease = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert lease is not None
    await clock.advance(5)
    renewed = await queue.renew_leadership("e", "a", lease.token, ttl_seconds=20)
    assert renewed is not None
    assert (renewed.token, renewed.remaining_seconds) == (lease.token, 20)
    await clock.advance(20 - 1e-6)
    assert await queue.current_leader("e") is not None
    await clock.advance(1e-6)
    assert await queue.current_leader("e") is None


async def test_renew_after_lapse_without_takeover_succeeds() -> None:
    queue, clock = make()
    lease = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert lease is not None
    await clock.advance(TTL + 100)
    renewed = await queue.renew_leadership("e", "a", lease.token, ttl_seconds=TTL)
    assert renewed is not None
    assert renewed.token == lease.token
    assert await queue.acquire_leadership("e", "b", ttl_seconds=TTL) is None


async def test_renew_and_resign_with_stale_token_or_other_holder_change_nothing() -> None:
    queue, clock = make()
    old = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert old is not None
    await clock.advance(TTL)
    new = await queue.acquire_leadership("e", "b", ttl_seconds=TTL)
    assert new is not None
    assert await queue.renew_leadership("e", "a", old.token, ttl_seconds=TTL) is None
    assert await queue.renew_leadership("e", "a", new.token, ttl_seconds=TTL) is None
    assert await queue.renew_leadership("e", "b", old.token, ttl_seconds=TTL) is None
    assert not await queue.resign_leadership("e", "a", old.token)
    assert not await queue.resign_leadership("e", "b", old.token)
    assert await queue.current_leader("e") == new
    assert await queue.renew_leadership("nobody", "a", 1, ttl_seconds=TTL) is None
    assert not await queue.resign_leadership("nobody", "a", 1)


async def test_resign_ends_lease_now_and_cannot_be_renewed_or_repeated() -> None:
    queue, _ = make()
    lease = await queue.acquire_leadership("e", "a", ttl_seconds=TTL)
    assert lease is not None
    assert await queue.resign_leadership("e", "a", lease.token)
    assert await queue.current_leader("e") is None
    assert not await queue.resign_leadership("e", "a", lease.token)
    assert await queue.renew_leadership("e", "a", lease.token, ttl_seconds=TTL) is None
    other = await queue.acquire_leadership("e", "b", ttl_seconds=TTL)
    assert other is not None
    assert other.token > lease.token


async def test_handles_of_one_store_share_elections() -> None:
    queue, _ = make()
    other = queue.open_handle()
    assert await queue.acquire_leadership("e", "a", ttl_seconds=TTL) is not None
    assert await other.acquire_leadership("e", "b", ttl_seconds=TTL) is None


# -- fire ------------------------------------------------------------------------


async def leader(queue: InMemoryQueue, holder: str = "a") -> int:
    lease = await queue.acquire_leadership("e", holder, ttl_seconds=TTL)
    assert lease is not None
    return lease.token


async def test_fire_adds_a_ready_message_and_records_it() -> None:
    queue, _ = make()
    token = await leader(queue)
    message_id = await queue.fire(election="e", token=token, schedule="s", instant=100, body=b"t")
    assert message_id is not None
    assert queue.ready_bodies() == [b"t"]
    [delivery] = await queue.receive("c", max_messages=5, wait_seconds=0, lease_seconds=5)
    assert (delivery.message_id, delivery.delivery_count) == (message_id, 1)
    records = await queue.fire_records(["s", "never"])
    assert records == {"s": FireRecord(schedule="s", instant=100.0, message_id=message_id)}


async def test_fire_once_per_instant_and_only_later_instants() -> None:
    queue, _ = make()
    token = await leader(queue)
    first = await queue.fire(election="e", token=token, schedule="s", instant=100, body=b"1")
    assert first is not None
    assert await queue.fire(election="e", token=token, schedule="s", instant=100, body=b"2") is None
    assert (
        await queue.fire(election="e", token=token, schedule="s", instant=99.5, body=b"3") is None
    )
    later = await queue.fire(election="e", token=token, schedule="s", instant=100.001, body=b"4")
    assert later is not None
    assert queue.ready_bodies() == [b"1", b"4"]
    records = await queue.fire_records(["s"])
    assert records["s"].instant == 100.001
    assert records["s"].message_id == later
    other = await queue.fire(election="e", token=token, schedule="t", instant=100, body=b"5")
    assert other is not None


async def test_fire_under_stale_token_is_refused() -> None:
    queue, clock = make()
    old = await leader(queue, "a")
    await clock.advance(TTL)
    new = await leader(queue, "b")
    assert await queue.fire(election="e", token=old, schedule="s", instant=1, body=b"x") is None
    assert await queue.fire(election="e", token=new + 1, schedule="s", instant=1, body=b"x") is None
    assert await queue.fire(election="e", token=new, schedule="s", instant=1, body=b"y") is not None
    assert queue.ready_bodies() == [b"y"]


async def test_fire_without_any_election_is_refused() -> None:
    queue, _ = make()
    assert await queue.fire(election="e", token=1, schedule="s", instant=1, body=b"x") is None
    assert await queue.len() == 0
    assert await queue.fire_records(["s"]) == {}


async def test_fire_after_lapse_without_takeover_is_allowed() -> None:
    queue, clock = make()
    token = await leader(queue)
    await clock.advance(TTL * 3)
    assert await queue.current_leader("e") is None
    assert await queue.fire(election="e", token=token, schedule="s", instant=1, body=b"x")


async def test_fire_with_bad_arguments_changes_nothing() -> None:
    queue, _ = make()
    token = await leader(queue)
    bad: list[tuple[dict[str, object], type[Exception]]] = [
        ({"body": "text"}, TypeError),
        ({"instant": math.nan}, ValueError),
        ({"instant": math.inf}, ValueError),
        ({"instant": "1"}, TypeError),
        ({"instant": True}, TypeError),
        ({"schedule": ""}, ValueError),
        ({"election": ""}, ValueError),
        ({"schedule": 1}, TypeError),
        ({"token": "1"}, TypeError),
        ({"token": True}, TypeError),
    ]
    for override, error in bad:
        kwargs: dict[str, object] = {
            "election": "e",
            "token": token,
            "schedule": "s",
            "instant": 1.0,
            "body": b"x",
            **override,
        }
        with pytest.raises(error):
            await queue.fire(**kwargs)  # type: ignore[arg-type]
    assert await queue.len() == 0
    assert await queue.fire_records(["s"]) == {}


@pytest.mark.parametrize(
    ("name", "holder", "ttl", "error"),
    [
        ("", "a", TTL, ValueError),
        ("e", "", TTL, ValueError),
        ("e", "a", 0, ValueError),
        ("e", "a", -1, ValueError),
        ("e", "a", math.inf, ValueError),
        ("e", "a", math.nan, ValueError),
        ("e", "a", True, TypeError),
        (1, "a", TTL, TypeError),
        ("e", None, TTL, TypeError),
        ("\udc80", "a", TTL, ValueError),
    ],
)
async def test_acquire_and_renew_refuse_bad_arguments(
    name: object, holder: object, ttl: object, error: type[Exception]
) -> None:
    queue, _ = make()
    with pytest.raises(error):
        await queue.acquire_leadership(name, holder, ttl_seconds=ttl)  # type: ignore[arg-type]
    with pytest.raises(error):
        await queue.renew_leadership(name, holder, 1, ttl_seconds=ttl)  # type: ignore[arg-type]
    assert await queue.current_leader("e") is None


async def test_fire_records_refuses_a_single_string() -> None:
    queue, _ = make()
    with pytest.raises(TypeError):
        await queue.fire_records("s")


async def test_closed_handle_refuses_every_leadership_call() -> None:
    queue, _ = make()
    token = await leader(queue)
    other = queue.open_handle()
    await other.aclose()
    with pytest.raises(QueueClosedError):
        await other.acquire_leadership("e", "b", ttl_seconds=TTL)
    with pytest.raises(QueueClosedError):
        await other.renew_leadership("e", "a", token, ttl_seconds=TTL)
    with pytest.raises(QueueClosedError):
        await other.resign_leadership("e", "a", token)
    with pytest.raises(QueueClosedError):
        await other.current_leader("e")
    with pytest.raises(QueueClosedError):
        await other.fire(election="e", token=token, schedule="s", instant=1, body=b"x")
    with pytest.raises(QueueClosedError):
        await other.fire_records(["s"])
    assert await queue.current_leader("e") is not None
    assert await queue.len() == 0
