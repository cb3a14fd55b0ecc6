"""``inspect --id``: where a message is, for people and for scripts."""

from __future__ import annotations

import asyncio

import pytest

from taskrunner import Producer, open_queue
from tests.cli.apps import QUEUE, app
from tests.cli.conftest import Cli

APP = "tests.cli.apps:app"


def dispatch(url: str, *, delay: float | None = None) -> str:
    async def send() -> str:
        async with open_queue(url, QUEUE) as opened:
            return await Producer(opened, app).dispatch("cli.greet", {"name": "z"}, delay=delay)

    return asyncio.run(send())


def test_inspect_id_shows_a_ready_and_a_delayed_message(run: Cli, memory_url: str) -> None:
    ready = dispatch(memory_url)
    delayed = dispatch(memory_url, delay=3600)

    result = run("inspect", APP, "--url", memory_url, "--id", ready, "--id", delayed)

    assert result.code == 0, result.err
    blocks = result.out.split("\n\n")
    assert blocks[0].startswith(f"message {ready}  ready\n")
    assert "  task         cli.greet\n" in blocks[0]
    assert "  deliveries   0\n" in blocks[0]
    assert blocks[1].startswith(f"message {delayed}  delayed\n")
    assert "  due at       " in blocks[1]
    # Nothing has received from the queue: both say what they wait for.
    assert (
        "  waiting for  a worker to receive it; no worker has received from this queue" in blocks[0]
    )
    assert "  waiting for  its due time (" in blocks[1]


def test_several_ids_may_follow_one_id_option(run: Cli, memory_url: str) -> None:
    ready = dispatch(memory_url)
    delayed = dispatch(memory_url, delay=3600)

    result = run("inspect", APP, "--url", memory_url, "--id", ready, delayed, "--json")

    assert result.code == 0, result.err
    states = [(m["message_id"], m["state"]) for m in result.json()["messages"]]
    assert states == [(ready, "ready"), (delayed, "delayed")]


def test_inspect_id_as_json_and_exit_1_for_an_unknown_id(run: Cli, memory_url: str) -> None:
    ready = dispatch(memory_url)

    result = run("inspect", APP, "--url", memory_url, "--id", ready, "--id", "999-0", "--json")

    assert result.code == 1
    document = result.json()
    assert document["queue"] == QUEUE
    first, second = document["messages"]
    assert (first["message_id"], first["state"], first["delivery_count"]) == (ready, "ready", 0)
    assert first["task"] == "cli.greet"
    assert first["enqueued_at"].endswith("Z")  # RFC 3339, UTC
    assert (second["message_id"], second["state"]) == ("999-0", "unknown")


def test_inspect_id_takes_one_queue(run: Cli, memory_url: str) -> None:
    result = run("inspect", "--url", memory_url, "--queue", "a", "--queue", "b", "--id", "1-0")

    assert result.code == 2
    assert "one --queue" in result.err


@pytest.mark.redis
def test_inspect_id_on_redis_shows_a_dead_letter_with_its_reason(
    run: Cli, redis_ns_url: str
) -> None:
    async def dead() -> str:
        async with open_queue(redis_ns_url, QUEUE) as opened:
            message_id = await Producer(opened, app).dispatch("cli.greet", {"name": "z"})
            [delivery] = await opened.receive("w", max_messages=1, wait_seconds=0, lease_seconds=30)
            await opened.dead_letter([delivery], reason="RuntimeError: broken printer")
            return message_id

    message_id = asyncio.run(dead())
    result = run("inspect", APP, "--url", redis_ns_url, "--id", message_id, "--json")

    assert result.code == 0, result.err
    [status] = result.json()["messages"]
    assert (status["state"], status["delivery_count"]) == ("dead", 1)
    assert status["last_error"] == "RuntimeError: broken printer"
