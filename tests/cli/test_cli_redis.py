"""The command line against Redis: dead-letter round trip, worker, inspect."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from taskrunner import open_queue
from taskrunner.codec import decode_envelope
from tests.cli.apps import QUEUE
from tests.cli.conftest import Cli

pytestmark = pytest.mark.redis

APP = "tests.cli.apps:app"
BURST = ("--burst",)


def queue_stats(url: str, name: str = QUEUE) -> Any:
    async def read() -> Any:
        async with open_queue(url, name) as queue:
            return await queue.stats()

    return asyncio.run(read())


def ready_bodies(url: str) -> list[bytes]:
    """Bodies of the ready messages, by leasing them and giving them straight back."""

    async def read() -> list[bytes]:
        async with open_queue(url, QUEUE) as queue:
            deliveries = await queue.receive(
                "peek", max_messages=100, wait_seconds=0, lease_seconds=60
            )
            await queue.release(deliveries)
            return [d.body for d in deliveries]

    return asyncio.run(read())


def test_dead_letter_retry_round_trip_neither_loses_nor_duplicates(
    run: Cli, redis_ns_url: str
) -> None:
    common = ("--app", APP, "--url", redis_ns_url)
    for name in ("ada", "grace"):
        assert run("enqueue", "cli.fail", "--payload", f'{{"name": "{name}"}}', *common).code == 0
    assert run("worker", APP, "--url", redis_ns_url, *BURST).code == 0
    letters = run("dead-letters", "list", *common, "--json").json()["dead_letters"]
    first = letters[0]

    retried = run("dead-letters", "retry", first["id"], *common, "--json")

    assert retried.code == 0
    assert retried.json()["retried"] == 1
    stats = queue_stats(redis_ns_url)
    assert (stats.ready, stats.in_flight, stats.dead) == (1, 0, 1)
    [body] = ready_bodies(redis_ns_url)
    assert decode_envelope(body).id == first["envelope"]["id"]
    remaining = run("dead-letters", "list", *common, "--json").json()["dead_letters"]
    assert [d["id"] for d in remaining] == [letters[1]["id"]]
    # Retrying the same id again moves nothing: it is no longer a dead letter.
    again = run("dead-letters", "retry", first["id"], *common)
    assert again.code == 1
    assert queue_stats(redis_ns_url).ready == 1

    everything = run("dead-letters", "retry", "--all", *common)

    assert everything.code == 0
    assert "retried 1 dead letter(s)" in everything.out
    stats = queue_stats(redis_ns_url)
    assert (stats.ready, stats.dead) == (2, 0)
    ids = sorted(decode_envelope(b).id for b in ready_bodies(redis_ns_url))
    assert ids == sorted(letter["envelope"]["id"] for letter in letters)

    # The retried messages run again (and fail again: the task always fails).
    assert run("worker", APP, "--url", redis_ns_url, *BURST).code == 0
    stats = queue_stats(redis_ns_url)
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 2)


def test_dead_letters_show_and_purge_on_redis(run: Cli, redis_ns_url: str) -> None:
    common = ("--app", APP, "--url", redis_ns_url)
    run("enqueue", "cli.fail", "--payload", '{"name": "ada"}', *common)
    run("worker", APP, "--url", redis_ns_url, *BURST)
    [letter] = run("dead-letters", "list", *common, "--json").json()["dead_letters"]

    shown = run("dead-letters", "show", letter["id"], *common)
    purged = run("dead-letters", "purge", letter["id"], "--yes", *common)

    assert shown.code == 0
    assert "task         cli.fail" in shown.out
    assert "deliveries   1" in shown.out
    assert purged.code == 0
    assert queue_stats(redis_ns_url).dead == 0


def test_inspect_lists_consumers_with_pending_counts_and_idle_times(
    run: Cli, redis_ns_url: str
) -> None:
    async def lease_one() -> None:
        async with open_queue(redis_ns_url, QUEUE) as queue:
            await queue.add([b"x", b"y"])
            await queue.receive("holder", max_messages=1, wait_seconds=0, lease_seconds=60)

    asyncio.run(lease_one())

    result = run("inspect", "--app", APP, "--url", redis_ns_url, "--json")
    table = run("inspect", "--app", APP, "--url", redis_ns_url)

    [report] = result.json()["queues"]
    assert (report["ready"], report["in_flight"], report["dead"]) == (1, 1, 0)
    [consumer] = report["consumers"]
    assert (consumer["name"], consumer["pending"]) == ("holder", 1)
    assert consumer["idle_seconds"] >= 0
    assert report["oldest_in_flight_age_seconds"] is not None
    assert "  in flight       1  (longest idle " in table.out
    assert "    holder  1        " in table.out


def test_enqueue_a_json_lines_file_then_a_burst_worker_runs_them(
    run: Cli, redis_ns_url: str, tmp_path: Path
) -> None:
    payloads = tmp_path / "greetings.jsonl"
    payloads.write_text('{"name": "ada"}\n\n{"name": "grace"}\n{"name": "edsger"}\n')

    enqueued = run("enqueue", APP, "cli.greet", "--file", str(payloads), "--url", redis_ns_url)
    ready = queue_stats(redis_ns_url).ready
    worker = run("worker", APP, "--url", redis_ns_url, *BURST)

    assert enqueued.code == 0, enqueued.err
    assert enqueued.err == ""
    assert len(enqueued.out.split()) == 3
    assert ready == 3
    assert worker.code == 0
    stats = queue_stats(redis_ns_url)
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)


def test_enqueue_reads_payloads_from_stdin_and_prints_json(
    run: Cli, redis_ns_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('{"name": "a"}\n{"name": "b"}\n'))

    result = run(
        "enqueue", "cli.greet", "--app", APP, "--file", "-", "--url", redis_ns_url, "--json"
    )

    assert result.code == 0, result.err
    document = result.json()
    assert (document["queue"], document["task"]) == (QUEUE, "cli.greet")
    assert len(document["message_ids"]) == 2
    assert sorted(decode_envelope(b).task for b in ready_bodies(redis_ns_url)) == ["cli.greet"] * 2


def test_enqueue_a_task_without_payload(run: Cli, redis_ns_url: str) -> None:
    result = run("enqueue", "cli.noop", "--app", APP, "--url", redis_ns_url, "--output", "json")

    assert result.code == 0, result.err
    [message_id] = result.json()["message_ids"]
    assert queue_stats(redis_ns_url).ready == 1
    assert message_id


def test_enqueue_without_app_sends_unchecked_and_the_worker_dead_letters_a_wrong_name(
    run: Cli, redis_ns_url: str
) -> None:
    enqueued = run(
        "enqueue", "cli.gret", "--queue", QUEUE, "--payload", '{"name": 1}', "--url", redis_ns_url
    )
    worker = run("worker", APP, "--url", redis_ns_url, *BURST)
    listed = run("dead-letters", "list", "--app", APP, "--url", redis_ns_url, "--json")

    assert enqueued.code == 0, enqueued.err
    assert "no App given: payloads for 'cli.gret' are not validated" in enqueued.err
    assert worker.code == 0
    [letter] = listed.json()["dead_letters"]
    assert "unknown task 'cli.gret'" in letter["reason"]
    assert letter["envelope"]["payload"] == {"name": 1}


def test_enqueue_without_app_or_queue_says_it_sends_to_queue_default(
    run: Cli, redis_ns_url: str
) -> None:
    result = run("enqueue", "some.task", "--url", redis_ns_url)

    assert result.code == 0, result.err
    assert (
        "no App given: payloads for 'some.task' are not validated and go to queue "
        "'default' (choose one with --queue NAME, or give the App as MODULE:APP or --app)"
    ) in result.err
    assert queue_stats(redis_ns_url, "default").ready == 1
