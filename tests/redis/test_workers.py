"""WorkerRegistry on Redis: publish, refresh, expiry on the server clock, removal."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner import App, Runner, RunnerConfig
from taskrunner.queue import WorkerInfo
from taskrunner_backends.redis import RedisStreamsQueue

from .helpers import eventually, open_queue

pytestmark = pytest.mark.redis


def _info(instance: str, workers: int = 4, busy: int = 1) -> WorkerInfo:
    return WorkerInfo(
        instance=instance, workers=workers, busy=busy, average_seconds=0.5, seen_at=1e9
    )


async def test_the_queue_offers_its_worker_registry(redis_queue: RedisStreamsQueue) -> None:
    assert redis_queue.worker_registry is redis_queue


async def test_published_workers_are_listed_and_refreshed_in_place(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.publish_worker(_info("a"), ttl_seconds=60)
    await redis_queue.publish_worker(_info("b", workers=8), ttl_seconds=60)
    await redis_queue.publish_worker(_info("a", busy=3), ttl_seconds=60)

    live = sorted(await redis_queue.live_workers(), key=lambda w: w.instance)

    assert live == [_info("a", busy=3), _info("b", workers=8)]


async def test_entries_expire_after_their_ttl_and_are_pruned(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.publish_worker(_info("short"), ttl_seconds=0.05)
    await redis_queue.publish_worker(_info("long"), ttl_seconds=60)

    live = await eventually(
        redis_queue.live_workers,
        lambda workers: [w.instance for w in workers] == ["long"],
        what="the short-lived entry expires",
    )

    assert [w.instance for w in live] == ["long"]
    fields = await redis_queue._raw.call("hkeys", "HKEYS", redis_queue.keys.workers)
    assert fields == [b"long"]


async def test_the_hash_expires_with_its_longest_lived_entry(
    redis_queue: RedisStreamsQueue,
) -> None:
    await redis_queue.publish_worker(_info("a"), ttl_seconds=30)
    await redis_queue.publish_worker(_info("b"), ttl_seconds=90)
    await redis_queue.publish_worker(_info("a"), ttl_seconds=30)

    ttl_ms = await redis_queue._raw.call("pttl", "PTTL", redis_queue.keys.workers)

    assert 80_000 < ttl_ms <= 90_000


async def test_remove_worker_is_idempotent(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.publish_worker(_info("a"), ttl_seconds=60)
    await redis_queue.publish_worker(_info("b"), ttl_seconds=60)

    await redis_queue.remove_worker("a")
    await redis_queue.remove_worker("a")
    await redis_queue.remove_worker("never-there")

    assert [w.instance for w in await redis_queue.live_workers()] == ["b"]


async def test_foreign_values_are_pruned_not_returned(redis_queue: RedisStreamsQueue) -> None:
    await redis_queue.publish_worker(_info("a"), ttl_seconds=60)
    await redis_queue._raw.call("hset", "HSET", redis_queue.keys.workers, "x", "not ours")

    assert [w.instance for w in await redis_queue.live_workers()] == ["a"]
    assert await redis_queue._raw.call("hexists", "HEXISTS", redis_queue.keys.workers, "x") == 0


async def test_registry_is_shared_between_handles_and_survives_purge(
    redis_queue: RedisStreamsQueue, redis_url: str, redis_namespace: str
) -> None:
    other = open_queue(redis_url, redis_namespace)
    try:
        await other.publish_worker(_info("elsewhere"), ttl_seconds=60)
        await redis_queue.purge()

        assert [w.instance for w in await redis_queue.live_workers()] == ["elsewhere"]
    finally:
        await other.aclose()


async def test_invalid_arguments_are_rejected(redis_queue: RedisStreamsQueue) -> None:
    with pytest.raises(ValueError, match="ttl_seconds"):
        await redis_queue.publish_worker(_info("a"), ttl_seconds=0)
    with pytest.raises(ValueError, match="non-empty"):
        await redis_queue.publish_worker(_info(""), ttl_seconds=1)
    with pytest.raises(TypeError):
        await redis_queue.publish_worker({"instance": "a"}, ttl_seconds=1)  # type: ignore[arg-type]


async def test_two_runners_see_each_other_and_leave_at_shutdown(
    redis_url: str, redis_namespace: str
) -> None:
    app = App("q")
    config = RunnerConfig(num_workers=3, monitor_interval_seconds=0.1, lease_seconds=5)
    first, second, observer = (open_queue(redis_url, redis_namespace) for _ in range(3))
    runners = [Runner(first, app, config), Runner(second, app, config)]
    tasks = [asyncio.create_task(runner.run()) for runner in runners]
    try:
        await eventually(
            lambda: _processes_seen(runners),
            lambda seen: seen == [2, 2],
            what="each runner counts both processes",
        )
        live = await observer.live_workers()
        assert sorted(w.instance for w in live) == sorted(r._incarnation for r in runners)
        assert all(w.workers == 3 for w in live)
        assert runners[0].stats().cluster_workers == 6
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.gather(*tasks)
    try:
        assert await observer.live_workers() == []
    finally:
        for queue in (first, second, observer):
            await queue.aclose()


async def _processes_seen(runners: list[Runner]) -> list[int | None]:
    return [runner.stats().processes for runner in runners]
