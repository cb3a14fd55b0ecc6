"""``enqueue --delay/--at/--unique-key``, ``cancel`` and ``schedules``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from taskrunner import App, Producer, open_queue
from taskrunner.cli.common import UsageError
from taskrunner.cli.enqueue import parse_at, parse_duration
from taskrunner.queue import leadership_of
from taskrunner.scheduler import ELECTION
from tests.cli.apps import QUEUE, app
from tests.cli.conftest import Cli

APP = "tests.cli.apps:app"
SCHED_APP = "tests.cli.test_cli_scheduling:sched_app"

sched_app = App("cli-sched")


@sched_app.task(name="digest")
async def digest(kind: str) -> None: ...


sched_app.schedule("hourly", digest, cron="0 * * * *", payload="hourly")
sched_app.schedule("paris-morning", digest, cron="0 9 * * *", payload="am", timezone="Europe/Paris")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("45", 45.0),
        (".5s", 0.5),
        ("0s", 0.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1s", "1w", "s", "1.2.3s", "1e999", "nan"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


def test_at_takes_iso_8601_with_an_offset_and_refuses_naive_times() -> None:
    assert parse_at("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_at("2026-12-01T11:00:00+01:00") == datetime(
        2026, 12, 1, 11, tzinfo=timezone(timedelta(hours=1))
    )
    with pytest.raises(UsageError, match="no UTC offset"):
        parse_at("2026-12-01T10:00:00")
    with pytest.raises(UsageError, match="ISO-8601"):
        parse_at("tomorrow")


def stats(url: str, queue: str = QUEUE) -> tuple[int, int]:
    async def read() -> tuple[int, int]:
        async with open_queue(url, queue) as opened:
            s = await opened.stats()
            return s.ready, s.delayed

    return asyncio.run(read())


@pytest.mark.redis
def test_enqueue_with_delay_adds_a_delayed_message(run: Cli, redis_ns_url: str) -> None:
    result = run(
        "enqueue",
        APP,
        "cli.greet",
        "--payload",
        '{"name": "a"}',
        "--delay",
        "30s",
        "--url",
        redis_ns_url,
    )

    assert result.code == 0, result.err
    assert len(result.out.split()) == 1
    assert stats(redis_ns_url) == (0, 1)


@pytest.mark.redis
def test_enqueue_at_a_past_time_is_ready_at_once(run: Cli, redis_ns_url: str) -> None:
    result = run(
        "enqueue",
        APP,
        "cli.greet",
        "--payload",
        '{"name": "a"}',
        "--at",
        "2020-01-01T00:00:00Z",
        "--url",
        redis_ns_url,
    )

    assert result.code == 0, result.err
    assert stats(redis_ns_url) == (1, 0)


@pytest.mark.redis
def test_enqueue_with_a_unique_key_adds_once_and_says_so(run: Cli, redis_ns_url: str) -> None:
    common = [
        "enqueue",
        APP,
        "cli.greet",
        "--payload",
        '{"name": "a"}',
        "--unique-key",
        "k1",
        "--url",
        redis_ns_url,
    ]
    first = run(*common)
    second = run(*common, "--json")

    assert first.code == 0, first.err
    assert second.code == 0, second.err
    assert second.json()["message_ids"] == [first.out.strip()]
    assert second.json()["added"] == [False]
    again = run(*common)
    assert "holds the unique key: nothing was added" in again.err
    assert stats(redis_ns_url) == (1, 0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--at", "2026-12-01T10:00:00"], "no UTC offset"),
        (["--delay", "soon"], "expected a duration"),
        (["--delay", "1s", "--at", "2026-12-01T10:00:00Z"], "not allowed with argument"),
        (["--unique-key", ""], "must not be empty"),
        (["--partition-key", ""], "--partition-key must not be empty"),
    ],
)
def test_bad_enqueue_options_are_usage_errors(run: Cli, extra: list[str], message: str) -> None:
    result = run(
        "enqueue",
        APP,
        "cli.greet",
        "--payload",
        '{"name": "a"}',
        *extra,
        "--url",
        "redis://127.0.0.1:1/0",
    )

    assert result.code == 2
    assert message in result.err
    assert result.out == ""


def delayed_message(url: str) -> str:
    async def send() -> str:
        async with open_queue(url, QUEUE) as opened:
            return await Producer(opened, app).dispatch("cli.greet", {"name": "z"}, delay=3600)

    return asyncio.run(send())


def test_cancel_removes_a_delayed_message_once(run: Cli, memory_url: str) -> None:
    message_id = delayed_message(memory_url)

    first = run("cancel", APP, message_id, "--url", memory_url)
    second = run("cancel", APP, message_id, "unknown-1", "--url", memory_url, "--json")

    assert first.code == 0, first.err
    assert first.out == f"{message_id}  cancelled\n"
    assert second.code == 1
    assert second.json() == {"queue": QUEUE, "cancelled": {message_id: False, "unknown-1": False}}
    assert stats(memory_url) == (0, 0)


def test_schedules_need_an_app(run: Cli, memory_url: str) -> None:
    result = run("schedules", "--url", memory_url)

    assert result.code == 2
    assert "give the App" in result.err


def test_schedules_list_last_and_next_fire_times_and_the_leader(run: Cli, memory_url: str) -> None:
    before = run("schedules", SCHED_APP, "--url", memory_url, "--json")
    assert before.code == 0, before.err
    rows = {row["name"]: row for row in before.json()["schedules"]}
    assert set(rows) == {"hourly", "paris-morning"}
    assert rows["hourly"]["last_fired"] is None
    assert rows["hourly"]["next"] % 3600 == 0
    assert rows["paris-morning"]["timing"] == "cron '0 9 * * *' (Europe/Paris)"
    assert before.json()["leader"] is None

    instant = datetime(2026, 1, 1, 10, tzinfo=UTC).timestamp()

    async def fire() -> str | None:
        async with open_queue(memory_url, sched_app.queue) as opened:
            part = leadership_of(opened)
            assert part is not None
            lease = await part.acquire_leadership(ELECTION, "host-1", ttl_seconds=600)
            assert lease is not None
            return await part.fire(
                election=ELECTION, token=lease.token, schedule="hourly", instant=instant, body=b"{}"
            )

    message_id = asyncio.run(fire())
    after = run("schedules", SCHED_APP, "--url", memory_url)

    assert after.code == 0, after.err
    lines = after.out.splitlines()
    assert lines[0] == "leader: host-1"
    assert lines[1].split() == ["NAME", "TASK", "WHEN", "CATCH-UP", "LAST", "FIRED", "NEXT"]
    hourly = next(line for line in lines if line.startswith("hourly"))
    assert "2026-01-01 10:00:00 UTC" in hourly
    assert message_id is not None
