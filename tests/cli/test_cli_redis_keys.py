"""What the commands leave on Redis: reading creates nothing, deleting leaves nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from taskrunner import Producer, open_queue
from tests.cli.apps import QUEUE, Greeting, app
from tests.cli.conftest import Cli

pytestmark = pytest.mark.redis

APP = "tests.cli.apps:app"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def keys_of(client: redis.Redis, namespace: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{namespace}:*"))


def fill(url: str, *, ready: int = 0, dead: int = 0, in_flight: int = 0) -> None:
    """Put messages on the App's queue: ready ones, dead letters, and leased ones."""

    async def arrange() -> None:
        async with open_queue(url, QUEUE) as queue:
            producer = Producer(queue, app)
            for i in range(dead + in_flight):
                await producer.dispatch("cli.greet", Greeting(f"n{i}"))
            if dead + in_flight:
                deliveries = await queue.receive(
                    "holder", max_messages=dead + in_flight, wait_seconds=0, lease_seconds=600
                )
                await queue.dead_letter(deliveries[:dead], reason="test")
            for i in range(ready):
                await producer.dispatch("cli.greet", Greeting(f"r{i}"))

    asyncio.run(arrange())


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "--queue", "nothing-here"],
        ["inspect", "--queue", "nothing-here", "--queue", "nor-here", "--json"],
        ["dead-letters", "list", "--queue", "nothing-here"],
        ["dead-letters", "list", "--queue", "nothing-here", "--json"],
        ["dead-letters", "show", "1-0", "--queue", "nothing-here"],
        ["dead-letters", "retry", "--all", "--queue", "nothing-here"],
        ["dead-letters", "retry", "1-0", "--queue", "nothing-here"],
        ["dead-letters", "purge", "--all", "--yes", "--queue", "nothing-here"],
        ["dead-letters", "purge", "1-0", "--yes", "--queue", "nothing-here"],
    ],
)
def test_reading_a_queue_that_does_not_exist_creates_no_key(
    run: Cli, redis_ns_url: str, redis_namespace: str, client: redis.Redis, argv: list[str]
) -> None:
    result = run(*argv, "--url", redis_ns_url)

    assert result.code in (0, 1), result.err
    assert "Traceback" not in result.err
    assert keys_of(client, redis_namespace) == []


def test_reading_an_existing_queue_changes_no_key(
    run: Cli, redis_ns_url: str, redis_namespace: str, client: redis.Redis
) -> None:
    fill(redis_ns_url, ready=2, dead=1, in_flight=1)
    before = {key: client.type(key) for key in keys_of(client, redis_namespace)}
    lengths = {key: client.xlen(key) for key, kind in before.items() if kind == b"stream"}

    for argv in (["inspect"], ["inspect", "--json"], ["dead-letters", "list"]):
        assert run(*argv, "--app", APP, "--url", redis_ns_url).code == 0

    assert {key: client.type(key) for key in keys_of(client, redis_namespace)} == before
    assert {key: client.xlen(key) for key in lengths} == lengths


def test_the_demo_on_redis_leaves_no_key_behind(
    run: Cli, redis_ns_url: str, redis_namespace: str, client: redis.Redis
) -> None:
    result = run("demo", "--url", redis_ns_url, "--tasks", "300", "--num-workers", "32")

    assert result.code == 0, result.err
    assert "processed      300" in result.out
    assert keys_of(client, redis_namespace) == []


def test_queue_delete_refuses_without_yes_and_says_what_it_would_delete(
    run: Cli, redis_ns_url: str, redis_namespace: str, client: redis.Redis
) -> None:
    fill(redis_ns_url, ready=3, dead=2, in_flight=1)
    before = keys_of(client, redis_namespace)

    refused = run("queue", "delete", QUEUE, "--url", redis_ns_url)

    assert refused.code == 2
    assert (
        f"queue delete: would delete queue {QUEUE!r} for good: 3 ready, 0 delayed, "
        "1 in flight, 2 dead letter(s), 1 consumer(s); pass --yes to confirm"
    ) in refused.err
    assert keys_of(client, redis_namespace) == before


def test_queue_delete_with_yes_removes_every_key_of_the_queue_and_only_that_queue(
    run: Cli, redis_ns_url: str, redis_namespace: str, client: redis.Redis
) -> None:
    fill(redis_ns_url, ready=3, dead=2, in_flight=1)

    async def other_queue() -> None:
        async with open_queue(redis_ns_url, "other") as queue:
            await queue.add([b"keep me"])

    asyncio.run(other_queue())

    deleted = run("queue", "delete", QUEUE, "--yes", "--url", redis_ns_url)
    again = run("queue", "delete", QUEUE, "--yes", "--url", redis_ns_url, "--json")

    assert deleted.code == 0, deleted.err
    assert (
        f"deleted queue {QUEUE!r}: 3 ready, 0 delayed, 1 in flight, 2 dead letter(s), 1 consumer(s)"
    ) in deleted.out
    assert [key.decode() for key in keys_of(client, redis_namespace)] == [
        f"{redis_namespace}:{{other}}:stream"
    ]
    assert again.code == 0
    assert again.json() == {
        "queue": QUEUE,
        "deleted": True,
        "ready": 0,
        "delayed": 0,
        "in_flight": 0,
        "dead": 0,
        "consumers": 0,
    }
    assert [key.decode() for key in keys_of(client, redis_namespace)] == [
        f"{redis_namespace}:{{other}}:stream"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["queue", "delete", "--url", "URL"], "the following arguments are required: NAME"),
        (["queue"], "the following arguments are required: ACTION"),
        (
            ["queue", "delete", "bad name", "--yes", "--url", "URL"],
            "queue_name must be a non-empty string",
        ),
    ],
)
def test_queue_delete_usage_errors(
    run: Cli, redis_ns_url: str, argv: list[str], message: str
) -> None:
    result = run(*[redis_ns_url if word == "URL" else word for word in argv])

    assert result.code == 2
    assert message in result.err
